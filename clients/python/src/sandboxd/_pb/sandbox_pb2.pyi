from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SandboxStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SANDBOX_STATUS_UNSPECIFIED: _ClassVar[SandboxStatus]
    SANDBOX_STATUS_STARTING: _ClassVar[SandboxStatus]
    SANDBOX_STATUS_RUNNING: _ClassVar[SandboxStatus]
    SANDBOX_STATUS_STOPPED: _ClassVar[SandboxStatus]
    SANDBOX_STATUS_ERROR: _ClassVar[SandboxStatus]
    SANDBOX_STATUS_UNKNOWN: _ClassVar[SandboxStatus]
    SANDBOX_STATUS_PAUSED: _ClassVar[SandboxStatus]
    SANDBOX_STATUS_HIBERNATED: _ClassVar[SandboxStatus]

class DiffKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DIFF_KIND_UNSPECIFIED: _ClassVar[DiffKind]
    DIFF_KIND_ADDED: _ClassVar[DiffKind]
    DIFF_KIND_CHANGED: _ClassVar[DiffKind]
    DIFF_KIND_DELETED: _ClassVar[DiffKind]

class TokenScope(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOKEN_SCOPE_UNSPECIFIED: _ClassVar[TokenScope]
    TOKEN_SCOPE_OWNER: _ClassVar[TokenScope]
    TOKEN_SCOPE_OPERATE: _ClassVar[TokenScope]
    TOKEN_SCOPE_READ: _ClassVar[TokenScope]

class SandboxEventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SANDBOX_EVENT_KIND_UNSPECIFIED: _ClassVar[SandboxEventKind]
    SANDBOX_EVENT_KIND_CREATED: _ClassVar[SandboxEventKind]
    SANDBOX_EVENT_KIND_READY: _ClassVar[SandboxEventKind]
    SANDBOX_EVENT_KIND_PAUSED: _ClassVar[SandboxEventKind]
    SANDBOX_EVENT_KIND_RESUMED: _ClassVar[SandboxEventKind]
    SANDBOX_EVENT_KIND_STOPPED: _ClassVar[SandboxEventKind]
    SANDBOX_EVENT_KIND_LEASE_EXPIRED: _ClassVar[SandboxEventKind]
    SANDBOX_EVENT_KIND_REMOVED: _ClassVar[SandboxEventKind]
    SANDBOX_EVENT_KIND_EXISTING: _ClassVar[SandboxEventKind]
    SANDBOX_EVENT_KIND_HIBERNATED: _ClassVar[SandboxEventKind]

class EgressAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EGRESS_ACTION_UNSPECIFIED: _ClassVar[EgressAction]
    EGRESS_ACTION_ALLOW: _ClassVar[EgressAction]
    EGRESS_ACTION_DENY: _ClassVar[EgressAction]

class ImagePrefetchState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    IMAGE_PREFETCH_STATE_UNSPECIFIED: _ClassVar[ImagePrefetchState]
    IMAGE_PREFETCH_STATE_PRESENT: _ClassVar[ImagePrefetchState]
    IMAGE_PREFETCH_STATE_PULLING: _ClassVar[ImagePrefetchState]
    IMAGE_PREFETCH_STATE_COPYING: _ClassVar[ImagePrefetchState]
    IMAGE_PREFETCH_STATE_READY: _ClassVar[ImagePrefetchState]
    IMAGE_PREFETCH_STATE_FAILED: _ClassVar[ImagePrefetchState]

class FileType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FILE_TYPE_UNSPECIFIED: _ClassVar[FileType]
    FILE_TYPE_FILE: _ClassVar[FileType]
    FILE_TYPE_DIR: _ClassVar[FileType]
    FILE_TYPE_SYMLINK: _ClassVar[FileType]
    FILE_TYPE_OTHER: _ClassVar[FileType]

class FileEventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FILE_EVENT_TYPE_UNSPECIFIED: _ClassVar[FileEventType]
    FILE_EVENT_TYPE_CREATE: _ClassVar[FileEventType]
    FILE_EVENT_TYPE_MODIFY: _ClassVar[FileEventType]
    FILE_EVENT_TYPE_REMOVE: _ClassVar[FileEventType]
    FILE_EVENT_TYPE_RENAME: _ClassVar[FileEventType]

class FailureKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FAILURE_KIND_UNSPECIFIED: _ClassVar[FailureKind]
    FAILURE_KIND_TIMEOUT: _ClassVar[FailureKind]
    FAILURE_KIND_OOM_KILLED: _ClassVar[FailureKind]
    FAILURE_KIND_SANDBOX_GONE: _ClassVar[FailureKind]
    FAILURE_KIND_SANDBOX_PAUSED: _ClassVar[FailureKind]
    FAILURE_KIND_AGENT_LOST: _ClassVar[FailureKind]
    FAILURE_KIND_DAEMON_UNAVAILABLE: _ClassVar[FailureKind]
    FAILURE_KIND_NODE_LOST: _ClassVar[FailureKind]
    FAILURE_KIND_CREATE_TIMEOUT: _ClassVar[FailureKind]
    FAILURE_KIND_CAPACITY: _ClassVar[FailureKind]
    FAILURE_KIND_QUOTA: _ClassVar[FailureKind]
    FAILURE_KIND_CREATE_FAILED: _ClassVar[FailureKind]
    FAILURE_KIND_EXEC_REFUSED: _ClassVar[FailureKind]
    FAILURE_KIND_INTERNAL: _ClassVar[FailureKind]
    FAILURE_KIND_STARTUP_TIMEOUT: _ClassVar[FailureKind]
    FAILURE_KIND_SETUP_TIMEOUT: _ClassVar[FailureKind]
SANDBOX_STATUS_UNSPECIFIED: SandboxStatus
SANDBOX_STATUS_STARTING: SandboxStatus
SANDBOX_STATUS_RUNNING: SandboxStatus
SANDBOX_STATUS_STOPPED: SandboxStatus
SANDBOX_STATUS_ERROR: SandboxStatus
SANDBOX_STATUS_UNKNOWN: SandboxStatus
SANDBOX_STATUS_PAUSED: SandboxStatus
SANDBOX_STATUS_HIBERNATED: SandboxStatus
DIFF_KIND_UNSPECIFIED: DiffKind
DIFF_KIND_ADDED: DiffKind
DIFF_KIND_CHANGED: DiffKind
DIFF_KIND_DELETED: DiffKind
TOKEN_SCOPE_UNSPECIFIED: TokenScope
TOKEN_SCOPE_OWNER: TokenScope
TOKEN_SCOPE_OPERATE: TokenScope
TOKEN_SCOPE_READ: TokenScope
SANDBOX_EVENT_KIND_UNSPECIFIED: SandboxEventKind
SANDBOX_EVENT_KIND_CREATED: SandboxEventKind
SANDBOX_EVENT_KIND_READY: SandboxEventKind
SANDBOX_EVENT_KIND_PAUSED: SandboxEventKind
SANDBOX_EVENT_KIND_RESUMED: SandboxEventKind
SANDBOX_EVENT_KIND_STOPPED: SandboxEventKind
SANDBOX_EVENT_KIND_LEASE_EXPIRED: SandboxEventKind
SANDBOX_EVENT_KIND_REMOVED: SandboxEventKind
SANDBOX_EVENT_KIND_EXISTING: SandboxEventKind
SANDBOX_EVENT_KIND_HIBERNATED: SandboxEventKind
EGRESS_ACTION_UNSPECIFIED: EgressAction
EGRESS_ACTION_ALLOW: EgressAction
EGRESS_ACTION_DENY: EgressAction
IMAGE_PREFETCH_STATE_UNSPECIFIED: ImagePrefetchState
IMAGE_PREFETCH_STATE_PRESENT: ImagePrefetchState
IMAGE_PREFETCH_STATE_PULLING: ImagePrefetchState
IMAGE_PREFETCH_STATE_COPYING: ImagePrefetchState
IMAGE_PREFETCH_STATE_READY: ImagePrefetchState
IMAGE_PREFETCH_STATE_FAILED: ImagePrefetchState
FILE_TYPE_UNSPECIFIED: FileType
FILE_TYPE_FILE: FileType
FILE_TYPE_DIR: FileType
FILE_TYPE_SYMLINK: FileType
FILE_TYPE_OTHER: FileType
FILE_EVENT_TYPE_UNSPECIFIED: FileEventType
FILE_EVENT_TYPE_CREATE: FileEventType
FILE_EVENT_TYPE_MODIFY: FileEventType
FILE_EVENT_TYPE_REMOVE: FileEventType
FILE_EVENT_TYPE_RENAME: FileEventType
FAILURE_KIND_UNSPECIFIED: FailureKind
FAILURE_KIND_TIMEOUT: FailureKind
FAILURE_KIND_OOM_KILLED: FailureKind
FAILURE_KIND_SANDBOX_GONE: FailureKind
FAILURE_KIND_SANDBOX_PAUSED: FailureKind
FAILURE_KIND_AGENT_LOST: FailureKind
FAILURE_KIND_DAEMON_UNAVAILABLE: FailureKind
FAILURE_KIND_NODE_LOST: FailureKind
FAILURE_KIND_CREATE_TIMEOUT: FailureKind
FAILURE_KIND_CAPACITY: FailureKind
FAILURE_KIND_QUOTA: FailureKind
FAILURE_KIND_CREATE_FAILED: FailureKind
FAILURE_KIND_EXEC_REFUSED: FailureKind
FAILURE_KIND_INTERNAL: FailureKind
FAILURE_KIND_STARTUP_TIMEOUT: FailureKind
FAILURE_KIND_SETUP_TIMEOUT: FailureKind

class SandboxSpec(_message.Message):
    __slots__ = ("image", "ttl_s", "ready_timeout_s", "workdir", "env", "files", "metadata", "resources", "entrypoint", "ports", "provider_options", "snapshot_id", "pool", "network_policy", "network", "cap_add", "shm_size_bytes", "volumes", "runtime", "setup", "setup_timeout_s")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class FilesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    READY_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    ENTRYPOINT_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    NETWORK_POLICY_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    CAP_ADD_FIELD_NUMBER: _ClassVar[int]
    SHM_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    VOLUMES_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    SETUP_FIELD_NUMBER: _ClassVar[int]
    SETUP_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    image: str
    ttl_s: float
    ready_timeout_s: float
    workdir: str
    env: _containers.ScalarMap[str, str]
    files: _containers.ScalarMap[str, bytes]
    metadata: _containers.ScalarMap[str, str]
    resources: SandboxResources
    entrypoint: _containers.RepeatedScalarFieldContainer[str]
    ports: _containers.RepeatedScalarFieldContainer[int]
    provider_options: ProviderOptions
    snapshot_id: str
    pool: str
    network_policy: NetworkPolicy
    network: str
    cap_add: _containers.RepeatedScalarFieldContainer[str]
    shm_size_bytes: int
    volumes: _containers.RepeatedCompositeFieldContainer[VolumeMount]
    runtime: str
    setup: str
    setup_timeout_s: float
    def __init__(self, image: _Optional[str] = ..., ttl_s: _Optional[float] = ..., ready_timeout_s: _Optional[float] = ..., workdir: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., files: _Optional[_Mapping[str, bytes]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., resources: _Optional[_Union[SandboxResources, _Mapping]] = ..., entrypoint: _Optional[_Iterable[str]] = ..., ports: _Optional[_Iterable[int]] = ..., provider_options: _Optional[_Union[ProviderOptions, _Mapping]] = ..., snapshot_id: _Optional[str] = ..., pool: _Optional[str] = ..., network_policy: _Optional[_Union[NetworkPolicy, _Mapping]] = ..., network: _Optional[str] = ..., cap_add: _Optional[_Iterable[str]] = ..., shm_size_bytes: _Optional[int] = ..., volumes: _Optional[_Iterable[_Union[VolumeMount, _Mapping]]] = ..., runtime: _Optional[str] = ..., setup: _Optional[str] = ..., setup_timeout_s: _Optional[float] = ...) -> None: ...

class VolumeMount(_message.Message):
    __slots__ = ("name", "target", "read_only", "subpath")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    SUBPATH_FIELD_NUMBER: _ClassVar[int]
    name: str
    target: str
    read_only: bool
    subpath: str
    def __init__(self, name: _Optional[str] = ..., target: _Optional[str] = ..., read_only: _Optional[bool] = ..., subpath: _Optional[str] = ...) -> None: ...

class SandboxResources(_message.Message):
    __slots__ = ("cpu", "memory_mib", "disk_gib", "gpu", "gpu_type")
    CPU_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    DISK_GIB_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    GPU_TYPE_FIELD_NUMBER: _ClassVar[int]
    cpu: float
    memory_mib: int
    disk_gib: int
    gpu: int
    gpu_type: str
    def __init__(self, cpu: _Optional[float] = ..., memory_mib: _Optional[int] = ..., disk_gib: _Optional[int] = ..., gpu: _Optional[int] = ..., gpu_type: _Optional[str] = ...) -> None: ...

class ProviderOptions(_message.Message):
    __slots__ = ("volumes", "run_args")
    VOLUMES_FIELD_NUMBER: _ClassVar[int]
    RUN_ARGS_FIELD_NUMBER: _ClassVar[int]
    volumes: _containers.RepeatedScalarFieldContainer[str]
    run_args: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, volumes: _Optional[_Iterable[str]] = ..., run_args: _Optional[_Iterable[str]] = ...) -> None: ...

class SandboxRef(_message.Message):
    __slots__ = ("sandbox_id", "ports", "workdir", "metadata", "token")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    ports: _containers.RepeatedScalarFieldContainer[int]
    workdir: str
    metadata: _containers.ScalarMap[str, str]
    token: str
    def __init__(self, sandbox_id: _Optional[str] = ..., ports: _Optional[_Iterable[int]] = ..., workdir: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., token: _Optional[str] = ...) -> None: ...

class CreateRequest(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: SandboxSpec
    def __init__(self, spec: _Optional[_Union[SandboxSpec, _Mapping]] = ...) -> None: ...

class CreateResponse(_message.Message):
    __slots__ = ("sandbox",)
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: SandboxRef
    def __init__(self, sandbox: _Optional[_Union[SandboxRef, _Mapping]] = ...) -> None: ...

class ConnectRequest(_message.Message):
    __slots__ = ("sandbox",)
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: SandboxRef
    def __init__(self, sandbox: _Optional[_Union[SandboxRef, _Mapping]] = ...) -> None: ...

class ConnectResponse(_message.Message):
    __slots__ = ("sandbox", "image", "shell")
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    SHELL_FIELD_NUMBER: _ClassVar[int]
    sandbox: SandboxRef
    image: str
    shell: str
    def __init__(self, sandbox: _Optional[_Union[SandboxRef, _Mapping]] = ..., image: _Optional[str] = ..., shell: _Optional[str] = ...) -> None: ...

class ExecRequest(_message.Message):
    __slots__ = ("sandbox_id", "command", "cwd", "env", "timeout_s", "user", "stdin")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    command: str
    cwd: str
    env: _containers.ScalarMap[str, str]
    timeout_s: float
    user: str
    stdin: bytes
    def __init__(self, sandbox_id: _Optional[str] = ..., command: _Optional[str] = ..., cwd: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., timeout_s: _Optional[float] = ..., user: _Optional[str] = ..., stdin: _Optional[bytes] = ...) -> None: ...

class ExecResponse(_message.Message):
    __slots__ = ("stdout", "stderr", "return_code", "error_type", "usage", "failure_kind")
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    RETURN_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_KIND_FIELD_NUMBER: _ClassVar[int]
    stdout: bytes
    stderr: bytes
    return_code: int
    error_type: str
    usage: ExecUsage
    failure_kind: FailureKind
    def __init__(self, stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., return_code: _Optional[int] = ..., error_type: _Optional[str] = ..., usage: _Optional[_Union[ExecUsage, _Mapping]] = ..., failure_kind: _Optional[_Union[FailureKind, str]] = ...) -> None: ...

class ExecUsage(_message.Message):
    __slots__ = ("wall_time_s", "user_cpu_s", "system_cpu_s", "peak_rss_bytes")
    WALL_TIME_S_FIELD_NUMBER: _ClassVar[int]
    USER_CPU_S_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_CPU_S_FIELD_NUMBER: _ClassVar[int]
    PEAK_RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    wall_time_s: float
    user_cpu_s: float
    system_cpu_s: float
    peak_rss_bytes: int
    def __init__(self, wall_time_s: _Optional[float] = ..., user_cpu_s: _Optional[float] = ..., system_cpu_s: _Optional[float] = ..., peak_rss_bytes: _Optional[int] = ...) -> None: ...

class ExecExit(_message.Message):
    __slots__ = ("return_code", "error_type", "usage", "message", "failure_kind")
    RETURN_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_KIND_FIELD_NUMBER: _ClassVar[int]
    return_code: int
    error_type: str
    usage: ExecUsage
    message: str
    failure_kind: FailureKind
    def __init__(self, return_code: _Optional[int] = ..., error_type: _Optional[str] = ..., usage: _Optional[_Union[ExecUsage, _Mapping]] = ..., message: _Optional[str] = ..., failure_kind: _Optional[_Union[FailureKind, str]] = ...) -> None: ...

class ExecStreamResponse(_message.Message):
    __slots__ = ("stdout", "stderr", "exit")
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    stdout: bytes
    stderr: bytes
    exit: ExecExit
    def __init__(self, stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., exit: _Optional[_Union[ExecExit, _Mapping]] = ...) -> None: ...

class UploadHeader(_message.Message):
    __slots__ = ("sandbox_id", "path", "mode", "size", "xattrs")
    class XattrsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    XATTRS_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    path: str
    mode: int
    size: int
    xattrs: _containers.ScalarMap[str, bytes]
    def __init__(self, sandbox_id: _Optional[str] = ..., path: _Optional[str] = ..., mode: _Optional[int] = ..., size: _Optional[int] = ..., xattrs: _Optional[_Mapping[str, bytes]] = ...) -> None: ...

class UploadRequest(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: UploadHeader
    chunk: bytes
    def __init__(self, header: _Optional[_Union[UploadHeader, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class UploadResponse(_message.Message):
    __slots__ = ("bytes_written",)
    BYTES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    bytes_written: int
    def __init__(self, bytes_written: _Optional[int] = ...) -> None: ...

class DownloadRequest(_message.Message):
    __slots__ = ("sandbox_id", "path")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    path: str
    def __init__(self, sandbox_id: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class DownloadResponse(_message.Message):
    __slots__ = ("chunk",)
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    chunk: bytes
    def __init__(self, chunk: _Optional[bytes] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ("sandbox_id",)
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("status", "runtime")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    status: SandboxStatus
    runtime: str
    def __init__(self, status: _Optional[_Union[SandboxStatus, str]] = ..., runtime: _Optional[str] = ...) -> None: ...

class EndpointRequest(_message.Message):
    __slots__ = ("sandbox_id", "port")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    port: int
    def __init__(self, sandbox_id: _Optional[str] = ..., port: _Optional[int] = ...) -> None: ...

class EndpointResponse(_message.Message):
    __slots__ = ("endpoint", "headers")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    endpoint: str
    headers: _containers.ScalarMap[str, str]
    def __init__(self, endpoint: _Optional[str] = ..., headers: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CloseRequest(_message.Message):
    __slots__ = ("sandbox_id",)
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ...) -> None: ...

class CloseResponse(_message.Message):
    __slots__ = ("usage",)
    USAGE_FIELD_NUMBER: _ClassVar[int]
    usage: SandboxUsage
    def __init__(self, usage: _Optional[_Union[SandboxUsage, _Mapping]] = ...) -> None: ...

class PtyOpen(_message.Message):
    __slots__ = ("sandbox_id", "command", "cwd", "env", "rows", "cols", "user", "pipe", "detach_timeout_s")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    COLS_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    PIPE_FIELD_NUMBER: _ClassVar[int]
    DETACH_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    command: str
    cwd: str
    env: _containers.ScalarMap[str, str]
    rows: int
    cols: int
    user: str
    pipe: bool
    detach_timeout_s: float
    def __init__(self, sandbox_id: _Optional[str] = ..., command: _Optional[str] = ..., cwd: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., rows: _Optional[int] = ..., cols: _Optional[int] = ..., user: _Optional[str] = ..., pipe: _Optional[bool] = ..., detach_timeout_s: _Optional[float] = ...) -> None: ...

class PtyResize(_message.Message):
    __slots__ = ("rows", "cols")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    COLS_FIELD_NUMBER: _ClassVar[int]
    rows: int
    cols: int
    def __init__(self, rows: _Optional[int] = ..., cols: _Optional[int] = ...) -> None: ...

class PtySignal(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class PtyClose(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PtyRequest(_message.Message):
    __slots__ = ("open", "input", "resize", "signal", "close", "attach", "detach", "stdin_end")
    OPEN_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    RESIZE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    ATTACH_FIELD_NUMBER: _ClassVar[int]
    DETACH_FIELD_NUMBER: _ClassVar[int]
    STDIN_END_FIELD_NUMBER: _ClassVar[int]
    open: PtyOpen
    input: bytes
    resize: PtyResize
    signal: PtySignal
    close: PtyClose
    attach: PtyAttach
    detach: PtyDetach
    stdin_end: PtyStdinEnd
    def __init__(self, open: _Optional[_Union[PtyOpen, _Mapping]] = ..., input: _Optional[bytes] = ..., resize: _Optional[_Union[PtyResize, _Mapping]] = ..., signal: _Optional[_Union[PtySignal, _Mapping]] = ..., close: _Optional[_Union[PtyClose, _Mapping]] = ..., attach: _Optional[_Union[PtyAttach, _Mapping]] = ..., detach: _Optional[_Union[PtyDetach, _Mapping]] = ..., stdin_end: _Optional[_Union[PtyStdinEnd, _Mapping]] = ...) -> None: ...

class PtyOpened(_message.Message):
    __slots__ = ("session_id", "mode", "offset")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    mode: str
    offset: int
    def __init__(self, session_id: _Optional[str] = ..., mode: _Optional[str] = ..., offset: _Optional[int] = ...) -> None: ...

class PtyExit(_message.Message):
    __slots__ = ("exit_code",)
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    exit_code: int
    def __init__(self, exit_code: _Optional[int] = ...) -> None: ...

class PtyResponse(_message.Message):
    __slots__ = ("opened", "output", "stderr", "exit")
    OPENED_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    opened: PtyOpened
    output: bytes
    stderr: bytes
    exit: PtyExit
    def __init__(self, opened: _Optional[_Union[PtyOpened, _Mapping]] = ..., output: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., exit: _Optional[_Union[PtyExit, _Mapping]] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ("labels", "statuses", "page_size", "page_token")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    LABELS_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.ScalarMap[str, str]
    statuses: _containers.RepeatedScalarFieldContainer[SandboxStatus]
    page_size: int
    page_token: str
    def __init__(self, labels: _Optional[_Mapping[str, str]] = ..., statuses: _Optional[_Iterable[_Union[SandboxStatus, str]]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class SandboxInfo(_message.Message):
    __slots__ = ("sandbox", "image", "status", "created_at_unix_ms", "expires_at_unix_ms", "runtime")
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    sandbox: SandboxRef
    image: str
    status: SandboxStatus
    created_at_unix_ms: int
    expires_at_unix_ms: int
    runtime: str
    def __init__(self, sandbox: _Optional[_Union[SandboxRef, _Mapping]] = ..., image: _Optional[str] = ..., status: _Optional[_Union[SandboxStatus, str]] = ..., created_at_unix_ms: _Optional[int] = ..., expires_at_unix_ms: _Optional[int] = ..., runtime: _Optional[str] = ...) -> None: ...

class ListResponse(_message.Message):
    __slots__ = ("sandboxes", "next_page_token")
    SANDBOXES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    sandboxes: _containers.RepeatedCompositeFieldContainer[SandboxInfo]
    next_page_token: str
    def __init__(self, sandboxes: _Optional[_Iterable[_Union[SandboxInfo, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class SetTimeoutRequest(_message.Message):
    __slots__ = ("sandbox_id", "ttl_s")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    ttl_s: float
    def __init__(self, sandbox_id: _Optional[str] = ..., ttl_s: _Optional[float] = ...) -> None: ...

class SetTimeoutResponse(_message.Message):
    __slots__ = ("expires_at_unix_ms",)
    EXPIRES_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    expires_at_unix_ms: int
    def __init__(self, expires_at_unix_ms: _Optional[int] = ...) -> None: ...

class SnapshotRequest(_message.Message):
    __slots__ = ("sandbox_id", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    labels: _containers.ScalarMap[str, str]
    def __init__(self, sandbox_id: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class SnapshotInfo(_message.Message):
    __slots__ = ("snapshot_id", "source_sandbox_id", "labels", "created_at_unix_ms", "size_bytes", "runtime", "live")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    LIVE_FIELD_NUMBER: _ClassVar[int]
    snapshot_id: str
    source_sandbox_id: str
    labels: _containers.ScalarMap[str, str]
    created_at_unix_ms: int
    size_bytes: int
    runtime: str
    live: bool
    def __init__(self, snapshot_id: _Optional[str] = ..., source_sandbox_id: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., created_at_unix_ms: _Optional[int] = ..., size_bytes: _Optional[int] = ..., runtime: _Optional[str] = ..., live: _Optional[bool] = ...) -> None: ...

class SnapshotResponse(_message.Message):
    __slots__ = ("snapshot",)
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    snapshot: SnapshotInfo
    def __init__(self, snapshot: _Optional[_Union[SnapshotInfo, _Mapping]] = ...) -> None: ...

class ListSnapshotsRequest(_message.Message):
    __slots__ = ("labels",)
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    LABELS_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.ScalarMap[str, str]
    def __init__(self, labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ListSnapshotsResponse(_message.Message):
    __slots__ = ("snapshots",)
    SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    snapshots: _containers.RepeatedCompositeFieldContainer[SnapshotInfo]
    def __init__(self, snapshots: _Optional[_Iterable[_Union[SnapshotInfo, _Mapping]]] = ...) -> None: ...

class DeleteSnapshotRequest(_message.Message):
    __slots__ = ("snapshot_id",)
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    snapshot_id: str
    def __init__(self, snapshot_id: _Optional[str] = ...) -> None: ...

class DeleteSnapshotResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ForkRequest(_message.Message):
    __slots__ = ("sandbox_id", "count", "labels", "live", "snapshot_id")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    LIVE_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    count: int
    labels: _containers.ScalarMap[str, str]
    live: bool
    snapshot_id: str
    def __init__(self, sandbox_id: _Optional[str] = ..., count: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., live: _Optional[bool] = ..., snapshot_id: _Optional[str] = ...) -> None: ...

class ForkResponse(_message.Message):
    __slots__ = ("sandboxes", "snapshot_id")
    SANDBOXES_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    sandboxes: _containers.RepeatedCompositeFieldContainer[SandboxRef]
    snapshot_id: str
    def __init__(self, sandboxes: _Optional[_Iterable[_Union[SandboxRef, _Mapping]]] = ..., snapshot_id: _Optional[str] = ...) -> None: ...

class DiffRequest(_message.Message):
    __slots__ = ("sandbox_id", "path_prefix")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_PREFIX_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    path_prefix: str
    def __init__(self, sandbox_id: _Optional[str] = ..., path_prefix: _Optional[str] = ...) -> None: ...

class DiffEntry(_message.Message):
    __slots__ = ("path", "kind")
    PATH_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    path: str
    kind: DiffKind
    def __init__(self, path: _Optional[str] = ..., kind: _Optional[_Union[DiffKind, str]] = ...) -> None: ...

class DiffResponse(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[DiffEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[DiffEntry, _Mapping]]] = ...) -> None: ...

class PauseRequest(_message.Message):
    __slots__ = ("sandbox_id",)
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ...) -> None: ...

class PauseResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ResumeRequest(_message.Message):
    __slots__ = ("sandbox_id",)
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ...) -> None: ...

class ResumeResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CheckpointRequest(_message.Message):
    __slots__ = ("sandbox_id", "labels", "leave_running")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    LEAVE_RUNNING_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    labels: _containers.ScalarMap[str, str]
    leave_running: bool
    def __init__(self, sandbox_id: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., leave_running: _Optional[bool] = ...) -> None: ...

class CheckpointResponse(_message.Message):
    __slots__ = ("snapshot",)
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    snapshot: SnapshotInfo
    def __init__(self, snapshot: _Optional[_Union[SnapshotInfo, _Mapping]] = ...) -> None: ...

class HibernateRequest(_message.Message):
    __slots__ = ("sandbox_id",)
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ...) -> None: ...

class HibernateResponse(_message.Message):
    __slots__ = ("checkpoint_bytes", "memory_freed_bytes")
    CHECKPOINT_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FREED_BYTES_FIELD_NUMBER: _ClassVar[int]
    checkpoint_bytes: int
    memory_freed_bytes: int
    def __init__(self, checkpoint_bytes: _Optional[int] = ..., memory_freed_bytes: _Optional[int] = ...) -> None: ...

class GrantRequest(_message.Message):
    __slots__ = ("sandbox_id", "scope", "ttl_s")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    scope: TokenScope
    ttl_s: float
    def __init__(self, sandbox_id: _Optional[str] = ..., scope: _Optional[_Union[TokenScope, str]] = ..., ttl_s: _Optional[float] = ...) -> None: ...

class GrantResponse(_message.Message):
    __slots__ = ("token", "token_id", "expires_at_s")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_S_FIELD_NUMBER: _ClassVar[int]
    token: str
    token_id: str
    expires_at_s: float
    def __init__(self, token: _Optional[str] = ..., token_id: _Optional[str] = ..., expires_at_s: _Optional[float] = ...) -> None: ...

class RevokeRequest(_message.Message):
    __slots__ = ("token_id",)
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    token_id: str
    def __init__(self, token_id: _Optional[str] = ...) -> None: ...

class RevokeResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LogsRequest(_message.Message):
    __slots__ = ("sandbox_id", "follow", "tail_lines")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    TAIL_LINES_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    follow: bool
    tail_lines: int
    def __init__(self, sandbox_id: _Optional[str] = ..., follow: _Optional[bool] = ..., tail_lines: _Optional[int] = ...) -> None: ...

class LogsResponse(_message.Message):
    __slots__ = ("stdout", "stderr")
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    stdout: bytes
    stderr: bytes
    def __init__(self, stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ...) -> None: ...

class NetworkAddressRequest(_message.Message):
    __slots__ = ("sandbox_id",)
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ...) -> None: ...

class NetworkAddressResponse(_message.Message):
    __slots__ = ("address", "network")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    address: str
    network: str
    def __init__(self, address: _Optional[str] = ..., network: _Optional[str] = ...) -> None: ...

class ListVolumesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class VolumeInfo(_message.Message):
    __slots__ = ("name", "created_at_unix_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    created_at_unix_ms: int
    def __init__(self, name: _Optional[str] = ..., created_at_unix_ms: _Optional[int] = ...) -> None: ...

class ListVolumesResponse(_message.Message):
    __slots__ = ("volumes",)
    VOLUMES_FIELD_NUMBER: _ClassVar[int]
    volumes: _containers.RepeatedCompositeFieldContainer[VolumeInfo]
    def __init__(self, volumes: _Optional[_Iterable[_Union[VolumeInfo, _Mapping]]] = ...) -> None: ...

class DeleteVolumeRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteVolumeResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("labels", "statuses", "include_existing")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    LABELS_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_EXISTING_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.ScalarMap[str, str]
    statuses: _containers.RepeatedScalarFieldContainer[SandboxStatus]
    include_existing: bool
    def __init__(self, labels: _Optional[_Mapping[str, str]] = ..., statuses: _Optional[_Iterable[_Union[SandboxStatus, str]]] = ..., include_existing: _Optional[bool] = ...) -> None: ...

class SandboxEvent(_message.Message):
    __slots__ = ("kind", "sandbox_id", "sandbox", "time_unix_ms", "exit_code", "oom_killed", "reason", "failure_kind")
    KIND_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    TIME_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    OOM_KILLED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    FAILURE_KIND_FIELD_NUMBER: _ClassVar[int]
    kind: SandboxEventKind
    sandbox_id: str
    sandbox: SandboxInfo
    time_unix_ms: int
    exit_code: int
    oom_killed: bool
    reason: str
    failure_kind: FailureKind
    def __init__(self, kind: _Optional[_Union[SandboxEventKind, str]] = ..., sandbox_id: _Optional[str] = ..., sandbox: _Optional[_Union[SandboxInfo, _Mapping]] = ..., time_unix_ms: _Optional[int] = ..., exit_code: _Optional[int] = ..., oom_killed: _Optional[bool] = ..., reason: _Optional[str] = ..., failure_kind: _Optional[_Union[FailureKind, str]] = ...) -> None: ...

class WatchResponse(_message.Message):
    __slots__ = ("event",)
    EVENT_FIELD_NUMBER: _ClassVar[int]
    event: SandboxEvent
    def __init__(self, event: _Optional[_Union[SandboxEvent, _Mapping]] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ("sandbox_id",)
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ...) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("read_at_unix_ns", "cpu_usage_ns", "cpu_limit", "memory_usage_bytes", "memory_limit_bytes", "memory_peak_bytes", "pids", "network_rx_bytes", "network_tx_bytes", "block_read_bytes", "block_write_bytes", "cgroup_version")
    READ_AT_UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    CPU_USAGE_NS_FIELD_NUMBER: _ClassVar[int]
    CPU_LIMIT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_LIMIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_PEAK_BYTES_FIELD_NUMBER: _ClassVar[int]
    PIDS_FIELD_NUMBER: _ClassVar[int]
    NETWORK_RX_BYTES_FIELD_NUMBER: _ClassVar[int]
    NETWORK_TX_BYTES_FIELD_NUMBER: _ClassVar[int]
    BLOCK_READ_BYTES_FIELD_NUMBER: _ClassVar[int]
    BLOCK_WRITE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CGROUP_VERSION_FIELD_NUMBER: _ClassVar[int]
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
    def __init__(self, read_at_unix_ns: _Optional[int] = ..., cpu_usage_ns: _Optional[int] = ..., cpu_limit: _Optional[float] = ..., memory_usage_bytes: _Optional[int] = ..., memory_limit_bytes: _Optional[int] = ..., memory_peak_bytes: _Optional[int] = ..., pids: _Optional[int] = ..., network_rx_bytes: _Optional[int] = ..., network_tx_bytes: _Optional[int] = ..., block_read_bytes: _Optional[int] = ..., block_write_bytes: _Optional[int] = ..., cgroup_version: _Optional[str] = ...) -> None: ...

class StatsStreamRequest(_message.Message):
    __slots__ = ("sandbox_id", "interval_s")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    interval_s: float
    def __init__(self, sandbox_id: _Optional[str] = ..., interval_s: _Optional[float] = ...) -> None: ...

class NetworkPolicy(_message.Message):
    __slots__ = ("default_action", "rules", "allow_domains")
    DEFAULT_ACTION_FIELD_NUMBER: _ClassVar[int]
    RULES_FIELD_NUMBER: _ClassVar[int]
    ALLOW_DOMAINS_FIELD_NUMBER: _ClassVar[int]
    default_action: EgressAction
    rules: _containers.RepeatedCompositeFieldContainer[EgressRule]
    allow_domains: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, default_action: _Optional[_Union[EgressAction, str]] = ..., rules: _Optional[_Iterable[_Union[EgressRule, _Mapping]]] = ..., allow_domains: _Optional[_Iterable[str]] = ...) -> None: ...

class EgressRule(_message.Message):
    __slots__ = ("action", "cidr", "ports")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    CIDR_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    action: EgressAction
    cidr: str
    ports: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, action: _Optional[_Union[EgressAction, str]] = ..., cidr: _Optional[str] = ..., ports: _Optional[_Iterable[int]] = ...) -> None: ...

class SetNetworkPolicyRequest(_message.Message):
    __slots__ = ("sandbox_id", "policy")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    policy: NetworkPolicy
    def __init__(self, sandbox_id: _Optional[str] = ..., policy: _Optional[_Union[NetworkPolicy, _Mapping]] = ...) -> None: ...

class SetNetworkPolicyResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PoolSpec(_message.Message):
    __slots__ = ("name", "image", "template", "target", "max", "recycle")
    NAME_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    RECYCLE_FIELD_NUMBER: _ClassVar[int]
    name: str
    image: str
    template: SandboxSpec
    target: int
    max: int
    recycle: bool
    def __init__(self, name: _Optional[str] = ..., image: _Optional[str] = ..., template: _Optional[_Union[SandboxSpec, _Mapping]] = ..., target: _Optional[int] = ..., max: _Optional[int] = ..., recycle: _Optional[bool] = ...) -> None: ...

class CreatePoolRequest(_message.Message):
    __slots__ = ("pool",)
    POOL_FIELD_NUMBER: _ClassVar[int]
    pool: PoolSpec
    def __init__(self, pool: _Optional[_Union[PoolSpec, _Mapping]] = ...) -> None: ...

class CreatePoolResponse(_message.Message):
    __slots__ = ("pool",)
    POOL_FIELD_NUMBER: _ClassVar[int]
    pool: PoolInfo
    def __init__(self, pool: _Optional[_Union[PoolInfo, _Mapping]] = ...) -> None: ...

class ListPoolsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListPoolsResponse(_message.Message):
    __slots__ = ("pools",)
    POOLS_FIELD_NUMBER: _ClassVar[int]
    pools: _containers.RepeatedCompositeFieldContainer[PoolInfo]
    def __init__(self, pools: _Optional[_Iterable[_Union[PoolInfo, _Mapping]]] = ...) -> None: ...

class PoolInfo(_message.Message):
    __slots__ = ("name", "spec", "target", "max", "ready", "claimed", "created", "in_use", "from_config", "tenant", "recycled")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    CLAIMED_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    IN_USE_FIELD_NUMBER: _ClassVar[int]
    FROM_CONFIG_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    RECYCLED_FIELD_NUMBER: _ClassVar[int]
    name: str
    spec: PoolSpec
    target: int
    max: int
    ready: int
    claimed: int
    created: int
    in_use: int
    from_config: bool
    tenant: str
    recycled: int
    def __init__(self, name: _Optional[str] = ..., spec: _Optional[_Union[PoolSpec, _Mapping]] = ..., target: _Optional[int] = ..., max: _Optional[int] = ..., ready: _Optional[int] = ..., claimed: _Optional[int] = ..., created: _Optional[int] = ..., in_use: _Optional[int] = ..., from_config: _Optional[bool] = ..., tenant: _Optional[str] = ..., recycled: _Optional[int] = ...) -> None: ...

class DeletePoolRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeletePoolResponse(_message.Message):
    __slots__ = ("removed",)
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    removed: int
    def __init__(self, removed: _Optional[int] = ...) -> None: ...

class PrefetchImagesRequest(_message.Message):
    __slots__ = ("images", "nodes")
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    images: _containers.RepeatedScalarFieldContainer[str]
    nodes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, images: _Optional[_Iterable[str]] = ..., nodes: _Optional[_Iterable[str]] = ...) -> None: ...

class PrefetchImagesResponse(_message.Message):
    __slots__ = ("image", "node", "state", "bytes_done", "bytes_total", "source", "error", "failure_kind")
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    BYTES_DONE_FIELD_NUMBER: _ClassVar[int]
    BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FAILURE_KIND_FIELD_NUMBER: _ClassVar[int]
    image: str
    node: str
    state: ImagePrefetchState
    bytes_done: int
    bytes_total: int
    source: str
    error: str
    failure_kind: FailureKind
    def __init__(self, image: _Optional[str] = ..., node: _Optional[str] = ..., state: _Optional[_Union[ImagePrefetchState, str]] = ..., bytes_done: _Optional[int] = ..., bytes_total: _Optional[int] = ..., source: _Optional[str] = ..., error: _Optional[str] = ..., failure_kind: _Optional[_Union[FailureKind, str]] = ...) -> None: ...

class PoolTarget(_message.Message):
    __slots__ = ("image", "count", "pool", "template")
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    image: str
    count: int
    pool: str
    template: SandboxSpec
    def __init__(self, image: _Optional[str] = ..., count: _Optional[int] = ..., pool: _Optional[str] = ..., template: _Optional[_Union[SandboxSpec, _Mapping]] = ...) -> None: ...

class SetPoolTargetsRequest(_message.Message):
    __slots__ = ("targets",)
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    targets: _containers.RepeatedCompositeFieldContainer[PoolTarget]
    def __init__(self, targets: _Optional[_Iterable[_Union[PoolTarget, _Mapping]]] = ...) -> None: ...

class PoolNodeShare(_message.Message):
    __slots__ = ("node", "ready")
    NODE_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    node: str
    ready: int
    def __init__(self, node: _Optional[str] = ..., ready: _Optional[int] = ...) -> None: ...

class PoolTargetResult(_message.Message):
    __slots__ = ("pool", "image", "target", "max", "created", "nodes")
    POOL_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    pool: str
    image: str
    target: int
    max: int
    created: bool
    nodes: _containers.RepeatedCompositeFieldContainer[PoolNodeShare]
    def __init__(self, pool: _Optional[str] = ..., image: _Optional[str] = ..., target: _Optional[int] = ..., max: _Optional[int] = ..., created: _Optional[bool] = ..., nodes: _Optional[_Iterable[_Union[PoolNodeShare, _Mapping]]] = ...) -> None: ...

class SetPoolTargetsResponse(_message.Message):
    __slots__ = ("pools",)
    POOLS_FIELD_NUMBER: _ClassVar[int]
    pools: _containers.RepeatedCompositeFieldContainer[PoolTargetResult]
    def __init__(self, pools: _Optional[_Iterable[_Union[PoolTargetResult, _Mapping]]] = ...) -> None: ...

class PtyAttach(_message.Message):
    __slots__ = ("sandbox_id", "session_id", "takeover", "since")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TAKEOVER_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    session_id: str
    takeover: bool
    since: int
    def __init__(self, sandbox_id: _Optional[str] = ..., session_id: _Optional[str] = ..., takeover: _Optional[bool] = ..., since: _Optional[int] = ...) -> None: ...

class PtyDetach(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PtyStdinEnd(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListPtySessionsRequest(_message.Message):
    __slots__ = ("sandbox_id",)
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ...) -> None: ...

class PtySessionInfo(_message.Message):
    __slots__ = ("session_id", "command", "mode", "rows", "cols", "running", "exit_code", "attached", "retained_bytes")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    COLS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    ATTACHED_FIELD_NUMBER: _ClassVar[int]
    RETAINED_BYTES_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    command: str
    mode: str
    rows: int
    cols: int
    running: bool
    exit_code: int
    attached: bool
    retained_bytes: int
    def __init__(self, session_id: _Optional[str] = ..., command: _Optional[str] = ..., mode: _Optional[str] = ..., rows: _Optional[int] = ..., cols: _Optional[int] = ..., running: _Optional[bool] = ..., exit_code: _Optional[int] = ..., attached: _Optional[bool] = ..., retained_bytes: _Optional[int] = ...) -> None: ...

class ListPtySessionsResponse(_message.Message):
    __slots__ = ("sessions",)
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[PtySessionInfo]
    def __init__(self, sessions: _Optional[_Iterable[_Union[PtySessionInfo, _Mapping]]] = ...) -> None: ...

class StartProcessRequest(_message.Message):
    __slots__ = ("sandbox_id", "command", "cwd", "env", "user", "pty", "rows", "cols", "argv")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    PTY_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    COLS_FIELD_NUMBER: _ClassVar[int]
    ARGV_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    command: str
    cwd: str
    env: _containers.ScalarMap[str, str]
    user: str
    pty: bool
    rows: int
    cols: int
    argv: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, sandbox_id: _Optional[str] = ..., command: _Optional[str] = ..., cwd: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., user: _Optional[str] = ..., pty: _Optional[bool] = ..., rows: _Optional[int] = ..., cols: _Optional[int] = ..., argv: _Optional[_Iterable[str]] = ...) -> None: ...

class StartProcessResponse(_message.Message):
    __slots__ = ("process_id", "pid")
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    pid: int
    def __init__(self, process_id: _Optional[str] = ..., pid: _Optional[int] = ...) -> None: ...

class ListProcessesRequest(_message.Message):
    __slots__ = ("sandbox_id",)
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ...) -> None: ...

class ProcessInfo(_message.Message):
    __slots__ = ("process_id", "pid", "command", "user", "started_at_unix_ms", "running", "exit_code", "retained_bytes", "pty", "attached", "oldest_offset", "end_offset")
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    RETAINED_BYTES_FIELD_NUMBER: _ClassVar[int]
    PTY_FIELD_NUMBER: _ClassVar[int]
    ATTACHED_FIELD_NUMBER: _ClassVar[int]
    OLDEST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    pid: int
    command: str
    user: str
    started_at_unix_ms: int
    running: bool
    exit_code: int
    retained_bytes: int
    pty: bool
    attached: bool
    oldest_offset: int
    end_offset: int
    def __init__(self, process_id: _Optional[str] = ..., pid: _Optional[int] = ..., command: _Optional[str] = ..., user: _Optional[str] = ..., started_at_unix_ms: _Optional[int] = ..., running: _Optional[bool] = ..., exit_code: _Optional[int] = ..., retained_bytes: _Optional[int] = ..., pty: _Optional[bool] = ..., attached: _Optional[bool] = ..., oldest_offset: _Optional[int] = ..., end_offset: _Optional[int] = ...) -> None: ...

class ListProcessesResponse(_message.Message):
    __slots__ = ("processes",)
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    processes: _containers.RepeatedCompositeFieldContainer[ProcessInfo]
    def __init__(self, processes: _Optional[_Iterable[_Union[ProcessInfo, _Mapping]]] = ...) -> None: ...

class AttachProcessRequest(_message.Message):
    __slots__ = ("sandbox_id", "process_id", "since")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    process_id: str
    since: int
    def __init__(self, sandbox_id: _Optional[str] = ..., process_id: _Optional[str] = ..., since: _Optional[int] = ...) -> None: ...

class ProcessAttached(_message.Message):
    __slots__ = ("offset", "pid")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    offset: int
    pid: int
    def __init__(self, offset: _Optional[int] = ..., pid: _Optional[int] = ...) -> None: ...

class ProcessOutput(_message.Message):
    __slots__ = ("data", "offset", "stderr")
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    offset: int
    stderr: bool
    def __init__(self, data: _Optional[bytes] = ..., offset: _Optional[int] = ..., stderr: _Optional[bool] = ...) -> None: ...

class ProcessExited(_message.Message):
    __slots__ = ("exit_code",)
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    exit_code: int
    def __init__(self, exit_code: _Optional[int] = ...) -> None: ...

class AttachProcessResponse(_message.Message):
    __slots__ = ("attached", "output", "exited")
    ATTACHED_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    EXITED_FIELD_NUMBER: _ClassVar[int]
    attached: ProcessAttached
    output: ProcessOutput
    exited: ProcessExited
    def __init__(self, attached: _Optional[_Union[ProcessAttached, _Mapping]] = ..., output: _Optional[_Union[ProcessOutput, _Mapping]] = ..., exited: _Optional[_Union[ProcessExited, _Mapping]] = ...) -> None: ...

class SignalProcessRequest(_message.Message):
    __slots__ = ("sandbox_id", "process_id", "signal")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    process_id: str
    signal: str
    def __init__(self, sandbox_id: _Optional[str] = ..., process_id: _Optional[str] = ..., signal: _Optional[str] = ...) -> None: ...

class SignalProcessResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PortForwardOpen(_message.Message):
    __slots__ = ("sandbox_id", "host", "port")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    host: str
    port: int
    def __init__(self, sandbox_id: _Optional[str] = ..., host: _Optional[str] = ..., port: _Optional[int] = ...) -> None: ...

class PortForwardRequest(_message.Message):
    __slots__ = ("open", "data")
    OPEN_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    open: PortForwardOpen
    data: bytes
    def __init__(self, open: _Optional[_Union[PortForwardOpen, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class PortForwardOpened(_message.Message):
    __slots__ = ("address",)
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    address: str
    def __init__(self, address: _Optional[str] = ...) -> None: ...

class PortForwardEof(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PortForwardResponse(_message.Message):
    __slots__ = ("opened", "data", "eof")
    OPENED_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    EOF_FIELD_NUMBER: _ClassVar[int]
    opened: PortForwardOpened
    data: bytes
    eof: PortForwardEof
    def __init__(self, opened: _Optional[_Union[PortForwardOpened, _Mapping]] = ..., data: _Optional[bytes] = ..., eof: _Optional[_Union[PortForwardEof, _Mapping]] = ...) -> None: ...

class FileEntry(_message.Message):
    __slots__ = ("name", "path", "type", "size", "mode", "uid", "gid", "mtime", "link_target", "xattrs")
    class XattrsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    GID_FIELD_NUMBER: _ClassVar[int]
    MTIME_FIELD_NUMBER: _ClassVar[int]
    LINK_TARGET_FIELD_NUMBER: _ClassVar[int]
    XATTRS_FIELD_NUMBER: _ClassVar[int]
    name: bytes
    path: bytes
    type: FileType
    size: int
    mode: int
    uid: int
    gid: int
    mtime: int
    link_target: bytes
    xattrs: _containers.ScalarMap[str, bytes]
    def __init__(self, name: _Optional[bytes] = ..., path: _Optional[bytes] = ..., type: _Optional[_Union[FileType, str]] = ..., size: _Optional[int] = ..., mode: _Optional[int] = ..., uid: _Optional[int] = ..., gid: _Optional[int] = ..., mtime: _Optional[int] = ..., link_target: _Optional[bytes] = ..., xattrs: _Optional[_Mapping[str, bytes]] = ...) -> None: ...

class ListDirRequest(_message.Message):
    __slots__ = ("sandbox_id", "path", "depth", "include_hidden", "user")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_HIDDEN_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    path: bytes
    depth: int
    include_hidden: bool
    user: str
    def __init__(self, sandbox_id: _Optional[str] = ..., path: _Optional[bytes] = ..., depth: _Optional[int] = ..., include_hidden: _Optional[bool] = ..., user: _Optional[str] = ...) -> None: ...

class ListDirResponse(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[FileEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[FileEntry, _Mapping]]] = ...) -> None: ...

class StatRequest(_message.Message):
    __slots__ = ("sandbox_id", "path", "follow_links", "user")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_LINKS_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    path: bytes
    follow_links: bool
    user: str
    def __init__(self, sandbox_id: _Optional[str] = ..., path: _Optional[bytes] = ..., follow_links: _Optional[bool] = ..., user: _Optional[str] = ...) -> None: ...

class StatResponse(_message.Message):
    __slots__ = ("entry",)
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    entry: FileEntry
    def __init__(self, entry: _Optional[_Union[FileEntry, _Mapping]] = ...) -> None: ...

class MakeDirRequest(_message.Message):
    __slots__ = ("sandbox_id", "path", "parents", "mode", "user")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    PARENTS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    path: bytes
    parents: bool
    mode: int
    user: str
    def __init__(self, sandbox_id: _Optional[str] = ..., path: _Optional[bytes] = ..., parents: _Optional[bool] = ..., mode: _Optional[int] = ..., user: _Optional[str] = ...) -> None: ...

class MakeDirResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RemoveRequest(_message.Message):
    __slots__ = ("sandbox_id", "path", "recursive", "user")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    RECURSIVE_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    path: bytes
    recursive: bool
    user: str
    def __init__(self, sandbox_id: _Optional[str] = ..., path: _Optional[bytes] = ..., recursive: _Optional[bool] = ..., user: _Optional[str] = ...) -> None: ...

class RemoveResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RenameRequest(_message.Message):
    __slots__ = ("sandbox_id", "source", "destination", "overwrite", "user")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    OVERWRITE_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    source: bytes
    destination: bytes
    overwrite: bool
    user: str
    def __init__(self, sandbox_id: _Optional[str] = ..., source: _Optional[bytes] = ..., destination: _Optional[bytes] = ..., overwrite: _Optional[bool] = ..., user: _Optional[str] = ...) -> None: ...

class RenameResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WatchDirRequest(_message.Message):
    __slots__ = ("sandbox_id", "path", "recursive", "user")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    RECURSIVE_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    path: bytes
    recursive: bool
    user: str
    def __init__(self, sandbox_id: _Optional[str] = ..., path: _Optional[bytes] = ..., recursive: _Optional[bool] = ..., user: _Optional[str] = ...) -> None: ...

class FileEvent(_message.Message):
    __slots__ = ("type", "path", "old_path", "is_dir")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    OLD_PATH_FIELD_NUMBER: _ClassVar[int]
    IS_DIR_FIELD_NUMBER: _ClassVar[int]
    type: FileEventType
    path: bytes
    old_path: bytes
    is_dir: bool
    def __init__(self, type: _Optional[_Union[FileEventType, str]] = ..., path: _Optional[bytes] = ..., old_path: _Optional[bytes] = ..., is_dir: _Optional[bool] = ...) -> None: ...

class WatchDirResponse(_message.Message):
    __slots__ = ("event",)
    EVENT_FIELD_NUMBER: _ClassVar[int]
    event: FileEvent
    def __init__(self, event: _Optional[_Union[FileEvent, _Mapping]] = ...) -> None: ...

class SandboxUsage(_message.Message):
    __slots__ = ("wall_time_s", "cpu_time_s", "peak_memory_bytes", "disk_write_bytes", "network_rx_bytes", "network_tx_bytes", "processes_started")
    WALL_TIME_S_FIELD_NUMBER: _ClassVar[int]
    CPU_TIME_S_FIELD_NUMBER: _ClassVar[int]
    PEAK_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_WRITE_BYTES_FIELD_NUMBER: _ClassVar[int]
    NETWORK_RX_BYTES_FIELD_NUMBER: _ClassVar[int]
    NETWORK_TX_BYTES_FIELD_NUMBER: _ClassVar[int]
    PROCESSES_STARTED_FIELD_NUMBER: _ClassVar[int]
    wall_time_s: float
    cpu_time_s: float
    peak_memory_bytes: int
    disk_write_bytes: int
    network_rx_bytes: int
    network_tx_bytes: int
    processes_started: int
    def __init__(self, wall_time_s: _Optional[float] = ..., cpu_time_s: _Optional[float] = ..., peak_memory_bytes: _Optional[int] = ..., disk_write_bytes: _Optional[int] = ..., network_rx_bytes: _Optional[int] = ..., network_tx_bytes: _Optional[int] = ..., processes_started: _Optional[int] = ...) -> None: ...

class UsageRequest(_message.Message):
    __slots__ = ("sandbox_id",)
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ...) -> None: ...

class UsageResponse(_message.Message):
    __slots__ = ("usage",)
    USAGE_FIELD_NUMBER: _ClassVar[int]
    usage: SandboxUsage
    def __init__(self, usage: _Optional[_Union[SandboxUsage, _Mapping]] = ...) -> None: ...

class CreateBatchRequest(_message.Message):
    __slots__ = ("spec", "count")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    spec: SandboxSpec
    count: int
    def __init__(self, spec: _Optional[_Union[SandboxSpec, _Mapping]] = ..., count: _Optional[int] = ...) -> None: ...

class BatchItemError(_message.Message):
    __slots__ = ("code", "message", "failure_kind")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_KIND_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    failure_kind: FailureKind
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., failure_kind: _Optional[_Union[FailureKind, str]] = ...) -> None: ...

class CreateBatchResponse(_message.Message):
    __slots__ = ("index", "sandbox", "error")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    index: int
    sandbox: SandboxRef
    error: BatchItemError
    def __init__(self, index: _Optional[int] = ..., sandbox: _Optional[_Union[SandboxRef, _Mapping]] = ..., error: _Optional[_Union[BatchItemError, _Mapping]] = ...) -> None: ...

class ResetRequest(_message.Message):
    __slots__ = ("sandbox_id",)
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ...) -> None: ...

class ResetResponse(_message.Message):
    __slots__ = ("paths_restored", "processes_killed", "duration_ms")
    PATHS_RESTORED_FIELD_NUMBER: _ClassVar[int]
    PROCESSES_KILLED_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    paths_restored: int
    processes_killed: int
    duration_ms: float
    def __init__(self, paths_restored: _Optional[int] = ..., processes_killed: _Optional[int] = ..., duration_ms: _Optional[float] = ...) -> None: ...

class TenantUsageRequest(_message.Message):
    __slots__ = ("tenant", "at_unix_ms")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    at_unix_ms: int
    def __init__(self, tenant: _Optional[str] = ..., at_unix_ms: _Optional[int] = ...) -> None: ...

class UsageReceipt(_message.Message):
    __slots__ = ("sandbox_id", "closed_at_unix_ms", "usage")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    CLOSED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    closed_at_unix_ms: int
    usage: SandboxUsage
    def __init__(self, sandbox_id: _Optional[str] = ..., closed_at_unix_ms: _Optional[int] = ..., usage: _Optional[_Union[SandboxUsage, _Mapping]] = ...) -> None: ...

class TenantUsageResponse(_message.Message):
    __slots__ = ("tenant", "period_start_unix_ms", "period_end_unix_ms", "receipts", "sandbox_seconds", "cpu_seconds", "sandbox_seconds_limit", "cpu_seconds_limit")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PERIOD_START_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    PERIOD_END_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_SECONDS_LIMIT_FIELD_NUMBER: _ClassVar[int]
    CPU_SECONDS_LIMIT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    period_start_unix_ms: int
    period_end_unix_ms: int
    receipts: _containers.RepeatedCompositeFieldContainer[UsageReceipt]
    sandbox_seconds: float
    cpu_seconds: float
    sandbox_seconds_limit: float
    cpu_seconds_limit: float
    def __init__(self, tenant: _Optional[str] = ..., period_start_unix_ms: _Optional[int] = ..., period_end_unix_ms: _Optional[int] = ..., receipts: _Optional[_Iterable[_Union[UsageReceipt, _Mapping]]] = ..., sandbox_seconds: _Optional[float] = ..., cpu_seconds: _Optional[float] = ..., sandbox_seconds_limit: _Optional[float] = ..., cpu_seconds_limit: _Optional[float] = ...) -> None: ...
