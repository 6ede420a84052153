"""What the Python end-to-end client (python_client.py) is built from: its bounds, the stubs
(generated on demand), the check counter, and bounded readers of bidirectional streams and
terminal output. Every blocking read here has a timeout."""

from __future__ import annotations

import os
import queue
import sys
import tempfile
import threading
import time
import traceback

import grpc

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

UNARY_TIMEOUT_S = 60.0  # gRPC deadline of unary calls (Create probes the container)
STREAM_TIMEOUT_S = 120.0  # gRPC deadline of streaming calls
READ_TIMEOUT_S = 20.0  # longest wait for one expected stream event
CHUNK = 256 * 1024
UPLOAD_SIZE = 3 * 1024 * 1024
NOT_FOUND_ID = "sandboxd-00000000000000000000000000000000"
# An id of a shape the service never issues: NOT_FOUND everywhere, Status included.
FOREIGN_ID = "sandboxd-not-an-id"


# --- stubs ---------------------------------------------------------------------------------


def load_stubs(stubs_dir: str | None):
    """Imports sandbox_pb2 / sandbox_pb2_grpc, generating them first when no dir is given."""
    if not stubs_dir:
        stubs_dir = tempfile.mkdtemp(prefix="sandboxd-pystubs-")
        from grpc_tools import protoc  # noqa: PLC0415 (only needed here)

        rc = protoc.main(
            [
                "grpc_tools.protoc",
                "-I",
                os.path.join(REPO_ROOT, "proto"),
                f"--python_out={stubs_dir}",
                f"--grpc_python_out={stubs_dir}",
                f"--pyi_out={stubs_dir}",
                "sandbox/v1/sandbox.proto",
            ]
        )
        if rc != 0:
            raise SystemExit(f"protoc failed ({rc}) generating stubs into {stubs_dir}")
    sys.path.insert(0, stubs_dir)
    from sandbox.v1 import sandbox_pb2, sandbox_pb2_grpc  # noqa: PLC0415

    return sandbox_pb2, sandbox_pb2_grpc


# --- check bookkeeping ---------------------------------------------------------------------


class Checks:
    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0
        self.failures: list[str] = []

    def ok(self, cond: bool, what: str, detail: object = "") -> None:
        """Counts one check; raises AssertionError (ending the current section) on failure."""
        if cond:
            self.passed += 1
            print(f"  ok   {what}", flush=True)
            return
        msg = f"{what}" + (f": {detail!r}" if detail != "" else "")
        raise AssertionError(msg)

    def section(self, name: str, fn, *args) -> None:
        """Runs one section; a failure is recorded and the next section still runs."""
        print(f"--- {name}", flush=True)
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 (every failure is reported, then counted)
            self.failed += 1
            desc = f"{name}: {type(e).__name__}: {e}"
            self.failures.append(desc)
            print(f"  FAIL {desc}", flush=True)
            traceback.print_exc(file=sys.stderr)

    def finish(self) -> int:
        for f in self.failures:
            print(f"FAILED: {f}", flush=True)
        print(f"{self.passed} passed, {self.failed} failed", flush=True)
        return 0 if self.failed == 0 else 1


def rpc_code(fn, *args, **kwargs):
    """Calls a unary RPC and returns its status code (OK when it succeeded)."""
    try:
        fn(*args, **kwargs)
    except grpc.RpcError as e:
        return e.code()
    return grpc.StatusCode.OK


# --- bidirectional stream with timeouts ----------------------------------------------------


class Bidi:
    """Drives a bidirectional-streaming call: requests go through a queue (None half-closes),
    responses are read by a thread into a queue so every read can time out."""

    _END = object()

    def __init__(self, method, metadata=None) -> None:
        self._requests: queue.Queue = queue.Queue()
        self._responses: queue.Queue = queue.Queue()
        self._call = method(self._request_iter(), timeout=STREAM_TIMEOUT_S, metadata=metadata)
        self.error: grpc.RpcError | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _request_iter(self):
        while True:
            item = self._requests.get()
            if item is None:
                return
            yield item

    def _read(self) -> None:
        try:
            for resp in self._call:
                self._responses.put(resp)
        except grpc.RpcError as e:
            self.error = e
        finally:
            self._responses.put(self._END)

    def send(self, req) -> None:
        self._requests.put(req)

    def half_close(self) -> None:
        self._requests.put(None)

    def cancel(self) -> None:
        self._call.cancel()

    def next(self, timeout: float = READ_TIMEOUT_S):
        """The next response; None at the end of the stream; TimeoutError after `timeout`."""
        try:
            item = self._responses.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no stream response within {timeout}s") from None
        if item is self._END:
            self._responses.put(self._END)  # stay at the end for later reads
            return None
        return item


class PtyReader:
    """Accumulates `output` / `stderr` of a Pty stream and waits for text or `exit`."""

    def __init__(self, bidi: Bidi) -> None:
        self.bidi = bidi
        self.output = b""
        self.stderr = b""
        self.exit_code: int | None = None
        self.ended = False

    def _pump(self, deadline: float) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed")
        resp = self.bidi.next(timeout=left)
        if resp is None:
            self.ended = True
            return
        kind = resp.WhichOneof("response")
        if kind == "output":
            self.output += resp.output
        elif kind == "stderr":
            self.stderr += resp.stderr
        elif kind == "exit":
            self.exit_code = resp.exit.exit_code
        else:
            raise AssertionError(f"unexpected Pty response {kind}: {resp}")

    def wait_output(self, needles: list[bytes], since: int = 0, timeout: float = READ_TIMEOUT_S):
        """Waits until every needle appears in output[since:]; returns that part."""
        deadline = time.monotonic() + timeout
        while not all(n in self.output[since:] for n in needles):
            if self.ended or self.exit_code is not None:
                raise AssertionError(
                    f"stream ended (exit={self.exit_code}, error={self.bidi.error}) before "
                    f"{needles!r}; output so far {self.output[since:]!r}"
                )
            try:
                self._pump(deadline)
            except TimeoutError:
                raise AssertionError(
                    f"timed out after {timeout}s waiting for {needles!r}; "
                    f"output so far {self.output[since:]!r}"
                ) from None
        return self.output[since:]

    def wait_exit(self, timeout: float = READ_TIMEOUT_S) -> int:
        deadline = time.monotonic() + timeout
        while self.exit_code is None:
            if self.ended:
                raise AssertionError(
                    f"stream ended without `exit` (error={self.bidi.error}); "
                    f"output {self.output!r} stderr {self.stderr!r}"
                )
            try:
                self._pump(deadline)
            except TimeoutError:
                raise AssertionError(
                    f"timed out after {timeout}s waiting for `exit`; output {self.output!r}"
                ) from None
        return self.exit_code

    def wait_end(self, timeout: float = READ_TIMEOUT_S) -> None:
        """Reads until the server ends the stream (nothing may follow `exit`)."""
        deadline = time.monotonic() + timeout
        while not self.ended:
            before = self.exit_code
            try:
                self._pump(deadline)
            except TimeoutError:
                raise AssertionError(f"stream not ended {timeout}s after `exit`") from None
            if before is not None and not self.ended:
                raise AssertionError("a response followed `exit`")
