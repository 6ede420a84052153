"""`SandboxdPtySession`: NeMo Gym's `SandboxPtySession` over a `sandboxd.PtySession`.

Same calls, Gym's errors. Gym's protocol says a session whose sandbox went away raises
`SandboxPtyError`; the server ends such a session like a killed program (EOF, exit 137), so at
the end of the output (and at the exit) the session asks whether its sandbox is still there, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

from nemo_gym.sandbox.providers.base import SandboxPtyError

from .closing import AsyncClosing
from .errors import SandboxdError
from .pty import PtySession

__all__ = ["SandboxdPtySession", "SandboxGoneProbe"]

SandboxGoneProbe = Callable[[int | None], Awaitable[bool]]
"""Whether the session's sandbox is gone, given the program's exit code (None: not known)."""


@contextlib.contextmanager
def _pty_errors() -> Iterator[None]:
    """A session call's `SandboxdError` as Gym's `SandboxPtyError`."""
    try:
        yield
    except SandboxdError as exc:
        raise SandboxPtyError(str(exc)) from exc


class SandboxdPtySession(AsyncClosing):
    """One terminal (or pipe-mode program) in a sandbox, with Gym's `SandboxPtySession` calls."""

    def __init__(self, session: PtySession, sandbox_id: str, sandbox_gone: SandboxGoneProbe) -> None:
        self._session = session
        self._sandbox_id = sandbox_id
        self._sandbox_gone = sandbox_gone
        self._gone: bool | None = None  # decided once, when the session's end is first seen
        self._gone_lock = asyncio.Lock()
        self.session_id = session.session_id
        self.mode: str | None = session.mode

    @property
    def closed(self) -> bool:
        return self._session.closed

    async def _check_end(self) -> None:
        """At the session's end: raise `SandboxPtyError` when it ended because the sandbox went
        away. A session this caller closed itself ended by its own hand."""
        if self._session.closed:
            return
        async with self._gone_lock:
            if self._gone is None:
                code: int | None = None
                with contextlib.suppress(Exception):
                    code = await self._session.wait_exit(timeout_s=0)
                self._gone = await self._sandbox_gone(code)
        if self._gone:
            raise SandboxPtyError(f"the sandbox {self._sandbox_id} of PTY session {self.session_id} is gone")

    async def read(self, *, timeout_s: float | None = None) -> bytes:
        with _pty_errors():
            chunk = await self._session.read(timeout_s=timeout_s)
        if not chunk:
            await self._check_end()
        return chunk

    async def read_stderr(self, *, timeout_s: float | None = None) -> bytes:
        with _pty_errors():
            chunk = await self._session.read_stderr(timeout_s=timeout_s)
        if not chunk:
            await self._check_end()
        return chunk

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[bytes]:
        while chunk := await self.read():
            yield chunk

    async def write(self, data: bytes) -> None:
        with _pty_errors():
            await self._session.write(data)

    async def resize(self, rows: int, cols: int) -> None:
        with _pty_errors():
            await self._session.resize(rows, cols)

    async def send_signal(self, signal: str) -> None:
        with _pty_errors():
            await self._session.send_signal(signal)

    async def wait_exit(self, *, timeout_s: float | None = None) -> int:
        with _pty_errors():
            code = await self._session.wait_exit(timeout_s=timeout_s)
        await self._check_end()
        return code

    async def run_detached(self, command: str, *, poll_interval_s: float = 15.0) -> tuple[bytes, int | None]:
        """Runs `command` in this session's shell, attached (sessions live in the server, and
        this client keeps one stream per session, so there is no connection to spare); returns
        the merged output after the command's echo and its exit code (None if the session
        ended first). `poll_interval_s` is accepted for the protocol and unused."""
        token = uuid.uuid4().hex[:16]
        # Markers are printed from two halves so the terminal's echo of this line never matches.
        await self.write(
            f"{{ printf '%s%s\\n' 'SDX{token[:8]}' '{token[8:]}S'\n{command}\n"
            f"printf '%s%s:%s\\n' 'SDX{token[:8]}' '{token[8:]}' \"$?\"\n}} </dev/null\n".encode()
        )
        start, end = f"SDX{token}S".encode(), f"SDX{token}:".encode()
        buffer = bytearray()
        while end not in buffer:
            chunk = await self.read()
            if not chunk:
                return bytes(buffer), None
            buffer.extend(chunk)
        while b"\n" not in buffer.split(end, 1)[1]:
            chunk = await self.read()
            if not chunk:
                break
            buffer.extend(chunk)
        before, _, after = bytes(buffer).partition(end)
        output = before.partition(start)[2].partition(b"\n")[2] if start in before else before
        code = after.split(b"\n", 1)[0].strip()
        return output, int(code) if code.isdigit() else None

    async def close(self) -> None:
        await self._session.close()
