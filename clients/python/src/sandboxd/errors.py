"""Typed exceptions for the gRPC status codes sandboxd answers with (see the proto's header).

Every exception carries the status `code` and the server's `details`, so callers can branch on
the class (``except SandboxNotFound``) or on the code. All derive from `SandboxdError`, itself a
`RuntimeError` like NeMo Gym's own sandbox errors.
"""

from __future__ import annotations

import re
from typing import Any

import grpc

from .failures import FailureKind, status_details

__all__ = [
    "SandboxdError",
    "InvalidArgument",
    "NotFound",
    "SandboxNotFound",
    "FileNotFound",
    "FailedPrecondition",
    "AlreadyExists",
    "CreateFailed",
    "CreateVerificationFailed",
    "PtySessionError",
    "SandboxUnavailable",
    "DeadlineExceeded",
    "PermissionDenied",
    "Unauthenticated",
    "ResourceExhausted",
    "Unimplemented",
    "Cancelled",
    "InternalError",
    "from_rpc_error",
    "from_parts",
    "Failure",
    "CommandTimedOut",
    "OomKilled",
    "SandboxGone",
    "SandboxPaused",
    "AgentLost",
    "DaemonUnavailable",
    "NodeLost",
    "CreateTimedOut",
    "StartupTimedOut",
    "SetupTimedOut",
    "CapacityExhausted",
    "QuotaExceeded",
    "CreateRejected",
    "ExecRefused",
    "InternalFailure",
    "FAILURE_CLASSES",
]


