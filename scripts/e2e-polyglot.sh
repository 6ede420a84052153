#!/usr/bin/env bash
# Polyglot end-to-end checks of the sandboxd gRPC server, driven by clients that are not Rust:
#   1. grpcurl (reflection, doc comments, Create/Exec/Upload/Download/Status/Close, error codes,
#      health),
#   2. Python grpcio (tests/polyglot/python_client.py with polyglot_support.py: files/env, exec,
#      3 MiB upload/download, interactive and pipe-mode Pty, close),
#   3. bearer auth against a second server started with --auth-token-file.
# Needs a reachable Docker daemon and the venv made by scripts/install-deps.sh (grpcurl, grpcio).
# Always stops the servers it started and removes the containers they created (all of them carry
# the label sandboxd.test=1 plus a label unique to this run); never touches other containers.
# Ends with `polyglot e2e: N passed, M failed`; exits non-zero when anything failed.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

VENV="${SANDBOXD_VENV:-$REPO_ROOT/.venv}"
PY="$VENV/bin/python"
GRPCURL="$VENV/bin/grpcurl"
SERVER_BIN="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/debug/sandboxd"
BUSYBOX_IMAGE="sandboxd-test/busybox:1"
SVC="sandbox.v1.SandboxService"
NOT_FOUND_ID="sandboxd-00000000000000000000000000000000"
# An id of a shape the service never issues: NotFound for Status too (a gone id of the
# service's own shape reads SANDBOX_STATUS_STOPPED).
FOREIGN_ID="sandboxd-not-an-id"

section() { printf '\n=== %s ===\n' "$*"; }
die() { printf 'e2e-polyglot: ERROR: %s\n' "$*" >&2; exit 1; }

[[ -x "$PY" ]] || die "$PY missing: run scripts/install-deps.sh first"
[[ -x "$GRPCURL" ]] || die "$GRPCURL missing: run scripts/install-deps.sh first"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/sandboxd-e2e-polyglot.XXXXXX")"
RUN_ID="$("$PY" -c 'import uuid; print(uuid.uuid4().hex)')"
IDS_FILE="$WORK/sandbox-ids" # every sandbox id this script (or the Python client) created
: >"$IDS_FILE"
SERVER_PIDS=()
CLIENT_PID="" # the Python client while it runs
TAIL_PID=""

# --- cleanup (always) ----------------------------------------------------------------------

stop_server() { # pid -> exit status of the server (SIGTERM, then SIGKILL after 20 s)
  local pid="$1" i
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 200; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    printf 'e2e-polyglot: server %s ignored SIGTERM for 20s; killing it\n' "$pid" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  local rc=0
  wait "$pid" 2>/dev/null || rc=$?
  return "$rc"
}

forget_server() { # pid: stopped already, so cleanup must not signal it (the pid may be reused)
  local keep=() p
  for p in "${SERVER_PIDS[@]}"; do [[ "$p" == "$1" ]] || keep+=("$p"); done
  SERVER_PIDS=("${keep[@]}")
}

