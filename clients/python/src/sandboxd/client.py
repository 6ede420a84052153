"""`Client`: one channel to a sandboxd server and every RPC of `sandbox.v1.SandboxService`,
addressed by sandbox id. `AsyncSandbox` (sandbox.py) is the per-sandbox face of it."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypedDict, TypeVar, overload

import grpc
from google.protobuf.message import Message

from ._otel import trace_metadata
from ._pb import sandbox_pb2 as pb
from .closing import AsyncClosing
from .connection import DEFAULT_ADDRESS, RetryPolicy, TlsConfig, normalize_address, open_channel
from .errors import DeadlineExceeded, SandboxdError, Unimplemented, from_parts, from_rpc_error
from .events import SandboxEvent, SandboxStats
from .failures import kind_from_wire
from .processes import ForwardConnection, ProcessEvent, ProcessInfo, process_event, request_stream
from .pty import PtySession
from .types import (
    TOKEN_SCOPES,
    DiffEntry,
    Endpoint,
    ExecEvent,
    ExecExit,
    ExecResult,
    ExecUsage,
    FileEntry,
    FileEvent,
    Grant,
    NetworkAddress,
    PoolInfo,
    PtySessionInfo,
    ResetResult,
    SandboxInfo,
    SandboxPage,
    SandboxRef,
    SandboxSpec,
    SandboxStatus,
    SandboxUsage,
    SnapshotInfo,
    Stderr,
    Stdout,
    TenantUsage,
    VolumeInfo,
)

if TYPE_CHECKING:
    from typing import Unpack

    from .sandbox import AsyncSandbox

__all__ = ["Client", "ClientOptions", "ExecOptions", "PathArg", "PtyOptions", "UploadSource", "WatchDirStream"]

SERVICE = "/sandbox.v1.SandboxService/"
CHUNK_SIZE = 256 * 1024
M = TypeVar("M", bound=Message)

UploadSource = bytes | bytearray | memoryview | str | os.PathLike[str] | IO[bytes]
"""What `upload_file` takes: bytes, a local path (str or PathLike), or a binary file object."""

PathArg = str | bytes | os.PathLike[str] | os.PathLike[bytes]
"""A path in the sandbox for the file calls: `str` (encoded with `os.fsencode`, so a `str` from
a `FileEntry` names the same bytes) or the raw `bytes`."""


def _path(path: PathArg) -> bytes:
    return os.fsencode(path)


class WatchDirStream:
    """A live `WatchDir` (from `Client.watch_dir`, once the watch is in place): iterate it for
    `FileEvent`s; it ends when the watched directory goes away. A watcher that stops reading is
    ended by the server with `ResourceExhausted`. `cancel()` (or leaving `async with`) ends it."""

    def __init__(self, call: Any) -> None:
        self._call = call

    def __aiter__(self) -> WatchDirStream:
        return self

    async def __anext__(self) -> FileEvent:
        while True:
            try:
                msg = await self._call.read()
            except grpc.RpcError as exc:
                raise from_rpc_error(exc, call="file") from None
            if msg is grpc.aio.EOF:
                raise StopAsyncIteration
            if msg.HasField("event"):
                return FileEvent.from_proto(msg.event)

    def cancel(self) -> None:
        self._call.cancel()

    async def __aenter__(self) -> WatchDirStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cancel()


def _unset_if_none(msg: Any, **fields: Any) -> None:
    for name, value in fields.items():
        if value is not None:
            setattr(msg, name, value)


def _user(user: str | int | None) -> str | None:
    return None if user is None else str(user)


class ClientOptions(TypedDict, total=False):
    """How `AsyncSandbox.create`/`connect` make the `Client` they own: `Client`'s parameters."""

    address: str
    token: str | None
    tls: TlsConfig | bool
    deadline_s: float | None
    retry: RetryPolicy | None


class ExecOptions(TypedDict, total=False):
    """The keyword arguments of `exec` and `exec_stream` (on `Client` and `AsyncSandbox`).

    `cwd`, `env` (on top of the sandbox's), `user` (name or uid) and `stdin` shape the command;
    `timeout_s` stops it (server default when None); `deadline_s` caps the whole call (then
    `DeadlineExceeded`)."""

    cwd: str | None
    env: Mapping[str, str] | None
    timeout_s: float | None
    user: str | int | None
    stdin: bytes | None
    deadline_s: float | None


class PtyOptions(TypedDict, total=False):
    """The keyword arguments of `Client.open_pty` and `AsyncSandbox.pty`: working directory,
    extra environment, the terminal's size (24x80 unless given), user, and `pipe=True` for
    separate stdout/stderr without a terminal."""

    cwd: str | None
    env: Mapping[str, str] | None
    rows: int
    cols: int
    user: str | int | None
    pipe: bool
    detach_timeout_s: float | None


def _check_keywords(call: str, given: Mapping[str, Any], allowed: type) -> None:
    """A keyword the options do not name is a `TypeError`, as with an explicit signature."""
    unknown = sorted(set(given) - set(allowed.__annotations__))
    if unknown:
        raise TypeError(f"{call}() got an unexpected keyword argument {unknown[0]!r}")


