"""Lifecycle events (`Client.watch`) and resource usage (`Client.stats`) as typed values."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ._pb import sandbox_pb2 as pb
from .failures import FailureKind, kind_from_wire
from .types import SandboxInfo

__all__ = ["SandboxEvent", "SandboxEventKind", "SandboxStats"]


class SandboxEventKind(str, enum.Enum):
    """What happened to a sandbox (the proto's `SandboxEventKind`)."""

    UNSPECIFIED = "unspecified"
    CREATED = "created"
    READY = "ready"
    PAUSED = "paused"
    RESUMED = "resumed"
    STOPPED = "stopped"
    LEASE_EXPIRED = "lease_expired"
    REMOVED = "removed"
    EXISTING = "existing"

    @classmethod
    def from_proto(cls, value: int) -> SandboxEventKind:
        return _KIND_FROM_PROTO.get(value, cls.UNSPECIFIED)


_KIND_FROM_PROTO: dict[int, SandboxEventKind] = {
    pb.SANDBOX_EVENT_KIND_CREATED: SandboxEventKind.CREATED,
    pb.SANDBOX_EVENT_KIND_READY: SandboxEventKind.READY,
    pb.SANDBOX_EVENT_KIND_PAUSED: SandboxEventKind.PAUSED,
    pb.SANDBOX_EVENT_KIND_RESUMED: SandboxEventKind.RESUMED,
    pb.SANDBOX_EVENT_KIND_STOPPED: SandboxEventKind.STOPPED,
    pb.SANDBOX_EVENT_KIND_LEASE_EXPIRED: SandboxEventKind.LEASE_EXPIRED,
    pb.SANDBOX_EVENT_KIND_REMOVED: SandboxEventKind.REMOVED,
    pb.SANDBOX_EVENT_KIND_EXISTING: SandboxEventKind.EXISTING,
}


@dataclass(frozen=True)
class SandboxEvent:
    """One lifecycle event. `sandbox` is the sandbox as far as the event tells (its `status`
    is the state after the event); `exit_code` and `oom_killed` are set on STOPPED, `reason`
    (who or why) on REMOVED and LEASE_EXPIRED."""

    kind: SandboxEventKind
    sandbox_id: str
    sandbox: SandboxInfo | None
    time_unix_ms: int
    exit_code: int | None
    oom_killed: bool
    reason: str
    failure_kind: FailureKind | None = None
    """STOPPED and REMOVED: why it ended when its owner did not end it (OOM_KILLED,
    SANDBOX_GONE); None otherwise."""

    @classmethod
    def from_proto(cls, msg: pb.SandboxEvent) -> SandboxEvent:
        return cls(
            kind=SandboxEventKind.from_proto(msg.kind),
            sandbox_id=msg.sandbox_id,
            sandbox=SandboxInfo.from_proto(msg.sandbox) if msg.HasField("sandbox") else None,
            time_unix_ms=int(msg.time_unix_ms),
            exit_code=int(msg.exit_code) if msg.HasField("exit_code") else None,
            oom_killed=bool(msg.oom_killed),
            reason=msg.reason,
            failure_kind=kind_from_wire(msg.failure_kind),
        )


@dataclass(frozen=True)
class SandboxStats:
    """One reading of a sandbox's usage. Counters are cumulative since it started: a rate is
    the difference of two readings over the difference of their `read_at_unix_ns`."""

    read_at_unix_ns: int
    cpu_usage_ns: int
    cpu_limit: float
    memory_usage_bytes: int
    memory_limit_bytes: int
    memory_peak_bytes: int
    pids: int
    network_rx_bytes: int
    network_tx_bytes: int
    block_read_bytes: int
    block_write_bytes: int
    cgroup_version: str

    @classmethod
    def from_proto(cls, msg: pb.StatsResponse) -> SandboxStats:
        return cls(
            read_at_unix_ns=int(msg.read_at_unix_ns),
            cpu_usage_ns=int(msg.cpu_usage_ns),
            cpu_limit=float(msg.cpu_limit),
            memory_usage_bytes=int(msg.memory_usage_bytes),
            memory_limit_bytes=int(msg.memory_limit_bytes),
            memory_peak_bytes=int(msg.memory_peak_bytes),
            pids=int(msg.pids),
            network_rx_bytes=int(msg.network_rx_bytes),
            network_tx_bytes=int(msg.network_tx_bytes),
            block_read_bytes=int(msg.block_read_bytes),
            block_write_bytes=int(msg.block_write_bytes),
            cgroup_version=msg.cgroup_version,
        )

    def cpu_percent_since(self, earlier: SandboxStats) -> float:
        """CPU time over wall time since `earlier`, in percent of one CPU (as `docker stats`)."""
        wall = self.read_at_unix_ns - earlier.read_at_unix_ns
        if wall <= 0:
            return 0.0
        return max(0, self.cpu_usage_ns - earlier.cpu_usage_ns) / wall * 100.0
