"""`PtySession`: one `Pty` bidirectional stream, read and written like a terminal.

A background task reads the server's messages into two queues (terminal output / stdout, and
stderr in pipe mode) and records the exit code, so `read`, `read_stderr` and `wait_exit` can be
awaited independently and with timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc

from ._pb import sandbox_pb2 as pb
from .closing import AsyncClosing
from .errors import PtySessionError, SandboxdError, from_rpc_error

__all__ = ["PtySession", "SIGNALS"]

SIGNALS = ("SIGINT", "SIGTERM", "SIGKILL", "SIGQUIT", "SIGHUP")
"""The signal names the server delivers."""

_EOF = b""


class PtySession(AsyncClosing):
    """A live terminal (or pipe-mode process) in a sandbox.

    `read()` returns the next output chunk (all terminal output in PTY mode, stdout in pipe
    mode) and `b""` once the program exited and its output is drained; `read_stderr()` the same
    for stderr (pipe mode only; PTY mode gives `b""` at exit). Both raise `TimeoutError` when
    `timeout_s` passes and `PtySessionError` (or the typed error of the failing call) when the
    session died without an exit. `async for chunk in session` yields output until EOF.
    `async with` closes it.
    """

    def __init__(self, call: Any, session_id: str, mode: str, offset: int = 0) -> None:
        self._call = call
        self.session_id = session_id
        self.mode = mode
        self.offset = offset
        """Offset in the session's output of the first byte this stream carried (0 for a session
        this stream opened; the replay point of an attach)."""
        self.received = offset
        """Offset of the next output byte this stream will carry (output and stderr counted)."""
        self._detached = False
        self._output: asyncio.Queue[bytes | SandboxdError] = asyncio.Queue()
        self._stderr: asyncio.Queue[bytes | SandboxdError] = asyncio.Queue()
        self._exit: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._write_lock = asyncio.Lock()
        self._closed = False
        self._reader: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, call: Any, opening: pb.PtyOpen, *, open_timeout_s: float | None) -> PtySession:
        """Send `opening` on `call` and wait for the server's `opened`."""
        return await cls._start(call, pb.PtyRequest(open=opening), open_timeout_s=open_timeout_s)

    @classmethod
    async def attach(cls, call: Any, attaching: pb.PtyAttach, *, open_timeout_s: float | None) -> PtySession:
        """Send `attaching` on `call` and wait for the server's `opened`."""
        return await cls._start(call, pb.PtyRequest(attach=attaching), open_timeout_s=open_timeout_s)

    @classmethod
    async def _start(cls, call: Any, first: pb.PtyRequest, *, open_timeout_s: float | None) -> PtySession:
        try:
            await call.write(first)
            reply = await asyncio.wait_for(call.read(), open_timeout_s)
        except asyncio.TimeoutError:
            call.cancel()
            raise TimeoutError(f"the PTY session did not open within {open_timeout_s}s") from None
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, call="pty") from None
        if reply is grpc.aio.EOF or reply.WhichOneof("response") != "opened":
            # The stream ended or failed before `opened`: its status says why.
            call.cancel()
            code = await call.code()
            details = await call.details()
            raise from_rpc_error(_StatusError(code, details or "the PTY stream ended before opening"), call="pty")
        session = cls(call, reply.opened.session_id, reply.opened.mode, int(reply.opened.offset))
        session._reader = asyncio.create_task(session._pump())
        return session

    @property
    def closed(self) -> bool:
        """Whether `close()` has run."""
        return self._closed

    async def _pump(self) -> None:
        failure: SandboxdError | None = None
        try:
            while True:
                msg = await self._call.read()
                if msg is grpc.aio.EOF:
                    break
                which = msg.WhichOneof("response")
                if which == "output":
                    self.received += len(msg.output)
                    self._output.put_nowait(bytes(msg.output))
                elif which == "stderr":
                    self.received += len(msg.stderr)
                    self._stderr.put_nowait(bytes(msg.stderr))
                elif which == "exit" and not self._exit.done():
                    self._exit.set_result(int(msg.exit.exit_code))
        except grpc.RpcError as exc:
            if not self._closed and not self._detached:
                failure = from_rpc_error(exc, call="pty")
        except asyncio.CancelledError:
            pass
        if not self._exit.done():
            if failure is None and not self._closed:
                failure = PtySessionError("the PTY session ended without an exit code")
            self._exit.set_exception(failure or PtySessionError("the PTY session was closed before its program exited"))
            self._exit.exception()  # mark retrieved: wait_exit re-raises it on demand
        end: bytes | SandboxdError = failure if failure is not None else _EOF
        self._output.put_nowait(end)
        self._stderr.put_nowait(end)

    async def _next(self, queue: asyncio.Queue[bytes | SandboxdError], timeout_s: float | None) -> bytes:
        try:
            item = await asyncio.wait_for(queue.get(), timeout_s)
        except asyncio.TimeoutError:
            raise TimeoutError(f"no PTY output within {timeout_s}s") from None
        if isinstance(item, SandboxdError) or item == _EOF:
            queue.put_nowait(item)  # every later read sees the end too
        if isinstance(item, SandboxdError):
            raise item
        return item

    async def read(self, *, timeout_s: float | None = None) -> bytes:
        """The next output chunk; `b""` at the end."""
        return await self._next(self._output, timeout_s)

    async def read_stderr(self, *, timeout_s: float | None = None) -> bytes:
        """The next stderr chunk (pipe mode); `b""` at the end."""
        return await self._next(self._stderr, timeout_s)

    async def read_all(self, *, timeout_s: float | None = None) -> bytes:
        """Output until the end (each read bounded by `timeout_s`)."""
        parts = []
        while chunk := await self.read(timeout_s=timeout_s):
            parts.append(chunk)
        return b"".join(parts)

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[bytes]:
        while chunk := await self.read():
            yield chunk

    async def _send(self, request: pb.PtyRequest) -> None:
        if self._closed:
            raise PtySessionError(f"PTY session {self.session_id} is closed")
        if self._exit.done():
            raise PtySessionError(f"PTY session {self.session_id} has ended")
        async with self._write_lock:
            try:
                await self._call.write(request)
            except (grpc.RpcError, asyncio.InvalidStateError, grpc.aio.UsageError) as exc:
                raise PtySessionError(f"PTY session {self.session_id} cannot take input: {exc}") from None

    async def write(self, data: bytes) -> None:
        """Bytes typed into the terminal (stdin in pipe mode)."""
        await self._send(pb.PtyRequest(input=bytes(data)))

    async def resize(self, rows: int, cols: int) -> None:
        """A new terminal size (ignored in pipe mode)."""
        if rows <= 0 or cols <= 0:
            raise ValueError(f"rows and cols must be > 0 (got {rows}x{cols})")
        await self._send(pb.PtyRequest(resize=pb.PtyResize(rows=rows, cols=cols)))

    async def send_signal(self, signal: str) -> None:
        """Deliver a named signal (one of `SIGNALS`) to the terminal's foreground group (PTY
        mode) or the session process's group (pipe mode)."""
        name = signal.upper()
        if not name.startswith("SIG"):
            name = "SIG" + name
        if name not in SIGNALS:
            raise ValueError(f"unsupported signal {signal!r}; allowed: {', '.join(SIGNALS)}")
        await self._send(pb.PtyRequest(signal=pb.PtySignal(name=name)))

    async def wait_exit(self, *, timeout_s: float | None = None) -> int:
        """The program's exit code (128 + n when ended by signal n)."""
        try:
            return await asyncio.wait_for(asyncio.shield(self._exit), timeout_s)
        except asyncio.TimeoutError:
            raise TimeoutError(f"the PTY program did not exit within {timeout_s}s") from None

    async def detach(self) -> None:
        """End this stream and leave the session running in the sandbox (re-attach with
        `Client.attach_pty`); reads then see the end. Needs the sandbox's agent (the docker
        exec engine answers `Unimplemented`, and its session ends). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._detached = True
        if not self._exit.done():
            try:
                async with self._write_lock:
                    await self._call.write(pb.PtyRequest(detach=pb.PtyDetach()))
            except (grpc.RpcError, asyncio.InvalidStateError, grpc.aio.UsageError):
                pass
            # The server ends the stream once it let go of the session; its status says how.
            if self._reader is not None:
                with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(self._reader), 10)
            with contextlib.suppress(Exception):
                await self._call.done_writing()
            code = await self._call.code() if self._call.done() else None
            if code not in (None, grpc.StatusCode.OK, grpc.StatusCode.CANCELLED):
                details = await self._call.details()
                raise from_rpc_error(_StatusError(code, details or "the detach failed"), call="pty")
        self._call.cancel()

    async def close(self) -> None:
        """End the session and its processes in the container (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if not self._exit.done():
            with contextlib.suppress(Exception):
                async with self._write_lock:
                    await self._call.write(pb.PtyRequest(close=pb.PtyClose()))
                    await self._call.done_writing()
            # The server ends the stream once the session is closed; don't wait forever.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._exit), 10)
        self._call.cancel()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._reader, 5)


class _StatusError(grpc.RpcError):
    """A status read from a finished call, shaped like the errors grpc raises."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details
