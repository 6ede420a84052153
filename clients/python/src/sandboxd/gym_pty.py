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
from .errors import InvalidArgument, SandboxdError
from .pty import PtySession

__all__ = ["SandboxdPtySession", "SandboxGoneProbe", "Reattach"]

SandboxGoneProbe = Callable[[int | None], Awaitable[bool]]
"""Whether the session's sandbox is gone, given the program's exit code (None: not known)."""

Reattach = Callable[[int], Awaitable[PtySession]]
"""Take the session over again, replaying its retained output from the given offset."""

_DRAIN_WAIT_S = 0.2
"""How long a poll of `run_detached` waits for more output before it lets go again."""


@contextlib.contextmanager
def _pty_errors() -> Iterator[None]:
    """A session call's `SandboxdError` as Gym's `SandboxPtyError`."""
    try:
        yield
    except SandboxdError as exc:
        raise SandboxPtyError(str(exc)) from exc


class SandboxdPtySession(AsyncClosing):
    """One terminal (or pipe-mode program) in a sandbox, with Gym's `SandboxPtySession` calls."""

    def __init__(
        self,
        session: PtySession,
        sandbox_id: str,
        sandbox_gone: SandboxGoneProbe,
        *,
        owner: bool = True,
        reattach: Reattach | None = None,
    ) -> None:
        self._session = session
        # The creator's close ends the session; an attacher's close only detaches.
        self._owner = owner
        # Set when the session outlives its stream (it lives in the sandbox's agent): then
        # `run_detached` holds no stream between polls.
        self._reattach = reattach
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
        """Runs `command` in this session's shell; returns the merged output after the command's
        echo and its exit code (None if the session ended first or the marker came back
        mangled). On a session that lives in the sandbox (the agent's), no stream is held
        between polls: the command is written, the stream detached, and every `poll_interval_s`
        the session is taken over again from the last byte read, its retained output drained.
        More output between two polls than the server retains (`server.pty.retain_bytes`)
        raises `SandboxPtyError` rather than returning truncated output. The session ends
        attached. Elsewhere (the docker exec engine) the command runs attached."""
        token = uuid.uuid4().hex[:16]
        # Markers are printed from two halves so the terminal's echo of this line never matches.
        await self.write(
            f"{{ printf '%s%s\\n' 'SDX{token[:8]}' '{token[8:]}S'\n{command}\n"
            f"printf '%s%s:%s\\n' 'SDX{token[:8]}' '{token[8:]}' \"$?\"\n}} </dev/null\n".encode()
        )
        start, end = f"SDX{token}S".encode(), f"SDX{token}:".encode()
        buffer = bytearray()

        def finished() -> bool:
            return end in buffer and b"\n" in buffer.split(end, 1)[1]

        if self._reattach is None:
            while not finished():
                chunk = await self.read()
                if not chunk:
                    return bytes(buffer), None
                buffer.extend(chunk)
        else:
            while True:
                ended = await self._drain(buffer, wait_s=_DRAIN_WAIT_S, finished=finished)
                if ended:
                    return bytes(buffer), None
                if finished():
                    break
                since = await self._let_go(buffer)
                await asyncio.sleep(poll_interval_s)
                try:
                    self._session = await self._reattach(since)
                except InvalidArgument as exc:
                    raise SandboxPtyError(
                        f"PTY session {self.session_id}: more output between two polls than the server "
                        f"retains; lost from offset {since} ({exc})"
                    ) from exc
                except SandboxdError as exc:
                    raise SandboxPtyError(str(exc)) from exc
        before, _, after = bytes(buffer).partition(end)
        output = before.partition(start)[2].partition(b"\n")[2] if start in before else before
        code = after.split(b"\n", 1)[0].strip()
        return output, int(code) if code.isdigit() else None

    async def _drain(self, buffer: bytearray, *, wait_s: float, finished: Callable[[], bool]) -> bool:
        """Output into `buffer` until none comes for `wait_s` or the marker is complete; True
        when the session ended."""
        while not finished():
            try:
                chunk = await self.read(timeout_s=wait_s)
            except TimeoutError:
                return False
            if not chunk:
                return True
            buffer.extend(chunk)
        return False

    async def _let_go(self, buffer: bytearray) -> int:
        """Detach, keep what the stream still carried, and return where to resume."""
        session = self._session
        with _pty_errors():
            await session.detach()
        while chunk := await session.read(timeout_s=5):
            buffer.extend(chunk)
        return session.received

    async def close(self) -> None:
        """The creator's close ends the session; an attacher's detaches (the session lives on
        for its owner)."""
        if self._owner:
            await self._session.close()
            return
        with contextlib.suppress(SandboxdError):
            await self._session.detach()
