//! The agent's wire protocol: length-prefixed binary frames over one byte stream (the stdio of
//! one `docker exec -i`), many requests multiplexed by id.
//!
//! A frame is `u32 len (little endian) | u8 kind | u64 request id | payload`, `len` counting
//! everything after itself. Payload fields are fixed-width little-endian integers and
//! `u32 len | bytes` strings. Hand-written rather than serde: the agent must stay a small static
//! binary with no dependency beyond libc, and both ends are built from this one module.

/// Bumped on any change; the agent announces it in `Hello`. Version 2 added the socket's
/// `Readiness` and the session requests; version 3 the port-forward frames (kinds 40-42 and
/// 140-143); every older frame is unchanged. `Detached`'s reason `InputFull` (3) came within 3:
/// only an agent that bounds its input sends it, and an older reader takes it for `Requested`.
/// Version 4 carries extended attributes: `PutStart` sets them, every `FsEntry` lists them.
pub const PROTOCOL_VERSION: u32 = 4;
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

mod event;
mod frame;
mod request;
#[cfg(test)]
mod tests;
mod types;

pub use event::{decode_event, Event};
pub use frame::{body_len, read_body, split_frame, unknown_request_id, write_frame, Frame, UnknownKind};
pub use request::{decode_request, Request};
pub use types::{
    check_xattrs, DetachReason, ExecExit, ExecStart, FailureKind, FsChange, FsChangeKind, FsEntry, FsKind,
    ReadyState, SessionInfo, SessionStart, Usage, WindowSize, Xattr, MAX_XATTRS, MAX_XATTR_VALUE,
    USER_XATTR_PREFIX,
};
