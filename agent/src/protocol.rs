//! The agent's wire protocol: length-prefixed binary frames over one byte stream (the stdio of
//! one `docker exec -i`), many requests multiplexed by id.
//!
//! A frame is `u32 len (little endian) | u8 kind | u64 request id | payload`, `len` counting
//! everything after itself. Payload fields are fixed-width little-endian integers and
//! `u32 len | bytes` strings. Hand-written rather than serde: the agent must stay a small static
//! binary with no dependency beyond libc, and both ends are built from this one file.

use std::io::{self, Read, Write};

/// Bumped on any change; the agent announces it in `Hello`. Version 2 added the socket's
/// `Readiness` and the session requests; version 3 the port-forward frames (kinds 40-42 and
/// 140-143); every older frame is unchanged. `Detached`'s reason `InputFull` (3) came within 3:
/// only an agent that bounds its input sends it, and an older reader takes it for `Requested`.
pub const PROTOCOL_VERSION: u32 = 3;
/// Output a session retains when its opener names no size (`server.pty.retain_bytes`).
pub const DEFAULT_RETAIN_BYTES: u64 = 1 << 20;
/// Largest retained output the agent accepts for one session.
pub const MAX_RETAIN_BYTES: u64 = 64 << 20;
/// Most input a session queues for a program that does not read it (the server's largest
/// message); past it the holder's stream ends with `Detached { InputFull }`.
pub const MAX_QUEUED_INPUT: u64 = 64 << 20;
/// `SessionStart::detach_timeout_ms` that never ends a session whose holder dropped (a
/// process: it outlives every client).
pub const DETACH_NEVER: u64 = u64::MAX;
/// Largest event frame the server accepts from an agent (a data chunk plus headers): whatever
/// runs as root in a sandbox could speak on the agent's behalf, so the server bounds it.
pub const MAX_FRAME: usize = 1 << 20;
/// Largest request frame the agent accepts: an exec's command travels in one frame, and gRPC
/// allows 64 MiB messages.
pub const MAX_REQUEST_FRAME: usize = 72 << 20;
/// Largest data chunk in one frame.
pub const MAX_CHUNK: usize = 256 * 1024;
/// Output bytes the agent may send for one request before the server grants more credit.
pub const INITIAL_CREDIT: u64 = 4 << 20;
/// Bytes of `ForwardData` the server may have sent for one connection that the agent has not
/// yet written to its socket (`ForwardAck` gives them back): a slow peer in the sandbox
/// bounds the agent's buffer, not the server's sender.
pub const FORWARD_WINDOW: u64 = 1 << 20;

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
    fn from_u8(v: u8) -> Self {
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
    fn from_u8(v: u8) -> Self {
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

/// Server to agent.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    Exec(ExecStart),
    /// Bytes for the command's standard input.
    Stdin(Vec<u8>),
    /// Close the command's standard input.
    StdinEnd,
    /// Stop the command and everything it started.
    Kill,
    /// The server consumed this many output bytes of the request.
    Credit(u64),
    /// Begin writing a file (written beside it, renamed on `PutEnd`).
    PutStart {
        path: String,
        mode: u32,
    },
    PutData(Vec<u8>),
    /// The upload is complete and had `size` bytes.
    PutEnd {
        size: u64,
    },
    /// Drop the partial upload; the old file stays.
    PutAbort,
    /// Read a file (a symlink is followed).
    Get {
        path: String,
    },
    /// Start a session (answered by `SessionOpened`). On the stream that holds a session,
    /// `Stdin`, `StdinEnd` and `Credit` act on it and `Kill` closes it.
    SessionOpen(SessionStart),
    /// Hold a session from this request on: replay from `since` (`Some(0)`: all still
    /// retained; `None`: live output only).
    SessionAttach {
        session_id: String,
        since: Option<u64>,
        takeover: bool,
    },
    /// Resize the held terminal.
    Resize(WindowSize),
    /// Signal the held session: a terminal's foreground process group, a pipe session's group.
    Signal(i32),
    /// End this stream; the session runs on.
    Detach,
    /// The holder went away without detaching: the session's detach timeout applies.
    Abandon,
    /// Signal a session by id without holding it (answered by `Done`).
    SignalSession {
        session_id: String,
        signal: i32,
    },
    /// End a session by id (HUP, then KILL) and forget it (answered by `Done`).
    CloseSession {
        session_id: String,
    },
    /// Every session (answered by `Sessions`).
    ListSessions,
    // --- port forwarding (forward.rs) ---
    /// Connect to `host:port` from inside the sandbox (answered by `ForwardOpened` or
    /// `Failed`); then `ForwardData`/`ForwardEnd` from the server, `Credit` for the agent's
    /// data, `Kill` to drop the connection.
    ForwardOpen {
        host: String,
        port: u16,
    },
    /// Bytes for the connection (within `FORWARD_WINDOW` of what was acknowledged).
    ForwardData(Vec<u8>),
    /// The server's half is done: shut down the connection's write side once the bytes before
    /// it are written.
    ForwardEnd,
    // --- files (kinds 50..=55): each acted on as `user` (`None`: root), answered by `Done`
    // (or `Entries` batches then `Done`, or `Failed` naming the path).
    /// A directory's entries to `depth` levels (answered by `Entries` batches, then `Done`).
    ListDir {
        path: Vec<u8>,
        depth: u32,
        include_hidden: bool,
        user: Option<String>,
    },
    /// One path's entry (answered by one `Entries`).
    Stat {
        path: Vec<u8>,
        follow_links: bool,
        user: Option<String>,
    },
    MakeDir {
        path: Vec<u8>,
        parents: bool,
        mode: u32,
        user: Option<String>,
    },
    Remove {
        path: Vec<u8>,
        recursive: bool,
        user: Option<String>,
    },
    Rename {
        source: Vec<u8>,
        destination: Vec<u8>,
        overwrite: bool,
        user: Option<String>,
    },
    /// Watch a directory (answered by `Watching`, then `Change`s until `Kill`, the directory's
    /// removal (`Done`) or an overflow (`Failed { Overflow }`)).
    WatchDir {
        path: Vec<u8>,
        recursive: bool,
        user: Option<String>,
    },
}

/// Agent to server.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// First frame (request id 0).
    Hello {
        version: u32,
        pid: u32,
    },
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    Exit(ExecExit),
    /// The request failed before or instead of running.
    Failed {
        kind: FailureKind,
        message: String,
    },
    PutDone {
        size: u64,
    },
    GetStart {
        size: u64,
    },
    GetData(Vec<u8>),
    GetEnd,
    /// On a socket, after `Hello` (request id 0) and again when it changes: the agent's
    /// readiness probe and the shell it found (`""`: none).
    Readiness {
        state: ReadyState,
        shell: String,
        detail: String,
    },
    /// The session started or was attached; `offset` is that of the first output byte this
    /// stream carries.
    SessionOpened {
        session_id: String,
        pid: u32,
        offset: u64,
    },
    /// Session output from `offset` (a jump past the last one means bytes were dropped from the
    /// ring before this holder read them). `stderr` only in pipe mode.
    Output {
        stderr: bool,
        offset: u64,
        data: Vec<u8>,
    },
    /// The session's program ended; last frame of a holder's stream.
    SessionExit {
        code: i32,
    },
    /// The holder's stream ended, the session runs on.
    Detached {
        reason: DetachReason,
        message: String,
    },
    Sessions(Vec<SessionInfo>),
    /// A control request succeeded; for a forward, both halves of its connection are closed.
    Done,
    // --- port forwarding (forward.rs) ---
    /// The connection is up (`ip:port`).
    ForwardOpened {
        address: String,
    },
    /// Bytes the peer in the sandbox sent (paced by `Credit`).
    ForwardData(Vec<u8>),
    /// The peer closed its write side: no more `ForwardData`.
    ForwardEof,
    /// This many bytes of `ForwardData` were written to the socket.
    ForwardAck(u64),
    /// The next batch of a `ListDir` (or the one entry of a `Stat`).
    Entries(Vec<FsEntry>),
    /// A `WatchDir` is in place: changes from now on are reported.
    Watching,
    /// One change below a watched directory.
    Change(FsChange),
}

