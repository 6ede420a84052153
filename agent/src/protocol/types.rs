//! The values requests and events carry: failures, exec and session parameters, file entries.

/// Why an operation failed inside the sandbox; the server maps each to its own error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FailureKind {
    /// A path (file, cwd, program) does not exist.
    NotFound = 1,
    /// A directory where a file was expected.
    IsDirectory = 2,
    /// A parent of the path is not a directory.
    NotDirectory = 3,
    /// The filesystem is read-only there.
    ReadOnly = 4,
    /// The user or group cannot be resolved or switched to.
    User = 5,
    /// The working directory cannot be entered.
    Cwd = 6,
    /// Not a regular file.
    NotRegular = 7,
    /// Permission denied.
    Permission = 8,
    /// The request itself is malformed (for example an upload of another length than declared).
    Invalid = 9,
    /// Anything else.
    Other = 10,
    /// No session has that id.
    NoSession = 11,
    /// The session has a holder and the attach did not ask to take it over.
    Held = 12,
    /// `since` is older than the oldest retained byte (the message names it) or past the end.
    OutOfRange = 13,
    /// The filesystem there does not offer what was asked (extended attributes on gVisor's
    /// root filesystem, for one).
    Unsupported = 14,
    /// The path a file call would make already exists.
    AlreadyExists = 40,
    /// A directory that must be empty is not.
    NotEmpty = 41,
    /// A watch fell behind (the kernel's event queue overflowed) or reached the watch limit.
    Overflow = 42,
    /// A rename across filesystems (rename(2) cannot).
    CrossDevice = 43,
}

impl FailureKind {
    pub(super) fn from_u8(v: u8) -> Self {
        match v {
            1 => Self::NotFound,
            2 => Self::IsDirectory,
            3 => Self::NotDirectory,
            4 => Self::ReadOnly,
            5 => Self::User,
            6 => Self::Cwd,
            7 => Self::NotRegular,
            8 => Self::Permission,
            9 => Self::Invalid,
            11 => Self::NoSession,
            12 => Self::Held,
            13 => Self::OutOfRange,
            14 => Self::Unsupported,
            40 => Self::AlreadyExists,
            41 => Self::NotEmpty,
            42 => Self::Overflow,
            43 => Self::CrossDevice,
            _ => Self::Other,
        }
    }

    /// The kind of an OS error.
    pub fn from_errno(errno: i32) -> Self {
        match errno {
            libc::ENOENT => Self::NotFound,
            libc::EISDIR => Self::IsDirectory,
            libc::ENOTDIR => Self::NotDirectory,
            libc::EROFS => Self::ReadOnly,
            libc::EACCES | libc::EPERM => Self::Permission,
            _ => Self::Other,
        }
    }
}

/// What to run: `<shell> -c <command>` with this environment, directory and user.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecStart {
    /// Program name or path, looked up in the command's `PATH` like `docker exec` does.
    pub shell: String,
    /// The command line; any length (long ones travel through a memfd, not argv).
    pub command: Vec<u8>,
    /// Added to the sandbox's environment (wins over it).
    pub env: Vec<(String, String)>,
    /// Working directory; `None` keeps the agent's (the container's configured one).
    pub cwd: Option<String>,
    /// `name`, `uid`, `name:group` or `uid:gid`; `None` or empty means root.
    pub user: Option<String>,
    /// Whether `Stdin` frames follow; otherwise standard input is at EOF from the start.
    pub stdin: bool,
    /// Bytes kept per stream; the rest is counted and dropped.
    pub output_limit: u64,
}

/// Accounting of one command's process tree.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Usage {
    pub wall_us: u64,
    pub user_us: u64,
    pub system_us: u64,
    pub peak_rss_bytes: u64,
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ExecExit {
    /// Exit code, 128 + n for a signal.
    pub code: i32,
    /// Stopped by a `Kill` request.
    pub killed: bool,
    pub dropped_stdout: u64,
    pub dropped_stderr: u64,
    pub usage: Usage,
}

/// A terminal's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WindowSize {
    pub rows: u16,
    pub cols: u16,
}

/// A session to start: a terminal (`pty`) or a process with pipes. Both are one thing in the
/// agent's table, so a terminal and a background process are attached, listed and signalled
/// alike.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SessionStart {
    /// Program and arguments; the program is looked up in the session's `PATH`.
    pub argv: Vec<String>,
    /// Added to the sandbox's environment (wins over it).
    pub env: Vec<(String, String)>,
    /// Working directory; `None` keeps the agent's.
    pub cwd: Option<String>,
    /// As in `ExecStart`.
    pub user: Option<String>,
    /// `Some`: a pty of that size, allocated in the sandbox; `None`: pipe mode.
    pub pty: Option<WindowSize>,
    /// Output bytes retained for replay; 0 means `DEFAULT_RETAIN_BYTES`.
    pub retain_bytes: u64,
    /// How long the session outlives a holder that dropped without `Detach`: `None` ends it
    /// at once (HUP, then KILL), `DETACH_NEVER` never.
    pub detach_timeout_ms: Option<u64>,
    /// Whether this request holds the session (its output follows); otherwise the request
    /// ends with `SessionOpened` and the session runs unheld.
    pub attach: bool,
}

