//! What every backend's terminals share with the service: how a session fails and whether it
//! has a terminal. Neutral, beside `backend.rs` (the docker terminals are in `docker/pty/`).

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
}

/// Whether a session has a terminal (the shared contract's word for it).
pub use crate::spec::TerminalMode;
