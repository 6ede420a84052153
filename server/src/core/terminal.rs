//! What every backend's terminals share with the service: how a session fails and whether it
//! has a terminal. Neutral, beside `backend.rs` (the docker terminals are in `backends/docker/pty/`).

use std::time::Duration;

/// Why a session failed outside a normal process exit.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum PtyError {
    /// A read or wait ran past its timeout (the session is still alive).
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The session failed: the client never started the program, the container went away, the
    /// session was released while a write waited, …
    #[error("{0}")]
    Failed(String),
    /// A caller mistake: unsupported signal, bad size.
    #[error("invalid {field}: {message}")]
    Invalid { field: String, message: String },
    /// Spawning the client failed.
    #[error("cannot start the session: {0}")]
    Spawn(String),
    /// The holder's stream ended and the session runs on: a `PtyDetach`, or a dropped stream
    /// of a session with a detach timeout. The stream ends cleanly.
    #[error("detached; the session runs on")]
    Detached,
    /// Another attach took the session over (ABORTED).
    #[error("{0}")]
    TakenOver(String),
    /// The stream wrote more input than the session queues for a program that does not read
    /// it (RESOURCE_EXHAUSTED): the stream ends, the session runs on.
    #[error("{0}")]
    Exhausted(String),
    /// This backend's sessions cannot do that (UNIMPLEMENTED).
    #[error("{0}")]
    Unsupported(String),
}

/// One session a sandbox keeps (`ListPtySessions`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TerminalInfo {
    pub session_id: String,
    /// What it runs: the `PtyOpen.command`, or the shell it runs interactively.
    pub command: String,
    pub mode: TerminalMode,
    /// The terminal's size now (0 x 0 in pipe mode).
    pub rows: u16,
    pub cols: u16,
    /// Its exit code once it ended.
    pub exit_code: Option<i32>,
    /// Whether a stream holds it.
    pub attached: bool,
    /// Output bytes retained for replay.
    pub retained_bytes: u64,
}

/// Where an attach starts reading a session's retained output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachSpec {
    pub session_id: String,
    /// End the current holder's stream.
    pub takeover: bool,
    /// Replay from this output offset; 0 replays all that is retained.
    pub since: u64,
}

/// Whether a session has a terminal (the shared contract's word for it).
pub use crate::core::spec::TerminalMode;
