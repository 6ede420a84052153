//! Server to agent: the requests and their encoding.

use std::io;

use super::frame::{bad_kind, parse_body, short, Dec, Enc, Frame};
use super::types::{ExecStart, SessionStart, WindowSize, Xattr};

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
        /// Extended attributes of the new file (`user.` names only).
        xattrs: Vec<Xattr>,
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
            Request::PutStart { path, mode, xattrs } => {
                let mut enc = Enc::new(6, id);
                enc.bytes(path.as_bytes()).u32(*mode).xattrs(xattrs);
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

    pub(super) fn decode(kind: u8, d: &mut Dec<'_>) -> io::Result<Self> {
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
            6 => Request::PutStart { path: d.string()?, mode: d.u32()?, xattrs: d.xattrs()? },
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

/// Decode a request body (what follows the 4-byte length).
pub fn decode_request(body: &[u8]) -> io::Result<Frame<Request>> {
    parse_body(body, Request::decode)
}
