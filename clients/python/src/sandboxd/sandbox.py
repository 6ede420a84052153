"""`AsyncSandbox`: one sandbox on a sandboxd server, with the calls of NeMo Gym's
`AsyncSandbox` (exec, upload/download, status, endpoint, serialize/connect, pty) plus the
round's lease, snapshot, fork, diff and pause/resume calls."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, overload

from .client import Client, ClientOptions, ExecOptions, PtyOptions, UploadSource
from .closing import AsyncClosing
from .events import SandboxStats
from .pty import PtySession
from .types import (
    DiffEntry,
    Endpoint,
    ExecEvent,
    ExecResult,
    Grant,
    ResetResult,
    SandboxRef,
    SandboxSpec,
    SandboxStatus,
    SandboxUsage,
    SnapshotInfo,
)

if TYPE_CHECKING:
    from typing import Unpack

__all__ = ["AsyncSandbox", "PtyOpener"]


async def _on_client(
    client: Client | None, options: ClientOptions, call: Callable[[Client], Awaitable[AsyncSandbox]]
) -> AsyncSandbox:
    """`call` on `client`, or on a new `Client(**options)` the returned sandbox owns (closed
    again when `call` fails)."""
    own = client is None
    client = client or Client(**options)
    try:
        sandbox = await call(client)
    except BaseException:
        if own:
            await client.close()
        raise
    sandbox._owns_client = own
    return sandbox


class AsyncSandbox(AsyncClosing):
    """A handle to one sandbox. Get one from `AsyncSandbox.create(...)`,
    `AsyncSandbox.connect(descriptor)`, or a `Client`'s `create`/`connect`.

    `async with` closes (removes) the sandbox on exit; `close()` is idempotent. A sandbox made
    by the classmethods owns its `Client` and closes it too.
    """

    def __init__(
        self,
        client: Client,
        ref: SandboxRef,
        *,
        image: str | None = None,
        shell: str | None = None,
        owns_client: bool = False,
    ) -> None:
        self.client = client
        self.ref = ref
        self.image = image
        self.shell = shell
        self._owns_client = owns_client
        self._closed = False
        # What the sandbox used over its life, as `close` returned it.
        self.final_usage: SandboxUsage | None = None

    # --- construction --------------------------------------------------------------------

    @classmethod
    async def create(
        cls,
        spec: SandboxSpec | str | Mapping[str, Any],
        *,
        client: Client | None = None,
        **options: Unpack[ClientOptions],
    ) -> AsyncSandbox:
        """Start a sandbox from a spec (a dict of its fields, or an image name). Without `client`, a client
        (`address`, `token`, `tls`, `deadline_s`, `retry`: see `ClientOptions`) is made and owned by the
        sandbox."""
        return await _on_client(client, options, lambda c: c.create(spec))

    @classmethod
    async def connect(
        cls,
        descriptor: SandboxRef | Mapping[str, Any] | str,
        *,
        client: Client | None = None,
        **options: Unpack[ClientOptions],
    ) -> AsyncSandbox:
        """Re-attach to a sandbox from `serialize()`'s descriptor (or a `SandboxRef`, or an id)."""
        return await _on_client(client, options, lambda c: c.connect(descriptor))

    # --- identity ----------------------------------------------------------------------------

    @property
    def sandbox_id(self) -> str:
        return self.ref.sandbox_id

    @property
    def ports(self) -> tuple[int, ...]:
        return self.ref.ports

    @property
    def workdir(self) -> str | None:
        return self.ref.workdir

    @property
    def closed(self) -> bool:
        return self._closed

    async def grant(self, scope: str, *, ttl_s: float | None = None) -> Grant:
        """A narrower token for this sandbox ("operate" or "read"; see `Client.grant`)."""
        return await self.client.grant(self.sandbox_id, scope, ttl_s=ttl_s)

    def serialize(self) -> dict[str, Any]:
        """A JSON-serializable descriptor `AsyncSandbox.connect` (in any process) takes back."""
        return self.ref.to_dict()

    def __repr__(self) -> str:
        return f"AsyncSandbox({self.sandbox_id!r}, address={self.client.address!r})"

    # --- calls -------------------------------------------------------------------------------

    async def exec(self, command: str, **options: Unpack[ExecOptions]) -> ExecResult:
        """Run `<shell> -c command`. A failing command is a result (see `ExecResult`), never an
        exception. `timeout_s` stops the command (server default when None); `deadline_s` caps
        the whole call (then `DeadlineExceeded`); the rest: `ExecOptions`."""
        return await self.client.exec(self.sandbox_id, command, **options)

    def exec_stream(
        self, command: str, *, fallback: bool = False, **options: Unpack[ExecOptions]
    ) -> AsyncIterator[ExecEvent]:
        """`Stdout`/`Stderr` events as produced, then one `ExecExit`; see `Client.exec_stream`."""
        return self.client.exec_stream(self.sandbox_id, command, fallback=fallback, **options)

    async def upload_file(
        self, remote_path: str, source: UploadSource, *, mode: int | None = None, deadline_s: float | None = None
    ) -> int:
        """Write `source` (bytes, a local path, or a binary file) to `remote_path`; returns the
        bytes written."""
        return await self.client.upload_file(self.sandbox_id, remote_path, source, mode=mode, deadline_s=deadline_s)

    @overload
    async def download_file(
        self, remote_path: str, target: None = None, *, deadline_s: float | None = None
    ) -> bytes: ...

    @overload
    async def download_file(
        self, remote_path: str, target: str | os.PathLike[str], *, deadline_s: float | None = None
    ) -> int: ...

    async def download_file(
        self, remote_path: str, target: str | os.PathLike[str] | None = None, *, deadline_s: float | None = None
    ) -> bytes | int:
        """The file's bytes, or (with a local `target`) its size once written there."""
        if target is None:
            return await self.client.download_file(self.sandbox_id, remote_path, deadline_s=deadline_s)
        return await self.client.download_file(self.sandbox_id, remote_path, target, deadline_s=deadline_s)

    def iter_download(self, remote_path: str, *, deadline_s: float | None = None) -> AsyncIterator[bytes]:
        """The file's chunks as they arrive."""
        return self.client.iter_download(self.sandbox_id, remote_path, deadline_s=deadline_s)

    async def status(self, *, deadline_s: float | None = None) -> SandboxStatus:
        return await self.client.status(self.sandbox_id, deadline_s=deadline_s)

    async def endpoint(self, port: int, *, deadline_s: float | None = None) -> Endpoint:
        """The host URL of a port the sandbox was created with."""
        return await self.client.endpoint(self.sandbox_id, port, deadline_s=deadline_s)

    def pty(self, command: str | None = None, **options: Unpack[PtyOptions]) -> PtyOpener:
        """A terminal session: `session = await sandbox.pty(...)` or
        `async with sandbox.pty(...) as session:` (closed on exit). No `command` runs the
        sandbox's shell interactively; `pipe=True` gives separate stdout/stderr, no terminal
        (see `PtyOptions`)."""
        return PtyOpener(self.client, self.sandbox_id, command, options)

    async def set_timeout(self, ttl_s: float, *, deadline_s: float | None = None) -> int:
        """Remove the sandbox `ttl_s` seconds from now; returns the lease's end (Unix ms)."""
        return await self.client.set_timeout(self.sandbox_id, ttl_s, deadline_s=deadline_s)

    async def snapshot(
        self, *, labels: Mapping[str, str] | None = None, deadline_s: float | None = None
    ) -> SnapshotInfo:
        return await self.client.snapshot(self.sandbox_id, labels=labels, deadline_s=deadline_s)

    async def fork(
        self,
        count: int = 1,
        *,
        labels: Mapping[str, str] | None = None,
        live: bool = False,
        snapshot_id: str | None = None,
        deadline_s: float | None = None,
    ) -> tuple[list[AsyncSandbox], str]:
        return await self.client.fork(
            self.sandbox_id, count, labels=labels, live=live, snapshot_id=snapshot_id, deadline_s=deadline_s
        )

    async def checkpoint(
        self, *, labels: Mapping[str, str] | None = None, leave_running: bool = True, deadline_s: float | None = None
    ) -> SnapshotInfo:
        return await self.client.checkpoint(
            self.sandbox_id, labels=labels, leave_running=leave_running, deadline_s=deadline_s
        )

    async def hibernate(self, *, deadline_s: float | None = None) -> tuple[int, int]:
        return await self.client.hibernate(self.sandbox_id, deadline_s=deadline_s)

    async def diff(self, *, path_prefix: str | None = None, deadline_s: float | None = None) -> list[DiffEntry]:
        return await self.client.diff(self.sandbox_id, path_prefix=path_prefix, deadline_s=deadline_s)

    async def pause(self, *, deadline_s: float | None = None) -> None:
        await self.client.pause(self.sandbox_id, deadline_s=deadline_s)

    async def resume(self, *, deadline_s: float | None = None) -> None:
        await self.client.resume(self.sandbox_id, deadline_s=deadline_s)

    async def stats(self, *, deadline_s: float | None = None) -> SandboxStats:
        """This sandbox's resource usage now (`Client.stats`)."""
        return await self.client.stats(self.sandbox_id, deadline_s=deadline_s)

    async def reset(self, *, deadline_s: float | None = None) -> ResetResult:
        """Put this sandbox back to the state it was created in, in place (`Client.reset`)."""
        return await self.client.reset(self.sandbox_id, deadline_s=deadline_s)

    async def usage(self, *, deadline_s: float | None = None) -> SandboxUsage:
        """What this sandbox used so far (`Client.usage`)."""
        return await self.client.usage(self.sandbox_id, deadline_s=deadline_s)

    async def close(self, *, deadline_s: float | None = None) -> None:
        """Remove the sandbox (idempotent; one already gone counts as closed). What it used
        over its life is kept in `final_usage`."""
        if not self._closed:
            self.final_usage = await self.client.close_sandbox(self.sandbox_id, deadline_s=deadline_s)
            self._closed = True
        if self._owns_client:
            await self.client.close()


class PtyOpener:
    """What `AsyncSandbox.pty()` returns: await it for a session, or use it with `async with`."""

    def __init__(self, client: Client, sandbox_id: str, command: str | None, options: PtyOptions) -> None:
        self._client = client
        self._sandbox_id = sandbox_id
        self._command = command
        self._options = options
        self._session: PtySession | None = None

    async def _open(self) -> PtySession:
        return await self._client.open_pty(self._sandbox_id, self._command, **self._options)

    def __await__(self) -> Generator[Any, None, PtySession]:
        return self._open().__await__()

    async def __aenter__(self) -> PtySession:
        self._session = await self._open()
        return self._session

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._session is not None:
            await self._session.close()