/// One frame: a message and the request it belongs to.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame<T> {
    pub id: u64,
    pub message: T,
}

// ----- encoding ---------------------------------------------------------------------------

struct Enc(Vec<u8>);

impl Enc {
    fn new(kind: u8, id: u64) -> Self {
        let mut v = Vec::with_capacity(64);
        v.extend_from_slice(&[0; 4]);
        v.push(kind);
        v.extend_from_slice(&id.to_le_bytes());
        Self(v)
    }
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
        self
    }
    fn opt(&mut self, v: Option<&str>) -> &mut Self {
        match v {
            Some(s) => self.u8(1).bytes(s.as_bytes()),
            None => self.u8(0),
        }
    }
    fn opt_u64(&mut self, v: Option<u64>) -> &mut Self {
        match v {
            Some(n) => self.u8(1).u64(n),
            None => self.u8(0),
        }
    }
    fn size(&mut self, v: WindowSize) -> &mut Self {
        self.0.extend_from_slice(&v.rows.to_le_bytes());
        self.0.extend_from_slice(&v.cols.to_le_bytes());
        self
    }
    fn strings(&mut self, v: &[String]) -> &mut Self {
        self.u32(v.len() as u32);
        for s in v {
            self.bytes(s.as_bytes());
        }
        self
    }
    fn entry(&mut self, e: &FsEntry) -> &mut Self {
        self.bytes(&e.name)
            .bytes(&e.path)
            .u8(e.kind as u8)
            .u64(e.size)
            .u32(e.mode)
            .u32(e.uid)
            .u32(e.gid)
            .u64(e.mtime_ms as u64)
            .bytes(&e.link_target)
    }
    fn finish(mut self) -> Vec<u8> {
        let len = (self.0.len() - 4) as u32;
        self.0[..4].copy_from_slice(&len.to_le_bytes());
        self.0
    }
}

struct Dec<'a>(&'a [u8]);

fn short() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "truncated agent frame")
}