cleanup() {
  local rc=$? pid ids
  trap - EXIT INT TERM
  for pid in "$CLIENT_PID" "$TAIL_PID"; do
    [[ -z "$pid" ]] || kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${SERVER_PIDS[@]}"; do
    stop_server "$pid" || true
  done
  # The sandboxes we know of, then anything else this run's servers created (a Create whose
  # reply never arrived) and what they used: all carry this run's label, so nothing else is
  # touched.
  ids="$(sort -u "$IDS_FILE" 2>/dev/null | sed '/^$/d' || true)"
  if [[ -n "$ids" ]]; then
    # shellcheck disable=SC2086 # one id per word
    docker rm -f $ids >/dev/null 2>&1 || true
  fi
  bash scripts/remove-test-leftovers.sh --case "$RUN_ID" 2>/dev/null || true
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- check bookkeeping ---------------------------------------------------------------------

PASSED=0
FAILED=0
FAILURES=()
pass() { PASSED=$((PASSED + 1)); printf '  ok   %s\n' "$1"; }
fail() {
  FAILED=$((FAILED + 1))
  FAILURES+=("$1")
  printf '  FAIL %s\n' "$1"
  [[ -z "${2:-}" ]] || printf '%s\n' "$2" | sed 's/^/       | /'
}
# check DESC COND_EXIT_STATUS [DETAIL]
check() { if [[ "$2" -eq 0 ]]; then pass "$1"; else fail "$1" "${3:-}"; fi; }

# grpcurl against ADDR; stdout+stderr in $OUT, exit status in $RC (never fails the script).
gc() {
  RC=0
  OUT="$("$GRPCURL" -plaintext -max-time 60 "$@" 2>&1)" || RC=$?
}
json_get() { # JSON on stdin, a python expression over `j` -> printed
  "$PY" -c 'import json, sys, base64; j = json.load(sys.stdin); v = eval(sys.argv[1]); print(v if v is not None else "")' "$1"
}
b64() { "$PY" -c 'import base64, sys; print(base64.b64encode(sys.argv[1].encode()).decode())' "$1"; }
unb64() { "$PY" -c 'import base64, sys; sys.stdout.write(base64.b64decode(sys.stdin.read()).decode())'; }
track() { [[ -z "$1" ]] || printf '%s\n' "$1" >>"$IDS_FILE"; }

# --- server --------------------------------------------------------------------------------

free_port() {
  "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_server NAME [extra args...]: sets ADDR and PID; waits for the "listening" line.
start_server() {
  local name="$1" attempt port i
  shift
  for attempt in 1 2 3; do
    port="$(free_port)"
    "$SERVER_BIN" --listen "127.0.0.1:$port" --config "$WORK/config.json" "$@" \
      >"$WORK/$name.out" 2>"$WORK/$name.err" &
    PID=$!
    SERVER_PIDS+=("$PID")
    for ((i = 0; i < 600; i++)); do
      if grep -q "^sandboxd listening on 127.0.0.1:$port\$" "$WORK/$name.out" 2>/dev/null; then
        ADDR="127.0.0.1:$port"
        printf 'server %s (pid %s) listening on %s\n' "$name" "$PID" "$ADDR"
        return 0
      fi
      kill -0 "$PID" 2>/dev/null || break
      sleep 0.1
    done
    printf 'e2e-polyglot: server %s did not start (attempt %s); its stderr:\n' "$name" "$attempt" >&2
    sed 's/^/  | /' "$WORK/$name.err" >&2 || true
    stop_server "$PID" || true
    forget_server "$PID"
  done
  die "cannot start the $name server"
}

section "build"
cargo test -p sandboxd --test images -q >"$WORK/images.log" 2>&1 || {
  cat "$WORK/images.log" >&2
  die "building the test images (cargo test -p sandboxd --test images) failed"
}
echo "test images present"
cargo build -q -p sandboxd --bin sandboxd
[[ -x "$SERVER_BIN" ]] || die "$SERVER_BIN was not built"
echo "built $SERVER_BIN"

cat >"$WORK/config.json" <<EOF
{"docker": {"create": {"extra_run_args": ["--label", "sandboxd.test=1", "--label", "sandboxd.test.case=$RUN_ID"]}}}
EOF

section "server"
start_server main
MAIN_PID="$PID"
MAIN_ADDR="$ADDR"

# --- 1. grpcurl ----------------------------------------------------------------------------

section "grpcurl: reflection"
gc "$MAIN_ADDR" list
check "list shows $SVC" "$([[ $RC -eq 0 ]] && grep -qx "$SVC" <<<"$OUT"; echo $?)" "$OUT"
check "list shows grpc.health.v1.Health" \
  "$([[ $RC -eq 0 ]] && grep -qx "grpc.health.v1.Health" <<<"$OUT"; echo $?)" "$OUT"

gc "$MAIN_ADDR" describe "$SVC"
check "describe $SVC shows doc comments" \
  "$([[ $RC -eq 0 ]] && grep -qF 'Run `<shell> -c <command>`' <<<"$OUT" &&
    grep -qF 'rpc Pty ( stream .sandbox.v1.PtyRequest ) returns ( stream .sandbox.v1.PtyResponse )' <<<"$OUT"
    echo $?)" "$OUT"

gc "$MAIN_ADDR" describe sandbox.v1.ExecRequest
check "describe sandbox.v1.ExecRequest shows its fields" \
  "$([[ $RC -eq 0 ]] && grep -qF 'string command = 2;' <<<"$OUT" &&
    grep -qF 'optional double timeout_s = 5;' <<<"$OUT"; echo $?)" "$OUT"

