"""Plain typed values the client takes and returns (no protobuf objects at the boundary)."""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._pb import sandbox_pb2 as pb
from .failures import FailureKind, kind_from_wire

__all__ = [
    "SandboxStatus",
    "Resources",
    "SandboxSpec",
    "SandboxRef",
    "ExecUsage",
    "ExecResult",
    "Endpoint",
    "SandboxInfo",
    "SandboxPage",
    "SnapshotInfo",
    "PtySessionInfo",
    "DiffKind",
    "DiffEntry",
    "Stdout",
    "Stderr",
    "ExecExit",
    "ExecEvent",
    "FileType",
    "FileEntry",
    "FileEventType",
    "FileEvent",
]


class SandboxStatus(str, enum.Enum):
    """A sandbox's lifecycle state (the proto's `SandboxStatus`)."""

    UNSPECIFIED = "unspecified"
    STARTING = "starting"
    RUNNING = "running"
    STOPPED = "stopped"
    ERROR = "error"
    UNKNOWN = "unknown"
    PAUSED = "paused"
    #: Checkpointed to disk by `hibernate`, its container stopped, until `resume`.
    HIBERNATED = "hibernated"

    @classmethod
    def from_proto(cls, value: int) -> SandboxStatus:
        return _STATUS_FROM_PROTO.get(value, cls.UNKNOWN)

    def to_proto(self) -> pb.SandboxStatus:
        return _STATUS_TO_PROTO[self]


_STATUS_TO_PROTO: dict[SandboxStatus, pb.SandboxStatus] = {
    SandboxStatus.UNSPECIFIED: pb.SANDBOX_STATUS_UNSPECIFIED,
    SandboxStatus.STARTING: pb.SANDBOX_STATUS_STARTING,
    SandboxStatus.RUNNING: pb.SANDBOX_STATUS_RUNNING,
    SandboxStatus.STOPPED: pb.SANDBOX_STATUS_STOPPED,
    SandboxStatus.ERROR: pb.SANDBOX_STATUS_ERROR,
    SandboxStatus.UNKNOWN: pb.SANDBOX_STATUS_UNKNOWN,
    SandboxStatus.PAUSED: pb.SANDBOX_STATUS_PAUSED,
    SandboxStatus.HIBERNATED: pb.SANDBOX_STATUS_HIBERNATED,
}
_STATUS_FROM_PROTO: dict[int, SandboxStatus] = {int(v): k for k, v in _STATUS_TO_PROTO.items()}


@dataclass(frozen=True)
class Resources:
    """Resource limits; None means no limit (`disk_gib`, `gpu_type` are ignored by Docker)."""

    cpu: float | None = None
    memory_mib: int | None = None
    disk_gib: int | None = None
    gpu: int | None = None
    gpu_type: str | None = None

    def to_proto(self) -> pb.SandboxResources:
        msg = pb.SandboxResources()
        if self.cpu is not None:
            msg.cpu = float(self.cpu)
        if self.memory_mib is not None:
            msg.memory_mib = int(self.memory_mib)
        if self.disk_gib is not None:
            msg.disk_gib = int(self.disk_gib)
        if self.gpu is not None:
            msg.gpu = int(self.gpu)
        if self.gpu_type is not None:
            msg.gpu_type = self.gpu_type
        return msg


FileContent = bytes | str


@dataclass(frozen=True)
class VolumeMount:
    """A named volume of the service mounted in a sandbox (the proto's `VolumeMount`): made on
    first use, shared by the tenant's sandboxes that name it, never a host path."""

    name: str
    target: str
    read_only: bool = False
    subpath: str | None = None

    def to_proto(self) -> pb.VolumeMount:
        msg = pb.VolumeMount(name=self.name, target=self.target, read_only=self.read_only)
        if self.subpath is not None:
            msg.subpath = self.subpath
        return msg