impl<'a> Dec<'a> {
    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(short());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().map_err(|_| short())?))
    }
    fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().map_err(|_| short())?))
    }
    fn bytes(&mut self) -> io::Result<Vec<u8>> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    fn string(&mut self) -> io::Result<String> {
        String::from_utf8(self.bytes()?)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "agent frame string is not UTF-8"))
    }
    fn opt(&mut self) -> io::Result<Option<String>> {
        Ok(if self.u8()? == 1 { Some(self.string()?) } else { None })
    }
    fn opt_u64(&mut self) -> io::Result<Option<u64>> {
        Ok(if self.u8()? == 1 { Some(self.u64()?) } else { None })
    }
    fn entry(&mut self) -> io::Result<FsEntry> {
        Ok(FsEntry {
            name: self.bytes()?,
            path: self.bytes()?,
            kind: FsKind::from_u8(self.u8()?),
            size: self.u64()?,
            mode: self.u32()?,
            uid: self.u32()?,
            gid: self.u32()?,
            mtime_ms: self.u64()? as i64,
            link_target: self.bytes()?,
        })
    }
    fn size(&mut self) -> io::Result<WindowSize> {
        let b = self.take(4)?;
        Ok(WindowSize { rows: u16::from_le_bytes([b[0], b[1]]), cols: u16::from_le_bytes([b[2], b[3]]) })
    }
    fn strings(&mut self) -> io::Result<Vec<String>> {
        let n = self.u32()? as usize;
        // Each string takes at least its 4-byte length: never reserve more than the frame holds.
        let mut v = Vec::with_capacity(n.min(self.0.len() / 4));
        for _ in 0..n {
            v.push(self.string()?);
        }
        Ok(v)
    }
}

/// A frame of a kind this build does not know (a newer peer's): the frame itself was well formed.
#[derive(Debug)]
pub struct UnknownKind(pub u8);

impl std::fmt::Display for UnknownKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unknown agent frame kind {}", self.0)
    }
}

impl std::error::Error for UnknownKind {}

fn bad_kind(kind: u8) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, UnknownKind(kind))
}

/// The request id of a body whose kind this build does not know, so the agent can answer it
/// with `Failed` instead of ending the channel (a newer server's request on an older agent).
pub fn unknown_request_id(body: &[u8], error: &io::Error) -> Option<u64> {
    error.get_ref()?.downcast_ref::<UnknownKind>()?;
    Some(u64::from_le_bytes(body.get(1..9)?.try_into().ok()?))
}

impl Request {
    /// The frame's bytes.
    pub fn encode(&self, id: u64) -> Vec<u8> {
        match self {
            Request::Exec(e) => {
                let mut enc = Enc::new(1, id);
                enc.bytes(e.shell.as_bytes()).bytes(&e.command).u32(e.env.len() as u32);
                for (k, v) in &e.env {
                    enc.bytes(k.as_bytes()).bytes(v.as_bytes());
                }
                enc.opt(e.cwd.as_deref()).opt(e.user.as_deref()).u8(e.stdin as u8).u64(e.output_limit);
                enc.finish()
            }
            Request::Stdin(d) => {
                let mut enc = Enc::new(2, id);
                enc.bytes(d);
                enc.finish()
            }
            Request::StdinEnd => Enc::new(3, id).finish(),
            Request::Kill => Enc::new(4, id).finish(),
            Request::Credit(n) => {
                let mut enc = Enc::new(5, id);
                enc.u64(*n);
                enc.finish()
            }
            Request::PutStart { path, mode } => {
                let mut enc = Enc::new(6, id);
                enc.bytes(path.as_bytes()).u32(*mode);
                enc.finish()
            }
            Request::PutData(d) => {
                let mut enc = Enc::new(7, id);
                enc.bytes(d);
                enc.finish()
            }
            Request::PutEnd { size } => {
                let mut enc = Enc::new(8, id);
                enc.u64(*size);
                enc.finish()
            }
            Request::PutAbort => Enc::new(9, id).finish(),
            Request::Get { path } => {
                let mut enc = Enc::new(10, id);
                enc.bytes(path.as_bytes());
                enc.finish()
            }
            Request::SessionOpen(s) => {
                let mut enc = Enc::new(11, id);
                enc.strings(&s.argv).u32(s.env.len() as u32);
                for (k, v) in &s.env {
                    enc.bytes(k.as_bytes()).bytes(v.as_bytes());
                }
                enc.opt(s.cwd.as_deref()).opt(s.user.as_deref());
                match s.pty {
                    Some(size) => enc.u8(1).size(size),
                    None => enc.u8(0),
                };
                enc.u64(s.retain_bytes).opt_u64(s.detach_timeout_ms).u8(s.attach as u8);
                enc.finish()
            }
            Request::SessionAttach { session_id, since, takeover } => {
                let mut enc = Enc::new(12, id);
                enc.bytes(session_id.as_bytes()).opt_u64(*since).u8(*takeover as u8);
                enc.finish()
            }
            Request::Resize(size) => {
                let mut enc = Enc::new(13, id);
                enc.size(*size);
                enc.finish()
            }
            Request::Signal(sig) => {
                let mut enc = Enc::new(14, id);
                enc.u32(*sig as u32);
                enc.finish()
            }
            Request::Detach => Enc::new(15, id).finish(),
            Request::Abandon => Enc::new(16, id).finish(),
            Request::SignalSession { session_id, signal } => {
                let mut enc = Enc::new(17, id);
                enc.bytes(session_id.as_bytes()).u32(*signal as u32);
                enc.finish()
            }
            Request::CloseSession { session_id } => {
                let mut enc = Enc::new(18, id);
                enc.bytes(session_id.as_bytes());
                enc.finish()
            }
            Request::ListSessions => Enc::new(19, id).finish(),
            Request::ForwardOpen { host, port } => {
                let mut enc = Enc::new(40, id);
                enc.bytes(host.as_bytes()).u32(u32::from(*port));
                enc.finish()
            }
            Request::ForwardData(d) => {
                let mut enc = Enc::new(41, id);
                enc.bytes(d);
                enc.finish()
            }
            Request::ForwardEnd => Enc::new(42, id).finish(),
            Request::ListDir { path, depth, include_hidden, user } => {
                let mut enc = Enc::new(50, id);
                enc.bytes(path).u32(*depth).u8(*include_hidden as u8).opt(user.as_deref());
                enc.finish()
            }
            Request::Stat { path, follow_links, user } => {
                let mut enc = Enc::new(51, id);
                enc.bytes(path).u8(*follow_links as u8).opt(user.as_deref());
                enc.finish()
            }
            Request::MakeDir { path, parents, mode, user } => {
                let mut enc = Enc::new(52, id);
                enc.bytes(path).u8(*parents as u8).u32(*mode).opt(user.as_deref());
                enc.finish()
            }
            Request::Remove { path, recursive, user } => {
                let mut enc = Enc::new(53, id);
                enc.bytes(path).u8(*recursive as u8).opt(user.as_deref());
                enc.finish()
            }
            Request::Rename { source, destination, overwrite, user } => {
                let mut enc = Enc::new(54, id);
                enc.bytes(source).bytes(destination).u8(*overwrite as u8).opt(user.as_deref());
                enc.finish()
            }
            Request::WatchDir { path, recursive, user } => {
                let mut enc = Enc::new(55, id);
                enc.bytes(path).u8(*recursive as u8).opt(user.as_deref());
                enc.finish()
            }
        }
    }