section "grpcurl: health"
gc "$MAIN_ADDR" grpc.health.v1.Health/Check
check "Health/Check is SERVING" \
  "$([[ $RC -eq 0 ]] && [[ "$(json_get 'j.get("status")' <<<"$OUT")" == SERVING ]]; echo $?)" "$OUT"

section "grpcurl: sandbox lifecycle ($BUSYBOX_IMAGE)"
gc -d "{\"spec\": {\"image\": \"$BUSYBOX_IMAGE\", \"env\": {\"WHO\": \"grpcurl\"}, \"metadata\": {\"run\": \"$RUN_ID\"}}}" \
  "$MAIN_ADDR" "$SVC/Create"
SID=""
[[ $RC -ne 0 ]] || SID="$(json_get 'j["sandbox"]["sandboxId"]' <<<"$OUT" 2>/dev/null || true)"
track "$SID"
check "Create returns a sandbox id" "$([[ "$SID" == sandboxd-* ]]; echo $?)" "$OUT"

gc -d "{\"sandbox_id\": \"$SID\", \"command\": \"echo hello-grpcurl; echo \$WHO\"}" \
  "$MAIN_ADDR" "$SVC/Exec"
stdout=""
[[ $RC -ne 0 ]] || stdout="$(json_get 'j.get("stdout", "")' <<<"$OUT" | unb64)"
check "Exec: stdout (base64) decodes to hello-grpcurl, spec env applies" \
  "$([[ $RC -eq 0 && "$stdout" == $'hello-grpcurl\ngrpcurl' ]] &&
    [[ -z "$(json_get 'j.get("returnCode")' <<<"$OUT")" ]]; echo $?)" "$OUT"

gc -d "{\"sandboxId\": \"$SID\", \"command\": \"echo oops >&2; exit 7\"}" "$MAIN_ADDR" "$SVC/Exec"
check "Exec: a failing command is a result (returnCode 7, no error)" \
  "$([[ $RC -eq 0 ]] && [[ "$(json_get 'j.get("returnCode")' <<<"$OUT")" == 7 ]] &&
    [[ -z "$(json_get 'j.get("errorType")' <<<"$OUT")" ]] &&
    [[ "$(json_get 'j.get("stderr", "")' <<<"$OUT" | unb64)" == oops ]]; echo $?)" "$OUT"

gc -d "{\"sandboxId\": \"$SID\", \"command\": \"printf out1; printf err1 >&2; exit 4\"}" \
  "$MAIN_ADDR" "$SVC/ExecStream"
stream="$([[ $RC -ne 0 ]] || "$PY" -c '
import base64, json, sys
dec, text, out, err, exits = json.JSONDecoder(), sys.stdin.read(), b"", b"", []
i = 0
while True:
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text):
        break
    obj, i = dec.raw_decode(text, i)
    out += base64.b64decode(obj.get("stdout", ""))
    err += base64.b64decode(obj.get("stderr", ""))
    if "exit" in obj:
        exits.append(obj["exit"])
last = exits[-1] if exits else {}
print(out.decode(), err.decode(), len(exits), last.get("returnCode", 0), last.get("errorType", ""))' <<<"$OUT")"
check "ExecStream (server streaming): stdout and stderr chunks, then one exit (returnCode 4)" \
  "$([[ "$stream" == "out1 err1 1 4 " ]]; echo $?)" "$OUT"

gc -d "{\"sandboxId\": \"$SID\", \"command\": \"\"}" "$MAIN_ADDR" "$SVC/ExecStream"
check "ExecStream with an empty command: InvalidArgument naming command" \
  "$([[ $RC -ne 0 ]] && grep -q 'Code: InvalidArgument' <<<"$OUT" && grep -q 'command' <<<"$OUT"; echo $?)" "$OUT"

