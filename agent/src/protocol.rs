//! The agent's wire protocol: length-prefixed binary frames over one byte stream (the stdio of
//! one `docker exec -i`), many requests multiplexed by id.
//!
//! A frame is `u32 len (little endian) | u8 kind | u64 request id | payload`, `len` counting
//! everything after itself. Payload fields are fixed-width little-endian integers and
//! `u32 len | bytes` strings. Hand-written rather than serde: the agent must stay a small static
//! binary with no dependency beyond libc, and both ends are built from this one file.

use std::io::{self, Read, Write};

/// Bumped on any incompatible change; the agent announces it in `Hello`.
pub const PROTOCOL_VERSION: u32 = 1;
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
}

fn bad_kind(kind: u8) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("unknown agent frame kind {kind}"))
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