    fn decode(kind: u8, d: &mut Dec<'_>) -> io::Result<Self> {
        Ok(match kind {
            1 => {
                let shell = d.string()?;
                let command = d.bytes()?;
                let n = d.u32()? as usize;
                let mut env = Vec::with_capacity(n.min(4096));
                for _ in 0..n {
                    env.push((d.string()?, d.string()?));
                }
                let cwd = d.opt()?;
                let user = d.opt()?;
                let stdin = d.u8()? == 1;
                let output_limit = d.u64()?;
                Request::Exec(ExecStart { shell, command, env, cwd, user, stdin, output_limit })
            }
            2 => Request::Stdin(d.bytes()?),
            3 => Request::StdinEnd,
            4 => Request::Kill,
            5 => Request::Credit(d.u64()?),
            6 => Request::PutStart { path: d.string()?, mode: d.u32()? },
            7 => Request::PutData(d.bytes()?),
            8 => Request::PutEnd { size: d.u64()? },
            9 => Request::PutAbort,
            10 => Request::Get { path: d.string()? },
            11 => {
                let argv = d.strings()?;
                let n = d.u32()? as usize;
                let mut env = Vec::with_capacity(n.min(4096));
                for _ in 0..n {
                    env.push((d.string()?, d.string()?));
                }
                let cwd = d.opt()?;
                let user = d.opt()?;
                let pty = if d.u8()? == 1 { Some(d.size()?) } else { None };
                Request::SessionOpen(SessionStart {
                    argv,
                    env,
                    cwd,
                    user,
                    pty,
                    retain_bytes: d.u64()?,
                    detach_timeout_ms: d.opt_u64()?,
                    attach: d.u8()? == 1,
                })
            }
            12 => Request::SessionAttach {
                session_id: d.string()?,
                since: d.opt_u64()?,
                takeover: d.u8()? == 1,
            },
            13 => Request::Resize(d.size()?),
            14 => Request::Signal(d.u32()? as i32),
            15 => Request::Detach,
            16 => Request::Abandon,
            17 => Request::SignalSession { session_id: d.string()?, signal: d.u32()? as i32 },
            18 => Request::CloseSession { session_id: d.string()? },
            19 => Request::ListSessions,
            40 => {
                let host = d.string()?;
                let port = u16::try_from(d.u32()?).map_err(|_| short())?;
                Request::ForwardOpen { host, port }
            }
            41 => Request::ForwardData(d.bytes()?),
            42 => Request::ForwardEnd,
            50 => Request::ListDir {
                path: d.bytes()?,
                depth: d.u32()?,
                include_hidden: d.u8()? == 1,
                user: d.opt()?,
            },
            51 => Request::Stat { path: d.bytes()?, follow_links: d.u8()? == 1, user: d.opt()? },
            52 => {
                Request::MakeDir { path: d.bytes()?, parents: d.u8()? == 1, mode: d.u32()?, user: d.opt()? }
            }
            53 => Request::Remove { path: d.bytes()?, recursive: d.u8()? == 1, user: d.opt()? },
            54 => Request::Rename {
                source: d.bytes()?,
                destination: d.bytes()?,
                overwrite: d.u8()? == 1,
                user: d.opt()?,
            },
            55 => Request::WatchDir { path: d.bytes()?, recursive: d.u8()? == 1, user: d.opt()? },
            k => return Err(bad_kind(k)),
        })
    }
}

