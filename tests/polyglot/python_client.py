#!/usr/bin/env python3
"""End-to-end checks of a running sandboxd server from Python (grpcio).

Usage:
    python_client.py ADDR                          # the full client walk-through
    python_client.py --auth-token-file F ADDR      # bearer-auth checks against an auth server

Options:
    --stubs DIR      directory holding the generated `sandbox/v1/sandbox_pb2*.py` (defaults to
                     $SANDBOXD_PY_STUBS; when neither is given the stubs are generated into a
                     temporary directory with grpc_tools.protoc from proto/)
    --ids-file F     append every created sandbox id to F (one a line) so a caller can clean up
    --image-bash I   the bash image (default sandboxd-test/bash:1)

Every check is counted; the last line is `N passed, M failed`, and the exit status is non-zero
when anything failed. Every blocking call has a timeout: unary calls carry gRPC deadlines and
stream reads go through a reader thread and a queue read with a timeout.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

import grpc

from polyglot_support import (  # the directory of this script is on sys.path
    UNARY_TIMEOUT_S,
    STREAM_TIMEOUT_S,
    READ_TIMEOUT_S,
    CHUNK,
    UPLOAD_SIZE,
    NOT_FOUND_ID,
    FOREIGN_ID,
    load_stubs,
    Checks,
    rpc_code,
    Bidi,
    PtyReader,
)


# --- the walk-through ----------------------------------------------------------------------


class Client:
    def __init__(self, args, pb2, pb2_grpc, checks: Checks) -> None:
        self.args = args
        self.pb = pb2
        self.checks = checks
        self.channel = grpc.insecure_channel(
            args.addr,
            options=[
                ("grpc.max_receive_message_length", 16 * 1024 * 1024),
                ("grpc.max_send_message_length", 16 * 1024 * 1024),
            ],
        )
        grpc.channel_ready_future(self.channel).result(timeout=UNARY_TIMEOUT_S)
        self.stub = pb2_grpc.SandboxServiceStub(self.channel)
        self.sandbox_id: str | None = None

    def record_id(self, sid: str) -> None:
        if self.args.ids_file:
            with open(self.args.ids_file, "a", encoding="utf-8") as f:
                f.write(sid + "\n")

    def exec(self, command: str, **kw):
        return self.stub.Exec(
            self.pb.ExecRequest(sandbox_id=self.sandbox_id, command=command, **kw),
            timeout=UNARY_TIMEOUT_S,
        )

    # sections -----------------------------------------------------------------------------

    def create(self) -> None:
        ok, pb = self.checks.ok, self.pb
        spec = pb.SandboxSpec(
            image=self.args.image_bash,
            env={"GREETING": "hello-from-python", "SHARED": "spec"},
            files={"/tmp/seed.txt": b"seeded"},
            metadata={"owner": "polyglot-e2e"},
        )
        resp = self.stub.Create(pb.CreateRequest(spec=spec), timeout=UNARY_TIMEOUT_S)
        sid = resp.sandbox.sandbox_id
        if sid:
            self.record_id(sid)
        ok(sid.startswith("sandboxd-"), "Create returns a sandbox id", sid)
        ok(dict(resp.sandbox.metadata) == {"owner": "polyglot-e2e"}, "Create returns the labels", resp.sandbox)
        self.sandbox_id = sid

    def execs(self) -> None:
        ok = self.checks.ok
        r = self.exec('echo "$GREETING"; echo "$BASH_VERSION" | cut -c1')
        ok(r.return_code == 0 and r.error_type == "", "Exec succeeds", r)
        lines = r.stdout.decode().splitlines()
        ok(lines[:1] == ["hello-from-python"], "Exec sees spec env", r.stdout)
        ok(len(lines) == 2 and lines[1].isdigit(), "Exec runs under bash", r.stdout)

        r = self.exec("cat /tmp/seed.txt")
        ok(r.return_code == 0 and r.stdout == b"seeded", "seeded file has its content", r)

        r = self.exec("echo to-stderr >&2; exit 5")
        ok(
            r.return_code == 5 and r.stderr == b"to-stderr\n" and r.error_type == "",
            "a failing command is a result (return_code 5, stderr kept)",
            r,
        )

        r = self.exec('echo "$SHARED"; pwd', env={"SHARED": "exec"}, cwd="/tmp")
        ok(r.stdout == b"exec\n/tmp\n", "Exec env wins over spec env; cwd applies", r.stdout)

        r = self.exec("tr a-z A-Z", stdin=b"piped input\n")
        ok(r.stdout == b"PIPED INPUT\n", "Exec feeds stdin", r.stdout)

    def exec_stream(self) -> None:
        ok, pb = self.checks.ok, self.pb
        # The first chunk arrives while the command still waits: output is streamed, not batched.
        call = self.stub.ExecStream(
            pb.ExecRequest(
                sandbox_id=self.sandbox_id,
                command="printf first; while [ ! -e /tmp/stream-go ]; do sleep 0.1; done; printf late >&2; exit 3",
                timeout_s=60,
            ),
            timeout=UNARY_TIMEOUT_S,
        )
        first = next(call)
        ok(first.WhichOneof("response") == "stdout" and first.stdout == b"first",
           "ExecStream sends stdout before the command ends", first)
        self.exec("touch /tmp/stream-go")
        rest = list(call)
        err = b"".join(m.stderr for m in rest if m.WhichOneof("response") == "stderr")
        exits = [m.exit for m in rest if m.WhichOneof("response") == "exit"]
        ok(err == b"late" and len(exits) == 1 and exits[0].return_code == 3 and exits[0].error_type == "",
           "ExecStream ends with one exit (return_code 3) after stderr", rest)

        call = self.stub.ExecStream(
            pb.ExecRequest(sandbox_id=self.sandbox_id, command="sleep 30", timeout_s=1),
            timeout=UNARY_TIMEOUT_S,
        )
        last = list(call)[-1]
        ok(last.exit.return_code == 125 and last.exit.error_type == "timeout",
           "ExecStream: a timeout ends with 125/timeout", last)

        code = rpc_code(lambda: list(self.stub.ExecStream(
            pb.ExecRequest(sandbox_id=self.sandbox_id, command=""), timeout=UNARY_TIMEOUT_S)))
        ok(code == grpc.StatusCode.INVALID_ARGUMENT, "ExecStream: an empty command is INVALID_ARGUMENT", code)

    def upload_download(self) -> None:
        ok, pb = self.checks.ok, self.pb
        data = os.urandom(UPLOAD_SIZE)
        path = "/tmp/polyglot/upload.bin"

        def requests():
            yield pb.UploadRequest(
                header=pb.UploadHeader(sandbox_id=self.sandbox_id, path=path, size=len(data))
            )
            for i in range(0, len(data), CHUNK):
                yield pb.UploadRequest(chunk=data[i : i + CHUNK])

        resp = self.stub.Upload(requests(), timeout=STREAM_TIMEOUT_S)
        ok(resp.bytes_written == len(data), "Upload writes 3 MiB", resp.bytes_written)

        r = self.exec(f"wc -c < {path}")
        ok(r.stdout.strip() == str(len(data)).encode(), "uploaded file has its size", r.stdout)

        got = bytearray()
        chunks = 0
        for part in self.stub.Download(
            pb.DownloadRequest(sandbox_id=self.sandbox_id, path=path), timeout=STREAM_TIMEOUT_S
        ):
            got += part.chunk
            chunks += 1
        ok(bytes(got) == data, f"Download returns the same bytes ({chunks} chunks)", len(got))

        code = rpc_code(
            lambda: list(
                self.stub.Download(
                    pb.DownloadRequest(sandbox_id=self.sandbox_id, path="/tmp/no-such-file"),
                    timeout=UNARY_TIMEOUT_S,
                )
            )
        )
        ok(code == grpc.StatusCode.NOT_FOUND, "Download of a missing file is NOT_FOUND", code)

    def status(self) -> None:
        ok, pb = self.checks.ok, self.pb
        r = self.stub.Status(pb.StatusRequest(sandbox_id=self.sandbox_id), timeout=UNARY_TIMEOUT_S)
        ok(r.status == pb.SANDBOX_STATUS_RUNNING, "Status is RUNNING", r)
        code = rpc_code(
            self.stub.Status, pb.StatusRequest(sandbox_id=FOREIGN_ID), timeout=UNARY_TIMEOUT_S
        )
        ok(code == grpc.StatusCode.NOT_FOUND, "Status of an id the service never issues is NOT_FOUND", code)
        r = self.stub.Status(pb.StatusRequest(sandbox_id=NOT_FOUND_ID), timeout=UNARY_TIMEOUT_S)
        ok(r.status == pb.SANDBOX_STATUS_STOPPED, "Status of a gone id of the service's shape is STOPPED", r)

    def labels_and_list(self) -> None:
        ok, pb = self.checks.ok, self.pb
        want = {"owner": "polyglot-e2e"}
        seen, token = [], ""
        while True:  # one sandbox per page: the pages must add up with no repeats
            r = self.stub.List(pb.ListRequest(labels=want, page_size=1, page_token=token), timeout=UNARY_TIMEOUT_S)
            seen += [(i.sandbox.sandbox_id, dict(i.sandbox.metadata), i.status) for i in r.sandboxes]
            token = r.next_page_token
            if not token:
                break
        ids = [s[0] for s in seen]
        ok(self.sandbox_id in ids, "List by label finds the sandbox, one page at a time", seen)
        ok(len(ids) == len(set(ids)), "List pages do not repeat a sandbox", ids)
        ok(all(m == want for _, m, _ in seen), "List returns each sandbox's labels", seen)
        r = self.stub.List(
            pb.ListRequest(labels=want, statuses=[pb.SANDBOX_STATUS_STOPPED]), timeout=UNARY_TIMEOUT_S
        )
        ok(self.sandbox_id not in [i.sandbox.sandbox_id for i in r.sandboxes], "List filters by status", r)
        code = rpc_code(self.stub.List, pb.ListRequest(page_size=5000), timeout=UNARY_TIMEOUT_S)
        ok(code == grpc.StatusCode.INVALID_ARGUMENT, "List page_size over 1000 is INVALID_ARGUMENT", code)

    def pty_interactive(self) -> None:
        ok, pb = self.checks.ok, self.pb
        bidi = Bidi(self.stub.Pty)
        pty = PtyReader(bidi)
        try:
            bidi.send(
                pb.PtyRequest(open=pb.PtyOpen(sandbox_id=self.sandbox_id, rows=30, cols=100))
            )
            first = bidi.next()
            ok(
                first is not None and first.WhichOneof("response") == "opened",
                "Pty answers `opened` first",
                first if first is not None else bidi.error,
            )
            ok(first.opened.mode == "pty" and first.opened.session_id != "", "opened: pty mode",
               first.opened)

            bidi.send(pb.PtyRequest(input=b"stty size; echo py-$((6*7))\n"))
            pty.wait_output([b"30 100", b"py-42"])
            ok(True, "Pty: initial size 30x100 and shell output")

            mark = len(pty.output)
            bidi.send(pb.PtyRequest(resize=pb.PtyResize(rows=40, cols=120)))
            bidi.send(pb.PtyRequest(input=b"stty size\n"))
            self.wait_resized(pty, mark)
            ok(True, "Pty: resize to 40x120 is seen by stty")

            bidi.send(pb.PtyRequest(input=b"exit 3\n"))
            code = pty.wait_exit()
            ok(code == 3, "Pty: `exit 3` gives exit_code 3", code)
            # The server ends the response stream after `exit`, without waiting for the caller.
            pty.wait_end()
            ok(bidi.error is None, "Pty: the stream ends cleanly after exit", bidi.error)
        finally:
            bidi.half_close()
            if not pty.ended:
                bidi.cancel()

    def wait_resized(self, pty: PtyReader, mark: int) -> None:
        """The `stty size` sent right after the resize must already see `40 120`: the server
        applies the size in the container before it reads the next request."""
        deadline = time.monotonic() + READ_TIMEOUT_S
        while True:
            text = pty.output[mark:]
            if b"40 120" in text:
                return
            if b"30 100" in text:
                raise AssertionError(f"input sent right after PtyResize ran at the old size: {text!r}")
            if pty.ended or pty.exit_code is not None:
                raise AssertionError(f"session ended before `stty size` answered: {text!r}")
            try:
                pty._pump(deadline)
            except TimeoutError:
                raise AssertionError(f"no `stty size` answer after resize: {text!r}") from None

    def pty_pipe(self) -> None:
        ok, pb = self.checks.ok, self.pb
        bidi = Bidi(self.stub.Pty)
        pty = PtyReader(bidi)
        try:
            bidi.send(
                pb.PtyRequest(
                    open=pb.PtyOpen(
                        sandbox_id=self.sandbox_id, command="echo out; echo err >&2", pipe=True
                    )
                )
            )
            first = bidi.next()
            ok(
                first is not None
                and first.WhichOneof("response") == "opened"
                and first.opened.mode == "pipe",
                "pipe Pty answers `opened` (mode pipe)",
                first if first is not None else bidi.error,
            )
            code = pty.wait_exit()
            ok(code == 0, "pipe Pty exits 0", code)
            ok(pty.output == b"out\n", "pipe Pty: stdout on `output`", pty.output)
            ok(pty.stderr == b"err\n", "pipe Pty: stderr on `stderr`", pty.stderr)
            bidi.half_close()
            pty.wait_end()
            ok(bidi.error is None, "pipe Pty: stream ends cleanly after half-close", bidi.error)
        finally:
            bidi.half_close()
            if not pty.ended:
                bidi.cancel()

    def pty_pipe_stdin(self) -> None:
        ok, pb = self.checks.ok, self.pb
        bidi = Bidi(self.stub.Pty)
        pty = PtyReader(bidi)
        try:
            bidi.send(
                pb.PtyRequest(
                    open=pb.PtyOpen(sandbox_id=self.sandbox_id, command="read x; echo got-$x",
                                    pipe=True)
                )
            )
            first = bidi.next()
            ok(first is not None and first.WhichOneof("response") == "opened",
               "pipe Pty with stdin: opened", first if first is not None else bidi.error)
            bidi.send(pb.PtyRequest(input=b"abc\n"))
            code = pty.wait_exit()
            ok(code == 0 and pty.output == b"got-abc\n", "pipe Pty: input reaches stdin",
               (code, pty.output))
        finally:
            bidi.half_close()
            if not pty.ended:
                bidi.cancel()

    def pty_control(self) -> None:
        ok, pb = self.checks.ok, self.pb

        def open_stream(open_msg):
            bidi = Bidi(self.stub.Pty)
            bidi.send(pb.PtyRequest(open=open_msg))
            first = bidi.next()
            if first is None or first.WhichOneof("response") != "opened":
                bidi.half_close()
                raise AssertionError(f"no `opened`: {first if first is not None else bidi.error}")
            return bidi, PtyReader(bidi)

        # SIGINT reaches the terminal's foreground job (like Ctrl-C): `sleep 30` ends at once.
        bidi, pty = open_stream(pb.PtyOpen(sandbox_id=self.sandbox_id))
        try:
            bidi.send(pb.PtyRequest(input=b"sleep 30\n"))
            time.sleep(1.0)
            started = time.monotonic()
            bidi.send(pb.PtyRequest(signal=pb.PtySignal(name="SIGINT")))
            bidi.send(pb.PtyRequest(input=b"echo after-int-$((1+1))\n"))
            pty.wait_output([b"after-int-2"], timeout=15)
            ok(time.monotonic() - started < 15, "Pty: SIGINT interrupts the foreground job")
            # PtyClose ends the session: `exit` (the shell is hung up), then the stream ends.
            bidi.send(pb.PtyRequest(close=pb.PtyClose()))
            pty.wait_end()
            ok(bidi.error is None, "Pty: PtyClose ends the stream", (pty.exit_code, bidi.error))
        finally:
            bidi.half_close()
            if not pty.ended:
                bidi.cancel()

        # Pipe mode: the signal goes to the process group; exit code 128 + 15.
        bidi, pty = open_stream(pb.PtyOpen(sandbox_id=self.sandbox_id, command="sleep 30",
                                           pipe=True))
        try:
            time.sleep(0.5)
            bidi.send(pb.PtyRequest(signal=pb.PtySignal(name="SIGTERM")))
            code = pty.wait_exit(timeout=15)
            ok(code == 143, "pipe Pty: SIGTERM gives exit_code 143", code)
        finally:
            bidi.half_close()
            if not pty.ended:
                bidi.cancel()

        # Errors: unknown sandbox, a first message that is not `open`, an unknown signal.
        for what, first, want in (
            ("Pty in an unknown sandbox is NOT_FOUND",
             pb.PtyRequest(open=pb.PtyOpen(sandbox_id=NOT_FOUND_ID)), grpc.StatusCode.NOT_FOUND),
            ("Pty whose first message is not `open` is INVALID_ARGUMENT",
             pb.PtyRequest(input=b"x"), grpc.StatusCode.INVALID_ARGUMENT),
        ):
            bidi = Bidi(self.stub.Pty)
            bidi.send(first)
            resp = bidi.next()
            bidi.half_close()
            code = bidi.error.code() if bidi.error is not None else resp
            ok(code == want, what, code)
        bidi, pty = open_stream(pb.PtyOpen(sandbox_id=self.sandbox_id, command="sleep 30",
                                           pipe=True))
        try:
            bidi.send(pb.PtyRequest(signal=pb.PtySignal(name="SIGFOO")))
            resp = bidi.next()
            code = bidi.error.code() if bidi.error is not None else resp
            ok(code == grpc.StatusCode.INVALID_ARGUMENT, "Pty: unknown signal is INVALID_ARGUMENT",
               code)
        finally:
            bidi.half_close()
            bidi.cancel()

    def close(self) -> None:
        ok, pb = self.checks.ok, self.pb
        self.stub.Close(pb.CloseRequest(sandbox_id=self.sandbox_id), timeout=UNARY_TIMEOUT_S)
        ok(True, "Close succeeds")
        # A closed sandbox reads STOPPED, from this server or any other (an id it never issues
        # is NOT_FOUND).
        try:
            r = self.stub.Status(
                pb.StatusRequest(sandbox_id=self.sandbox_id), timeout=UNARY_TIMEOUT_S
            )
            after = pb.SandboxStatus.Name(r.status)
        except grpc.RpcError as e:
            after = e.code().name
        ok(after == "SANDBOX_STATUS_STOPPED", "Status after Close: STOPPED", after)
        self.stub.Close(pb.CloseRequest(sandbox_id=self.sandbox_id), timeout=UNARY_TIMEOUT_S)
        ok(True, "a second Close also succeeds")
        code = rpc_code(
            self.stub.Exec,
            pb.ExecRequest(sandbox_id=self.sandbox_id, command="true"),
            timeout=UNARY_TIMEOUT_S,
        )
        ok(code == grpc.StatusCode.NOT_FOUND, "Exec after Close is NOT_FOUND", code)

    def run(self) -> None:
        c = self.checks
        c.section("Create (bash image, env, seeded file)", self.create)
        if self.sandbox_id is None:
            return
        c.section("Exec", self.execs)
        c.section("ExecStream", self.exec_stream)
        c.section("Upload / Download (3 MiB)", self.upload_download)
        c.section("Status", self.status)
        c.section("Labels and List", self.labels_and_list)
        c.section("Pty (interactive terminal)", self.pty_interactive)
        c.section("Pty (pipe mode)", self.pty_pipe)
        c.section("Pty (pipe mode, stdin)", self.pty_pipe_stdin)
        c.section("Pty (signals, close, errors)", self.pty_control)
        c.section("Close", self.close)


def auth_checks(args, pb, pb_grpc, checks: Checks) -> None:
    with open(args.auth_token_file, encoding="utf-8") as f:
        token = f.read().strip()
    channel = grpc.insecure_channel(args.addr)
    grpc.channel_ready_future(channel).result(timeout=UNARY_TIMEOUT_S)
    stub = pb_grpc.SandboxServiceStub(channel)
    req = pb.StatusRequest(sandbox_id=FOREIGN_ID)

    def run() -> None:
        ok = checks.ok
        code = rpc_code(stub.Status, req, timeout=UNARY_TIMEOUT_S)
        ok(code == grpc.StatusCode.UNAUTHENTICATED, "no token: UNAUTHENTICATED", code)
        code = rpc_code(
            stub.Status, req, timeout=UNARY_TIMEOUT_S,
            metadata=(("authorization", "Bearer wrong-token"),),
        )
        ok(code == grpc.StatusCode.UNAUTHENTICATED, "wrong token: UNAUTHENTICATED", code)
        code = rpc_code(
            stub.Status, req, timeout=UNARY_TIMEOUT_S,
            metadata=(("authorization", f"Bearer {token}"),),
        )
        ok(code == grpc.StatusCode.NOT_FOUND, "right token: passes auth (NOT_FOUND)", code)

        # Streaming RPCs are guarded too.
        bidi = Bidi(stub.Pty)
        bidi.send(pb.PtyRequest(open=pb.PtyOpen(sandbox_id=NOT_FOUND_ID)))
        resp = bidi.next()
        bidi.half_close()
        ok(
            resp is None and bidi.error is not None
            and bidi.error.code() == grpc.StatusCode.UNAUTHENTICATED,
            "no token on Pty: UNAUTHENTICATED",
            bidi.error.code() if bidi.error is not None else resp,
        )

        # grpc.health.v1.Health/Check without generated stubs: the request is an empty
        # HealthCheckRequest (service ""), the reply `status: SERVING` encodes as 08 01.
        check = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        raw = check(b"", timeout=UNARY_TIMEOUT_S)
        ok(raw == b"\x08\x01", "health without token: SERVING", raw)

    checks.section("bearer auth", run)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("addr", help="server address, host:port")
    ap.add_argument("--stubs", default=os.environ.get("SANDBOXD_PY_STUBS"))
    ap.add_argument("--ids-file", default=os.environ.get("SANDBOXD_E2E_IDS_FILE"))
    ap.add_argument("--image-bash", default="sandboxd-test/bash:1")
    ap.add_argument("--auth-token-file", help="run the bearer-auth checks with this token")
    args = ap.parse_args()
    # Die of SIGINT (not KeyboardInterrupt, which grpc's blocking calls may swallow), so a
    # calling shell sees the interrupt and runs its cleanup.
    signal.signal(signal.SIGINT, signal.SIG_DFL)

    pb2, pb2_grpc = load_stubs(args.stubs)
    checks = Checks()
    if args.auth_token_file:
        auth_checks(args, pb2, pb2_grpc, checks)
    else:
        Client(args, pb2, pb2_grpc, checks).run()
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