@dataclass(frozen=True)
class SandboxSpec:
    """What to start (the proto's `SandboxSpec`); unset fields take the server's defaults.

    `files` are written by the server right after the sandbox starts (str is UTF-8 encoded);
    `volumes`/`run_args` (host bind mounts and `docker run` flags, the proto's
    `provider_options`) are refused unless the server's policy allows them. `network`,
    `cap_add`, `shm_size_bytes` and `named_volumes` (the proto's `volumes`) are the runtime
    requirements: a network of the service's, capabilities from the operator's allow-list,
    the size of `/dev/shm`, named volumes of the service's.
    """

    image: str = ""
    ttl_s: float | None = None
    ready_timeout_s: float | None = None
    workdir: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, FileContent] = field(default_factory=dict)
    metadata: Mapping[str, str] = field(default_factory=dict)
    resources: Resources = field(default_factory=Resources)
    entrypoint: Sequence[str] = ()
    ports: Sequence[int] = ()
    volumes: Sequence[str] = ()
    run_args: Sequence[str] = ()
    snapshot_id: str | None = None
    network: str | None = None
    cap_add: Sequence[str] = ()
    shm_size_bytes: int | None = None
    named_volumes: Sequence[VolumeMount] = ()
    pool: str | None = None
    """Claim a ready sandbox of this warm pool: only env, files, metadata and ttl_s apply; other
    fields must be unset or equal the pool's template."""
    runtime: str | None = None
    """The OCI runtime to run on, by the name the server offers (`"runsc"`: gVisor); None: the
    server's default, or the one the caller's tenant is bound to."""

    @classmethod
    def of(cls, spec: SandboxSpec | str | Mapping[str, Any]) -> SandboxSpec:
        """`spec` itself, a spec of just an image name, or `from_mapping` of a dict."""
        if isinstance(spec, SandboxSpec):
            return spec
        return cls(image=spec) if isinstance(spec, str) else cls.from_mapping(spec)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> SandboxSpec:
        """A spec from a dict shaped like this class or like NeMo Gym's spec (`resources` as a
        mapping, `provider_options: {volumes, run_args}`); an unknown key is a ValueError."""
        fields = dict(data)
        options = fields.pop("provider_options", None) or {}
        unknown_options = set(options) - {"volumes", "run_args"}
        if unknown_options:
            raise ValueError(f"unknown provider_options keys: {sorted(unknown_options)}; allowed: run_args, volumes")
        fields.setdefault("volumes", options.get("volumes", ()))
        fields.setdefault("run_args", options.get("run_args", ()))
        allowed = set(cls.__dataclass_fields__)
        unknown = set(fields) - allowed
        if unknown:
            raise ValueError(f"unknown sandbox spec keys: {sorted(unknown)}; allowed: {sorted(allowed)}")
        named = fields.get("named_volumes")
        if named:
            fields["named_volumes"] = tuple(v if isinstance(v, VolumeMount) else VolumeMount(**v) for v in named)
        resources = fields.get("resources")
        if isinstance(resources, Mapping):
            fields["resources"] = Resources(**resources)
        elif resources is None:
            fields.pop("resources", None)
        return cls(**fields)

    def to_proto(self) -> pb.SandboxSpec:
        msg = pb.SandboxSpec(
            image=self.image,
            env=dict(self.env),
            files={k: v.encode() if isinstance(v, str) else bytes(v) for k, v in self.files.items()},
            metadata=dict(self.metadata),
            resources=self.resources.to_proto(),
            entrypoint=list(self.entrypoint),
            ports=[int(p) for p in self.ports],
        )
        if self.ttl_s is not None:
            msg.ttl_s = float(self.ttl_s)
        if self.ready_timeout_s is not None:
            msg.ready_timeout_s = float(self.ready_timeout_s)
        if self.workdir is not None:
            msg.workdir = self.workdir
        if self.volumes or self.run_args:
            msg.provider_options.volumes.extend(self.volumes)
            msg.provider_options.run_args.extend(self.run_args)
        if self.snapshot_id is not None:
            msg.snapshot_id = self.snapshot_id
        if self.network is not None:
            msg.network = self.network
        msg.cap_add.extend(self.cap_add)
        if self.shm_size_bytes is not None:
            msg.shm_size_bytes = int(self.shm_size_bytes)
        msg.volumes.extend(v.to_proto() for v in self.named_volumes)
        if self.pool is not None:
            msg.pool = self.pool
        if self.runtime:
            msg.runtime = self.runtime
        return msg