/// Where a sandbox is on its way to ready, as the agent's own probe saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ReadyState {
    /// The probe has not passed yet.
    Pending = 0,
    Ready = 1,
    /// The probe failed for good (its detail says how).
    Failed = 2,
}

/// Why a holder's stream ended while its session runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum DetachReason {
    /// The holder asked (`Detach`).
    Requested = 1,
    /// Another attach took the session over.
    TakenOver = 2,
    /// The holder wrote more input than the program read, past the bound the agent queues
    /// (`MAX_QUEUED_INPUT`): its stream ends, the session runs on.
    InputFull = 3,
}

/// One row of `ListSessions`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SessionInfo {
    pub session_id: String,
    pub argv: Vec<String>,
    /// `Some` for a terminal (its current size), `None` in pipe mode.
    pub pty: Option<WindowSize>,
    pub pid: u32,
    /// Its exit code once it ended.
    pub exit_code: Option<i32>,
    /// Whether a stream holds it.
    pub attached: bool,
    /// Offset of the oldest retained byte and of the next byte to come.
    pub oldest_offset: u64,
    pub end_offset: u64,
    /// Unix milliseconds.
    pub started_ms: u64,
}

impl SessionInfo {
    /// Bytes retained for replay.
    pub fn retained_bytes(&self) -> u64 {
        self.end_offset - self.oldest_offset
    }
}

// --- files ---

/// What kind of thing a path is (lstat's file type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum FsKind {
    #[default]
    File = 1,
    Dir = 2,
    Symlink = 3,
    Other = 4,
}

impl FsKind {
    pub(super) fn from_u8(v: u8) -> Self {
        match v {
            1 => Self::File,
            2 => Self::Dir,
            3 => Self::Symlink,
            _ => Self::Other,
        }
    }
}

/// One path as lstat(2) (or stat(2)) saw it. Names and paths are raw bytes: a Linux file name
/// need not be UTF-8.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FsEntry {
    pub name: Vec<u8>,
    pub path: Vec<u8>,
    pub kind: FsKind,
    pub size: u64,
    /// `st_mode & 0o7777`.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Unix milliseconds.
    pub mtime_ms: i64,
    /// A symlink's target as stored; empty otherwise.
    pub link_target: Vec<u8>,
    /// The path's extended attributes in the `user.` namespace (those a file's owner may set),
    /// by full name; other namespaces are the system's and never leave the sandbox.
    pub xattrs: Vec<Xattr>,
}

/// One extended attribute: its full name (`user.…`) and value.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Xattr {
    pub name: Vec<u8>,
    pub value: Vec<u8>,
}

/// The namespace of the extended attributes files carry to and from the server.
pub const USER_XATTR_PREFIX: &[u8] = b"user.";
/// Most attributes an upload may set (Linux allows about this many on most filesystems).
pub const MAX_XATTRS: usize = 64;
/// Largest attribute value accepted in either direction (Linux's own limit).
pub const MAX_XATTR_VALUE: usize = 64 * 1024;

/// Why `xattrs` cannot be set on a file (the rules both ends hold an upload to, the server
/// before a byte is read, the agent before it writes).
pub fn check_xattrs(xattrs: &[Xattr]) -> Result<(), String> {
    if xattrs.len() > MAX_XATTRS {
        return Err(format!("{} extended attributes, at most {MAX_XATTRS} are allowed", xattrs.len()));
    }
    for x in xattrs {
        let shown = String::from_utf8_lossy(&x.name);
        if !x.name.starts_with(USER_XATTR_PREFIX) || x.name.len() == USER_XATTR_PREFIX.len() {
            return Err(format!("extended attribute {shown:?} must be a name in the user. namespace"));
        }
        if x.name.len() > 255 || x.name.contains(&0) {
            return Err(format!("extended attribute {shown:?}: a name is at most 255 bytes, without NUL"));
        }
        if x.value.len() > MAX_XATTR_VALUE {
            return Err(format!("extended attribute {shown:?}: a value is at most {MAX_XATTR_VALUE} bytes"));
        }
    }
    Ok(())
}

/// What happened below a watched directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FsChangeKind {
    Create = 1,
    Modify = 2,
    Remove = 3,
    Rename = 4,
}

/// One change a `WatchDir` saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsChange {
    pub kind: FsChangeKind,
    pub path: Vec<u8>,
    /// For a rename: where it was.
    pub old_path: Vec<u8>,
    pub is_dir: bool,
}
