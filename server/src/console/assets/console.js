// The sandboxd console: the fleet from /api (each call a gRPC request through the served stack, service/calls.rs), live from the Watch
// WebSocket, and a terminal (xterm.js) over the Pty WebSocket. Nothing is fetched from
// elsewhere; the credential stays in this tab's sessionStorage.
(function () {
  "use strict";
  var state = { token: sessionStorage.getItem("sandboxd.token") || "", sandboxes: {}, selected: null,
                watch: null, term: null, termSocket: null, refreshTimer: null };
  window.consoleState = state;
  var $ = function (id) { return document.getElementById(id); };

  function headers() {
    return state.token ? { Authorization: "Bearer " + state.token } : {};
  }
  function say(text) { $("message").textContent = text || ""; }
  function api(path, options) {
    options = options || {};
    options.headers = headers();
    return fetch(path, options).then(function (r) {
      return r.json().then(function (body) {
        if (!r.ok) throw new Error(body.error || ("HTTP " + r.status));
        return body;
      });
    });
  }
  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function duration(ms) {
    var s = Math.max(0, Math.round(ms / 1000));
    if (s < 120) return s + "s";
    if (s < 7200) return Math.round(s / 60) + "m";
    return Math.round(s / 3600) + "h";
  }
  function bytes(n) {
    if (n < 1024) return n + " B";
    if (n < 1048576) return (n / 1024).toFixed(1) + " KiB";
    return (n / 1048576).toFixed(1) + " MiB";
  }

  // --- the fleet ----------------------------------------------------------------------------
  function renderSandboxes() {
    var body = $("sandboxes").tBodies[0];
    body.textContent = "";
    var list = Object.keys(state.sandboxes).map(function (k) { return state.sandboxes[k]; });
    list.sort(function (a, b) { return b.created_at_unix_ms - a.created_at_unix_ms; });
    var now = Date.now();
    list.forEach(function (s) {
      var row = el("tr", null, "sandbox" + (s.id === state.selected ? " selected" : ""));
      row.id = "sandbox-" + s.id;
      row.dataset.id = s.id;
      row.appendChild(el("td", s.id, "id"));
      row.appendChild(el("td", s.status, "status state-" + s.status));
      var labels = el("td", null, "labels");
      Object.keys(s.labels || {}).forEach(function (k) { labels.appendChild(el("span", k + "=" + s.labels[k], "label")); });
      row.appendChild(labels);
      row.appendChild(el("td", s.image));
      row.appendChild(el("td", s.runtime));
      row.appendChild(el("td", s.node || ""));
      row.appendChild(el("td", duration(now - s.created_at_unix_ms), "age"));
      row.appendChild(el("td", s.expires_at_unix_ms ? duration(s.expires_at_unix_ms - now) + " left" : "none", "lease"));
      row.addEventListener("click", function () { select(s.id); });
      body.appendChild(row);
    });
    $("sandbox-count").textContent = "(" + list.length + ")";
  }
  function loadSandboxes() {
    return api("/api/sandboxes").then(function (body) {
      var next = {};
      body.sandboxes.forEach(function (s) { next[s.id] = s; });
      state.sandboxes = next;
      renderSandboxes();
    }).catch(function (e) { say("sandboxes: " + e.message); });
  }
  function loadPools() {
    return api("/api/pools").then(function (body) {
      var tbody = $("pools").tBodies[0];
      tbody.textContent = "";
      body.pools.forEach(function (p) {
        var row = el("tr");
        row.appendChild(el("td", p.name));
        row.appendChild(el("td", p.image));
        var fill = el("td");
        var meter = el("meter");
        meter.max = Math.max(p.target, 1); meter.value = p.ready;
        fill.appendChild(meter); fill.appendChild(el("span", " " + p.ready + "/" + p.target + " ready"));
        row.appendChild(fill);
        row.appendChild(el("td", p.in_use));
        row.appendChild(el("td", p.target + " / " + p.max));
        row.appendChild(el("td", p.tenant || ""));
        tbody.appendChild(row);
      });
    }).catch(function (e) { say("pools: " + e.message); });
  }
  function scheduleRefresh() {
    if (state.refreshTimer) return;
    state.refreshTimer = setTimeout(function () {
      state.refreshTimer = null;
      loadSandboxes(); loadPools();
      if (state.selected) loadDetail();
    }, 250);
  }
  function wsUrl(path) {
    return (location.protocol === "https:" ? "wss://" : "ws://") + location.host + path;
  }
  function watch() {
    if (state.watch) state.watch.close();
    var socket = new WebSocket(wsUrl("/ws/watch"));
    state.watch = socket;
    socket.onopen = function () { socket.send(JSON.stringify({ token: state.token })); };
    socket.onmessage = function (m) {
      var msg = JSON.parse(m.data);
      if (msg.watching) { $("live").textContent = "live"; $("live").className = "on"; loadSandboxes(); return; }
      if (msg.error) { say("watch: " + msg.error); return; }
      var e = msg.event;
      if (e && e.sandbox && state.sandboxes[e.sandbox_id]) {
        state.sandboxes[e.sandbox_id].status = e.sandbox.status;
        renderSandboxes();
      }
      scheduleRefresh();
    };
    socket.onclose = function () {
      if (state.watch !== socket) return;
      $("live").textContent = "not live"; $("live").className = "off";
      setTimeout(function () { if (state.watch === socket) watch(); }, 2000);
    };
  }

  // --- one sandbox --------------------------------------------------------------------------
  function select(id) {
    state.selected = id;
    $("detail").hidden = false;
    $("detail-id").textContent = id;
    renderSandboxes();
    loadDetail();
  }
  function part(tableId, value, row) {
    var tbody = $(tableId).tBodies[0];
    tbody.textContent = "";
    if (!Array.isArray(value)) {
      var r = el("tr"); var cell = el("td", value && value.error ? value.error : "");
      cell.colSpan = 8; r.appendChild(cell); tbody.appendChild(r); return;
    }
    value.forEach(function (item) { tbody.appendChild(row(item)); });
  }
  function loadDetail() {
    var id = state.selected;
    return api("/api/sandboxes/" + encodeURIComponent(id)).then(function (d) {
      if (state.selected !== id) return;
      $("detail-status").textContent = d.status + (d.node ? " on " + d.node : "");
      var usage = $("usage").tBodies[0];
      usage.textContent = "";
      if (d.usage.error) usage.appendChild(el("tr")).appendChild(el("td", d.usage.error));
      else [["wall time", duration(d.usage.wall_time_s * 1000)], ["cpu time", d.usage.cpu_time_s.toFixed(2) + " s"],
            ["peak memory", bytes(d.usage.peak_memory_bytes)], ["disk written", bytes(d.usage.disk_write_bytes)],
            ["network in / out", bytes(d.usage.network_rx_bytes) + " / " + bytes(d.usage.network_tx_bytes)],
            ["processes started", d.usage.processes_started]].forEach(function (kv) {
        var r = el("tr"); r.appendChild(el("th", kv[0])); r.appendChild(el("td", kv[1])); usage.appendChild(r);
      });
      part("sessions", d.sessions, function (s) {
        var r = el("tr"); r.id = "session-" + s.session_id;
        [s.session_id, s.command, s.mode, s.running ? "yes" : "exit " + s.exit_code, s.attached ? "yes" : "no",
         bytes(s.retained_bytes)].forEach(function (v) { r.appendChild(el("td", v)); });
        var cell = el("td"); var b = el("button", "Attach", "attach-session");
        b.addEventListener("click", function () { openTerminal(s.session_id, s.attached); });
        cell.appendChild(b); r.appendChild(cell);
        return r;
      });
      part("processes", d.processes, function (p) {
        var r = el("tr");
        [p.process_id, p.pid, p.command, p.user, p.running ? "yes" : "no", p.exit_code === null ? "" : p.exit_code]
          .forEach(function (v) { r.appendChild(el("td", v)); });
        return r;
      });
      $("logs").textContent = typeof d.logs === "string" ? d.logs : d.logs.error;
    }).catch(function (e) { say(id + ": " + e.message); });
  }

  // --- the terminal -------------------------------------------------------------------------
  function leaveTerminal() {
    if (state.termSocket) { var s = state.termSocket; state.termSocket = null; s.close(); }
    if (state.term) { state.term.destroy(); state.term = null; }
    $("terminal-box").hidden = true;
  }
  // The terminal is as wide as its box allows (and follows the window); the program in the
  // sandbox learns each new size through the session's resize, as from any terminal.
  var TERMINAL_ROWS = 24;
  var TERMINAL_FONT = { family: "monospace", size: 14 };
  function cellWidth() {
    var probe = document.createElement("span");
    probe.style.cssText = "position:absolute;visibility:hidden;white-space:pre;font-family:" +
      TERMINAL_FONT.family + ";font-size:" + TERMINAL_FONT.size + "px";
    probe.textContent = new Array(101).join("W");
    document.body.appendChild(probe);
    var width = probe.getBoundingClientRect().width / 100;
    document.body.removeChild(probe);
    return width || 8;
  }
  function fittingCols() {
    var box = $("terminal");
    var style = getComputedStyle(box);
    // Room for the padding and xterm's scroll bar.
    var room = box.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight) - 16;
    return Math.max(20, Math.min(400, Math.floor(room / cellWidth())));
  }
  var refit = null;
  window.addEventListener("resize", function () {
    clearTimeout(refit);
    refit = setTimeout(function () {
      if (!state.term) return;
      var cols = fittingCols();
      if (cols !== state.term.cols) state.term.resize(cols, state.term.rows);
    }, 100);
  });
  // The terminal's size as the page set it (for a reader and for the browser tests).
  window.terminalSize = function () { return state.term ? [state.term.rows, state.term.cols] : null; };
  function openTerminal(sessionId, takeover) {
    leaveTerminal();
    $("terminal-box").hidden = false;
    $("terminal-session").textContent = sessionId || "(new)";
    $("terminal-state").textContent = "connecting";
    var term = new Terminal({ cols: fittingCols(), rows: TERMINAL_ROWS, rendererType: "dom", cursorBlink: true,
                              fontFamily: TERMINAL_FONT.family, fontSize: TERMINAL_FONT.size });
    state.term = term;
    term.open($("terminal"));
    var decoder = new TextDecoder();
    var encoder = new TextEncoder();
    var socket = new WebSocket(wsUrl("/ws/terminal"));
    socket.binaryType = "arraybuffer";
    state.termSocket = socket;
    socket.onopen = function () {
      socket.send(JSON.stringify({ token: state.token, sandbox_id: state.selected, session_id: sessionId || null,
                                   takeover: !!takeover, cols: term.cols, rows: term.rows }));
    };
    socket.onmessage = function (m) {
      if (typeof m.data !== "string") { term.write(decoder.decode(new Uint8Array(m.data), { stream: true })); return; }
      var msg = JSON.parse(m.data);
      if (msg.opened) {
        $("terminal-session").textContent = msg.opened.session_id;
        $("terminal-state").textContent = "open (" + msg.opened.mode + ")";
        term.focus();
      } else if (msg.exit !== undefined) {
        $("terminal-state").textContent = "exited " + msg.exit;
      } else if (msg.error) {
        $("terminal-state").textContent = "error: " + msg.error;
      }
    };
    socket.onclose = function () {
      if ($("terminal-state").textContent.indexOf("open") === 0) $("terminal-state").textContent = "closed";
    };
    term.on("data", function (data) {
      if (socket.readyState === WebSocket.OPEN) socket.send(encoder.encode(data));
    });
    term.on("resize", function (size) {
      if (socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ resize: { cols: size.cols, rows: size.rows } }));
    });
  }
  // What the terminal shows, line by line (for a reader and for the browser tests).
  window.terminalText = function () {
    var rows = document.querySelector("#terminal .xterm-rows");
    if (!rows) return "";
    return Array.prototype.map.call(rows.children, function (r) { return r.textContent; }).join("\n");
  };

  // --- wiring -------------------------------------------------------------------------------
  function signIn() {
    say("");
    api("/api/whoami").then(function (who) {
      $("whoami").textContent = who.kind + (who.name ? " " + who.name : "");
      loadSandboxes(); loadPools(); watch();
    }).catch(function (e) { $("whoami").textContent = ""; say("sign-in: " + e.message); });
  }
  $("login").addEventListener("submit", function (e) {
    e.preventDefault();
    state.token = $("token").value.trim();
    sessionStorage.setItem("sandboxd.token", state.token);
    state.sandboxes = {}; state.selected = null; $("detail").hidden = true; leaveTerminal();
    renderSandboxes();
    signIn();
  });
  $("new-terminal").addEventListener("click", function () { openTerminal(null, false); });
  $("attach").addEventListener("click", function () {
    var id = $("attach-id").value.trim();
    if (id) openTerminal(id, false);
  });
  $("terminal-close").addEventListener("click", leaveTerminal);
  $("refresh-detail").addEventListener("click", loadDetail);
  $("close-sandbox").addEventListener("click", function () {
    var id = state.selected;
    if (!id || !confirm("Close sandbox " + id + "?")) return;
    api("/api/sandboxes/" + encodeURIComponent(id) + "/close", { method: "POST" })
      .then(function () { state.selected = null; $("detail").hidden = true; leaveTerminal(); loadSandboxes(); })
      .catch(function (e) { say("close: " + e.message); });
  });
  setInterval(renderSandboxes, 5000);
  // A pool's fill moves without events the caller's Watch carries (its members are no tenant's).
  setInterval(function () { if ($("whoami").textContent) loadPools(); }, 3000);
  $("token").value = state.token;
  signIn();
})();