@dataclass(frozen=True)
class SandboxRef:
    """The serialized descriptor of a sandbox: all another process needs to use it again."""

    sandbox_id: str
    ports: tuple[int, ...] = ()
    workdir: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    #: A capability token for this sandbox ("" when none): the owner token `Create` returned, or
    #: one from `grant`. Present it as the bearer (`Client.with_token`).
    token: str = ""

    @classmethod
    def from_proto(cls, msg: pb.SandboxRef) -> SandboxRef:
        return cls(
            sandbox_id=msg.sandbox_id,
            ports=tuple(int(p) for p in msg.ports),
            workdir=msg.workdir if msg.HasField("workdir") else None,
            metadata=dict(msg.metadata),
            token=msg.token,
        )

    def to_proto(self) -> pb.SandboxRef:
        msg = pb.SandboxRef(
            sandbox_id=self.sandbox_id, ports=list(self.ports), metadata=dict(self.metadata), token=self.token
        )
        if self.workdir is not None:
            msg.workdir = self.workdir
        return msg

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable form; `from_dict` reads it back (the token only when there is one)."""
        data: dict[str, Any] = {
            "sandbox_id": self.sandbox_id,
            "ports": list(self.ports),
            "workdir": self.workdir,
            "metadata": dict(self.metadata),
        }
        if self.token:
            data["token"] = self.token
        return data

    @classmethod
    def of(cls, ref: SandboxRef | Mapping[str, Any] | str) -> SandboxRef:
        """`ref` itself, the descriptor of a bare sandbox id, or `from_dict` of a dict."""
        if isinstance(ref, SandboxRef):
            return ref
        return cls(sandbox_id=ref) if isinstance(ref, str) else cls.from_dict(ref)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SandboxRef:
        sandbox_id = data.get("sandbox_id")
        if not isinstance(sandbox_id, str) or not sandbox_id:
            raise ValueError("a sandbox descriptor needs a non-empty string 'sandbox_id'")
        workdir = data.get("workdir")
        return cls(
            sandbox_id=sandbox_id,
            ports=tuple(int(p) for p in data.get("ports") or ()),
            workdir=str(workdir) if workdir is not None else None,
            metadata={str(k): str(v) for k, v in (data.get("metadata") or {}).items()},
            token=str(data.get("token") or ""),
        )


#: The scopes a token may have, by the names `grant` (and Gym's `serialize_handle`) take.
TOKEN_SCOPES: Mapping[str, pb.TokenScope] = {
    "owner": pb.TOKEN_SCOPE_OWNER,
    "operate": pb.TOKEN_SCOPE_OPERATE,
    "read": pb.TOKEN_SCOPE_READ,
}


@dataclass(frozen=True)
class Grant:
    """A token minted by `Grant`: present `token` as the bearer; `token_id` is for `revoke`."""

    token: str
    token_id: str
    expires_at_s: float


@dataclass(frozen=True)
class ExecUsage:
    """What a command's process tree used (sent when the server's exec engine measures it)."""

    wall_time_s: float
    user_cpu_s: float
    system_cpu_s: float
    peak_rss_bytes: int

    @classmethod
    def from_proto(cls, msg: pb.ExecUsage) -> ExecUsage:
        return cls(msg.wall_time_s, msg.user_cpu_s, msg.system_cpu_s, int(msg.peak_rss_bytes))


@dataclass(frozen=True)
class ExecResult:
    """A finished command. A failing command is a result, never an exception.

    `error_type` is None when the command ran to its exit, "timeout" when it was stopped at its
    timeout, "sandbox" when the container or daemon failed it (then `return_code` is 125).
    `failure_kind` says why it produced no result of its own (OOM_KILLED on a command the
    kernel killed for memory, SANDBOX_GONE, AGENT_LOST, ...); None when it ran to its exit.
    """

    stdout: bytes
    stderr: bytes
    return_code: int
    error_type: str | None = None
    usage: ExecUsage | None = None
    failure_kind: FailureKind | None = None

    @property
    def ok(self) -> bool:
        return self.return_code == 0 and self.error_type is None

    @property
    def stdout_text(self) -> str:
        return self.stdout.decode(errors="replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode(errors="replace")

    @classmethod
    def from_proto(cls, msg: pb.ExecResponse) -> ExecResult:
        return cls(
            stdout=bytes(msg.stdout),
            stderr=bytes(msg.stderr),
            return_code=int(msg.return_code),
            error_type=msg.error_type or None,
            usage=ExecUsage.from_proto(msg.usage) if msg.HasField("usage") else None,
            failure_kind=kind_from_wire(msg.failure_kind),
        )


@dataclass(frozen=True)
class Endpoint:
    """A host URL reaching a published port, and the headers a client must send there."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SandboxInfo:
    """One sandbox as `Client.list` sees it."""

    ref: SandboxRef
    image: str
    status: SandboxStatus
    created_at_unix_ms: int
    expires_at_unix_ms: int | None
    #: The OCI runtime it runs on (`"runc"`, `"runsc"` for gVisor); "" when the server does not say.
    runtime: str = ""

    @classmethod
    def from_proto(cls, msg: pb.SandboxInfo) -> SandboxInfo:
        return cls(
            ref=SandboxRef.from_proto(msg.sandbox),
            image=msg.image,
            status=SandboxStatus.from_proto(msg.status),
            created_at_unix_ms=int(msg.created_at_unix_ms),
            expires_at_unix_ms=int(msg.expires_at_unix_ms) if msg.HasField("expires_at_unix_ms") else None,
            runtime=msg.runtime,
        )


