//! One error type for every command: a gRPC code when the server (or the connection) gave one,
//! and a message. Printed as `CODE: message`.

use std::fmt;

use sandboxd_client::ClientError;

#[derive(Debug)]
pub struct CtlError {
    pub code: Option<tonic::Code>,
    pub message: String,
    /// The failure kind the server named, printed after the message (`[OOM_KILLED]`).
    pub failure_kind: Option<sandboxd_client::FailureKind>,
}

impl CtlError {
    /// A failure on this side (bad argument, local file) with no gRPC code.
    pub fn local(message: impl Into<String>) -> Self {
        Self { code: None, message: message.into(), failure_kind: None }
    }

    /// Prefixes the message with what was being done.
    pub fn context(mut self, what: impl fmt::Display) -> Self {
        self.message = format!("{what}: {}", self.message);
        self
    }
}

impl From<ClientError> for CtlError {
    fn from(e: ClientError) -> Self {
        let code = match &e {
            ClientError::Io(_) | ClientError::InvalidArgument(_) => None,
            other => Some(other.code()),
        };
        Self { code, message: e.message(), failure_kind: e.failure_kind() }
    }
}

impl From<tonic::Status> for CtlError {
    fn from(s: tonic::Status) -> Self {
        Self {
            code: Some(s.code()),
            message: s.message().to_string(),
            failure_kind: sandboxd_client::failure_kind_of(&s),
        }
    }
}

impl From<std::io::Error> for CtlError {
    fn from(e: std::io::Error) -> Self {
        Self::local(e.to_string())
    }
}

/// One line: a multi-line server message (docker's stderr) is joined with ` | `.
impl fmt::Display for CtlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let message: Vec<&str> = self.message.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        match self.code {
            Some(code) => write!(f, "{}: {}", sandboxd_client::code_name(code), message.join(" | "))?,
            None => f.write_str(&message.join(" | "))?,
        }
        // NOT_FOUND already says SANDBOX_GONE.
        match (self.failure_kind, self.code) {
            (Some(sandboxd_client::FailureKind::SandboxGone), Some(tonic::Code::NotFound)) | (None, _) => {
                Ok(())
            }
            (Some(kind), _) => write!(f, " [{}]", kind.reason()),
        }
    }
}

impl std::error::Error for CtlError {}
