//! The client's typed errors.

use std::fmt;

pub use sandboxd_proto::contract::FailureKind;
use sandboxd_proto::contract::FAILURE_DOMAIN;
use tonic_types::StatusExt;

/// The failure kind a status carries as a `google.rpc.ErrorInfo` of the `sandboxd` domain.
pub fn failure_kind_of(status: &tonic::Status) -> Option<FailureKind> {
    let info = status.get_details_error_info()?;
    (info.domain == FAILURE_DOMAIN).then(|| FailureKind::from_reason(&info.reason)).flatten()
}

/// Everything a client call can fail with. Server errors keep their gRPC code; nothing the
/// server sends makes the client panic.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The connection to the server could not be made (bad URL, refused, TLS, ...).
    #[error("{}", causes(.0))]
    Transport(#[from] tonic::transport::Error),
    /// The server answered with a gRPC status.
    #[error("server error ({code:?}): {message}")]
    Status {
        /// The status code.
        code: tonic::Code,
        /// The server's message.
        message: String,
        /// Why, when the server named a failure kind (its `google.rpc.ErrorInfo` detail).
        failure_kind: Option<FailureKind>,
    },
    /// A client-side check refused the call (for example an undeclared port or a stopped
    /// sandbox); the message says what is allowed.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A local file could not be read or written.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// A terminal session failed outside a normal process exit, or broke the protocol.
    #[error("pty session error: {0}")]
    Pty(String),
    /// The server sent something the contract does not allow (for example a missing field).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A client-side timeout elapsed.
    #[error("timed out")]
    Timeout,
    /// The session (or stream) was already closed.
    #[error("closed")]
    Closed,
}

impl From<tonic::Status> for ClientError {
    fn from(status: tonic::Status) -> Self {
        ClientError::Status {
            code: status.code(),
            message: status.message().to_string(),
            failure_kind: failure_kind_of(&status),
        }
    }
}

impl ClientError {
    /// The gRPC code that best describes this error (the server's own for [`ClientError::Status`]).
    pub fn code(&self) -> tonic::Code {
        match self {
            ClientError::Transport(_) => tonic::Code::Unavailable,
            ClientError::Status { code, .. } => *code,
            ClientError::InvalidArgument(_) => tonic::Code::InvalidArgument,
            ClientError::Io(_) => tonic::Code::Internal,
            ClientError::Pty(_) => tonic::Code::Aborted,
            ClientError::Protocol(_) => tonic::Code::Internal,
            ClientError::Timeout => tonic::Code::DeadlineExceeded,
            ClientError::Closed => tonic::Code::Cancelled,
        }
    }

    /// The server's message for a [`ClientError::Status`], else this error's text.
    pub fn message(&self) -> String {
        match self {
            ClientError::Status { message, .. } => message.clone(),
            other => other.to_string(),
        }
    }

    /// The failure kind the server named (OOM_KILLED, SANDBOX_GONE, CAPACITY, ...), if any:
    /// what a trainer branches on (mask the rollout, retry it, count it).
    pub fn failure_kind(&self) -> Option<FailureKind> {
        match self {
            ClientError::Status { failure_kind, .. } => *failure_kind,
            ClientError::Transport(_) => Some(FailureKind::DaemonUnavailable),
            _ => None,
        }
    }

    /// True for a server `NOT_FOUND`.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ClientError::Status { code: tonic::Code::NotFound, .. })
    }

    /// True for a server `UNAVAILABLE` or a transport failure.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, ClientError::Transport(_) | ClientError::Status { code: tonic::Code::Unavailable, .. })
    }
}

/// An error and its sources, `: `-joined (tonic's transport error alone says only "transport
/// error"; the cause, such as "Connection refused", is in its sources).
fn causes(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

/// A local file error that names the file.
pub(crate) fn local_file(path: &std::path::Path, err: std::io::Error) -> ClientError {
    ClientError::Io(std::io::Error::new(err.kind(), format!("{}: {err}", path.display())))
}

/// `Result` with [`ClientError`].
pub type Result<T, E = ClientError> = std::result::Result<T, E>;

/// How a terminal session's response stream ended (kept by the session's reader task).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum StreamEnd {
    /// The program exited with this code.
    Exited(i32),
    /// The stream ended with a gRPC status before an exit.
    Failed { code: tonic::Code, message: String },
    /// The stream ended cleanly without an exit message.
    Ended,
}

impl fmt::Display for StreamEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamEnd::Exited(code) => write!(f, "exited with {code}"),
            StreamEnd::Failed { code, message } => write!(f, "failed ({code:?}): {message}"),
            StreamEnd::Ended => f.write_str("ended without an exit status"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_maps_code_and_message() {
        let err: ClientError = tonic::Status::not_found("no sandbox sbx-1").into();
        assert_eq!(err.code(), tonic::Code::NotFound);
        assert_eq!(err.message(), "no sandbox sbx-1");
        assert!(err.is_not_found());
        assert!(!err.is_unavailable());
        let err: ClientError = tonic::Status::unavailable("docker down").into();
        assert!(err.is_unavailable());
        assert!(err.to_string().contains("docker down"));
    }

    #[test]
    fn local_errors_have_codes() {
        assert_eq!(ClientError::InvalidArgument("x".into()).code(), tonic::Code::InvalidArgument);
        assert_eq!(ClientError::Timeout.code(), tonic::Code::DeadlineExceeded);
        assert_eq!(ClientError::Closed.code(), tonic::Code::Cancelled);
        let io: ClientError = std::io::Error::other("disk").into();
        assert_eq!(io.code(), tonic::Code::Internal);
        assert_eq!(io.message(), "I/O error: disk");
    }
}
