"""`SandboxdProvider`: NeMo Gym's sandbox provider protocols over a sandboxd server.

NeMo Gym finds it through the `nemo_gym.sandbox_providers` entry point named `sandboxd`, so a
Gym config switches from its own Docker provider to a fleet of sandboxd servers by changing
the provider name::

    create_provider({"sandboxd": {"address": "sandboxd.internal:50051", "token_file": "/run/token"}})

It implements `SandboxProvider`, `ConnectableProvider`, `SupportsSandboxEndpoint`,
`SupportsSandboxPty` and `SupportsSandboxPauseResume` with Gym's own types, and behaves like
Gym's Docker provider wherever a caller can observe it (the conformance tests run one driver
against both). Importing this module needs `nemo_gym.sandbox.providers` (NeMo Gym installed).
"""

from __future__ import annotations

import contextlib
import os
import stat
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

from nemo_gym.sandbox.providers.base import (
    SandboxCreateError,
    SandboxCreateVerificationError,
    SandboxEndpoint,
    SandboxExecResult,
    SandboxHandle,
    SandboxPtyError,
    SandboxPtySpec,
    SandboxSpec,
    SandboxStatus,
)

from . import types as sd
from .client import Client
from .closing import AsyncClosing
from .connection import DEFAULT_ADDRESS, RetryPolicy, TlsConfig
from .errors import (
    CreateVerificationFailed,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    SandboxdError,
    SandboxUnavailable,
    Unimplemented,
)
from .pty import PtySession
from .sandbox import AsyncSandbox

__all__ = ["SandboxdProvider", "SandboxdPtySession"]

# Gym's exec sentinel for "the runtime, not the command, failed".
SANDBOX_RUNTIME_RETURN_CODE = 125

_STATUS = {
    sd.SandboxStatus.STARTING: SandboxStatus.STARTING,
    sd.SandboxStatus.RUNNING: SandboxStatus.RUNNING,
    sd.SandboxStatus.PAUSED: SandboxStatus.PAUSED,
    sd.SandboxStatus.STOPPED: SandboxStatus.STOPPED,
    sd.SandboxStatus.ERROR: SandboxStatus.ERROR,
}


def _read_file(path: str | None, what: str) -> bytes | None:
    if path is None:
        return None
    try:
        return Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise ValueError(f"sandboxd provider: cannot read {what} {path!r}: {exc}") from exc


