//! Agent to server: the events and their encoding.

use std::io;

use super::frame::{bad_kind, parse_body, short, Dec, Enc, Frame};
use super::types::{
    DetachReason, ExecExit, FailureKind, FsChange, FsChangeKind, FsEntry, ReadyState, SessionInfo, Usage,
};

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

    pub(super) fn decode(kind: u8, d: &mut Dec<'_>) -> io::Result<Self> {
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
                // Each entry takes at least 45 bytes: a count beyond what the frame holds is a lie.
                if n > d.0.len() / 45 {
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

/// Decode an event body (what follows the 4-byte length).
pub fn decode_event(body: &[u8]) -> io::Result<Frame<Event>> {
    parse_body(body, Event::decode)
}
