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
SANDBOX_STATUS_UNSPECIFIED: SandboxStatus
SANDBOX_STATUS_STARTING: SandboxStatus
SANDBOX_STATUS_RUNNING: SandboxStatus
SANDBOX_STATUS_STOPPED: SandboxStatus
SANDBOX_STATUS_ERROR: SandboxStatus
SANDBOX_STATUS_UNKNOWN: SandboxStatus
SANDBOX_STATUS_PAUSED: SandboxStatus
DIFF_KIND_UNSPECIFIED: DiffKind
DIFF_KIND_ADDED: DiffKind
DIFF_KIND_CHANGED: DiffKind
DIFF_KIND_DELETED: DiffKind
TOKEN_SCOPE_UNSPECIFIED: TokenScope
TOKEN_SCOPE_OWNER: TokenScope
TOKEN_SCOPE_OPERATE: TokenScope
TOKEN_SCOPE_READ: TokenScope
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

class SandboxSpec(_message.Message):
    __slots__ = ("image", "ttl_s", "ready_timeout_s", "workdir", "env", "files", "metadata", "resources", "entrypoint", "ports", "provider_options", "snapshot_id")
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
    def __init__(self, image: _Optional[str] = ..., ttl_s: _Optional[float] = ..., ready_timeout_s: _Optional[float] = ..., workdir: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., files: _Optional[_Mapping[str, bytes]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., resources: _Optional[_Union[SandboxResources, _Mapping]] = ..., entrypoint: _Optional[_Iterable[str]] = ..., ports: _Optional[_Iterable[int]] = ..., provider_options: _Optional[_Union[ProviderOptions, _Mapping]] = ..., snapshot_id: _Optional[str] = ...) -> None: ...

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
    __slots__ = ("stdout", "stderr", "return_code", "error_type", "usage")
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    RETURN_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    stdout: bytes
    stderr: bytes
    return_code: int
    error_type: str
    usage: ExecUsage
    def __init__(self, stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., return_code: _Optional[int] = ..., error_type: _Optional[str] = ..., usage: _Optional[_Union[ExecUsage, _Mapping]] = ...) -> None: ...

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
    __slots__ = ("return_code", "error_type", "usage", "message")
    RETURN_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    return_code: int
    error_type: str
    usage: ExecUsage
    message: str
    def __init__(self, return_code: _Optional[int] = ..., error_type: _Optional[str] = ..., usage: _Optional[_Union[ExecUsage, _Mapping]] = ..., message: _Optional[str] = ...) -> None: ...

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
    __slots__ = ("sandbox_id", "path", "mode", "size")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    path: str
    mode: int
    size: int
    def __init__(self, sandbox_id: _Optional[str] = ..., path: _Optional[str] = ..., mode: _Optional[int] = ..., size: _Optional[int] = ...) -> None: ...

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
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: SandboxStatus
    def __init__(self, status: _Optional[_Union[SandboxStatus, str]] = ...) -> None: ...

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
    __slots__ = ()
    def __init__(self) -> None: ...

class PtyOpen(_message.Message):
    __slots__ = ("sandbox_id", "command", "cwd", "env", "rows", "cols", "user", "pipe")
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
    sandbox_id: str
    command: str
    cwd: str
    env: _containers.ScalarMap[str, str]
    rows: int
    cols: int
    user: str
    pipe: bool
    def __init__(self, sandbox_id: _Optional[str] = ..., command: _Optional[str] = ..., cwd: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., rows: _Optional[int] = ..., cols: _Optional[int] = ..., user: _Optional[str] = ..., pipe: _Optional[bool] = ...) -> None: ...

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
    __slots__ = ("open", "input", "resize", "signal", "close")
    OPEN_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    RESIZE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    open: PtyOpen
    input: bytes
    resize: PtyResize
    signal: PtySignal
    close: PtyClose
    def __init__(self, open: _Optional[_Union[PtyOpen, _Mapping]] = ..., input: _Optional[bytes] = ..., resize: _Optional[_Union[PtyResize, _Mapping]] = ..., signal: _Optional[_Union[PtySignal, _Mapping]] = ..., close: _Optional[_Union[PtyClose, _Mapping]] = ...) -> None: ...

class PtyOpened(_message.Message):
    __slots__ = ("session_id", "mode")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    mode: str
    def __init__(self, session_id: _Optional[str] = ..., mode: _Optional[str] = ...) -> None: ...

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
    __slots__ = ("sandbox", "image", "status", "created_at_unix_ms", "expires_at_unix_ms")
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    sandbox: SandboxRef
    image: str
    status: SandboxStatus
    created_at_unix_ms: int
    expires_at_unix_ms: int
    def __init__(self, sandbox: _Optional[_Union[SandboxRef, _Mapping]] = ..., image: _Optional[str] = ..., status: _Optional[_Union[SandboxStatus, str]] = ..., created_at_unix_ms: _Optional[int] = ..., expires_at_unix_ms: _Optional[int] = ...) -> None: ...

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
    __slots__ = ("snapshot_id", "source_sandbox_id", "labels", "created_at_unix_ms", "size_bytes")
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
    snapshot_id: str
    source_sandbox_id: str
    labels: _containers.ScalarMap[str, str]
    created_at_unix_ms: int
    size_bytes: int
    def __init__(self, snapshot_id: _Optional[str] = ..., source_sandbox_id: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., created_at_unix_ms: _Optional[int] = ..., size_bytes: _Optional[int] = ...) -> None: ...

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
    __slots__ = ("sandbox_id", "count", "labels")
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
    sandbox_id: str
    count: int
    labels: _containers.ScalarMap[str, str]
    def __init__(self, sandbox_id: _Optional[str] = ..., count: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

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

class FileEntry(_message.Message):
    __slots__ = ("name", "path", "type", "size", "mode", "uid", "gid", "mtime", "link_target")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    GID_FIELD_NUMBER: _ClassVar[int]
    MTIME_FIELD_NUMBER: _ClassVar[int]
    LINK_TARGET_FIELD_NUMBER: _ClassVar[int]
    name: bytes
    path: bytes
    type: FileType
    size: int
    mode: int
    uid: int
    gid: int
    mtime: int
    link_target: bytes
    def __init__(self, name: _Optional[bytes] = ..., path: _Optional[bytes] = ..., type: _Optional[_Union[FileType, str]] = ..., size: _Optional[int] = ..., mode: _Optional[int] = ..., uid: _Optional[int] = ..., gid: _Optional[int] = ..., mtime: _Optional[int] = ..., link_target: _Optional[bytes] = ...) -> None: ...

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
