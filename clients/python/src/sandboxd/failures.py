"""Failure kinds (`FailureKind` in the proto): why a call or a command produced no result of its
own, in a form a trainer branches on. The server sends one on exec results (`failure_kind`) and
on error statuses as a `google.rpc.ErrorInfo` detail (domain ``sandboxd``, reason the kind's
name, e.g. ``OOM_KILLED``); `errors.from_rpc_error` raises a subclass per kind.

The status details are decoded here by hand (a `google.rpc.Status` holding `Any`s): three small
messages do not justify a dependency on googleapis-common-protos.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from ._pb import sandbox_pb2 as pb

__all__ = ["FailureKind", "DOMAIN", "kind_from_wire", "status_details"]

DOMAIN = "sandboxd"
_STATUS_DETAILS_KEY = "grpc-status-details-bin"
_ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"


class FailureKind(enum.Enum):
    """One failure kind; the value is its reason (the proto name without ``FAILURE_KIND_``)."""

    TIMEOUT = "TIMEOUT"
    OOM_KILLED = "OOM_KILLED"
    SANDBOX_GONE = "SANDBOX_GONE"
    SANDBOX_PAUSED = "SANDBOX_PAUSED"
    AGENT_LOST = "AGENT_LOST"
    DAEMON_UNAVAILABLE = "DAEMON_UNAVAILABLE"
    NODE_LOST = "NODE_LOST"
    CREATE_TIMEOUT = "CREATE_TIMEOUT"
    CAPACITY = "CAPACITY"
    QUOTA = "QUOTA"
    CREATE_FAILED = "CREATE_FAILED"
    EXEC_REFUSED = "EXEC_REFUSED"
    INTERNAL = "INTERNAL"
    STARTUP_TIMEOUT = "STARTUP_TIMEOUT"
    SETUP_TIMEOUT = "SETUP_TIMEOUT"

    @property
    def is_task_fault(self) -> bool:
        """The task itself caused it (count the rollout); otherwise mask it from the loss."""
        return self in (FailureKind.TIMEOUT, FailureKind.OOM_KILLED, FailureKind.SETUP_TIMEOUT)

    @property
    def is_retry_safe(self) -> bool:
        """Calling again (with a new sandbox for a lost one) duplicates nothing."""
        return self not in (FailureKind.EXEC_REFUSED, FailureKind.INTERNAL, FailureKind.CREATE_FAILED)

    @classmethod
    def from_reason(cls, reason: str) -> FailureKind | None:
        """From an ErrorInfo reason (with or without the prefix); None for an unknown one."""
        name = reason.removeprefix("FAILURE_KIND_")
        try:
            return cls(name)
        except ValueError:
            return None


def kind_from_wire(value: int) -> FailureKind | None:
    """A result's `failure_kind` field: None for UNSPECIFIED; an unknown value reads INTERNAL."""
    if value == 0:
        return None
    try:
        name = pb.FailureKind.Name(value)
    except ValueError:
        return FailureKind.INTERNAL
    return FailureKind.from_reason(name) or FailureKind.INTERNAL


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fields(data: bytes) -> Iterable[tuple[int, int | bytes]]:
    """(field number, value) of a protobuf message: varints as int, length-delimited as bytes;
    fixed-width fields are skipped."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            yield number, value
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise ValueError("truncated field")
            yield number, data[pos : pos + length]
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")


def status_details(metadata: Iterable[tuple[str, str | bytes]] | None) -> tuple[FailureKind | None, float | None]:
    """The failure kind (ErrorInfo of domain ``sandboxd``) and retry delay in seconds
    (RetryInfo) a failed call's trailing metadata carries; (None, None) when absent or
    malformed."""
    raw = next((v for k, v in metadata or () if k == _STATUS_DETAILS_KEY and isinstance(v, bytes)), None)
    if raw is None:
        return None, None
    kind: FailureKind | None = None
    retry_after: float | None = None
    try:
        for number, any_value in _fields(raw):
            if number != 3 or not isinstance(any_value, bytes):
                continue
            parts = dict((n, v) for n, v in _fields(any_value) if isinstance(v, bytes))
            type_url, value = parts.get(1, b"").decode(errors="replace"), parts.get(2, b"")
            if type_url == _ERROR_INFO:
                info = dict((n, v) for n, v in _fields(value) if isinstance(v, bytes) and n in (1, 2))
                if info.get(2, b"").decode(errors="replace") == DOMAIN:
                    kind = FailureKind.from_reason(info.get(1, b"").decode(errors="replace"))
            elif type_url == _RETRY_INFO:
                for n, delay in _fields(value):
                    if n == 1 and isinstance(delay, bytes):
                        d = dict(_fields(delay))
                        seconds, nanos = d.get(1, 0), d.get(2, 0)
                        if isinstance(seconds, int) and isinstance(nanos, int):
                            retry_after = seconds + nanos / 1e9
    except ValueError:
        return None, None
    return kind, retry_after