# Client streaming: one header message, then chunks (base64), all read from stdin.
CONTENT=$'uploaded by grpcurl\n'
gc -d @ "$MAIN_ADDR" "$SVC/Upload" <<EOF
{"header": {"sandboxId": "$SID", "path": "/tmp/grpcurl/hello.txt"}}
{"chunk": "$(b64 "$CONTENT")"}
EOF
check "Upload (client streaming) writes the file" \
  "$([[ $RC -eq 0 ]] && [[ "$(json_get 'j.get("bytesWritten")' <<<"$OUT")" == "${#CONTENT}" ]]; echo $?)" \
  "$OUT"

gc -d "{\"sandboxId\": \"$SID\", \"path\": \"/tmp/grpcurl/hello.txt\"}" "$MAIN_ADDR" "$SVC/Download"
got=""
[[ $RC -ne 0 ]] || got="$("$PY" -c '
import base64, json, sys
dec, text, out = json.JSONDecoder(), sys.stdin.read(), b""
i = 0
while True:
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text):
        break
    obj, i = dec.raw_decode(text, i)
    out += base64.b64decode(obj.get("chunk", ""))
sys.stdout.write(out.decode())' <<<"$OUT")"
check "Download (server streaming) returns the uploaded bytes" \
  "$([[ $RC -eq 0 && "$got" == "${CONTENT%$'\n'}" ]]; echo $?)" "$OUT"

# Files (issue 19): paths are bytes, so base64 in grpcurl's JSON; a name with a space, a
# newline and a byte that is not UTF-8 made by MakeDir comes back from ListDir as the same bytes.
ODD_B64="$("$PY" -c 'import base64; print(base64.b64encode(b"/tmp/grpcurl/odd \n\xff dir").decode())')"
gc -d "{\"sandboxId\": \"$SID\", \"path\": \"$ODD_B64\", \"mode\": 448}" "$MAIN_ADDR" "$SVC/MakeDir"
check "MakeDir of a non-UTF-8 path (bytes, base64)" "$RC" "$OUT"
gc -d "{\"sandboxId\": \"$SID\", \"path\": \"$(b64 /tmp/grpcurl)\"}" "$MAIN_ADDR" "$SVC/ListDir"
check "ListDir returns the odd name's exact bytes, typed a directory with its mode" \
  "$([[ $RC -eq 0 ]] && [[ "$(json_get '[(e["path"], e["type"], e["mode"]) for e in j["entries"] if e["type"] == "FILE_TYPE_DIR"] == [("'"$ODD_B64"'", "FILE_TYPE_DIR", 448)]' <<<"$OUT")" == True ]]; echo $?)" \
  "$OUT"
gc -d "{\"sandboxId\": \"$SID\", \"path\": \"$(b64 /tmp/grpcurl/none)\"}" "$MAIN_ADDR" "$SVC/Stat"
check "Stat of a missing path: NotFound naming it" \
  "$([[ $RC -ne 0 ]] && grep -q 'Code: NotFound' <<<"$OUT" && grep -q '/tmp/grpcurl/none' <<<"$OUT"; echo $?)" "$OUT"

gc -d "{\"sandboxId\": \"$SID\"}" "$MAIN_ADDR" "$SVC/Status"
check "Status is SANDBOX_STATUS_RUNNING" \
  "$([[ $RC -eq 0 ]] && [[ "$(json_get 'j.get("status")' <<<"$OUT")" == SANDBOX_STATUS_RUNNING ]]; echo $?)" \
  "$OUT"

gc -d "{\"labels\": {\"run\": \"$RUN_ID\"}}" "$MAIN_ADDR" "$SVC/List"
check "List by label finds the sandbox created with that label, with its labels" \
  "$([[ $RC -eq 0 ]] && [[ "$(json_get '[(s["sandbox"]["sandboxId"], s["sandbox"]["metadata"]["run"]) for s in j["sandboxes"]] == [("'"$SID"'", "'"$RUN_ID"'")]' <<<"$OUT")" == True ]]; echo $?)" \
  "$OUT"