@dataclass(frozen=True)
class PoolInfo:
    """A warm pool as `Client.list_pools` reports it."""

    name: str
    image: str
    target: int
    max: int
    ready: int
    """Started, ready and unclaimed now."""
    claimed: int
    """Handed out from ready ones since the server started."""
    created: int
    """Started by the pool since the server started."""
    in_use: int
    """Claimed from it and still alive."""
    from_config: bool
    tenant: str
    """The tenant it belongs to; "" for everyone's."""
    recycle: bool = False
    """A closed sandbox of the pool is reset and handed back to it instead of removed."""
    recycled: int = 0
    """Handed back by a reset instead of removed, since the server started."""

    @classmethod
    def from_proto(cls, msg: pb.PoolInfo) -> PoolInfo:
        return cls(
            name=msg.name,
            image=msg.spec.image,
            target=int(msg.target),
            max=int(msg.max),
            ready=int(msg.ready),
            claimed=int(msg.claimed),
            created=int(msg.created),
            in_use=int(msg.in_use),
            from_config=bool(msg.from_config),
            tenant=msg.tenant,
            recycle=bool(msg.spec.recycle),
            recycled=int(msg.recycled),
        )


@dataclass(frozen=True)
class ResetResult:
    """What `Client.reset` did."""

    paths_restored: int
    """Root filesystem paths rolled back (added ones removed, the image's restored)."""
    processes_killed: int
    duration_ms: float
    """How long the reset took in the server."""

    @classmethod
    def from_proto(cls, msg: pb.ResetResponse) -> ResetResult:
        return cls(
            paths_restored=int(msg.paths_restored),
            processes_killed=int(msg.processes_killed),
            duration_ms=float(msg.duration_ms),
        )


@dataclass(frozen=True)
class SandboxPage:
    """One page of `Client.list`; pass `next_page_token` for the next ("" on the last)."""

    sandboxes: list[SandboxInfo]
    next_page_token: str


@dataclass(frozen=True)
class SnapshotInfo:
    """A snapshot image this service owns."""

    snapshot_id: str
    source_sandbox_id: str
    labels: Mapping[str, str]
    created_at_unix_ms: int
    size_bytes: int
    #: The OCI runtime of the sandbox it was taken from; a sandbox from it runs on it too.
    runtime: str = ""
    #: A live snapshot (`checkpoint`): a sandbox from it is restored with its processes and memory.
    live: bool = False

    @classmethod
    def from_proto(cls, msg: pb.SnapshotInfo) -> SnapshotInfo:
        return cls(
            snapshot_id=msg.snapshot_id,
            source_sandbox_id=msg.source_sandbox_id,
            labels=dict(msg.labels),
            created_at_unix_ms=int(msg.created_at_unix_ms),
            size_bytes=int(msg.size_bytes),
            runtime=msg.runtime,
            live=msg.live,
        )


