//! Frames: the length-prefixed envelope, the field encoder and decoder, and reading and
//! writing whole frames (the part the fuzz target drives). It knows no message: `event` and
//! `request` decode theirs through [`parse_body`].

use std::io::{self, Read, Write};

use super::types::{FsEntry, FsKind, WindowSize, Xattr};

/// One frame: a message and the request it belongs to.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame<T> {
    pub id: u64,
    pub message: T,
}

// ----- encoding ---------------------------------------------------------------------------

pub(super) struct Enc(Vec<u8>);

impl Enc {
    pub(super) fn new(kind: u8, id: u64) -> Self {
        let mut v = Vec::with_capacity(64);
        v.extend_from_slice(&[0; 4]);
        v.push(kind);
        v.extend_from_slice(&id.to_le_bytes());
        Self(v)
    }
    pub(super) fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    pub(super) fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(super) fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(super) fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
        self
    }
    pub(super) fn opt(&mut self, v: Option<&str>) -> &mut Self {
        match v {
            Some(s) => self.u8(1).bytes(s.as_bytes()),
            None => self.u8(0),
        }
    }
    pub(super) fn opt_u64(&mut self, v: Option<u64>) -> &mut Self {
        match v {
            Some(n) => self.u8(1).u64(n),
            None => self.u8(0),
        }
    }
    pub(super) fn size(&mut self, v: WindowSize) -> &mut Self {
        self.0.extend_from_slice(&v.rows.to_le_bytes());
        self.0.extend_from_slice(&v.cols.to_le_bytes());
        self
    }
    pub(super) fn strings(&mut self, v: &[String]) -> &mut Self {
        self.u32(v.len() as u32);
        for s in v {
            self.bytes(s.as_bytes());
        }
        self
    }
    pub(super) fn entry(&mut self, e: &FsEntry) -> &mut Self {
        self.bytes(&e.name)
            .bytes(&e.path)
            .u8(e.kind as u8)
            .u64(e.size)
            .u32(e.mode)
            .u32(e.uid)
            .u32(e.gid)
            .u64(e.mtime_ms as u64)
            .bytes(&e.link_target)
            .xattrs(&e.xattrs)
    }
    pub(super) fn xattrs(&mut self, v: &[Xattr]) -> &mut Self {
        self.u32(v.len() as u32);
        for x in v {
            self.bytes(&x.name).bytes(&x.value);
        }
        self
    }
    pub(super) fn finish(mut self) -> Vec<u8> {
        let len = (self.0.len() - 4) as u32;
        self.0[..4].copy_from_slice(&len.to_le_bytes());
        self.0
    }
}

pub(super) struct Dec<'a>(pub(super) &'a [u8]);

pub(super) fn short() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "truncated agent frame")
}

impl<'a> Dec<'a> {
    pub(super) fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(short());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    pub(super) fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }
    pub(super) fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().map_err(|_| short())?))
    }
    pub(super) fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().map_err(|_| short())?))
    }
    pub(super) fn bytes(&mut self) -> io::Result<Vec<u8>> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    pub(super) fn string(&mut self) -> io::Result<String> {
        String::from_utf8(self.bytes()?)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "agent frame string is not UTF-8"))
    }
    pub(super) fn opt(&mut self) -> io::Result<Option<String>> {
        Ok(if self.u8()? == 1 { Some(self.string()?) } else { None })
    }
    pub(super) fn opt_u64(&mut self) -> io::Result<Option<u64>> {
        Ok(if self.u8()? == 1 { Some(self.u64()?) } else { None })
    }
    pub(super) fn entry(&mut self) -> io::Result<FsEntry> {
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
            xattrs: self.xattrs()?,
        })
    }
    pub(super) fn xattrs(&mut self) -> io::Result<Vec<Xattr>> {
        let n = self.u32()? as usize;
        // Each attribute takes at least its two 4-byte lengths.
        if n > self.0.len() / 8 {
            return Err(short());
        }
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(Xattr { name: self.bytes()?, value: self.bytes()? });
        }
        Ok(v)
    }
    pub(super) fn size(&mut self) -> io::Result<WindowSize> {
        let b = self.take(4)?;
        Ok(WindowSize { rows: u16::from_le_bytes([b[0], b[1]]), cols: u16::from_le_bytes([b[2], b[3]]) })
    }
    pub(super) fn strings(&mut self) -> io::Result<Vec<String>> {
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

pub(super) fn bad_kind(kind: u8) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, UnknownKind(kind))
}

/// The request id of a body whose kind this build does not know, so the agent can answer it
/// with `Failed` instead of ending the channel (a newer server's request on an older agent).
pub fn unknown_request_id(body: &[u8], error: &io::Error) -> Option<u64> {
    error.get_ref()?.downcast_ref::<UnknownKind>()?;
    Some(u64::from_le_bytes(body.get(1..9)?.try_into().ok()?))
}

/// Split a frame body (everything after the length) into kind, id and payload decoder.
pub(super) fn parse_body<T>(
    body: &[u8],
    decode: fn(u8, &mut Dec<'_>) -> io::Result<T>,
) -> io::Result<Frame<T>> {
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