gc -d "{\"sandboxId\": \"$SID\"}" "$MAIN_ADDR" "$SVC/Close"
check "Close succeeds" "$RC" "$OUT"
gc -d "{\"sandboxId\": \"$SID\"}" "$MAIN_ADDR" "$SVC/Close"
check "Close again succeeds (already gone)" "$RC" "$OUT"
check "the container is removed" \
  "$([[ -z "$(docker ps -aq --filter "name=^${SID}\$" 2>/dev/null)" ]]; echo $?)"

section "grpcurl: errors"
gc -d '{"spec": {"image": ""}}' "$MAIN_ADDR" "$SVC/Create"
check "Create with an empty image: InvalidArgument naming spec.image" \
  "$([[ $RC -ne 0 ]] && grep -q 'Code: InvalidArgument' <<<"$OUT" && grep -q 'spec.image' <<<"$OUT"
    echo $?)" "$OUT"
gc -d "{\"sandboxId\": \"$NOT_FOUND_ID\", \"command\": \"true\"}" "$MAIN_ADDR" "$SVC/Exec"
check "Exec in an unknown sandbox: NotFound" \
  "$([[ $RC -ne 0 ]] && grep -q 'Code: NotFound' <<<"$OUT"; echo $?)" "$OUT"
gc -d "{\"sandboxId\": \"$FOREIGN_ID\"}" "$MAIN_ADDR" "$SVC/Status"
check "Status of an id the service never issues: NotFound" \
  "$([[ $RC -ne 0 ]] && grep -q 'Code: NotFound' <<<"$OUT"; echo $?)" "$OUT"
gc -d "{\"sandboxId\": \"$NOT_FOUND_ID\"}" "$MAIN_ADDR" "$SVC/Status"
check "Status of a gone sandbox: STOPPED" \
  "$([[ $RC -eq 0 ]] && grep -q 'SANDBOX_STATUS_STOPPED' <<<"$OUT"; echo $?)" "$OUT"

# --- 2. Python -----------------------------------------------------------------------------