class Client(AsyncClosing):
    """An asyncio client of one sandboxd server.

    `address` is `host:port` (or `http://host:port`; `https://` turns TLS on). `token` is sent
    as `authorization: Bearer <token>`; `tls` is False (plaintext), True (system roots) or a
    `TlsConfig`; `deadline_s` is the default gRPC deadline of every call (None: no deadline) and
    each method takes its own `deadline_s`; `retry` governs transient UNAVAILABLE on idempotent
    calls. Use as `async with Client(...) as client:` or call `close()`. The channel is made in
    the event loop of the first call, so a client may be built outside any loop.
    """

    def __init__(
        self,
        address: str = DEFAULT_ADDRESS,
        *,
        token: str | None = None,
        tls: TlsConfig | bool = False,
        deadline_s: float | None = None,
        retry: RetryPolicy | None = None,
        channel_options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        if deadline_s is not None and deadline_s <= 0:
            raise ValueError("deadline_s must be > 0 or None")
        self.address, tls = normalize_address(address, tls)
        self._tls = tls
        self._channel_options = tuple(channel_options)
        # grpc.aio channels belong to the event loop they were made in: made on first use, and
        # again if a later call runs in another loop (a client may be built outside any loop).
        self._open_channel: grpc.aio.Channel | None = None
        self._channel_loop: asyncio.AbstractEventLoop | None = None
        self._metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token.strip()}"),) if token else ()
        self._deadline_s = deadline_s
        self._retry = retry or RetryPolicy()
        self._closed = False

    def _call_metadata(self) -> tuple[tuple[str, str], ...]:
        """The bearer, and the caller's trace context when OpenTelemetry is installed."""
        return self._metadata + trace_metadata()

    # --- lifecycle of the client ------------------------------------------------------------

    async def close(self) -> None:
        """Close the channel (idempotent). Sandboxes live on: close them first if you mean to."""
        if self._closed:
            return
        self._closed = True
        channel, self._open_channel = self._open_channel, None
        if channel is not None and self._channel_loop is asyncio.get_running_loop():
            await channel.close()

    @property
    def _channel(self) -> grpc.aio.Channel:
        loop = asyncio.get_running_loop()
        if self._open_channel is None or self._channel_loop is not loop:
            self._open_channel = open_channel(self.address, self._tls, self._channel_options)
            self._channel_loop = loop
        return self._open_channel

    # --- plumbing -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxdError(f"this client of {self.address} is closed")

    def _timeout(self, deadline_s: float | None) -> float | None:
        return deadline_s if deadline_s is not None else self._deadline_s

    async def _unary(
        self,
        method: str,
        request: Message,
        response_type: type[M],
        *,
        deadline_s: float | None,
        idempotent: bool,
        kind: str = "",
    ) -> M:
        """One unary call; idempotent ones are retried on UNAVAILABLE, all attempts together
        within the call's deadline."""
        self._check_open()
        callable_ = self._channel.unary_unary(
            SERVICE + method,
            request_serializer=type(request).SerializeToString,
            response_deserializer=response_type.FromString,
        )
        timeout = self._timeout(deadline_s)
        loop = asyncio.get_running_loop()
        deadline_at = None if timeout is None else loop.time() + timeout

        async def attempt() -> M:
            remaining = None if deadline_at is None else deadline_at - loop.time()
            if remaining is not None and remaining <= 0:
                raise DeadlineExceeded(
                    f"{method}: the deadline passed while retrying", grpc.StatusCode.DEADLINE_EXCEEDED
                )
            try:
                response: M = await callable_(request, timeout=remaining, metadata=self._call_metadata())
                return response
            except grpc.RpcError as exc:
                raise from_rpc_error(exc, call=kind) from None

        if idempotent:
            return await self._retry.run(method, attempt)
        return await attempt()

    def _server_stream(self, method: str, request: Any, response_type: Any, deadline_s: float | None) -> Any:
        self._check_open()
        callable_ = self._channel.unary_stream(
            SERVICE + method,
            request_serializer=type(request).SerializeToString,
            response_deserializer=response_type.FromString,
        )
        return callable_(request, timeout=self._timeout(deadline_s), metadata=self._call_metadata())

    # --- sandboxes ---------------------------------------------------------------------------

    async def create(
        self, spec: SandboxSpec | str | Mapping[str, Any], *, deadline_s: float | None = None
    ) -> AsyncSandbox:
        """Start a sandbox (a `SandboxSpec`, a dict of its fields, or just an image name) and
        return its handle. Raises `CreateFailed` / `CreateVerificationFailed` (no container is
        left), or `InvalidArgument` naming the bad field."""
        from .sandbox import AsyncSandbox

        spec = SandboxSpec.of(spec)
        response = await self._unary(
            "Create",
            pb.CreateRequest(spec=spec.to_proto()),
            pb.CreateResponse,
            deadline_s=deadline_s,
            idempotent=False,
            kind="create",
        )
        return AsyncSandbox(self, SandboxRef.from_proto(response.sandbox), image=spec.image or None)

    async def create_batch(
        self, spec: SandboxSpec | str | Mapping[str, Any], count: int, *, deadline_s: float | None = None
    ) -> AsyncIterator[AsyncSandbox | SandboxdError]:
        """Start `count` (1-256) sandboxes of one spec (or one pool: `spec.pool`) in one call
        (`CreateBatch`), yielding each as it is ready: an `AsyncSandbox`, or the typed error
        (with its `failure_kind`) of one that was not made. A batch past the tenant's quota
        raises `QuotaExceeded` at once, with nothing made."""
        from .sandbox import AsyncSandbox

        spec = SandboxSpec.of(spec)
        request = pb.CreateBatchRequest(spec=spec.to_proto(), count=count)
        call = self._server_stream("CreateBatch", request, pb.CreateBatchResponse, deadline_s)
        try:
            async for msg in call:
                if msg.WhichOneof("result") == "sandbox":
                    yield AsyncSandbox(self, SandboxRef.from_proto(msg.sandbox), image=spec.image or None)
                else:
                    error = msg.error
                    yield from_parts(error.code, error.message, kind_from_wire(error.failure_kind))
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, call="create") from None
        finally:
            call.cancel()

    async def connect(
        self, ref: SandboxRef | Mapping[str, Any] | str, *, deadline_s: float | None = None
    ) -> AsyncSandbox:
        """Re-attach to a sandbox from its descriptor (`AsyncSandbox.serialize()`), a
        `SandboxRef`, or a bare sandbox id. Raises `SandboxNotFound` for one this service does
        not own."""
        from .sandbox import AsyncSandbox

        ref = SandboxRef.of(ref)
        response = await self._unary(
            "Connect",
            pb.ConnectRequest(sandbox=ref.to_proto()),
            pb.ConnectResponse,
            deadline_s=deadline_s,
            idempotent=True,
        )
        return AsyncSandbox(
            self,
            SandboxRef.from_proto(response.sandbox),
            image=response.image or None,
            shell=response.shell or None,
        )

    async def list(
        self,
        *,
        labels: Mapping[str, str] | None = None,
        statuses: Iterable[SandboxStatus] = (),
        page_size: int = 0,
        page_token: str = "",
        deadline_s: float | None = None,
    ) -> SandboxPage:
        """One page of the sandboxes this service owns, filtered by labels and states."""
        request = pb.ListRequest(
            labels=dict(labels or {}),
            statuses=[s.to_proto() for s in statuses],
            page_size=page_size,
            page_token=page_token,
        )
        response = await self._unary("List", request, pb.ListResponse, deadline_s=deadline_s, idempotent=True)
        return SandboxPage([SandboxInfo.from_proto(s) for s in response.sandboxes], response.next_page_token)

    async def list_all(
        self, *, labels: Mapping[str, str] | None = None, statuses: Iterable[SandboxStatus] = ()
    ) -> AsyncIterator[SandboxInfo]:
        """Every matching sandbox, page after page."""
        wanted = list(statuses)
        token = ""
        while True:
            page = await self.list(labels=labels, statuses=wanted, page_token=token)
            for info in page.sandboxes:
                yield info
            token = page.next_page_token
            if not token:
                return

    async def list_snapshots(
        self, *, labels: Mapping[str, str] | None = None, deadline_s: float | None = None
    ) -> builtins.list[SnapshotInfo]:
        response = await self._unary(
            "ListSnapshots",
            pb.ListSnapshotsRequest(labels=dict(labels or {})),
            pb.ListSnapshotsResponse,
            deadline_s=deadline_s,
            idempotent=True,
        )
        return [SnapshotInfo.from_proto(s) for s in response.snapshots]

    async def delete_snapshot(self, snapshot_id: str, *, deadline_s: float | None = None) -> None:
        await self._unary(
            "DeleteSnapshot",
            pb.DeleteSnapshotRequest(snapshot_id=snapshot_id),
            pb.DeleteSnapshotResponse,
            deadline_s=deadline_s,
            idempotent=False,
        )

    # --- per-sandbox calls (by id) -------------------------------------------------------------

    @staticmethod
    def _exec_request(call: str, sandbox_id: str, command: str, options: ExecOptions) -> pb.ExecRequest:
        _check_keywords(call, options, ExecOptions)
        request = pb.ExecRequest(sandbox_id=sandbox_id, command=command, env=dict(options.get("env") or {}))
        timeout_s = options.get("timeout_s")
        _unset_if_none(
            request,
            cwd=options.get("cwd"),
            user=_user(options.get("user")),
            stdin=options.get("stdin"),
            timeout_s=float(timeout_s) if timeout_s is not None else None,
        )
        return request

    async def exec(self, sandbox_id: str, command: str, **options: Unpack[ExecOptions]) -> ExecResult:
        """Run `<shell> -c command`; see `AsyncSandbox.exec` and `ExecOptions`."""
        request = self._exec_request("exec", sandbox_id, command, options)
        response = await self._unary(
            "Exec", request, pb.ExecResponse, deadline_s=options.get("deadline_s"), idempotent=False
        )
        return ExecResult.from_proto(response)

    async def exec_stream(
        self, sandbox_id: str, command: str, *, fallback: bool = False, **options: Unpack[ExecOptions]
    ) -> AsyncIterator[ExecEvent]:
        """Stdout/stderr chunks as the command produces them, then one `ExecExit`. Leaving the
        loop early cancels the call, which stops the command. A server without ExecStream
        raises `Unimplemented`, or with `fallback=True` runs the command through Exec and yields
        its whole stdout, stderr and exit."""
        request = self._exec_request("exec_stream", sandbox_id, command, options)
        call = self._server_stream("ExecStream", request, pb.ExecStreamResponse, options.get("deadline_s"))
        started = False
        try:
            try:
                async for msg in call:
                    started = True
                    which = msg.WhichOneof("response")
                    if which == "stdout":
                        yield Stdout(bytes(msg.stdout))
                    elif which == "stderr":
                        yield Stderr(bytes(msg.stderr))
                    elif which == "exit":
                        yield ExecExit(
                            return_code=int(msg.exit.return_code),
                            error_type=msg.exit.error_type or None,
                            usage=ExecUsage.from_proto(msg.exit.usage) if msg.exit.HasField("usage") else None,
                            failure_kind=kind_from_wire(msg.exit.failure_kind),
                        )
            except grpc.RpcError as exc:
                error = from_rpc_error(exc)
                if not (isinstance(error, Unimplemented) and fallback and not started):
                    raise error from None
                result = await self.exec(sandbox_id, command, **options)
                if result.stdout:
                    yield Stdout(result.stdout)
                if result.stderr:
                    yield Stderr(result.stderr)
                yield ExecExit(result.return_code, result.error_type, result.usage, result.failure_kind)
        finally:
            call.cancel()

    async def upload_file(
        self,
        sandbox_id: str,
        remote_path: str,
        source: UploadSource,
        *,
        mode: int | None = None,
        deadline_s: float | None = None,
    ) -> int:
        """Stream `source` to `remote_path` (parents created, owned by root); returns the bytes
        written. The size is announced when known (bytes, a path, a seekable file), which lets
        the server stream straight to Docker instead of spooling."""
        self._check_open()
        opened: IO[bytes] | None = None
        data: bytes | None = None
        if isinstance(source, (bytes, bytearray, memoryview)):
            data = bytes(source)
            size: int | None = len(data)
        elif isinstance(source, (str, os.PathLike)):
            opened = open(source, "rb")  # noqa: SIM115 (closed below)
            size = os.fstat(opened.fileno()).st_size
            reader: IO[bytes] = opened
        else:
            reader = source
            size = None
            try:
                if reader.seekable():
                    here = reader.tell()
                    size = reader.seek(0, os.SEEK_END) - here
                    reader.seek(here)
            except (OSError, ValueError):
                size = None

        header = pb.UploadHeader(sandbox_id=sandbox_id, path=remote_path)
        _unset_if_none(header, mode=mode, size=size)

        async def requests() -> AsyncIterator[pb.UploadRequest]:
            yield pb.UploadRequest(header=header)
            if data is not None:
                for start in range(0, len(data), CHUNK_SIZE):
                    yield pb.UploadRequest(chunk=data[start : start + CHUNK_SIZE])
                return
            while chunk := await asyncio.to_thread(reader.read, CHUNK_SIZE):
                yield pb.UploadRequest(chunk=chunk)

        callable_ = self._channel.stream_unary(
            SERVICE + "Upload",
            request_serializer=pb.UploadRequest.SerializeToString,
            response_deserializer=pb.UploadResponse.FromString,
        )
        try:
            response = await callable_(requests(), timeout=self._timeout(deadline_s), metadata=self._call_metadata())
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, call="file") from None
        finally:
            if opened is not None:
                opened.close()
        return int(response.bytes_written)

    async def iter_download(
        self, sandbox_id: str, remote_path: str, *, deadline_s: float | None = None
    ) -> AsyncIterator[bytes]:
        """The file's chunks as they arrive. A transient UNAVAILABLE before the first chunk is
        retried; after it, the error is raised (part of the file was already handed out)."""
        request = pb.DownloadRequest(sandbox_id=sandbox_id, path=remote_path)
        attempt = 1
        while True:
            call = self._server_stream("Download", request, pb.DownloadResponse, deadline_s)
            received = False
            try:
                async for msg in call:
                    received = True
                    yield bytes(msg.chunk)
                return
            except grpc.RpcError as exc:
                error = from_rpc_error(exc, call="file")
                if received or error.code != grpc.StatusCode.UNAVAILABLE or attempt >= self._retry.max_attempts:
                    raise error from None
                await asyncio.sleep(self._retry.backoff_s(attempt))
                attempt += 1
            finally:
                call.cancel()

    @overload
    async def download_file(
        self, sandbox_id: str, remote_path: str, target: None = None, *, deadline_s: float | None = None
    ) -> bytes: ...

    @overload
    async def download_file(
        self, sandbox_id: str, remote_path: str, target: str | os.PathLike[str], *, deadline_s: float | None = None
    ) -> int: ...

    async def download_file(
        self,
        sandbox_id: str,
        remote_path: str,
        target: str | os.PathLike[str] | None = None,
        *,
        deadline_s: float | None = None,
    ) -> bytes | int:
        """The file's bytes (no `target`), or its size after writing it to the local `target`
        (parents created; written to a temporary name first, so a failed download leaves no
        partial file)."""
        if target is None:
            parts = [chunk async for chunk in self.iter_download(sandbox_id, remote_path, deadline_s=deadline_s)]
            return b"".join(parts)
        path = Path(target)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.partial")
        written = 0
        try:
            with open(partial, "wb") as out:
                async for chunk in self.iter_download(sandbox_id, remote_path, deadline_s=deadline_s):
                    await asyncio.to_thread(out.write, chunk)
                    written += len(chunk)
            os.replace(partial, path)
        finally:
            if partial.exists():
                partial.unlink()
        return written

    async def status(self, sandbox_id: str, *, deadline_s: float | None = None) -> SandboxStatus:
        response = await self._unary(
            "Status",
            pb.StatusRequest(sandbox_id=sandbox_id),
            pb.StatusResponse,
            deadline_s=deadline_s,
            idempotent=True,
        )
        return SandboxStatus.from_proto(response.status)

    async def endpoint(self, sandbox_id: str, port: int, *, deadline_s: float | None = None) -> Endpoint:
        response = await self._unary(
            "Endpoint",
            pb.EndpointRequest(sandbox_id=sandbox_id, port=port),
            pb.EndpointResponse,
            deadline_s=deadline_s,
            idempotent=True,
        )
        return Endpoint(url=response.endpoint, headers=dict(response.headers))

    async def close_sandbox(self, sandbox_id: str, *, deadline_s: float | None = None) -> SandboxUsage | None:
        """Remove the sandbox (closing one that is already gone succeeds); returns what it used
        over its life (None when the server could not read it, e.g. it had stopped)."""
        response = await self._unary(
            "Close",
            pb.CloseRequest(sandbox_id=sandbox_id),
            pb.CloseResponse,
            deadline_s=deadline_s,
            idempotent=True,
        )
        return SandboxUsage.from_proto(response.usage) if response.HasField("usage") else None

    async def reset(self, sandbox_id: str, *, deadline_s: float | None = None) -> ResetResult:
        """Put the sandbox back to the state it was created in, in place: every process of the
        episode killed, its root filesystem rolled back to the image, the spec's files written
        again; its id, lease and tokens kept (needs the owner scope). Raises
        `FailedPrecondition` where it cannot (gVisor's runsc, a paused sandbox)."""
        response = await self._unary(
            "Reset", pb.ResetRequest(sandbox_id=sandbox_id), pb.ResetResponse, deadline_s=deadline_s, idempotent=True
        )
        return ResetResult.from_proto(response)

    async def usage(self, sandbox_id: str, *, deadline_s: float | None = None) -> SandboxUsage:
        """What the live sandbox used so far: wall time, CPU, peak memory, disk and network
        bytes, processes started (a stopped one raises `FailedPrecondition`)."""
        response = await self._unary(
            "Usage", pb.UsageRequest(sandbox_id=sandbox_id), pb.UsageResponse, deadline_s=deadline_s, idempotent=True
        )
        return SandboxUsage.from_proto(response.usage)

    async def tenant_usage(
        self, tenant: str | None = None, *, at_unix_ms: int | None = None, deadline_s: float | None = None
    ) -> TenantUsage:
        """A tenant's receipts over one period and their sums, with its budgets: the period that
        holds `at_unix_ms` (default: the current one). A tenant key reads its own (leave `tenant`
        out); the operator names one."""
        request = pb.TenantUsageRequest(tenant=tenant or "")
        if at_unix_ms is not None:
            request.at_unix_ms = at_unix_ms
        response = await self._unary(
            "TenantUsage", request, pb.TenantUsageResponse, deadline_s=deadline_s, idempotent=True
        )
        return TenantUsage.from_proto(response)

    async def open_pty(
        self,
        sandbox_id: str,
        command: str | None = None,
        *,
        open_timeout_s: float | None = 60.0,
        **options: Unpack[PtyOptions],
    ) -> PtySession:
        """Open a terminal (or, with `pipe=True`, a pipe-mode process) and wait until the server
        says it is open; see `PtySession` and `PtyOptions`."""
        self._check_open()
        _check_keywords("open_pty", options, PtyOptions)
        opening = pb.PtyOpen(
            sandbox_id=sandbox_id,
            env=dict(options.get("env") or {}),
            rows=options.get("rows", 24),
            cols=options.get("cols", 80),
            pipe=options.get("pipe", False),
        )
        _unset_if_none(opening, command=command, cwd=options.get("cwd"), user=_user(options.get("user")))
        if options.get("detach_timeout_s") is not None:
            opening.detach_timeout_s = float(options["detach_timeout_s"])  # type: ignore[arg-type]
        return await PtySession.open(self._pty_call(), opening, open_timeout_s=open_timeout_s)

    async def attach_pty(
        self,
        sandbox_id: str,
        session_id: str,
        *,
        takeover: bool = False,
        since: int = 0,
        open_timeout_s: float | None = 60.0,
    ) -> PtySession:
        """Hold a session the sandbox's agent keeps (from any process): its retained output
        from offset `since` (0: all still retained) comes first, then live output. `takeover`
        ends the current holder's stream (it fails with ABORTED); without it a held session is
        `PtySessionError`. An unknown id is `NotFound`, a `since` older than the retained output
        `InvalidArgument` (OUT_OF_RANGE, naming the oldest offset)."""
        self._check_open()
        if since < 0:
            raise ValueError(f"since must be >= 0 (got {since})")
        attaching = pb.PtyAttach(sandbox_id=sandbox_id, session_id=session_id, takeover=takeover, since=since)
        return await PtySession.attach(self._pty_call(), attaching, open_timeout_s=open_timeout_s)

    async def list_pty_sessions(
        self, sandbox_id: str, *, deadline_s: float | None = None
    ) -> builtins.list[PtySessionInfo]:
        """The sessions the sandbox's agent keeps (running, or ended and not yet forgotten),
        oldest first."""
        response = await self._unary(
            "ListPtySessions",
            pb.ListPtySessionsRequest(sandbox_id=sandbox_id),
            pb.ListPtySessionsResponse,
            deadline_s=deadline_s,
            idempotent=True,
        )
        return [PtySessionInfo.from_proto(s) for s in response.sessions]

    def _pty_call(self) -> Any:
        callable_ = self._channel.stream_stream(
            SERVICE + "Pty",
            request_serializer=pb.PtyRequest.SerializeToString,
            response_deserializer=pb.PtyResponse.FromString,
        )
        return callable_(metadata=self._call_metadata())

    async def grant(
        self, sandbox_id: str, scope: str, *, ttl_s: float | None = None, deadline_s: float | None = None
    ) -> Grant:
        """A token for `sandbox_id` with `scope` ("owner", "operate" or "read"; never wider than
        the caller's own), valid `ttl_s` seconds (None: the server's `server.auth.grant_ttl_s`)."""
        if scope not in TOKEN_SCOPES:
            raise ValueError(f"scope must be one of {sorted(TOKEN_SCOPES)} (got {scope!r})")
        request = pb.GrantRequest(sandbox_id=sandbox_id, scope=TOKEN_SCOPES[scope])
        _unset_if_none(request, ttl_s=None if ttl_s is None else float(ttl_s))
        response = await self._unary("Grant", request, pb.GrantResponse, deadline_s=deadline_s, idempotent=False)
        return Grant(token=response.token, token_id=response.token_id, expires_at_s=response.expires_at_s)

    async def revoke(self, token_id: str, *, deadline_s: float | None = None) -> None:
        """Revoke a token by id (and every token granted from it); durable on the server."""
        await self._unary(
            "Revoke", pb.RevokeRequest(token_id=token_id), pb.RevokeResponse, deadline_s=deadline_s, idempotent=True
        )

    def with_token(self, token: str) -> Client:
        """A client of the same server presenting `token` (a tenant key or a capability token)
        instead of this one's; same TLS, deadline, retry and channel options, its own channel."""
        return Client(
            self.address,
            token=token,
            tls=self._tls,
            deadline_s=self._deadline_s,
            retry=self._retry,
            channel_options=self._channel_options,
        )

    # --- pools -------------------------------------------------------------------------------

    async def create_pool(
        self,
        name: str,
        image: str,
        *,
        target: int,
        max: int,
        template: SandboxSpec | Mapping[str, Any] | None = None,
        recycle: bool = False,
        deadline_s: float | None = None,
    ) -> PoolInfo:
        """Add a warm pool: the server keeps `target` ready sandboxes of `image` started from
        `template` (no image, ttl_s, snapshot_id or pool), at most `max` alive, claimed ones
        included. `create(SandboxSpec(pool=name, ...))` then claims one. Raises
        `InvalidArgument` naming the field (`pool.target`, `pool.max`, ...). `recycle`: a
        closed sandbox of the pool is reset and handed back to it instead of removed."""
        spec = SandboxSpec.of(template) if template is not None else SandboxSpec()
        request = pb.CreatePoolRequest(
            pool=pb.PoolSpec(name=name, image=image, template=spec.to_proto(), target=target, max=max, recycle=recycle)
        )
        response = await self._unary(
            "CreatePool", request, pb.CreatePoolResponse, deadline_s=deadline_s, idempotent=False
        )
        return PoolInfo.from_proto(response.pool)

    async def list_pools(self, *, deadline_s: float | None = None) -> builtins.list[PoolInfo]:
        """The pools this caller can claim from, by name."""
        response = await self._unary(
            "ListPools", pb.ListPoolsRequest(), pb.ListPoolsResponse, deadline_s=deadline_s, idempotent=True
        )
        return [PoolInfo.from_proto(p) for p in response.pools]

    async def delete_pool(self, name: str, *, deadline_s: float | None = None) -> int:
        """Remove a pool and its unclaimed sandboxes (claimed ones stay); returns how many went."""
        response = await self._unary(
            "DeletePool", pb.DeletePoolRequest(name=name), pb.DeletePoolResponse, deadline_s=deadline_s, idempotent=True
        )
        return int(response.removed)

    async def set_pool_targets(
        self,
        targets: Mapping[str, int] | Iterable[tuple[str, int] | tuple[str, int, str]],
        *,
        deadline_s: float | None = None,
    ) -> builtins.list[dict[str, Any]]:
        """Set the pools a task schedule needs in one call ("the next 200 tasks need these
        images"): `{image: count}` or `(image, count[, pool])` entries. Each image gets a pool
        (named after it unless `pool` is given; made when missing, its target set when present)
        that keeps `count` ready sandboxes; 0 lets it drain. Returns per entry `pool`, `image`,
        `target`, `max`, `created` and `ready_by_node` (its ready members per node)."""
        items = targets.items() if isinstance(targets, Mapping) else targets
        entries = []
        for item in items:
            image, count, *rest = item
            entries.append(pb.PoolTarget(image=image, count=int(count), pool=rest[0] if rest else ""))
        response = await self._unary(
            "SetPoolTargets",
            pb.SetPoolTargetsRequest(targets=entries),
            pb.SetPoolTargetsResponse,
            deadline_s=deadline_s,
            idempotent=True,
        )
        return [
            {
                "pool": p.pool,
                "image": p.image,
                "target": int(p.target),
                "max": int(p.max),
                "created": bool(p.created),
                "ready_by_node": {n.node: int(n.ready) for n in p.nodes},
            }
            for p in response.pools
        ]

    async def prefetch_images(
        self, images: Iterable[str], *, nodes: Iterable[str] = (), deadline_s: float | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """Make `images` present on `nodes` (empty: every node) before the tasks that need
        them: pulled where a registry is reachable, else (in a cluster) copied from a node that
        has them, node to node. Yields each step as a dict: `image`, `node`, `state` (`present`,
        `pulling`, `copying`, `ready`, `failed`), `bytes_done`, `bytes_total`, `source`,
        `error`; the iteration ends when every image ended on every node."""
        request = pb.PrefetchImagesRequest(images=list(images), nodes=list(nodes))
        call = self._server_stream("PrefetchImages", request, pb.PrefetchImagesResponse, deadline_s)
        names = {
            pb.IMAGE_PREFETCH_STATE_PRESENT: "present",
            pb.IMAGE_PREFETCH_STATE_PULLING: "pulling",
            pb.IMAGE_PREFETCH_STATE_COPYING: "copying",
            pb.IMAGE_PREFETCH_STATE_READY: "ready",
            pb.IMAGE_PREFETCH_STATE_FAILED: "failed",
        }
        try:
            async for msg in call:
                yield {
                    "image": msg.image,
                    "node": msg.node,
                    "state": names.get(msg.state, "unknown"),
                    "bytes_done": int(msg.bytes_done),
                    "bytes_total": int(msg.bytes_total),
                    "source": msg.source,
                    "error": msg.error,
                }
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        finally:
            call.cancel()

    async def set_timeout(self, sandbox_id: str, ttl_s: float, *, deadline_s: float | None = None) -> int:
        """Move the sandbox's lease to `ttl_s` seconds from now; returns its end (Unix ms)."""
        response = await self._unary(
            "SetTimeout",
            pb.SetTimeoutRequest(sandbox_id=sandbox_id, ttl_s=float(ttl_s)),
            pb.SetTimeoutResponse,
            deadline_s=deadline_s,
            idempotent=True,
        )
        return int(response.expires_at_unix_ms)

    async def snapshot(
        self, sandbox_id: str, *, labels: Mapping[str, str] | None = None, deadline_s: float | None = None
    ) -> SnapshotInfo:
        response = await self._unary(
            "Snapshot",
            pb.SnapshotRequest(sandbox_id=sandbox_id, labels=dict(labels or {})),
            pb.SnapshotResponse,
            deadline_s=deadline_s,
            idempotent=False,
        )
        return SnapshotInfo.from_proto(response.snapshot)

    async def fork(
        self,
        sandbox_id: str,
        count: int = 1,
        *,
        labels: Mapping[str, str] | None = None,
        live: bool = False,
        snapshot_id: str | None = None,
        deadline_s: float | None = None,
    ) -> tuple[builtins.list[AsyncSandbox], str]:
        """`count` new sandboxes from one fresh snapshot of the source, and that snapshot's id.

        With `live` (a gVisor sandbox), the children are restored from a live snapshot
        (`snapshot_id`'s, else a fresh one) and their processes go on from it."""
        from .sandbox import AsyncSandbox

        request = pb.ForkRequest(sandbox_id=sandbox_id, count=count, labels=dict(labels or {}), live=live)
        _unset_if_none(request, snapshot_id=snapshot_id)
        response = await self._unary(
            "Fork",
            request,
            pb.ForkResponse,
            deadline_s=deadline_s,
            idempotent=False,
        )
        children = [AsyncSandbox(self, SandboxRef.from_proto(r)) for r in response.sandboxes]
        return children, response.snapshot_id

    async def diff(
        self, sandbox_id: str, *, path_prefix: str | None = None, deadline_s: float | None = None
    ) -> builtins.list[DiffEntry]:
        """Paths added, changed and deleted since the sandbox started (or its snapshot)."""
        request = pb.DiffRequest(sandbox_id=sandbox_id)
        _unset_if_none(request, path_prefix=path_prefix)

        async def attempt() -> builtins.list[DiffEntry]:
            call = self._server_stream("Diff", request, pb.DiffResponse, deadline_s)
            try:
                return [DiffEntry.from_proto(e) async for msg in call for e in msg.entries]
            except grpc.RpcError as exc:
                raise from_rpc_error(exc) from None

        return await self._retry.run("Diff", attempt)

    async def checkpoint(
        self,
        sandbox_id: str,
        *,
        labels: Mapping[str, str] | None = None,
        leave_running: bool = True,
        deadline_s: float | None = None,
    ) -> SnapshotInfo:
        """A live snapshot of a running gVisor sandbox: processes, memory and files of one moment."""
        response = await self._unary(
            "Checkpoint",
            pb.CheckpointRequest(sandbox_id=sandbox_id, labels=dict(labels or {}), leave_running=leave_running),
            pb.CheckpointResponse,
            deadline_s=deadline_s,
            idempotent=False,
        )
        return SnapshotInfo.from_proto(response.snapshot)

    async def hibernate(self, sandbox_id: str, *, deadline_s: float | None = None) -> tuple[int, int]:
        """Checkpoint a gVisor sandbox to disk and stop it until `resume`: (checkpoint bytes,
        memory freed in bytes)."""
        response = await self._unary(
            "Hibernate",
            pb.HibernateRequest(sandbox_id=sandbox_id),
            pb.HibernateResponse,
            deadline_s=deadline_s,
            idempotent=True,
        )
        return int(response.checkpoint_bytes), int(response.memory_freed_bytes)

    async def pause(self, sandbox_id: str, *, deadline_s: float | None = None) -> None:
        await self._unary(
            "Pause", pb.PauseRequest(sandbox_id=sandbox_id), pb.PauseResponse, deadline_s=deadline_s, idempotent=True
        )

    async def network_address(self, sandbox_id: str, *, deadline_s: float | None = None) -> NetworkAddress:
        """The sandbox's address on its `network` (or on the daemon's network it runs on)."""
        response = await self._unary(
            "NetworkAddress",
            pb.NetworkAddressRequest(sandbox_id=sandbox_id),
            pb.NetworkAddressResponse,
            deadline_s=deadline_s,
            idempotent=True,
        )
        return NetworkAddress.from_proto(response)

    async def list_volumes(self, *, deadline_s: float | None = None) -> builtins.list[VolumeInfo]:
        """The named volumes the service owns for the caller's tenant."""
        response = await self._unary(
            "ListVolumes", pb.ListVolumesRequest(), pb.ListVolumesResponse, deadline_s=deadline_s, idempotent=True
        )
        return [VolumeInfo.from_proto(v) for v in response.volumes]

    async def delete_volume(self, name: str, *, deadline_s: float | None = None) -> None:
        """Remove a named volume and its data (FailedPrecondition while a sandbox mounts it)."""
        await self._unary(
            "DeleteVolume",
            pb.DeleteVolumeRequest(name=name),
            pb.DeleteVolumeResponse,
            deadline_s=deadline_s,
            idempotent=True,
        )

    async def resume(self, sandbox_id: str, *, deadline_s: float | None = None) -> None:
        await self._unary(
            "Resume",
            pb.ResumeRequest(sandbox_id=sandbox_id),
            pb.ResumeResponse,
            deadline_s=deadline_s,
            idempotent=True,
        )

    # --- events and usage ----------------------------------------------------------------------

    async def watch(
        self,
        *,
        labels: Mapping[str, str] | None = None,
        statuses: Iterable[SandboxStatus] = (),
        include_existing: bool = False,
    ) -> AsyncIterator[SandboxEvent]:
        """Lifecycle events of the sandboxes this service owns (a tenant's: its own), as they
        happen, until the loop is left (which cancels the call). `statuses` keeps events after
        which the sandbox is in one of them; `include_existing` first yields one EXISTING event
        per matching sandbox. A watcher that falls behind is ended with `ResourceExhausted`:
        watch again with `include_existing=True`."""
        request = pb.WatchRequest(
            labels=dict(labels or {}),
            statuses=[s.to_proto() for s in statuses],
            include_existing=include_existing,
        )
        call = self._server_stream("Watch", request, pb.WatchResponse, None)
        try:
            async for msg in call:
                yield SandboxEvent.from_proto(msg.event)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        finally:
            call.cancel()

    async def stats(self, sandbox_id: str, *, deadline_s: float | None = None) -> SandboxStats:
        """The sandbox's CPU, memory, pids, network and block I/O now (running or paused; a
        stopped one raises `FailedPrecondition`)."""
        response = await self._unary(
            "Stats", pb.StatsRequest(sandbox_id=sandbox_id), pb.StatsResponse, deadline_s=deadline_s, idempotent=True
        )
        return SandboxStats.from_proto(response)

    async def stats_stream(self, sandbox_id: str, *, interval_s: float = 1.0) -> AsyncIterator[SandboxStats]:
        """One reading every `interval_s` (0.1 to 3600) until the loop is left; it ends once the
        sandbox stopped or went."""
        request = pb.StatsStreamRequest(sandbox_id=sandbox_id, interval_s=interval_s)
        call = self._server_stream("StatsStream", request, pb.StatsResponse, None)
        try:
            async for msg in call:
                yield SandboxStats.from_proto(msg)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        finally:
            call.cancel()

    # --- processes and ports -----------------------------------------------------------------

    async def start_process(
        self,
        sandbox_id: str,
        command: str = "",
        *,
        argv: Sequence[str] | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        user: str | int | None = None,
        pty: bool = False,
        rows: int = 0,
        cols: int = 0,
        deadline_s: float | None = None,
    ) -> str:
        """Start a background process (`command` through the sandbox's shell, or `argv` as is)
        and return its id at once; it runs until it exits, the sandbox closes, or a signal."""
        request = pb.StartProcessRequest(
            sandbox_id=sandbox_id,
            command=command,
            argv=list(argv or ()),
            env=dict(env or {}),
            pty=pty,
            rows=rows,
            cols=cols,
        )
        _unset_if_none(request, cwd=cwd, user=_user(user))
        response = await self._unary(
            "StartProcess", request, pb.StartProcessResponse, deadline_s=deadline_s, idempotent=False
        )
        return response.process_id

    async def list_processes(self, sandbox_id: str, *, deadline_s: float | None = None) -> builtins.list[ProcessInfo]:
        """Every process and terminal session of the sandbox, oldest first."""
        response = await self._unary(
            "ListProcesses",
            pb.ListProcessesRequest(sandbox_id=sandbox_id),
            pb.ListProcessesResponse,
            deadline_s=deadline_s,
            idempotent=True,
        )
        return [ProcessInfo.from_proto(p) for p in response.processes]

    async def attach_process(
        self, sandbox_id: str, process_id: str, *, since: int | None = None
    ) -> AsyncIterator[ProcessEvent]:
        """`ProcessAttached`, the output from `since` (None: everything still retained), then
        live output, then `ProcessExited`. Leaving the loop detaches; the process runs on."""
        request = pb.AttachProcessRequest(sandbox_id=sandbox_id, process_id=process_id)
        _unset_if_none(request, since=since)
        call = self._server_stream("AttachProcess", request, pb.AttachProcessResponse, None)
        try:
            try:
                async for msg in call:
                    yield process_event(msg)
            except grpc.RpcError as exc:
                raise from_rpc_error(exc, call="AttachProcess") from None
        finally:
            call.cancel()

    async def signal_process(
        self, sandbox_id: str, process_id: str, signal: str | int = "SIGTERM", *, deadline_s: float | None = None
    ) -> None:
        """Signal the process's whole group (a name such as `SIGTERM` or a number)."""
        await self._unary(
            "SignalProcess",
            pb.SignalProcessRequest(sandbox_id=sandbox_id, process_id=process_id, signal=str(signal)),
            pb.SignalProcessResponse,
            deadline_s=deadline_s,
            idempotent=False,
        )

    async def port_forward(self, sandbox_id: str, port: int, *, host: str = "") -> ForwardConnection:
        """One TCP connection to `host:port` as the sandbox sees it (works with `network: none`);
        a connect failure raises `SandboxUnavailable` naming the address."""
        self._check_open()
        callable_ = self._channel.stream_stream(
            SERVICE + "PortForward",
            request_serializer=pb.PortForwardRequest.SerializeToString,
            response_deserializer=pb.PortForwardResponse.FromString,
        )
        queue: asyncio.Queue[pb.PortForwardRequest | None] = asyncio.Queue(maxsize=8)
        first = pb.PortForwardRequest(open=pb.PortForwardOpen(sandbox_id=sandbox_id, host=host, port=port))
        call = callable_(request_stream(first, queue), metadata=self._call_metadata())
        try:
            msg = await call.read()
        except grpc.RpcError as exc:
            # The request stream must end with the call, or its task outlives it.
            queue.put_nowait(None)
            call.cancel()
            raise from_rpc_error(exc, call="PortForward") from None
        if not isinstance(msg, pb.PortForwardResponse) or msg.WhichOneof("message") != "opened":
            queue.put_nowait(None)
            call.cancel()
            raise SandboxdError("PortForward did not answer with `opened`")
        return ForwardConnection(call, queue, msg.opened.address)

    async def forward_port(
        self,
        sandbox_id: str,
        remote_port: int,
        *,
        local_port: int = 0,
        local_host: str = "127.0.0.1",
        remote_host: str = "",
    ) -> asyncio.Server:
        """A local listener (what `sandboxctl port-forward` opens): each accepted connection
        becomes one `PortForward` call to `remote_host:remote_port` inside the sandbox. Close
        the returned server to stop; `server.sockets[0].getsockname()` is where it listens."""

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                connection = await self.port_forward(sandbox_id, remote_port, host=remote_host)
            except SandboxdError:
                writer.close()
                return
            with contextlib.suppress(SandboxdError, ConnectionError):
                await connection.splice(reader, writer)

        return await asyncio.start_server(handle, local_host, local_port)

    # --- files -------------------------------------------------------------------------------

    async def iter_list_dir(
        self,
        sandbox_id: str,
        path: PathArg,
        *,
        depth: int = 1,
        include_hidden: bool = False,
        user: str | int | None = None,
        deadline_s: float | None = None,
    ) -> AsyncIterator[FileEntry]:
        """The entries of directory `path` (`ListDir`) as they stream in: depth first, each
        directory's sorted by name; links are listed, never followed."""
        request = pb.ListDirRequest(
            sandbox_id=sandbox_id,
            path=_path(path),
            depth=depth,
            include_hidden=include_hidden,
            user=_user(user) or "",
        )
        call = self._server_stream("ListDir", request, pb.ListDirResponse, deadline_s)
        try:
            async for msg in call:
                for entry in msg.entries:
                    yield FileEntry.from_proto(entry)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, call="file") from None

    async def list_dir(
        self,
        sandbox_id: str,
        path: PathArg,
        *,
        depth: int = 1,
        include_hidden: bool = False,
        user: str | int | None = None,
        deadline_s: float | None = None,
    ) -> builtins.list[FileEntry]:
        """Every entry of `iter_list_dir`."""
        return [
            e
            async for e in self.iter_list_dir(
                sandbox_id, path, depth=depth, include_hidden=include_hidden, user=user, deadline_s=deadline_s
            )
        ]

    async def stat(
        self,
        sandbox_id: str,
        path: PathArg,
        *,
        follow_links: bool = False,
        user: str | int | None = None,
        deadline_s: float | None = None,
    ) -> FileEntry:
        """One path's entry (`Stat`): of a link itself unless `follow_links`."""
        request = pb.StatRequest(
            sandbox_id=sandbox_id, path=_path(path), follow_links=follow_links, user=_user(user) or ""
        )
        response = await self._unary(
            "Stat", request, pb.StatResponse, deadline_s=deadline_s, idempotent=True, kind="file"
        )
        return FileEntry.from_proto(response.entry)

    async def make_dir(
        self,
        sandbox_id: str,
        path: PathArg,
        *,
        parents: bool = False,
        mode: int = 0,
        user: str | int | None = None,
        deadline_s: float | None = None,
    ) -> None:
        """Make directory `path` (`MakeDir`; `mode` 0 is 0o755, set exactly)."""
        request = pb.MakeDirRequest(
            sandbox_id=sandbox_id, path=_path(path), parents=parents, mode=mode, user=_user(user) or ""
        )
        await self._unary("MakeDir", request, pb.MakeDirResponse, deadline_s=deadline_s, idempotent=False, kind="file")

    async def remove(
        self,
        sandbox_id: str,
        path: PathArg,
        *,
        recursive: bool = False,
        user: str | int | None = None,
        deadline_s: float | None = None,
    ) -> None:
        """Remove `path` (`Remove`); a directory with contents only with `recursive`."""
        request = pb.RemoveRequest(sandbox_id=sandbox_id, path=_path(path), recursive=recursive, user=_user(user) or "")
        await self._unary("Remove", request, pb.RemoveResponse, deadline_s=deadline_s, idempotent=False, kind="file")

    async def rename(
        self,
        sandbox_id: str,
        source: PathArg,
        destination: PathArg,
        *,
        overwrite: bool = False,
        user: str | int | None = None,
        deadline_s: float | None = None,
    ) -> None:
        """Move `source` to `destination` (`Rename`); an existing destination only with `overwrite`."""
        request = pb.RenameRequest(
            sandbox_id=sandbox_id,
            source=_path(source),
            destination=_path(destination),
            overwrite=overwrite,
            user=_user(user) or "",
        )
        await self._unary("Rename", request, pb.RenameResponse, deadline_s=deadline_s, idempotent=False, kind="file")

    async def watch_dir(
        self,
        sandbox_id: str,
        path: PathArg,
        *,
        recursive: bool = False,
        user: str | int | None = None,
    ) -> WatchDirStream:
        """Watch directory `path` (`WatchDir`); returns once the watch is in place."""
        self._check_open()
        request = pb.WatchDirRequest(
            sandbox_id=sandbox_id, path=_path(path), recursive=recursive, user=_user(user) or ""
        )
        callable_ = self._channel.unary_stream(
            SERVICE + "WatchDir",
            request_serializer=pb.WatchDirRequest.SerializeToString,
            response_deserializer=pb.WatchDirResponse.FromString,
        )
        call = callable_(request, metadata=self._call_metadata())
        try:
            first = await call.read()
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, call="file") from None
        if not isinstance(first, pb.WatchDirResponse) or first.HasField("event"):
            call.cancel()
            raise SandboxdError("WatchDir did not start with its in-place response")
        return WatchDirStream(call)