impl Event {
    /// The frame's bytes.
    pub fn encode(&self, id: u64) -> Vec<u8> {
        match self {
            Event::Hello { version, pid } => {
                let mut enc = Enc::new(101, id);
                enc.u32(*version).u32(*pid);
                enc.finish()
            }
            Event::Stdout(d) => {
                let mut enc = Enc::new(102, id);
                enc.bytes(d);
                enc.finish()
            }
            Event::Stderr(d) => {
                let mut enc = Enc::new(103, id);
                enc.bytes(d);
                enc.finish()
            }
            Event::Exit(x) => {
                let mut enc = Enc::new(104, id);
                enc.u32(x.code as u32)
                    .u8(x.killed as u8)
                    .u64(x.dropped_stdout)
                    .u64(x.dropped_stderr)
                    .u64(x.usage.wall_us)
                    .u64(x.usage.user_us)
                    .u64(x.usage.system_us)
                    .u64(x.usage.peak_rss_bytes);
                enc.finish()
            }
            Event::Failed { kind, message } => {
                let mut enc = Enc::new(105, id);
                enc.u8(*kind as u8).bytes(message.as_bytes());
                enc.finish()
            }
            Event::PutDone { size } => {
                let mut enc = Enc::new(106, id);
                enc.u64(*size);
                enc.finish()
            }
            Event::GetStart { size } => {
                let mut enc = Enc::new(107, id);
                enc.u64(*size);
                enc.finish()
            }
            Event::GetData(d) => {
                let mut enc = Enc::new(108, id);
                enc.bytes(d);
                enc.finish()
            }
            Event::GetEnd => Enc::new(109, id).finish(),
            Event::Readiness { state, shell, detail } => {
                let mut enc = Enc::new(110, id);
                enc.u8(*state as u8).bytes(shell.as_bytes()).bytes(detail.as_bytes());
                enc.finish()
            }
            Event::SessionOpened { session_id, pid, offset } => {
                let mut enc = Enc::new(111, id);
                enc.bytes(session_id.as_bytes()).u32(*pid).u64(*offset);
                enc.finish()
            }
            Event::Output { stderr, offset, data } => {
                let mut enc = Enc::new(112, id);
                enc.u8(*stderr as u8).u64(*offset).bytes(data);
                enc.finish()
            }
            Event::SessionExit { code } => {
                let mut enc = Enc::new(113, id);
                enc.u32(*code as u32);
                enc.finish()
            }
            Event::Detached { reason, message } => {
                let mut enc = Enc::new(114, id);
                enc.u8(*reason as u8).bytes(message.as_bytes());
                enc.finish()
            }
            Event::Sessions(list) => {
                let mut enc = Enc::new(115, id);
                enc.u32(list.len() as u32);
                for s in list {
                    enc.bytes(s.session_id.as_bytes()).strings(&s.argv);
                    match s.pty {
                        Some(size) => enc.u8(1).size(size),
                        None => enc.u8(0),
                    };
                    enc.u32(s.pid);
                    match s.exit_code {
                        Some(code) => enc.u8(1).u32(code as u32),
                        None => enc.u8(0),
                    };
                    enc.u8(s.attached as u8).u64(s.oldest_offset).u64(s.end_offset).u64(s.started_ms);
                }
                enc.finish()
            }
            Event::Done => Enc::new(116, id).finish(),
            Event::ForwardOpened { address } => {
                let mut enc = Enc::new(140, id);
                enc.bytes(address.as_bytes());
                enc.finish()
            }
            Event::ForwardData(d) => {
                let mut enc = Enc::new(141, id);
                enc.bytes(d);
                enc.finish()
            }
            Event::ForwardEof => Enc::new(142, id).finish(),
            Event::ForwardAck(n) => {
                let mut enc = Enc::new(143, id);
                enc.u64(*n);
                enc.finish()
            }
            Event::Entries(list) => {
                let mut enc = Enc::new(150, id);
                enc.u32(list.len() as u32);
                for e in list {
                    enc.entry(e);
                }
                enc.finish()
            }
            Event::Watching => Enc::new(151, id).finish(),
            Event::Change(c) => {
                let mut enc = Enc::new(152, id);
                enc.u8(c.kind as u8).bytes(&c.path).bytes(&c.old_path).u8(c.is_dir as u8);
                enc.finish()
            }
        }
    }

