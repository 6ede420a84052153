"""`SandboxdProvider`: NeMo Gym's sandbox provider protocols over a sandboxd server.

NeMo Gym finds it through the `nemo_gym.sandbox_providers` entry point named `sandboxd`, so a
Gym config switches from its own Docker provider to a fleet of sandboxd servers by changing
the provider name::

    create_provider({"sandboxd": {"address": "sandboxd.internal:50051", "token_file": "/run/token"}})

It implements `SandboxProvider`, `ConnectableProvider`, `SupportsSandboxEndpoint`,
`SupportsSandboxPty`, `SupportsSandboxPtyAttach`, `SupportsSandboxPauseResume`,
`SupportsSandboxSnapshot`, `SupportsSandboxPortForwarding`, `SupportsSandboxBackgroundServices`,
`SupportsSandboxNetwork`, `SupportsSandboxRuntimeRequirements` and
`SupportsSandboxSharedStorage` (those three in `gym_runtime`) with Gym's own types, and
behaves like Gym's Docker provider wherever a caller can observe it (the conformance tests run
one driver against both). Importing this module needs `nemo_gym.sandbox.providers`
(NeMo Gym installed), and works with every Gym the package may meet: nemo-gym 0.7.0 and Gym's
main branch before and after `SandboxStatus.PAUSED`. What differs between them is detected here,
never assumed at import (see `PAUSED`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import os
import posixpath
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nemo_gym.sandbox.providers import base as _gym_base
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
from .failures import FailureKind
from .gym_pty import SandboxdPtySession
from .gym_runtime import RuntimeCapabilities, runtime_spec_fields
from .processes import ProcessExited, ProcessOutput
from .sandbox import AsyncSandbox
from .tree import TreeDownloadError, download_tree

__all__ = ["PAUSED", "SandboxdProvider", "SandboxdPtySession"]

# Gym's exec sentinel for "the runtime, not the command, failed".
SANDBOX_RUNTIME_RETURN_CODE = 125
# What Gym's Docker provider returns when `docker exec` cannot start the command (a missing
# working directory, an unknown user): the OCI runtime's exit code, its text in stdout.
EXEC_START_FAILED_RETURN_CODE = 126
# A program ended by SIGKILL, which is also how the server ends a session whose sandbox was removed.
_SIGKILL_EXIT = 128 + 9

# The agent binary inside every sandbox the server made (a read-only bind mount).
AGENT_IN_SANDBOX = "/.sandboxd/agent"

PAUSED = getattr(SandboxStatus, "PAUSED", SandboxStatus.RUNNING)
"""A paused sandbox's Gym status: `SandboxStatus.PAUSED` where the installed Gym has it (0.7.0,
main since its pause/resume work); `RUNNING` on a Gym without it, which is what Gym's own
Docker provider reports for a paused container there."""

_STATUS = {
    sd.SandboxStatus.STARTING: SandboxStatus.STARTING,
    sd.SandboxStatus.RUNNING: SandboxStatus.RUNNING,
    sd.SandboxStatus.PAUSED: PAUSED,
    # Hibernated (gVisor: checkpointed to disk by `pause`): Gym's paused, woken by `resume`.
    sd.SandboxStatus.HIBERNATED: PAUSED,
    sd.SandboxStatus.STOPPED: SandboxStatus.STOPPED,
    sd.SandboxStatus.ERROR: SandboxStatus.ERROR,
}

# How long a session that ended by SIGKILL waits for its sandbox's status to show a removal.
_GONE_WAIT_S = 2.0
_GONE_POLL_S = 0.1
# The label `snapshot(handle, name=...)` keeps Gym's snapshot name under.
SNAPSHOT_NAME_LABEL = "nemo-gym.name"

# The server's words (agent and docker engines) for a command that could not be started: its
# message for a missing working directory starts with `cwd "…"`; the others name the user.
_MISSING_CWD_PREFIX = "cwd "
_UNKNOWN_USER_MARKERS = ("unable to find user", "cannot switch to uid", "no matching entries in passwd")


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


def _start_failure(stderr: str) -> bool:
    """Whether a `sandbox` exec failure is a command that could not start (missing cwd, unknown
    user) rather than a sandbox that failed."""
    low = stderr.lower()
    return low.startswith(_MISSING_CWD_PREFIX) or any(marker in low for marker in _UNKNOWN_USER_MARKERS)


def _names_a_directory(exc: SandboxdError) -> bool:
    return "is a directory" in exc.details


# Whether the installed Gym's exec result carries `duration_ms` (measured in the sandbox), and
# whether it has `SandboxResourceUsage(wall_time_s, cpu_time_s, peak_memory_mib)`.
_HAS_DURATION = "duration_ms" in {f.name for f in dataclasses.fields(SandboxExecResult)}
_GYM_RESOURCE_USAGE: Any = getattr(_gym_base, "SandboxResourceUsage", None)
# Close-time usage kept per sandbox for `resource_usage` after `close` (the oldest dropped).
_KEPT_USAGE = 4096


def gym_error_type(kind: FailureKind | None, fallback: str | None) -> str | None:
    """Gym's `error_type` for a failure kind, in Gym's own words so that it is the trainer's
    mask: the task's failures are "timeout" and "oom_killed" (count the rollout), every failure
    of the infrastructure is "sandbox" (as Gym's Docker provider says; mask it). `fallback`
    when the server named no kind."""
    if kind is None:
        return fallback
    if kind is FailureKind.TIMEOUT:
        return "timeout"
    if kind is FailureKind.OOM_KILLED:
        return "oom_killed"
    return "sandbox"


def _exec_result(**fields: Any) -> SandboxExecResult:
    """Gym's exec result, with `duration_ms` only where the installed Gym has the field."""
    duration_ms = fields.pop("duration_ms", None)
    if _HAS_DURATION:
        fields["duration_ms"] = duration_ms
    return SandboxExecResult(**fields)


def _timed_out(timeout_s: float | None, stdout: str, stderr: str) -> SandboxExecResult:
    """Gym's shape of a timed-out exec (as its Docker provider: no stdout unless some was kept,
    a stderr that says it timed out, 125)."""
    if "timed out" not in stderr.lower():
        limit = f"{timeout_s:g}s" if timeout_s is not None else "the default timeout"
        stderr = f"command timed out after {limit}" + (f": {stderr}" if stderr else "")
    return SandboxExecResult(
        stdout=stdout or None, stderr=stderr, return_code=SANDBOX_RUNTIME_RETURN_CODE, error_type="timeout"
    )


class SandboxdProvider(RuntimeCapabilities):
    """NeMo Gym provider backed by a sandboxd server.

    Config keys (all optional): `address` (host:port or http[s]://host:port, default 127.0.0.1:50051); `token` or
    `token_file` (bearer token); `tls` (bool), `root_certificates_file`,
    `client_certificate_file` + `client_key_file` (mutual TLS), `server_name_override`;
    `deadline_s` (gRPC deadline of every call; None = none); `retry_attempts` (transient
    UNAVAILABLE retries of idempotent calls, default 4); `network` (a server network every
    sandbox joins, so they reach each other by address; a spec's `provider_options["network"]`
    wins); `shared_volume` (the server volume `shared_volume_options` mounts);
    `pty_detach_timeout_s` (how long a PTY session this provider opened outlives a stream that
    went away without `close`, waiting for `attach_pty`; default 600; None: it ends with its
    stream and `run_detached` runs attached).
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
        network: str | None = None,
        shared_volume: str | None = None,
        pty_detach_timeout_s: float | None = 600.0,
    ) -> None:
        self._network = network
        self._shared_volume = shared_volume
        if pty_detach_timeout_s is not None and not pty_detach_timeout_s > 0:
            raise ValueError(f"sandboxd provider: pty_detach_timeout_s must be > 0 or None, got {pty_detach_timeout_s}")
        self._pty_detach_timeout_s = pty_detach_timeout_s
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
        # Sandboxes this provider was asked to close: a PTY session of one ends as "sandbox gone".
        self._closing: set[str] = set()
        self._closed_usage: dict[str, sd.SandboxUsage] = {}
        # Clients presenting a token a connected descriptor carried (`serialize_handle(scope=)`).
        self._token_clients: dict[str, Client] = {}

    @property
    def client(self) -> Client:
        """The underlying `sandboxd.Client` (for calls Gym's protocols do not cover)."""
        return self._client

    def _client_for(self, handle: SandboxHandle) -> Client:
        """The client a handle is driven through: the one presenting the token its descriptor
        carried when it came from `connect`, else the provider's own."""
        token = _ref(handle).token
        return self._token_clients.get(token, self._client) if token else self._client

    def _handle(self, sandbox: AsyncSandbox) -> SandboxHandle:
        return SandboxHandle(sandbox_id=sandbox.sandbox_id, provider_name=self.name, raw=sandbox.ref)

    # --- SandboxProvider --------------------------------------------------------------------

    async def create(self, spec: SandboxSpec) -> SandboxHandle:
        """Start a ready sandbox, from `spec.image` or from a snapshot
        (`provider_options["snapshot_id"]`, as Gym's checkpointer restores one). `spec.files`
        are left to Gym's `AsyncSandbox.start`, which uploads them through `upload_file` for
        every provider (sending them here as well would write each file twice)."""
        options = spec.provider_options or {}
        snapshot_id = options.get("snapshot_id")
        if snapshot_id is not None and not isinstance(snapshot_id, str):
            raise SandboxCreateError(
                f"provider_options['snapshot_id'] must be a string, got {type(snapshot_id).__name__}"
            )
        if spec.image is None and snapshot_id is None:
            raise SandboxCreateError(
                "spec.image is required for the sandboxd provider (or provider_options['snapshot_id'])"
            )
        resources = spec.resources
        try:
            metadata, runtime = runtime_spec_fields(spec.metadata, options, self._network)
        except ValueError as exc:
            raise SandboxCreateError(f"sandboxd: {exc}") from exc
        request = sd.SandboxSpec(
            image=spec.image or "",
            ttl_s=float(spec.ttl_s) if spec.ttl_s is not None else None,
            ready_timeout_s=float(spec.ready_timeout_s) if spec.ready_timeout_s is not None else None,
            workdir=spec.workdir or None,
            env=dict(spec.env),
            metadata=metadata,
            resources=sd.Resources(
                cpu=getattr(resources, "cpu", None),
                memory_mib=getattr(resources, "memory_mib", None),
                disk_gib=getattr(resources, "disk_gib", None),
                gpu=getattr(resources, "gpu", None),
                gpu_type=getattr(resources, "gpu_type", None),
            ),
            entrypoint=list(spec.entrypoint or ()),
            ports=[int(p) for p in getattr(spec, "ports", ())],
            run_args=_str_list(options.get("run_args"), "run_args"),
            snapshot_id=snapshot_id,
            **runtime,
        )
        source = f"image {spec.image!r}" if snapshot_id is None else f"snapshot {snapshot_id!r}"
        try:
            sandbox = await self._client.create(request)
        except CreateVerificationFailed as exc:
            raise SandboxCreateVerificationError(f"sandboxd: {exc}") from exc
        except SandboxdError as exc:
            raise SandboxCreateError(f"sandboxd create from {source} failed: {exc}") from exc
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
        """Run a command; never raises for command failure. As Gym's Docker provider: a
        timed-out command reports `stdout=None`; a missing `cwd` or unknown `user` is 126 with
        the reason in stdout; a sandbox that is gone, stopped or unreachable is
        `return_code=125, error_type="sandbox"`. Bad input raises ValueError."""
        ref = _ref(handle)
        try:
            result = await self._client_for(handle).exec(
                ref.sandbox_id, command, cwd=cwd, env=env, timeout_s=timeout_s, user=user, stdin=stdin
            )
        except InvalidArgument as exc:
            raise ValueError(str(exc)) from exc
        except DeadlineExceeded as exc:  # the provider's `deadline_s` passed first
            return _timed_out(timeout_s, "", str(exc))
        except (NotFound, FailedPrecondition, SandboxUnavailable) as exc:
            return SandboxExecResult(
                stdout="",
                stderr=str(exc),
                return_code=SANDBOX_RUNTIME_RETURN_CODE,
                error_type=gym_error_type(exc.failure_kind, "sandbox"),
            )
        duration_ms = None if result.usage is None else result.usage.wall_time_s * 1000.0
        if result.error_type == "timeout":
            return _timed_out(timeout_s, _text(result.stdout), _text(result.stderr))
        if result.error_type == "sandbox" and _start_failure(_text(result.stderr)):
            return _exec_result(
                stdout=_text(result.stdout) + _text(result.stderr),
                stderr="",
                return_code=EXEC_START_FAILED_RETURN_CODE,
                error_type=None,
                duration_ms=duration_ms,
            )
        return _exec_result(
            stdout=_text(result.stdout),
            stderr=_text(result.stderr),
            return_code=result.return_code,
            error_type=gym_error_type(result.failure_kind, result.error_type),
            duration_ms=duration_ms,
        )

    async def upload_file(self, handle: SandboxHandle, source_path: Path, target_path: str) -> None:
        """Upload one host file, as `docker cp` does: the parent directories are created, the
        file is owned by root and keeps the host file's permission bits, and a target that is an
        existing directory receives the file inside it (under the source's name). A source that
        cannot be read raises RuntimeError, as Gym's Docker provider does."""
        source = Path(source_path)
        sandbox_id = _ref(handle).sandbox_id
        try:
            info = os.stat(source)
        except OSError as exc:
            raise RuntimeError(f"sandboxd upload to {target_path!r} failed: {source}: {exc.strerror}") from exc
        if not stat.S_ISREG(info.st_mode):
            raise RuntimeError(f"sandboxd upload to {target_path!r} failed: {source} is not a regular file")
        mode = stat.S_IMODE(info.st_mode)
        try:
            await self._client_for(handle).upload_file(sandbox_id, target_path, source, mode=mode)
        except InvalidArgument as exc:
            if not _names_a_directory(exc):
                raise
            inside = posixpath.join(target_path, source.name)
            await self._client_for(handle).upload_file(sandbox_id, inside, source, mode=mode)
        except OSError as exc:  # the source vanished or became unreadable after the stat
            raise RuntimeError(f"sandboxd upload to {target_path!r} failed: {source}: {exc.strerror}") from exc

    async def download_file(self, handle: SandboxHandle, source_path: str, target_path: Path) -> None:
        """Download a sandbox file, or (as `docker cp` does) a directory's whole tree: to
        `target_path`, or inside it when it is an existing directory."""
        sandbox_id = _ref(handle).sandbox_id
        target = Path(target_path)
        # A file onto an existing local directory goes inside it, as with `docker cp`.
        file_target = target / posixpath.basename(source_path) if target.is_dir() else target
        try:
            await self._client_for(handle).download_file(sandbox_id, source_path, file_target)
        except InvalidArgument as exc:
            if not _names_a_directory(exc):
                raise
            try:
                await download_tree(self._client, sandbox_id, source_path, target)
            except TreeDownloadError as tree_exc:
                raise RuntimeError(f"sandboxd download of directory {source_path!r} failed: {tree_exc}") from tree_exc

    async def status(self, handle: SandboxHandle) -> SandboxStatus:
        """The sandbox's state; one that is gone is STOPPED, an unreachable server UNKNOWN, a
        paused one `PAUSED` (see there)."""
        try:
            status = await self._client_for(handle).status(_ref(handle).sandbox_id)
        except NotFound:
            return SandboxStatus.STOPPED
        except SandboxdError:
            return SandboxStatus.UNKNOWN
        return _STATUS.get(status, SandboxStatus.UNKNOWN)

    async def close(self, handle: SandboxHandle) -> None:
        """Remove the sandbox (already gone counts as success)."""
        sandbox_id = _ref(handle).sandbox_id
        self._closing.add(sandbox_id)
        usage = await self._client_for(handle).close_sandbox(sandbox_id)
        if usage is not None:
            if len(self._closed_usage) >= _KEPT_USAGE:
                self._closed_usage.pop(next(iter(self._closed_usage)))
            self._closed_usage[sandbox_id] = usage

    async def reset(self, handle: SandboxHandle) -> None:
        """Put the sandbox back to the state it was created in, in place (sandboxd's `Reset`;
        not a Gym protocol method): an episode boundary without a close and a create."""
        await self._client_for(handle).reset(_ref(handle).sandbox_id)

    async def resource_usage(self, handle: SandboxHandle) -> Any:
        """What the sandbox used (so far, or over its life once closed): Gym's
        `SandboxResourceUsage(wall_time_s, cpu_time_s, peak_memory_mib)` when the installed Gym
        has it, else sandboxd's `SandboxUsage` (which has those and more)."""
        sandbox_id = _ref(handle).sandbox_id
        usage = self._closed_usage.get(sandbox_id)
        if usage is None:
            usage = await self._client_for(handle).usage(sandbox_id)
        if _GYM_RESOURCE_USAGE is None:
            return usage
        return _GYM_RESOURCE_USAGE(
            wall_time_s=usage.wall_time_s,
            cpu_time_s=usage.cpu_time_s,
            peak_memory_mib=usage.peak_memory_bytes / (1024 * 1024),
        )

    async def aclose(self) -> None:
        for client in self._token_clients.values():
            await client.close()
        self._token_clients.clear()
        await self._client.close()

    # --- SupportsSandboxEndpoint ------------------------------------------------------------

    async def endpoint(self, handle: SandboxHandle, port: int) -> SandboxEndpoint:
        ref = _ref(handle)
        if port not in ref.ports:
            raise ValueError(
                f"Sandbox port {port} was not declared in SandboxSpec.ports; declared ports: {list(ref.ports)!r}"
            )
        found = await self._client_for(handle).endpoint(ref.sandbox_id, port)
        return SandboxEndpoint(endpoint=found.url, headers=dict(found.headers))

    # --- ConnectableProvider ----------------------------------------------------------------

    async def serialize_handle(self, handle: SandboxHandle, *, scope: str | None = None) -> dict[str, Any]:
        """The sandbox's descriptor (id, ports, workdir, labels, and the token it carries). With
        `scope` ("owner", "operate" or "read"; Gym's lease scopes) the server mints a token of
        that scope (`Grant`, never wider than this provider's own access) and the descriptor
        carries it instead: whoever connects with it may do only that."""
        ref = _ref(handle)
        if scope is None:
            return ref.to_dict()
        if scope not in sd.TOKEN_SCOPES:
            raise ValueError(f"sandboxd provider: scope must be one of {sorted(sd.TOKEN_SCOPES)} (got {scope!r})")
        grant = await self._client_for(handle).grant(ref.sandbox_id, scope)
        return dataclasses.replace(ref, token=grant.token).to_dict()

    async def connect(self, descriptor: Mapping[str, Any]) -> SandboxHandle:
        """Re-attach from a descriptor; one carrying a token is driven with that token."""
        try:
            ref = sd.SandboxRef.from_dict(descriptor)
        except (ValueError, TypeError) as exc:
            raise SandboxCreateError(f"sandboxd connect: {exc}") from exc
        client = self._client
        if ref.token:
            client = self._token_clients.get(ref.token) or self._client.with_token(ref.token)
            self._token_clients[ref.token] = client
        try:
            sandbox = await client.connect(ref)
        except SandboxdError as exc:
            raise SandboxCreateError(f"cannot connect to sandbox {ref.sandbox_id!r}: {exc}") from exc
        return self._handle(sandbox)

    # --- SupportsSandboxPauseResume ---------------------------------------------------------

    async def pause(self, handle: SandboxHandle) -> None:
        """Pause the sandbox keeping its processes and their memory. On a runtime that can
        checkpoint (gVisor's runsc offered with `checkpoint: true`) this is `Hibernate`: the
        processes and memory go to disk and the host's memory is freed. Where the server refuses
        that (FAILED_PRECONDITION: runc, or a gVisor sandbox that cannot be checkpointed now) it
        is `Pause`: the processes are frozen with their memory in place. `resume` wakes either;
        `status` says `PAUSED` for both. NotImplementedError when the server has neither."""
        client, sandbox_id = self._client_for(handle), _ref(handle).sandbox_id
        with contextlib.suppress(FailedPrecondition, Unimplemented):
            await client.hibernate(sandbox_id)
            return
        try:
            await client.pause(sandbox_id)
        except Unimplemented as exc:
            raise NotImplementedError(f"this sandboxd server does not support pause: {exc.details}") from exc

    async def resume(self, handle: SandboxHandle) -> None:
        """Wake a paused or hibernated sandbox (its processes go on where they were)."""
        try:
            await self._client_for(handle).resume(_ref(handle).sandbox_id)
        except Unimplemented as exc:
            raise NotImplementedError(f"this sandboxd server does not support resume: {exc.details}") from exc

    # --- SupportsSandboxSnapshot ------------------------------------------------------------

    async def snapshot(self, handle: SandboxHandle, *, name: str | None = None) -> str:
        """Snapshot the sandbox's filesystem (it keeps running) and return the snapshot id,
        which `create` takes as `provider_options["snapshot_id"]`. `name` is kept as the
        snapshot's `nemo-gym.name` label."""
        labels = {SNAPSHOT_NAME_LABEL: name} if name else None
        info = await self._client_for(handle).snapshot(_ref(handle).sandbox_id, labels=labels)
        return info.snapshot_id

    async def delete_snapshot(self, snapshot_id: str) -> None:
        """Delete a snapshot; one already gone counts as success (as `close` does). A snapshot a
        sandbox still runs from is refused (`FailedPrecondition`, naming the sandboxes)."""
        try:
            await self._client.delete_snapshot(snapshot_id)
        except NotFound:
            pass

    # --- SupportsSandboxPty -----------------------------------------------------------------

    async def create_pty(self, handle: SandboxHandle, spec: SandboxPtySpec) -> SandboxdPtySession:
        ref = _ref(handle)
        options: dict[str, Any] = {
            "cwd": spec.cwd,
            "env": spec.env,
            "rows": spec.rows,
            "cols": spec.cols,
            "user": spec.user,
            "pipe": not spec.pty,
        }
        detachable = self._pty_detach_timeout_s is not None
        try:
            try:
                session = await self._client_for(handle).open_pty(
                    ref.sandbox_id, spec.command, detach_timeout_s=self._pty_detach_timeout_s, **options
                )
            except Unimplemented:
                # The server runs this sandbox's terminals through docker exec: the session
                # lives with its stream.
                detachable = False
                session = await self._client_for(handle).open_pty(ref.sandbox_id, spec.command, **options)
        except InvalidArgument as exc:
            raise ValueError(str(exc)) from exc
        except (SandboxdError, TimeoutError) as exc:
            raise SandboxPtyError(f"sandboxd: cannot open a PTY session: {exc}") from exc
        return self._pty_session(session, ref.sandbox_id, owner=True, detachable=detachable)

    # --- SupportsSandboxPtyAttach -------------------------------------------------------------

    async def attach_pty(
        self, handle: SandboxHandle, session_id: str, *, takeover: bool = True, since: int | None = None
    ) -> SandboxdPtySession:
        """Re-attach to a session by id, from any process: its retained output from byte offset
        `since` (0 or None: all that is still retained) replays before live output.
        `takeover` evicts the current holder (its session then fails with `SandboxPtyError`);
        without it, a held session fails. Closing the returned session detaches it; the
        session lives on for its owner."""
        ref = _ref(handle)
        try:
            session = await self._client.attach_pty(ref.sandbox_id, session_id, takeover=takeover, since=since or 0)
        except ValueError:
            raise
        except (SandboxdError, TimeoutError) as exc:
            raise SandboxPtyError(f"sandboxd: cannot attach to PTY session {session_id}: {exc}") from exc
        return self._pty_session(session, ref.sandbox_id, owner=False, detachable=True)

    def _pty_session(self, session: Any, sandbox_id: str, *, owner: bool, detachable: bool) -> SandboxdPtySession:
        async def sandbox_gone(exit_code: int | None) -> bool:
            return await self._sandbox_gone(sandbox_id, exit_code)

        session_id = session.session_id

        async def reattach(since: int) -> Any:
            return await self._client.attach_pty(sandbox_id, session_id, takeover=True, since=since)

        return SandboxdPtySession(
            session, sandbox_id, sandbox_gone, owner=owner, reattach=reattach if detachable else None
        )

    async def _sandbox_gone(self, sandbox_id: str, exit_code: int | None) -> bool:
        """Whether a session that just ended did so because its sandbox went away: closed through
        this provider, or no longer running. The server ends such a session as SIGKILL (137)
        while the removal may still be under way, so for that code the answer waits up to
        `_GONE_WAIT_S` for the status to settle."""
        if sandbox_id in self._closing:
            return True
        waited = 0.0
        while True:
            try:
                status = await self._client.status(sandbox_id)
            except NotFound:
                return True
            except SandboxdError:
                return False  # the server cannot say: the session's own end stands
            if status in (sd.SandboxStatus.STOPPED, sd.SandboxStatus.ERROR):
                return True
            if exit_code not in (_SIGKILL_EXIT, None) or waited >= _GONE_WAIT_S:
                return False
            await asyncio.sleep(_GONE_POLL_S)
            waited += _GONE_POLL_S

    # --- SupportsSandboxPortForwarding ------------------------------------------------------

    def validate_port_forwarding(self) -> None:
        """Always available: the sandbox's agent listens and connects inside the sandbox, so
        no network setting or tool in the image is needed (a server on `exec.engine: docker`
        refuses `forward_ports` with FailedPrecondition, raised as NotImplementedError)."""
        return None

    async def forward_ports(
        self, handle: SandboxHandle, target_address: str, ports: tuple[int, ...], *, ready_file: str
    ) -> None:
        """As Gym's Docker provider: loopback listeners inside the sandbox on each of `ports`,
        every connection spliced to `target_address` on the same port (a Compose service sharing
        another's network), until cancelled; `ready_file` (a path in the sandbox) is written once
        every listener is up. Runs as a process of the sandbox's agent (`sandboxd-agent relay`),
        so the image needs no Python or socat. Raises RuntimeError if the relay ends."""
        address = str(ipaddress.ip_address(target_address))
        checked = SandboxSpec(ports=tuple(ports)).ports
        if not checked:
            raise ValueError("forward_ports needs at least one port")
        sandbox_id = _ref(handle).sandbox_id
        argv = [AGENT_IN_SANDBOX, "relay", "--ready-file", ready_file, address, *(str(p) for p in checked)]
        try:
            process_id = await self._client.start_process(sandbox_id, argv=argv, user=0)
        except FailedPrecondition as exc:
            raise NotImplementedError(f"sandboxd cannot forward ports here: {exc.details}") from exc
        output = bytearray()
        try:
            async for event in self._client.attach_process(sandbox_id, process_id):
                if isinstance(event, ProcessOutput):
                    output += event.data[-4096:]
                elif isinstance(event, ProcessExited):
                    text = output.decode(errors="replace").strip()
                    raise RuntimeError(f"sandboxd forwarding exited ({event.exit_code}): {text}")
            raise RuntimeError("sandboxd forwarding stream ended before the relay did")
        finally:
            # Cancelled (or failed): the relay must not outlive the collection.
            with contextlib.suppress(SandboxdError):
                await asyncio.shield(self._client.signal_process(sandbox_id, process_id, "SIGKILL"))

    # --- SupportsSandboxBackgroundServices --------------------------------------------------

    async def exec_with_background_services(
        self,
        handle: SandboxHandle,
        command: str,
        *,
        cwd: str | None = None,
        timeout_s: int | float | None = None,
    ) -> SandboxExecResult:
        """Run `command` as a supervised process of the sandbox's agent rather than an exec:
        what it starts in the background is reparented to the agent and keeps running after
        the command returns (no client, no exec session holds it). Returns when the command
        itself exits; at `timeout_s` its process group is killed and the result is `exec`'s
        timeout shape (125, `error_type="timeout"`, the output kept so far)."""
        sandbox_id = _ref(handle).sandbox_id
        try:
            process_id = await self._client.start_process(sandbox_id, command, cwd=cwd)
        except InvalidArgument as exc:
            raise ValueError(str(exc)) from exc
        except FailedPrecondition as exc:
            if "exec.engine: docker" in str(exc):
                return await self.exec(handle, command, cwd=cwd, timeout_s=timeout_s)
            return SandboxExecResult(
                stdout="", stderr=str(exc), return_code=SANDBOX_RUNTIME_RETURN_CODE, error_type="sandbox"
            )
        except (NotFound, SandboxUnavailable) as exc:
            return SandboxExecResult(
                stdout="", stderr=str(exc), return_code=SANDBOX_RUNTIME_RETURN_CODE, error_type="sandbox"
            )
        stdout, stderr = bytearray(), bytearray()

        async def collect() -> int:
            async for event in self._client.attach_process(sandbox_id, process_id):
                if isinstance(event, ProcessOutput):
                    (stderr if event.stderr else stdout).extend(event.data)
                elif isinstance(event, ProcessExited):
                    return event.exit_code
            raise SandboxUnavailable("the process stream ended before the process did")

        try:
            code = await asyncio.wait_for(collect(), timeout_s)
        except TimeoutError:
            with contextlib.suppress(SandboxdError):
                await self._client.signal_process(sandbox_id, process_id, "SIGKILL")
            return _timed_out(timeout_s, _text(bytes(stdout)), _text(bytes(stderr)))
        except SandboxdError as exc:
            return SandboxExecResult(
                stdout=_text(bytes(stdout)),
                stderr=_text(bytes(stderr)) + str(exc),
                return_code=SANDBOX_RUNTIME_RETURN_CODE,
                error_type="sandbox",
            )
        return SandboxExecResult(stdout=_text(bytes(stdout)), stderr=_text(bytes(stderr)), return_code=code)