# run_python LABEL ARGS...: runs the Python client, adds its `N passed, M failed` to the totals.
run_python() {
  local label="$1" rc=0 last n m
  shift
  # In the background, so a signal to this script runs its trap at once (a trap waits for a
  # foreground command); its output is shown live.
  SANDBOXD_PY_STUBS="$WORK/pystubs" SANDBOXD_E2E_IDS_FILE="$IDS_FILE" PYTHONUNBUFFERED=1 \
    "$PY" tests/polyglot/python_client.py "$@" >"$WORK/py.out" 2>"$WORK/py.err" &
  CLIENT_PID=$!
  tail -n +1 -f --pid="$CLIENT_PID" "$WORK/py.out" &
  TAIL_PID=$!
  wait "$CLIENT_PID" || rc=$?
  wait "$TAIL_PID" || true
  CLIENT_PID="" TAIL_PID=""
  last="$(tail -n 1 "$WORK/py.out")"
  if [[ "$last" =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
    n="${BASH_REMATCH[1]}" m="${BASH_REMATCH[2]}"
    PASSED=$((PASSED + n))
    FAILED=$((FAILED + m))
    if ((m > 0)); then
      FAILURES+=("$label: $m failed (see above)")
      sed 's/^/       | /' "$WORK/py.err"
    fi
  else
    m=1
    fail "$label: the client did not finish (exit $rc)" "$(cat "$WORK/py.err")"
  fi
  if ((rc != 0 && m == 0)); then
    fail "$label: the client exited $rc" "$(cat "$WORK/py.err")"
  fi
}

section "python: generate stubs"
mkdir -p "$WORK/pystubs"
stub_rc=0
"$PY" -m grpc_tools.protoc -I proto --python_out="$WORK/pystubs" --grpc_python_out="$WORK/pystubs" \
  --pyi_out="$WORK/pystubs" sandbox/v1/sandbox.proto 2>"$WORK/protoc.err" || stub_rc=$?
check "grpc_tools.protoc generates the Python stubs" \
  "$([[ $stub_rc -eq 0 && -f "$WORK/pystubs/sandbox/v1/sandbox_pb2_grpc.py" ]]; echo $?)" \
  "$(cat "$WORK/protoc.err")"

section "python: client walk-through (tests/polyglot/python_client.py)"
# run_quickstart LABEL ADDR [TOKEN]: runs the Python quickstart of docs/examples.md as written.
run_quickstart() {
  local label="$1" addr="$2" token="${3:-}" rc=0 sid
  if [[ ! -s "$WORK/quickstart.py" ]]; then
    fail "$label: no \`# quickstart.py\` python block in docs/examples.md"
    return
  fi
  PYTHONPATH="$WORK/pystubs" SANDBOXD_TOKEN="$token" PYTHONUNBUFFERED=1 \
    "$PY" "$WORK/quickstart.py" "$addr" "$BUSYBOX_IMAGE" >"$WORK/qs.out" 2>&1 &
  CLIENT_PID=$!
  wait "$CLIENT_PID" || rc=$?
  CLIENT_PID=""
  sid="$(sed -n 's/^sandbox: //p' "$WORK/qs.out")"
  track "$sid"
  check "$label" "$([[ $rc -eq 0 ]] && grep -q "^closed $sid\$" "$WORK/qs.out"; echo $?)" \
    "$(cat "$WORK/qs.out")"
}

run_python "python client" "$MAIN_ADDR"

section "python: the quickstart of docs/examples.md"
awk '/^```python$/ { getline l; if (l ~ /^# quickstart.py/) { f = 1; print l; next } }
  f && /^```$/ { f = 0 } f' docs/examples.md >"$WORK/quickstart.py"
run_quickstart "docs/examples.md quickstart runs as written" "$MAIN_ADDR"

section "server: SIGTERM"
srv_rc=0
stop_server "$MAIN_PID" || srv_rc=$?
forget_server "$MAIN_PID"
check "the server exits 0 on SIGTERM" "$srv_rc" "$(tail -n 20 "$WORK/main.err")"

# --- 3. bearer auth ------------------------------------------------------------------------

section "auth: server with --auth-token-file"
TOKEN="e2e-$("$PY" -c 'import secrets; print(secrets.token_hex(16))')"
printf '%s\n' "$TOKEN" >"$WORK/token"
chmod 600 "$WORK/token"
start_server auth --auth-token-file "$WORK/token"
AUTH_ADDR="$ADDR"

# '${SANDBOXD_E2E_AUTH}' below is single-quoted on purpose: grpcurl expands it, so the token
# never shows up in a process listing.
export SANDBOXD_E2E_AUTH="authorization: Bearer $TOKEN" # grpcurl -expand-headers reads it
gc -d "{\"sandboxId\": \"$FOREIGN_ID\"}" "$AUTH_ADDR" "$SVC/Status"
check "grpcurl without a token: Unauthenticated" \
  "$([[ $RC -ne 0 ]] && grep -q 'Unauthenticated' <<<"$OUT"; echo $?)" "$OUT"
# shellcheck disable=SC2016
gc -expand-headers -H '${SANDBOXD_E2E_AUTH}' -d "{\"sandboxId\": \"$FOREIGN_ID\"}" \
  "$AUTH_ADDR" "$SVC/Status"
check "grpcurl with the token: passes auth (NotFound)" \
  "$([[ $RC -ne 0 ]] && grep -q 'Code: NotFound' <<<"$OUT"; echo $?)" "$OUT"
# Reflection needs the token too; -reflect-header sends it only to reflection, not to Check.
# shellcheck disable=SC2016
gc -expand-headers -reflect-header '${SANDBOXD_E2E_AUTH}' "$AUTH_ADDR" grpc.health.v1.Health/Check
check "grpcurl health without a token: SERVING" \
  "$([[ $RC -eq 0 ]] && [[ "$(json_get 'j.get("status")' <<<"$OUT")" == SERVING ]]; echo $?)" "$OUT"

run_python "python auth checks" --auth-token-file "$WORK/token" "$AUTH_ADDR"
run_quickstart "docs/examples.md quickstart runs with SANDBOXD_TOKEN against the auth server" \
  "$AUTH_ADDR" "$TOKEN"

# --- summary -------------------------------------------------------------------------------

section "summary"
for f in "${FAILURES[@]}"; do
  printf 'FAILED: %s\n' "$f"
done
echo "polyglot e2e: $PASSED passed, $FAILED failed"
[[ "$FAILED" -eq 0 ]]