    fn decode(kind: u8, d: &mut Dec<'_>) -> io::Result<Self> {
        Ok(match kind {
            101 => Event::Hello { version: d.u32()?, pid: d.u32()? },
            102 => Event::Stdout(d.bytes()?),
            103 => Event::Stderr(d.bytes()?),
            104 => Event::Exit(ExecExit {
                code: d.u32()? as i32,
                killed: d.u8()? == 1,
                dropped_stdout: d.u64()?,
                dropped_stderr: d.u64()?,
                usage: Usage {
                    wall_us: d.u64()?,
                    user_us: d.u64()?,
                    system_us: d.u64()?,
                    peak_rss_bytes: d.u64()?,
                },
            }),
            105 => {
                let kind = FailureKind::from_u8(d.u8()?);
                let message = String::from_utf8_lossy(&d.bytes()?).into_owned();
                Event::Failed { kind, message }
            }
            106 => Event::PutDone { size: d.u64()? },
            107 => Event::GetStart { size: d.u64()? },
            108 => Event::GetData(d.bytes()?),
            109 => Event::GetEnd,
            110 => Event::Readiness {
                state: match d.u8()? {
                    0 => ReadyState::Pending,
                    1 => ReadyState::Ready,
                    _ => ReadyState::Failed,
                },
                shell: d.string()?,
                detail: String::from_utf8_lossy(&d.bytes()?).into_owned(),
            },
            111 => Event::SessionOpened { session_id: d.string()?, pid: d.u32()?, offset: d.u64()? },
            112 => Event::Output { stderr: d.u8()? == 1, offset: d.u64()?, data: d.bytes()? },
            113 => Event::SessionExit { code: d.u32()? as i32 },
            114 => Event::Detached {
                reason: match d.u8()? {
                    2 => DetachReason::TakenOver,
                    3 => DetachReason::InputFull,
                    _ => DetachReason::Requested,
                },
                message: String::from_utf8_lossy(&d.bytes()?).into_owned(),
            },
            115 => {
                let n = d.u32()? as usize;
                // Each row takes at least 42 bytes: a count beyond what the frame holds is a lie.
                if n > d.0.len() / 42 {
                    return Err(short());
                }
                let mut list = Vec::with_capacity(n);
                for _ in 0..n {
                    let session_id = d.string()?;
                    let argv = d.strings()?;
                    let pty = if d.u8()? == 1 { Some(d.size()?) } else { None };
                    let pid = d.u32()?;
                    let exit_code = if d.u8()? == 1 { Some(d.u32()? as i32) } else { None };
                    list.push(SessionInfo {
                        session_id,
                        argv,
                        pty,
                        pid,
                        exit_code,
                        attached: d.u8()? == 1,
                        oldest_offset: d.u64()?,
                        end_offset: d.u64()?,
                        started_ms: d.u64()?,
                    });
                    if list[list.len() - 1].oldest_offset > list[list.len() - 1].end_offset {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "session offsets out of order",
                        ));
                    }
                }
                Event::Sessions(list)
            }
            116 => Event::Done,
            140 => Event::ForwardOpened { address: d.string()? },
            141 => Event::ForwardData(d.bytes()?),
            142 => Event::ForwardEof,
            143 => Event::ForwardAck(d.u64()?),
            150 => {
                let n = d.u32()? as usize;
                // Each entry takes at least 41 bytes: a count beyond what the frame holds is a lie.
                if n > d.0.len() / 41 {
                    return Err(short());
                }
                let mut list = Vec::with_capacity(n);
                for _ in 0..n {
                    list.push(d.entry()?);
                }
                Event::Entries(list)
            }
            151 => Event::Watching,
            152 => Event::Change(FsChange {
                kind: match d.u8()? {
                    1 => FsChangeKind::Create,
                    2 => FsChangeKind::Modify,
                    3 => FsChangeKind::Remove,
                    4 => FsChangeKind::Rename,
                    k => return Err(bad_kind(k)),
                },
                path: d.bytes()?,
                old_path: d.bytes()?,
                is_dir: d.u8()? == 1,
            }),
            k => return Err(bad_kind(k)),
        })
    }
}

/// Split a frame body (everything after the length) into kind, id and payload decoder.
fn parse_body<T>(body: &[u8], decode: fn(u8, &mut Dec<'_>) -> io::Result<T>) -> io::Result<Frame<T>> {
    let mut d = Dec(body);
    let kind = d.u8()?;
    let id = d.u64()?;
    let message = decode(kind, &mut d)?;
    if !d.0.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "trailing bytes in agent frame"));
    }
    Ok(Frame { id, message })
}

/// The body length a frame header announces, checked against `max`.
pub fn body_len(header: [u8; 4], max: usize) -> io::Result<usize> {
    let len = u32::from_le_bytes(header) as usize;
    if !(9..=max).contains(&len) {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("agent frame of {len} bytes")));
    }
    Ok(len)
}

/// The first whole frame in `buf`: its body and the bytes it took, `None` while incomplete.
/// Pure (the fuzz target drives it with the decoders): a length over `max` is an error before
/// anything is allocated.
pub fn split_frame(buf: &[u8], max: usize) -> io::Result<Option<(&[u8], usize)>> {
    let Some(header) = buf.get(..4) else { return Ok(None) };
    let len = body_len([header[0], header[1], header[2], header[3]], max)?;
    Ok(buf.get(4..4 + len).map(|body| (body, 4 + len)))
}