class SandboxdError(RuntimeError):
    """A call failed. `code` is the gRPC status code (None for failures found on this side);
    `failure_kind` the kind the server named (None when it named none); `retry_after_s` how
    long to wait before retrying a CAPACITY or QUOTA refusal."""

    code: grpc.StatusCode | None
    failure_kind: FailureKind | None = None
    retry_after_s: float | None = None

    def __init__(self, details: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(details if code is None else f"{code.name}: {details}")
        self.details = details
        self.code = code


class InvalidArgument(SandboxdError):
    """INVALID_ARGUMENT: bad input; the message names the field. Nothing was changed."""


class NotFound(SandboxdError):
    """NOT_FOUND: an unknown sandbox (or one the service does not own) or a missing file."""


class SandboxNotFound(NotFound):
    """NOT_FOUND for the sandbox itself."""


class FileNotFound(NotFound):
    """NOT_FOUND for a path inside the sandbox (upload/download)."""


class FailedPrecondition(SandboxdError):
    """FAILED_PRECONDITION: the sandbox is stopped, or create/verification/PTY failed."""


class AlreadyExists(SandboxdError):
    """ALREADY_EXISTS: a path a file call would make (MakeDir, Rename) exists."""


class CreateFailed(FailedPrecondition):
    """Create failed; the server left no container behind."""


class CreateVerificationFailed(CreateFailed):
    """The new sandbox never passed its readiness probe; it was removed."""


class PtySessionError(FailedPrecondition):
    """A terminal session failed outside a normal process exit (or was used after it ended)."""


class SandboxUnavailable(SandboxdError):
    """UNAVAILABLE: the server or its Docker daemon cannot be reached (retried on idempotent calls)."""


class DeadlineExceeded(SandboxdError):
    """DEADLINE_EXCEEDED: the call's deadline passed."""


class PermissionDenied(SandboxdError):
    """PERMISSION_DENIED: server policy forbids the request (for example host volumes)."""


class Unauthenticated(SandboxdError):
    """UNAUTHENTICATED: missing or wrong bearer token."""


class ResourceExhausted(SandboxdError):
    """RESOURCE_EXHAUSTED: a server limit was reached."""


class Unimplemented(SandboxdError):
    """UNIMPLEMENTED: this server does not offer the call (yet)."""


class Cancelled(SandboxdError):
    """CANCELLED: the call was cancelled."""


class InternalError(SandboxdError):
    """INTERNAL (or UNKNOWN/DATA_LOSS): any other server-side failure."""


class Failure(SandboxdError):
    """An error the server named a failure kind for. Every instance is also the class of its
    gRPC code (``except FailedPrecondition`` still catches a paused sandbox), so callers can
    branch on the kind (``except OomKilled``) or on `failure_kind`."""

    failure_kind: FailureKind | None = None

    @property
    def is_task_fault(self) -> bool:
        """The task itself caused it: count the rollout rather than mask it."""
        return self.failure_kind is not None and self.failure_kind.is_task_fault

    @property
    def is_retry_safe(self) -> bool:
        """Calling again (a new sandbox for a lost one) duplicates nothing."""
        return self.failure_kind is not None and self.failure_kind.is_retry_safe


class CommandTimedOut(Failure):
    """TIMEOUT: the command ran past its timeout."""

    failure_kind = FailureKind.TIMEOUT


class OomKilled(Failure):
    """OOM_KILLED: the sandbox's cgroup hit its memory cap and the kernel killed a process."""

    failure_kind = FailureKind.OOM_KILLED


class SandboxGone(Failure):
    """SANDBOX_GONE: the sandbox was removed, killed or stopped (from outside, or closed)."""

    failure_kind = FailureKind.SANDBOX_GONE


class SandboxPaused(Failure):
    """SANDBOX_PAUSED: the sandbox is frozen; resume it and call again."""

    failure_kind = FailureKind.SANDBOX_PAUSED


class AgentLost(Failure):
    """AGENT_LOST: the in-sandbox agent went away during the call."""

    failure_kind = FailureKind.AGENT_LOST


class DaemonUnavailable(Failure):
    """DAEMON_UNAVAILABLE: the container runtime could not be reached or did not answer."""

    failure_kind = FailureKind.DAEMON_UNAVAILABLE


class NodeLost(Failure):
    """NODE_LOST: the cluster node running the sandbox is lost."""

    failure_kind = FailureKind.NODE_LOST


class CreateTimedOut(Failure):
    """CREATE_TIMEOUT: a create did not become ready before its deadline."""

    failure_kind = FailureKind.CREATE_TIMEOUT


class StartupTimedOut(Failure):
    """STARTUP_TIMEOUT: the create's deadline passed while the sandbox was still starting (the
    host's fault: retry later or elsewhere)."""

    failure_kind = FailureKind.STARTUP_TIMEOUT


class SetupTimedOut(Failure):
    """SETUP_TIMEOUT: the spec's setup command did not finish within `setup_timeout_s` (the task's
    setup hung); the sandbox was removed."""

    failure_kind = FailureKind.SETUP_TIMEOUT


class CapacityExhausted(Failure):
    """CAPACITY: no room on the server; retry after `retry_after_s`."""

    failure_kind = FailureKind.CAPACITY


class QuotaExceeded(Failure):
    """QUOTA: the tenant's quota is used up; retry after closing sandboxes."""

    failure_kind = FailureKind.QUOTA


class CreateRejected(Failure):
    """CREATE_FAILED: the create failed for its spec or image (missing image, bad entrypoint)."""

    failure_kind = FailureKind.CREATE_FAILED


class ExecRefused(Failure):
    """EXEC_REFUSED: the command could not start as asked (missing cwd, unknown user)."""

    failure_kind = FailureKind.EXEC_REFUSED


class InternalFailure(Failure):
    """INTERNAL: a failure of the service or runtime no other kind names."""

    failure_kind = FailureKind.INTERNAL


FAILURE_CLASSES: dict[FailureKind, type[Failure]] = {
    cls.failure_kind: cls
    for cls in (
        CommandTimedOut,
        OomKilled,
        SandboxGone,
        SandboxPaused,
        AgentLost,
        DaemonUnavailable,
        NodeLost,
        CreateTimedOut,
        CapacityExhausted,
        QuotaExceeded,
        CreateRejected,
        ExecRefused,
        InternalFailure,
        StartupTimedOut,
        SetupTimedOut,
    )
    if cls.failure_kind is not None
}

_COMBINED: dict[tuple[type[SandboxdError], type[Failure]], type[SandboxdError]] = {}


def _with_kind(code_cls: type[SandboxdError], kind: FailureKind) -> type[SandboxdError]:
    """The class that is both `code_cls` and the kind's class (made once per pair)."""
    kind_cls = FAILURE_CLASSES[kind]
    key = (code_cls, kind_cls)
    if key not in _COMBINED:
        _COMBINED[key] = type(f"{kind_cls.__name__}{code_cls.__name__}", (kind_cls, code_cls), {})
    return _COMBINED[key]


_BY_CODE: dict[grpc.StatusCode, type[SandboxdError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: SandboxNotFound,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.UNAVAILABLE: SandboxUnavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNIMPLEMENTED: Unimplemented,
    grpc.StatusCode.CANCELLED: Cancelled,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
}

# The server's wording for an unknown sandbox (`sandbox "ID" not found`); any other NOT_FOUND
# from a file call is about the path.
_SANDBOX_NOT_FOUND = re.compile(r'^sandbox ".*" not found$')
_VERIFICATION = "readiness verification failed"


def from_parts(code_value: int, details: str, kind: FailureKind | None) -> SandboxdError:
    """The typed exception for an error sent as data (a `CreateBatch` item): its gRPC code's
    class, with its failure kind's."""
    code = next((c for c in grpc.StatusCode if c.value[0] == code_value), grpc.StatusCode.UNKNOWN)
    cls = _BY_CODE.get(code, InternalError)
    if kind is not None:
        cls = _with_kind(cls, kind)
    return cls(details, code)


def from_rpc_error(error: grpc.RpcError, *, call: str = "") -> SandboxdError:
    """The typed exception for a failed call. `call` ("create", "file", "pty") refines codes
    whose meaning depends on the call."""
    code_fn = getattr(error, "code", None)
    details_fn = getattr(error, "details", None)
    code = code_fn() if callable(code_fn) else grpc.StatusCode.UNKNOWN
    details = (details_fn() if callable(details_fn) else None) or str(error)
    cls = _BY_CODE.get(code, InternalError)
    if code == grpc.StatusCode.NOT_FOUND and call == "file" and not _SANDBOX_NOT_FOUND.match(details):
        cls = FileNotFound
    elif code == grpc.StatusCode.FAILED_PRECONDITION and call == "create":
        cls = CreateVerificationFailed if details.startswith(_VERIFICATION) else CreateFailed
    elif code == grpc.StatusCode.FAILED_PRECONDITION and call == "pty":
        cls = PtySessionError
    if code == grpc.StatusCode.UNIMPLEMENTED:
        details = f"{details} (this sandboxd server does not implement the call)"
    trailing: Any = getattr(error, "trailing_metadata", None)
    kind, retry_after = status_details(trailing() if callable(trailing) else None)
    if kind is not None:
        cls = _with_kind(cls, kind)
    exc = cls(details, code)
    exc.retry_after_s = retry_after
    return exc