def _str_list(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    raise SandboxCreateError(f"provider_options[{what!r}] must be a string or list, got {type(value).__name__}")


def _ref(handle: SandboxHandle) -> sd.SandboxRef:
    """The handle's descriptor: plain data, so a handle is usable from any event loop."""
    raw = handle.raw
    if not isinstance(raw, sd.SandboxRef):
        raise TypeError(f"handle {handle.sandbox_id!r} was not made by the sandboxd provider")
    return raw


def _text(data: bytes) -> str:
    return data.decode(errors="replace")


def _timed_out(timeout_s: float | None, stdout: str, stderr: str) -> SandboxExecResult:
    """Gym's shape of a timed-out exec (as its Docker provider: no stdout unless some was kept,
    a stderr that says it timed out, 125)."""
    if "timed out" not in stderr.lower():
        limit = f"{timeout_s:g}s" if timeout_s is not None else "the default timeout"
        stderr = f"command timed out after {limit}" + (f": {stderr}" if stderr else "")
    return SandboxExecResult(
        stdout=stdout or None, stderr=stderr, return_code=SANDBOX_RUNTIME_RETURN_CODE, error_type="timeout"
    )


class SandboxdProvider:
    """NeMo Gym provider backed by a sandboxd server.

    Config keys (all optional): `address` (host:port or http[s]://host:port, default 127.0.0.1:50051); `token` or
    `token_file` (bearer token); `tls` (bool), `root_certificates_file`,
    `client_certificate_file` + `client_key_file` (mutual TLS), `server_name_override`;
    `deadline_s` (gRPC deadline of every call; None = none); `retry_attempts` (transient
    UNAVAILABLE retries of idempotent calls, default 4).
    """

    name = "sandboxd"

    def __init__(
        self,
        *,
        address: str = DEFAULT_ADDRESS,
        token: str | None = None,
        token_file: str | None = None,
        tls: bool = False,
        root_certificates_file: str | None = None,
        client_certificate_file: str | None = None,
        client_key_file: str | None = None,
        server_name_override: str | None = None,
        deadline_s: float | None = None,
        retry_attempts: int = 4,
    ) -> None:
        if token is not None and token_file is not None:
            raise ValueError("sandboxd provider: give `token` or `token_file`, not both")
        if token_file is not None:
            token = (_read_file(token_file, "token_file") or b"").decode().strip()
            if not token:
                raise ValueError(f"sandboxd provider: token_file {token_file!r} is empty")
        tls_config: TlsConfig | bool = False
        if tls or root_certificates_file or client_certificate_file or client_key_file:
            tls_config = TlsConfig(
                root_certificates=_read_file(root_certificates_file, "root_certificates_file"),
                certificate_chain=_read_file(client_certificate_file, "client_certificate_file"),
                private_key=_read_file(client_key_file, "client_key_file"),
                server_name_override=server_name_override,
            )
        self._client = Client(
            address,
            token=token,
            tls=tls_config,
            deadline_s=deadline_s,
            retry=RetryPolicy(max_attempts=retry_attempts),
        )

    @property
    def client(self) -> Client:
        """The underlying `sandboxd.Client` (for calls Gym's protocols do not cover)."""
        return self._client

    def _handle(self, sandbox: AsyncSandbox) -> SandboxHandle:
        return SandboxHandle(sandbox_id=sandbox.sandbox_id, provider_name=self.name, raw=sandbox.ref)

    # --- SandboxProvider --------------------------------------------------------------------

    async def create(self, spec: SandboxSpec) -> SandboxHandle:
        """Start a ready sandbox. `spec.files` are left to Gym's `AsyncSandbox.start`, which
        uploads them through `upload_file` for every provider (sending them here as well would
        write each file twice)."""
        if spec.image is None:
            raise SandboxCreateError("spec.image is required for the sandboxd provider")
        options = spec.provider_options or {}
        resources = spec.resources
        request = sd.SandboxSpec(
            image=spec.image,
            ttl_s=float(spec.ttl_s) if spec.ttl_s is not None else None,
            ready_timeout_s=float(spec.ready_timeout_s) if spec.ready_timeout_s is not None else None,
            workdir=spec.workdir or None,
            env=dict(spec.env),
            metadata=dict(spec.metadata),
            resources=sd.Resources(
                cpu=getattr(resources, "cpu", None),
                memory_mib=getattr(resources, "memory_mib", None),
                disk_gib=getattr(resources, "disk_gib", None),
                gpu=getattr(resources, "gpu", None),
                gpu_type=getattr(resources, "gpu_type", None),
            ),
            entrypoint=list(spec.entrypoint or ()),
            ports=[int(p) for p in spec.ports],
            volumes=_str_list(options.get("volumes"), "volumes"),
            run_args=_str_list(options.get("run_args"), "run_args"),
        )
        try:
            sandbox = await self._client.create(request)
        except CreateVerificationFailed as exc:
            raise SandboxCreateVerificationError(f"sandboxd: {exc}") from exc
        except SandboxdError as exc:
            raise SandboxCreateError(f"sandboxd create of image {spec.image!r} failed: {exc}") from exc
        return self._handle(sandbox)

    async def exec(
        self,
        handle: SandboxHandle,
        command: str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: int | float | None = None,
        user: str | int | None = None,
        stdin: bytes | None = None,
    ) -> SandboxExecResult:
        """Run a command; never raises for command failure. A timed-out command reports
        `stdout=None` as Gym's Docker provider does; a sandbox that is gone, stopped or
        unreachable is `return_code=125, error_type="sandbox"`. Bad input raises ValueError."""
        ref = _ref(handle)
        try:
            result = await self._client.exec(
                ref.sandbox_id, command, cwd=cwd, env=env, timeout_s=timeout_s, user=user, stdin=stdin
            )
        except InvalidArgument as exc:
            raise ValueError(str(exc)) from exc
        except DeadlineExceeded as exc:  # the provider's `deadline_s` passed first
            return _timed_out(timeout_s, "", str(exc))
        except (NotFound, FailedPrecondition, SandboxUnavailable) as exc:
            return SandboxExecResult(
                stdout="", stderr=str(exc), return_code=SANDBOX_RUNTIME_RETURN_CODE, error_type="sandbox"
            )
        if result.error_type == "timeout":
            return _timed_out(timeout_s, _text(result.stdout), _text(result.stderr))
        return SandboxExecResult(
            stdout=_text(result.stdout),
            stderr=_text(result.stderr),
            return_code=result.return_code,
            error_type=result.error_type,
        )

    async def upload_file(self, handle: SandboxHandle, source_path: Path, target_path: str) -> None:
        """Upload one host file; the parent directories are created and the file is owned by
        root and keeps the host file's permission bits (as `docker cp` does)."""
        mode = stat.S_IMODE(os.stat(source_path).st_mode)
        await self._client.upload_file(_ref(handle).sandbox_id, target_path, Path(source_path), mode=mode)

    async def download_file(self, handle: SandboxHandle, source_path: str, target_path: Path) -> None:
        await self._client.download_file(_ref(handle).sandbox_id, source_path, Path(target_path))

    async def status(self, handle: SandboxHandle) -> SandboxStatus:
        """The sandbox's state; one that is gone is STOPPED, an unreachable server UNKNOWN."""
        try:
            status = await self._client.status(_ref(handle).sandbox_id)
        except NotFound:
            return SandboxStatus.STOPPED
        except SandboxdError:
            return SandboxStatus.UNKNOWN
        return _STATUS.get(status, SandboxStatus.UNKNOWN)

    async def close(self, handle: SandboxHandle) -> None:
        """Remove the sandbox (already gone counts as success)."""
        await self._client.close_sandbox(_ref(handle).sandbox_id)

    async def aclose(self) -> None:
        await self._client.close()

    # --- SupportsSandboxEndpoint ------------------------------------------------------------

    async def endpoint(self, handle: SandboxHandle, port: int) -> SandboxEndpoint:
        ref = _ref(handle)
        if port not in ref.ports:
            raise ValueError(
                f"Sandbox port {port} was not declared in SandboxSpec.ports; declared ports: {list(ref.ports)!r}"
            )
        found = await self._client.endpoint(ref.sandbox_id, port)
        return SandboxEndpoint(endpoint=found.url, headers=dict(found.headers))

    # --- ConnectableProvider ----------------------------------------------------------------

    async def serialize_handle(self, handle: SandboxHandle, *, scope: str | None = None) -> dict[str, Any]:
        """The sandbox's descriptor (id, ports, workdir, labels); `scope` is unused."""
        return _ref(handle).to_dict()

    async def connect(self, descriptor: Mapping[str, Any]) -> SandboxHandle:
        try:
            ref = sd.SandboxRef.from_dict(descriptor)
        except (ValueError, TypeError) as exc:
            raise SandboxCreateError(f"sandboxd connect: {exc}") from exc
        try:
            sandbox = await self._client.connect(ref)
        except SandboxdError as exc:
            raise SandboxCreateError(f"cannot connect to sandbox {ref.sandbox_id!r}: {exc}") from exc
        return self._handle(sandbox)

    # --- SupportsSandboxPauseResume ---------------------------------------------------------

    async def pause(self, handle: SandboxHandle) -> None:
        """Freeze the sandbox; NotImplementedError when the server has no Pause."""
        try:
            await self._client.pause(_ref(handle).sandbox_id)
        except Unimplemented as exc:
            raise NotImplementedError(f"this sandboxd server does not support pause: {exc.details}") from exc

    async def resume(self, handle: SandboxHandle) -> None:
        try:
            await self._client.resume(_ref(handle).sandbox_id)
        except Unimplemented as exc:
            raise NotImplementedError(f"this sandboxd server does not support resume: {exc.details}") from exc

    # --- SupportsSandboxPty -----------------------------------------------------------------

    async def create_pty(self, handle: SandboxHandle, spec: SandboxPtySpec) -> SandboxdPtySession:
        ref = _ref(handle)
        try:
            session = await self._client.open_pty(
                ref.sandbox_id,
                spec.command,
                cwd=spec.cwd,
                env=spec.env,
                rows=spec.rows,
                cols=spec.cols,
                user=spec.user,
                pipe=not spec.pty,
            )
        except InvalidArgument as exc:
            raise ValueError(str(exc)) from exc
        except (SandboxdError, TimeoutError) as exc:
            raise SandboxPtyError(f"sandboxd: cannot open a PTY session: {exc}") from exc
        return SandboxdPtySession(session)


@contextlib.contextmanager
def _pty_errors() -> Iterator[None]:
    """A session call's `SandboxdError` as Gym's `SandboxPtyError`."""
    try:
        yield
    except SandboxdError as exc:
        raise SandboxPtyError(str(exc)) from exc


class SandboxdPtySession(AsyncClosing):
    """Gym's `SandboxPtySession` over a `sandboxd.PtySession`: same calls, Gym's errors."""

    def __init__(self, session: PtySession) -> None:
        self._session = session
        self.session_id = session.session_id
        self.mode: str | None = session.mode

    @property
    def closed(self) -> bool:
        return self._session.closed

    async def read(self, *, timeout_s: float | None = None) -> bytes:
        with _pty_errors():
            return await self._session.read(timeout_s=timeout_s)

    async def read_stderr(self, *, timeout_s: float | None = None) -> bytes:
        with _pty_errors():
            return await self._session.read_stderr(timeout_s=timeout_s)

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
            return await self._session.wait_exit(timeout_s=timeout_s)

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