/// Decode a request body (what follows the 4-byte length).
pub fn decode_request(body: &[u8]) -> io::Result<Frame<Request>> {
    parse_body(body, Request::decode)
}

/// Decode an event body (what follows the 4-byte length).
pub fn decode_event(body: &[u8]) -> io::Result<Frame<Event>> {
    parse_body(body, Event::decode)
}

/// Read one frame body (at most `max` bytes) from a blocking reader; `Ok(None)` at a clean end
/// of stream.
pub fn read_body(reader: &mut impl Read, max: usize) -> io::Result<Option<Vec<u8>>> {
    let mut header = [0u8; 4];
    match reader.read_exact(&mut header) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let mut body = vec![0u8; body_len(header, max)?];
    reader.read_exact(&mut body)?;
    Ok(Some(body))
}

/// Write one encoded frame to a blocking writer.
pub fn write_frame(writer: &mut impl Write, frame: &[u8]) -> io::Result<()> {
    writer.write_all(frame)?;
    writer.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request_round_trip(r: Request) {
        let bytes = r.encode(42);
        let body = read_body(&mut bytes.as_slice(), MAX_FRAME).unwrap().unwrap();
        assert_eq!(decode_request(&body).unwrap(), Frame { id: 42, message: r });
    }

    fn event_round_trip(e: Event) {
        let bytes = e.encode(7);
        let body = read_body(&mut bytes.as_slice(), MAX_FRAME).unwrap().unwrap();
        assert_eq!(decode_event(&body).unwrap(), Frame { id: 7, message: e });
    }

    #[test]
    fn every_request_round_trips() {
        request_round_trip(Request::Exec(ExecStart {
            shell: "bash".into(),
            command: b"printf '%s' \"$X\"".to_vec(),
            env: vec![("X".into(), "a=b".into()), ("EMPTY".into(), String::new())],
            cwd: Some("/work".into()),
            user: None,
            stdin: true,
            output_limit: 16 << 20,
        }));
        request_round_trip(Request::Stdin(vec![0, 1, 2, 255]));
        request_round_trip(Request::StdinEnd);
        request_round_trip(Request::Kill);
        request_round_trip(Request::Credit(1 << 40));
        request_round_trip(Request::PutStart { path: "/a/b".into(), mode: 0o4755 });
        request_round_trip(Request::PutData(vec![9; 1000]));
        request_round_trip(Request::PutEnd { size: 1000 });
        request_round_trip(Request::PutAbort);
        request_round_trip(Request::Get { path: "/etc/passwd".into() });
        request_round_trip(Request::SessionOpen(SessionStart {
            argv: vec!["bash".into(), "-l".into()],
            env: vec![("TERM".into(), "xterm".into())],
            cwd: Some("/w".into()),
            user: Some("1000:1000".into()),
            pty: Some(WindowSize { rows: 40, cols: 132 }),
            retain_bytes: 1 << 20,
            detach_timeout_ms: Some(5000),
            attach: true,
        }));
        request_round_trip(Request::SessionOpen(SessionStart {
            argv: vec!["sleep".into()],
            detach_timeout_ms: Some(DETACH_NEVER),
            ..Default::default()
        }));
        request_round_trip(Request::SessionAttach {
            session_id: "ab".into(),
            since: Some(9),
            takeover: true,
        });
        request_round_trip(Request::SessionAttach { session_id: "ab".into(), since: None, takeover: false });
        request_round_trip(Request::Resize(WindowSize { rows: 1, cols: 65535 }));
        request_round_trip(Request::Signal(libc::SIGINT));
        request_round_trip(Request::Detach);
        request_round_trip(Request::Abandon);
        request_round_trip(Request::SignalSession { session_id: "x".into(), signal: 15 });
        request_round_trip(Request::CloseSession { session_id: "x".into() });
        request_round_trip(Request::ListSessions);
        request_round_trip(Request::ForwardOpen { host: "127.0.0.1".into(), port: 65535 });
        request_round_trip(Request::ForwardData(vec![0, 255, 7]));
        request_round_trip(Request::ForwardEnd);
        let odd = b"/w/a b\n\xff".to_vec();
        request_round_trip(Request::ListDir {
            path: odd.clone(),
            depth: 3,
            include_hidden: true,
            user: None,
        });
        request_round_trip(Request::Stat {
            path: odd.clone(),
            follow_links: true,
            user: Some("1000".into()),
        });
        request_round_trip(Request::MakeDir { path: odd.clone(), parents: true, mode: 0o700, user: None });
        request_round_trip(Request::Remove { path: odd.clone(), recursive: true, user: None });
        request_round_trip(Request::Rename {
            source: odd.clone(),
            destination: b"/x".to_vec(),
            overwrite: false,
            user: Some("u:g".into()),
        });
        request_round_trip(Request::WatchDir { path: odd, recursive: true, user: None });
    }

    #[test]
    fn every_event_round_trips() {
        event_round_trip(Event::Hello { version: PROTOCOL_VERSION, pid: 12 });
        event_round_trip(Event::Stdout(b"out".to_vec()));
        event_round_trip(Event::Stderr(Vec::new()));
        event_round_trip(Event::Exit(ExecExit {
            code: -1i32.wrapping_add(138),
            killed: true,
            dropped_stdout: 5,
            dropped_stderr: 6,
            usage: Usage { wall_us: 1, user_us: 2, system_us: 3, peak_rss_bytes: 4096 },
        }));
        event_round_trip(Event::Failed { kind: FailureKind::Cwd, message: "cwd \"/x\"".into() });
        event_round_trip(Event::PutDone { size: 3 });
        event_round_trip(Event::GetStart { size: 3 });
        event_round_trip(Event::GetData(vec![1, 2, 3]));
        event_round_trip(Event::GetEnd);
        event_round_trip(Event::Readiness {
            state: ReadyState::Failed,
            shell: String::new(),
            detail: "x".into(),
        });
        event_round_trip(Event::SessionOpened { session_id: "s".into(), pid: 9, offset: 1 << 33 });
        event_round_trip(Event::Output { stderr: true, offset: 5, data: b"err".to_vec() });
        event_round_trip(Event::SessionExit { code: 130 });
        event_round_trip(Event::Detached { reason: DetachReason::TakenOver, message: "m".into() });
        event_round_trip(Event::Detached { reason: DetachReason::InputFull, message: "f".into() });
        event_round_trip(Event::Sessions(vec![
            SessionInfo {
                session_id: "a".into(),
                argv: vec!["sh".into(), "-c".into(), "x".into()],
                pty: Some(WindowSize { rows: 2, cols: 3 }),
                pid: 4,
                exit_code: Some(1),
                attached: true,
                oldest_offset: 5,
                end_offset: 6,
                started_ms: 7,
            },
            SessionInfo::default(),
        ]));
        event_round_trip(Event::Done);
        event_round_trip(Event::ForwardOpened { address: "[::1]:80".into() });
        event_round_trip(Event::ForwardData(b"HTTP/1.0 200 OK".to_vec()));
        event_round_trip(Event::ForwardEof);
        event_round_trip(Event::ForwardAck(1 << 20));
        event_round_trip(Event::Entries(vec![
            FsEntry {
                name: b"a\nb\xfe".to_vec(),
                path: b"/a\nb\xfe".to_vec(),
                kind: FsKind::Symlink,
                size: 5,
                mode: 0o4755,
                uid: 1000,
                gid: 1001,
                mtime_ms: -5,
                link_target: b"../t".to_vec(),
            },
            FsEntry::default(),
        ]));
        event_round_trip(Event::Watching);
        event_round_trip(Event::Change(FsChange {
            kind: FsChangeKind::Rename,
            path: b"/n".to_vec(),
            old_path: b"/o".to_vec(),
            is_dir: true,
        }));
    }

    #[test]
    fn an_unknown_request_kind_is_told_apart_from_a_broken_frame() {
        let mut body = Request::Kill.encode(77)[4..].to_vec();
        body[0] = 250;
        let e = decode_request(&body).unwrap_err();
        assert_eq!(unknown_request_id(&body, &e), Some(77));
        let body = Request::Get { path: "/x".into() }.encode(1)[4..].to_vec();
        let e = decode_request(&body[..body.len() - 1]).unwrap_err();
        assert_eq!(unknown_request_id(&body, &e), None, "a truncated known frame is broken");
    }

    #[test]
    fn split_frame_waits_for_a_whole_frame_and_refuses_oversized_ones() {
        let frame = Request::ListSessions.encode(3);
        assert_eq!(split_frame(&frame[..frame.len() - 1], MAX_FRAME).unwrap(), None);
        let (body, used) = split_frame(&frame, MAX_FRAME).unwrap().unwrap();
        assert_eq!(used, frame.len());
        assert_eq!(decode_request(body).unwrap().message, Request::ListSessions);
        assert!(split_frame(&u32::MAX.to_le_bytes(), MAX_FRAME).is_err());
    }

    #[test]
    fn counts_larger_than_the_frame_are_errors_not_allocations() {
        let mut body = Enc::new(115, 1);
        body.u32(u32::MAX);
        let bytes = body.finish();
        assert!(decode_event(&bytes[4..]).is_err());
        let mut body = Enc::new(11, 1);
        body.u32(u32::MAX);
        let bytes = body.finish();
        assert!(decode_request(&bytes[4..]).is_err());
    }

    #[test]
    fn bad_frames_are_errors_not_panics() {
        assert!(body_len([0, 0, 0, 0], MAX_FRAME).is_err(), "a frame shorter than kind + id");
        assert!(body_len(((MAX_FRAME + 1) as u32).to_le_bytes(), MAX_FRAME).is_err(), "an oversized frame");
        let mut body = Request::Kill.encode(1)[4..].to_vec();
        body[0] = 250;
        assert!(decode_request(&body).is_err(), "unknown kind");
        let body = Request::Get { path: "/x".into() }.encode(1)[4..].to_vec();
        assert!(decode_request(&body[..body.len() - 1]).is_err(), "truncated payload");
        let mut body = Request::Kill.encode(1)[4..].to_vec();
        body.push(0);
        assert!(decode_request(&body).is_err(), "trailing bytes");
        assert_eq!(read_body(&mut [].as_slice(), MAX_FRAME).unwrap(), None, "clean end of stream");
    }
}
