"""The web console (server.console) in a real browser: headless Chromium driven by Selenium,
against a real sandboxd on the real Docker daemon, with two tenants and the operator.

Run with scripts/test-console.sh (it builds sandboxd and sandboxctl, installs selenium and pytest
in the project venv, and needs Debian's chromium and chromium-driver). Screenshots go to
target/artifacts/console/.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import secrets
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

REPO = pathlib.Path(__file__).resolve().parents[2]
TARGET = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
SANDBOXD = TARGET / "debug" / "sandboxd"
SANDBOXCTL = TARGET / "debug" / "sandboxctl"
ARTIFACTS = TARGET / "artifacts" / "console"
IMAGE = "sandboxd-test/busybox:1"
WAIT_S = 30.0


def wait_for(what: str, check: Callable[[], Any], within: float = WAIT_S) -> Any:
    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as e:  # noqa: BLE001  (a page mid-render, a stale element: try again)
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {within}s (last: {last!r})")


class Server:
    def __init__(self, tmp: pathlib.Path) -> None:
        self.case = f"console-{uuid.uuid4().hex[:12]}"
        self.operator = secrets.token_hex(16)
        self.keys = {"red": secrets.token_hex(16), "blue": secrets.token_hex(16)}
        tenants = {
            "tenants": [
                {"name": name, "key_sha256": hashlib.sha256(key.encode()).hexdigest()}
                for name, key in self.keys.items()
            ]
        }
        (tmp / "tenants.json").write_text(json.dumps(tenants))
        (tmp / "token").write_text(self.operator)
        self.audit = tmp / "audit.log"
        config = {
            "docker": {
                "create": {
                    "extra_run_args": [
                        "--label",
                        "sandboxd.test=1",
                        "--label",
                        f"sandboxd.test.case={self.case}",
                    ]
                }
            },
            "server": {
                "state_dir": str(tmp / "state"),
                "audit": str(self.audit),
                "auth": {"tenants_file": str(tmp / "tenants.json")},
                "console": {"listen": "127.0.0.1:0"},
            },
            "pools": [{"name": "warm", "image": IMAGE, "target": 1, "max": 2}],
        }
        (tmp / "config.json").write_text(json.dumps(config))
        self.log = open(tmp / "server.log", "wb")  # noqa: SIM115  (open for the server's life)
        self.proc = subprocess.Popen(
            [
                str(SANDBOXD),
                "--listen",
                "127.0.0.1:0",
                "--config",
                str(tmp / "config.json"),
                "--auth-token-file",
                str(tmp / "token"),
                "--remove-on-shutdown",
            ],
            stdout=subprocess.PIPE,
            stderr=self.log,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "RUST_LOG": "info"},
        )
        self.console = ""
        self.addr = ""
        found = threading.Event()

        def read() -> None:
            assert self.proc.stdout is not None
            for raw in self.proc.stdout:
                line = raw.decode().strip()
                if line.startswith("sandboxd console on "):
                    self.console = line.removeprefix("sandboxd console on ").rstrip("/")
                if line.startswith("sandboxd listening on "):
                    self.addr = line.removeprefix("sandboxd listening on ")
                    found.set()

        threading.Thread(target=read, daemon=True).start()
        if not found.wait(60):
            self.stop()
            raise AssertionError(
                "sandboxd did not start:\n" + (tmp / "server.log").read_text()
            )
        assert self.console.startswith("http://127.0.0.1:"), self.console

    def ctl(self, who: str, *args: str) -> str:
        token = self.operator if who == "operator" else self.keys[who]
        out = subprocess.run(
            [str(SANDBOXCTL), *args],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "SANDBOXD_ADDR": self.addr, "SANDBOXD_TOKEN": token},
        )
        assert out.returncode == 0, f"sandboxctl {' '.join(args)}: {out.stderr}"
        return out.stdout.strip()

    def create(self, who: str, *labels: str) -> str:
        args = ["create", IMAGE]
        for label in labels:
            args += ["--label", label]
        return self.ctl(who, *args).split()[0]

    def http(self, who: str, path: str) -> tuple[int, Any]:
        token = self.operator if who == "operator" else self.keys[who]
        req = urllib.request.Request(
            self.console + path, headers={"Authorization": f"Bearer {token}"}
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as e:
            return e.code, json.load(e)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        leftovers = subprocess.run(
            [
                "docker",
                "ps",
                "-aq",
                "--filter",
                f"label=sandboxd.test.case={self.case}",
            ],
            check=False,
            capture_output=True,
            text=True,
        ).stdout.split()
        if leftovers:
            subprocess.run(
                ["docker", "rm", "-f", *leftovers], check=False, capture_output=True
            )


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with tempfile.TemporaryDirectory(prefix="sandboxd-console-") as tmp:
        s = Server(pathlib.Path(tmp))
        try:
            yield s
        finally:
            s.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--window-size=1500,1000",
        "--disable-dev-shm-usage",
    ):
        options.add_argument(arg)
    options.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    driver = webdriver.Chrome(
        service=Service(os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")),
        options=options,
    )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()


def sign_in(browser: webdriver.Chrome, server: Server, key: str) -> None:
    browser.get(server.console + "/")
    field = browser.find_element(By.ID, "token")
    field.clear()
    field.send_keys(key)
    browser.find_element(By.ID, "sign-in").click()
    wait_for(
        "the page is live (Watch open)",
        lambda: browser.find_element(By.ID, "live").text == "live",
    )


def row(browser: webdriver.Chrome, sandbox_id: str) -> Any:
    found = browser.find_elements(By.ID, f"sandbox-{sandbox_id}")
    return found[0] if found else None


def row_text(browser: webdriver.Chrome, sandbox_id: str) -> tuple[str, str] | None:
    """A sandbox's row as (its text, its status cell's text), read by one script in the page,
    so a re-render between two reads cannot split them; `None` when there is no such row."""
    found = browser.execute_script(
        "const r = document.getElementById(arguments[0]);"
        "if (!r) { return null; }"
        "const s = r.querySelector('.status');"
        "return [r.innerText, s ? s.innerText : ''];",
        f"sandbox-{sandbox_id}",
    )
    return (str(found[0]), str(found[1]).strip()) if found else None


def click(browser: webdriver.Chrome, what: str, css: str) -> None:
    """Clicks `css` once it is there (the page re-renders its tables on every event, so an
    element found a moment ago may be gone: found again on each try)."""

    def attempt() -> bool:
        browser.find_element(By.CSS_SELECTOR, css).click()
        return True

    wait_for(what, attempt)


def shot(browser: webdriver.Chrome, name: str) -> None:
    assert browser.save_screenshot(str(ARTIFACTS / name)), name


def test_sandboxes_appear_live_and_a_tenant_sees_only_its_own(
    server: Server, browser: webdriver.Chrome
) -> None:
    blue = server.create("blue", "team=blue")
    sign_in(browser, server, server.keys["red"])
    assert "tenant red" in browser.find_element(By.ID, "whoami").text
    # Created after the page went live: they appear through the Watch, without a reload.
    made = [server.create("red", "team=red", f"rollout={i}") for i in range(2)]
    for sandbox_id in made:

        def running(sandbox_id: str = sandbox_id) -> str | None:
            # Read in one step: the page replaces its rows on every event, so a row found by
            # one WebDriver call may be gone by the next.
            seen = row_text(browser, sandbox_id)
            return seen[0] if seen and seen[1] == "running" else None

        text = wait_for(f"{sandbox_id} running on the page", running)
        assert "team=red" in text and IMAGE in text and "runc" in text, text
    assert row(browser, blue) is None, "red's page shows blue's sandbox"
    # The config's warm pool (every tenant's) with its fill, once its member is ready.
    wait_for(
        "the pool filled",
        lambda: "1/1 ready" in browser.find_element(By.ID, "pools").text,
    )
    shot(browser, "fleet.png")
    # The same walls through the JSON API: blue's sandbox is not red's to read.
    code, body = server.http("red", f"/api/sandboxes/{blue}")
    assert code in (403, 404), (code, body)
    code, listing = server.http("red", "/api/sandboxes")
    assert code == 200 and {s["id"] for s in listing["sandboxes"]} >= set(made)
    assert blue not in {s["id"] for s in listing["sandboxes"]}
    code, everything = server.http("operator", "/api/sandboxes")
    assert code == 200 and {blue, *made} <= {s["id"] for s in everything["sandboxes"]}
    req = urllib.request.Request(
        server.console + "/api/sandboxes", headers={"Authorization": "Bearer not-a-key"}
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(req, timeout=30)
    assert refused.value.code == 401
    # Nor through the terminal's WebSocket: red cannot open a shell in blue's sandbox.
    answer = browser.execute_async_script(TERMINAL_PROBE, server.keys["red"], blue)
    assert '"error"' in answer and (
        "PermissionDenied" in answer or "NotFound" in answer
    ), answer
    assert "opened" not in answer, answer
    # Blue's page shows blue's, not red's.
    sign_in(browser, server, server.keys["blue"])
    wait_for("blue's sandbox on blue's page", lambda: row(browser, blue))
    assert all(row(browser, s) is None for s in made)


# Opens /ws/terminal with `key` on `sandbox_id` and answers the first message the server sends.
TERMINAL_PROBE = """
const [key, sandboxId, done] = arguments;
const socket = new WebSocket("ws://" + location.host + "/ws/terminal");
socket.onopen = () => socket.send(JSON.stringify({token: key, sandbox_id: sandboxId, cols: 80, rows: 24}));
socket.onmessage = (m) => { done(typeof m.data === "string" ? m.data : "binary output"); socket.close(); };
socket.onclose = () => done("closed without a message");
"""


def terminal_lines(browser: webdriver.Chrome) -> list[str]:
    return [
        line.rstrip()
        for line in browser.execute_script("return window.terminalText();").split("\n")
    ]


def test_terminal_in_the_browser_runs_echo(
    server: Server, browser: webdriver.Chrome
) -> None:
    sandbox_id = server.create("red", "team=red", "purpose=terminal")
    sign_in(browser, server, server.keys["red"])
    click(browser, "the sandbox's row", f"#sandbox-{sandbox_id}")
    browser.find_element(By.ID, "new-terminal").click()
    wait_for(
        "the session open",
        lambda: browser.find_element(By.ID, "terminal-state").text.startswith("open"),
    )
    typing = browser.find_element(By.CSS_SELECTOR, "#terminal .xterm-helper-textarea")
    typing.send_keys("echo hello\n")
    wait_for("hello on a line of its own", lambda: "hello" in terminal_lines(browser))
    assert any(line.endswith("echo hello") for line in terminal_lines(browser)), (
        terminal_lines(browser)
    )
    shot(browser, "terminal.png")
    # The page's Pty call went through the audited path, as red.
    audit = server.audit.read_text()
    assert any('"Pty"' in line and "red" in line for line in audit.splitlines()), audit[
        -2000:
    ]


def test_the_terminal_fits_the_window_and_the_program_learns_each_size(
    server: Server, browser: webdriver.Chrome
) -> None:
    sandbox_id = server.create("red", "team=red", "purpose=resize")
    sign_in(browser, server, server.keys["red"])
    click(browser, "the sandbox's row", f"#sandbox-{sandbox_id}")
    browser.find_element(By.ID, "new-terminal").click()
    wait_for(
        "the session open",
        lambda: browser.find_element(By.ID, "terminal-state").text.startswith("open"),
    )
    typing = browser.find_element(By.CSS_SELECTOR, "#terminal .xterm-helper-textarea")

    def program_sees(rows: int, cols: int) -> None:
        typing.send_keys("stty size\n")
        wait_for(
            f"stty size answering {rows} {cols}",
            lambda: f"{rows} {cols}" in terminal_lines(browser),
        )

    rows, wide = browser.execute_script("return window.terminalSize();")
    assert wide > 40, wide  # as wide as the box, not a fixed width
    program_sees(rows, wide)
    browser.set_window_size(1000, 1000)
    try:
        wait_for(
            "the terminal narrower",
            lambda: browser.execute_script("return window.terminalSize();")[1] < wide,
        )
        rows, narrow = browser.execute_script("return window.terminalSize();")
        program_sees(rows, narrow)
    finally:
        browser.set_window_size(1500, 1000)


def test_attach_to_a_running_session_replays_its_output(
    server: Server, browser: webdriver.Chrome
) -> None:
    sandbox_id = server.create("red", "team=red", "purpose=attach")
    process_id = server.ctl(
        "red",
        "start",
        sandbox_id,
        "--tty",
        "--",
        "echo retained-marker-$((6*7)); exec sleep 600",
    )
    sign_in(browser, server, server.keys["red"])
    click(browser, "the sandbox's row", f"#sandbox-{sandbox_id}")
    listed = wait_for(
        "the session listed",
        lambda: browser.find_element(By.ID, f"session-{process_id}").text,
    )
    assert "sleep 600" in listed, listed
    click(browser, "the session's Attach", f"#session-{process_id} .attach-session")
    wait_for(
        "attached",
        lambda: browser.find_element(By.ID, "terminal-state").text.startswith("open"),
    )
    wait_for(
        "the retained output replayed",
        lambda: "retained-marker-42" in terminal_lines(browser),
    )
    assert browser.find_element(By.ID, "terminal-session").text == process_id
    shot(browser, "attach.png")
    # Leaving detaches: the session runs on.
    browser.find_element(By.ID, "terminal-close").click()
    ps = json.loads(server.ctl("red", "ps", sandbox_id, "-o", "json"))
    assert any(p["process_id"] == process_id and p["running"] for p in ps), ps


def test_closing_a_sandbox_from_the_page_is_audited(
    server: Server, browser: webdriver.Chrome
) -> None:
    sandbox_id = server.create("red", "team=red", "purpose=close")
    sign_in(browser, server, server.keys["red"])
    click(browser, "the sandbox's row", f"#sandbox-{sandbox_id}")
    click(browser, "Close sandbox", "#close-sandbox")
    wait_for("the confirmation", lambda: browser.switch_to.alert).accept()
    wait_for("the row gone", lambda: row(browser, sandbox_id) is None)
    code, _ = server.http("red", f"/api/sandboxes/{sandbox_id}")
    assert code == 404, code
    audit = [
        json.loads(line)
        for line in server.audit.read_text().splitlines()
        if line.strip()
    ]
    assert any(
        e.get("method") == "Close" and sandbox_id in json.dumps(e) for e in audit
    ), audit[-5:]