@dataclass(frozen=True)
class PtySessionInfo:
    """A terminal or pipe session the sandbox's agent keeps (`Client.list_pty_sessions`)."""

    session_id: str
    command: str
    mode: str
    rows: int
    cols: int
    running: bool
    exit_code: int | None
    attached: bool
    retained_bytes: int

    @classmethod
    def from_proto(cls, msg: pb.PtySessionInfo) -> PtySessionInfo:
        return cls(
            session_id=msg.session_id,
            command=msg.command,
            mode=msg.mode,
            rows=int(msg.rows),
            cols=int(msg.cols),
            running=bool(msg.running),
            exit_code=int(msg.exit_code) if msg.HasField("exit_code") else None,
            attached=bool(msg.attached),
            retained_bytes=int(msg.retained_bytes),
        )


class DiffKind(str, enum.Enum):
    UNSPECIFIED = "unspecified"
    ADDED = "added"
    CHANGED = "changed"
    DELETED = "deleted"


_DIFF_FROM_PROTO = {
    int(pb.DIFF_KIND_ADDED): DiffKind.ADDED,
    int(pb.DIFF_KIND_CHANGED): DiffKind.CHANGED,
    int(pb.DIFF_KIND_DELETED): DiffKind.DELETED,
}


@dataclass(frozen=True)
class DiffEntry:
    """One changed path of `AsyncSandbox.diff`."""

    path: str
    kind: DiffKind

    @classmethod
    def from_proto(cls, msg: pb.DiffEntry) -> DiffEntry:
        return cls(path=msg.path, kind=_DIFF_FROM_PROTO.get(int(msg.kind), DiffKind.UNSPECIFIED))


@dataclass(frozen=True)
class Stdout:
    """Streamed exec: the next stdout bytes."""

    data: bytes


@dataclass(frozen=True)
class Stderr:
    """Streamed exec: the next stderr bytes."""

    data: bytes


@dataclass(frozen=True)
class ExecExit:
    """Streamed exec: the end (always the last event)."""

    return_code: int
    error_type: str | None = None
    usage: ExecUsage | None = None
    failure_kind: FailureKind | None = None


@dataclass(frozen=True)
class SandboxUsage:
    """What a sandbox used over its life so far (`Usage`, and what `Close` returns)."""

    wall_time_s: float
    cpu_time_s: float
    peak_memory_bytes: int
    disk_write_bytes: int
    network_rx_bytes: int
    network_tx_bytes: int
    processes_started: int

    @classmethod
    def from_proto(cls, msg: pb.SandboxUsage) -> SandboxUsage:
        return cls(
            wall_time_s=msg.wall_time_s,
            cpu_time_s=msg.cpu_time_s,
            peak_memory_bytes=int(msg.peak_memory_bytes),
            disk_write_bytes=int(msg.disk_write_bytes),
            network_rx_bytes=int(msg.network_rx_bytes),
            network_tx_bytes=int(msg.network_tx_bytes),
            processes_started=int(msg.processes_started),
        )


@dataclass(frozen=True)
class UsageReceipt:
    """What one closed sandbox used, as its `Close` returned it."""

    sandbox_id: str
    closed_at_unix_ms: int
    usage: SandboxUsage

    @classmethod
    def from_proto(cls, msg: pb.UsageReceipt) -> UsageReceipt:
        return cls(
            sandbox_id=msg.sandbox_id,
            closed_at_unix_ms=int(msg.closed_at_unix_ms),
            usage=SandboxUsage.from_proto(msg.usage),
        )


@dataclass(frozen=True)
class TenantUsage:
    """A tenant's spending over one period (`TenantUsage`): its closed sandboxes' receipts, their
    exact sums, and its budgets per period (0: none)."""

    tenant: str
    period_start_unix_ms: int
    period_end_unix_ms: int
    receipts: list[UsageReceipt]
    sandbox_seconds: float
    cpu_seconds: float
    sandbox_seconds_limit: float
    cpu_seconds_limit: float

    @classmethod
    def from_proto(cls, msg: pb.TenantUsageResponse) -> TenantUsage:
        return cls(
            tenant=msg.tenant,
            period_start_unix_ms=int(msg.period_start_unix_ms),
            period_end_unix_ms=int(msg.period_end_unix_ms),
            receipts=[UsageReceipt.from_proto(r) for r in msg.receipts],
            sandbox_seconds=msg.sandbox_seconds,
            cpu_seconds=msg.cpu_seconds,
            sandbox_seconds_limit=msg.sandbox_seconds_limit,
            cpu_seconds_limit=msg.cpu_seconds_limit,
        )


