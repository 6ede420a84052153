//! The provider layer's errors. Each variant is something a caller can act on differently; the
//! gRPC layer maps them one-to-one onto status codes.

use crate::config::ConfigError;

#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// Bad input: names the field and what is allowed. Nothing was changed.
    #[error("invalid {field}: {message}")]
    InvalidArgument { field: String, message: String },
    /// Server policy forbids the request (for example client-supplied host volumes).
    #[error("not permitted: {0}")]
    PermissionDenied(String),
    /// No such sandbox, or one this service does not own.
    #[error("sandbox {0:?} not found")]
    SandboxNotFound(String),
    /// A path in the sandbox or on the host that does not exist or is the wrong kind.
    #[error("{0}")]
    FileNotFound(String),
    /// Docker could not create the sandbox; no container was left behind.
    #[error("create failed: {0}")]
    Create(String),
    /// The new container never passed its readiness probe; it was removed.
    #[error("readiness verification failed: {0}")]
    CreateVerification(String),
    /// The new container did not pass its readiness probe before its deadline; it was removed.
    #[error("readiness verification failed: {0}")]
    ReadyTimeout(String),
    /// The spec's setup command did not finish within `setup_timeout_s`; the sandbox was removed.
    #[error("setup timed out: {0}")]
    SetupTimeout(String),
    /// The create as a whole ran out of time (the call's deadline or `server.create_timeout_s`).
    #[error("timed out: {0}")]
    CreateTimeout(String),
    /// The sandbox exists but is not running.
    #[error("sandbox {0:?} is not running")]
    Stopped(String),
    /// The sandbox is frozen by `Pause`: exec and terminals wait for `Resume`.
    #[error("sandbox {0:?} is paused; Resume it first")]
    Paused(String),
    /// No such snapshot, or an image this service does not own.
    #[error("snapshot {0:?} not found")]
    SnapshotNotFound(String),
    /// The snapshot is still the image of a sandbox.
    #[error("snapshot in use: {0}")]
    SnapshotInUse(String),
    /// A named volume (or another shared resource) is still used by a sandbox.
    #[error("in use: {0}")]
    InUse(String),
    /// What a file call would make already exists.
    #[error("{0}")]
    AlreadyExists(String),
    /// A server limit was reached (for example `server.max_snapshots`).
    #[error("limit reached: {0}")]
    ResourceExhausted(String),
    /// No room now (this host's start slots, its admission queue): come back after
    /// `retry_after`, an estimate from the measured start rate and the queue.
    #[error("busy: {message}")]
    Busy { message: String, retry_after: std::time::Duration },
    /// The Docker daemon (or the docker binary) cannot be reached.
    #[error("docker unavailable: {0}")]
    Unavailable(String),
    /// A docker call ran out of time.
    #[error("timed out: {0}")]
    Timeout(String),
    /// A terminal session failed outside a normal process exit.
    #[error("pty session failed: {0}")]
    Pty(String),
    /// No terminal session with that id in the sandbox.
    #[error("{0}")]
    SessionNotFound(String),
    /// The session has a holder and the attach did not ask to take it over.
    #[error("{0}")]
    SessionHeld(String),
    /// A position outside what is kept (an attach's `since` older than the retained output).
    #[error("{0}")]
    OutOfRange(String),
    /// The backend (or this sandbox's transport) cannot do this.
    #[error("{0}")]
    Unimplemented(String),
    /// Any other docker failure.
    #[error("docker failed: {0}")]
    Docker(String),
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    // --- processes and ports ---
    /// The call cannot work on this sandbox or engine (the message says why).
    #[error("{0}")]
    FailedPrecondition(String),
    /// No process (agent session) has that id in the sandbox.
    #[error("{0}")]
    ProcessNotFound(String),
    /// The stream was ended by another caller (a takeover).
    #[error("{0}")]
    Aborted(String),
}

impl ProviderError {
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::InvalidArgument { field: field.into(), message: message.into() }
    }
}

impl From<ConfigError> for ProviderError {
    fn from(e: ConfigError) -> Self {
        Self::InvalidArgument { field: e.field, message: e.message }
    }
}

pub type Result<T, E = ProviderError> = std::result::Result<T, E>;
