"""Typed exceptions for the gRPC status codes sandboxd answers with (see the proto's header).

Every exception carries the status `code` and the server's `details`, so callers can branch on
the class (``except SandboxNotFound``) or on the code. All derive from `SandboxdError`, itself a
`RuntimeError` like NeMo Gym's own sandbox errors.
"""

from __future__ import annotations

import re

import grpc

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
]


class SandboxdError(RuntimeError):
    """A call failed. `code` is the gRPC status code (None for failures found on this side)."""

    code: grpc.StatusCode | None

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
    return cls(details, code)