ExecEvent = Stdout | Stderr | ExecExit


@dataclass(frozen=True)
class NetworkAddress:
    """A sandbox's address on its network (`NetworkAddress`): what another sandbox dials."""

    address: str
    network: str

    @classmethod
    def from_proto(cls, msg: pb.NetworkAddressResponse) -> NetworkAddress:
        return cls(address=msg.address, network=msg.network)


@dataclass(frozen=True)
class VolumeInfo:
    """One of the service's named volumes (`ListVolumes`)."""

    name: str
    created_at_unix_ms: int = 0

    @classmethod
    def from_proto(cls, msg: pb.VolumeInfo) -> VolumeInfo:
        return cls(name=msg.name, created_at_unix_ms=msg.created_at_unix_ms)


# --- files -------------------------------------------------------------------------------------
#
# Paths come back as `str` decoded like `os.listdir` does (`os.fsdecode`: bytes that are not
# UTF-8 become surrogate escapes), so `os.fsencode(entry.path)` (or `entry.path_bytes`) is exactly
# the sandbox's bytes and passing the `str` back names the same file.


class FileType(str, enum.Enum):
    UNSPECIFIED = "unspecified"
    FILE = "file"
    DIR = "dir"
    SYMLINK = "symlink"
    OTHER = "other"


_FILE_TYPE_FROM_PROTO = {
    int(pb.FILE_TYPE_FILE): FileType.FILE,
    int(pb.FILE_TYPE_DIR): FileType.DIR,
    int(pb.FILE_TYPE_SYMLINK): FileType.SYMLINK,
    int(pb.FILE_TYPE_OTHER): FileType.OTHER,
}


@dataclass(frozen=True)
class FileEntry:
    """One path in the sandbox (`Client.list_dir`, `Client.stat`)."""

    name: str
    path: str
    type: FileType
    size: int
    mode: int
    uid: int
    gid: int
    mtime_ms: int
    link_target: str = ""

    @property
    def path_bytes(self) -> bytes:
        """The path exactly as the sandbox has it."""
        return os.fsencode(self.path)

    @classmethod
    def from_proto(cls, msg: pb.FileEntry) -> FileEntry:
        return cls(
            name=os.fsdecode(msg.name),
            path=os.fsdecode(msg.path),
            type=_FILE_TYPE_FROM_PROTO.get(int(msg.type), FileType.UNSPECIFIED),
            size=int(msg.size),
            mode=int(msg.mode),
            uid=int(msg.uid),
            gid=int(msg.gid),
            mtime_ms=int(msg.mtime),
            link_target=os.fsdecode(msg.link_target),
        )


class FileEventType(str, enum.Enum):
    UNSPECIFIED = "unspecified"
    CREATE = "create"
    MODIFY = "modify"
    REMOVE = "remove"
    RENAME = "rename"


_EVENT_FROM_PROTO = {
    int(pb.FILE_EVENT_TYPE_CREATE): FileEventType.CREATE,
    int(pb.FILE_EVENT_TYPE_MODIFY): FileEventType.MODIFY,
    int(pb.FILE_EVENT_TYPE_REMOVE): FileEventType.REMOVE,
    int(pb.FILE_EVENT_TYPE_RENAME): FileEventType.RENAME,
}


@dataclass(frozen=True)
class FileEvent:
    """One change below a watched directory (`Client.watch_dir`)."""

    type: FileEventType
    path: str
    old_path: str = ""
    is_dir: bool = False

    @classmethod
    def from_proto(cls, msg: pb.FileEvent) -> FileEvent:
        return cls(
            type=_EVENT_FROM_PROTO.get(int(msg.type), FileEventType.UNSPECIFIED),
            path=os.fsdecode(msg.path),
            old_path=os.fsdecode(msg.old_path),
            is_dir=bool(msg.is_dir),
        )
