//! What a command did: its result (unary `Exec`), how a streamed one ended (`ExecExit`), the
//! events of a stream, and their wire mapping.

use super::failure::FailureKind;
use super::words::ExecErrorType;

/// Return code of an exec that did not reach the command's exit (Docker's own convention).
pub const SANDBOX_RUNTIME_RETURN_CODE: i32 = 125;

/// What one command's process tree used (from `wait4`'s rusage on the agent engine).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExecUsage {
    /// Wall-clock time from start to exit.
    pub wall_time: std::time::Duration,
    /// User CPU time of the command and its waited-for descendants.
    pub user_cpu: std::time::Duration,
    /// System CPU time of the command and its waited-for descendants.
    pub system_cpu: std::time::Duration,
    /// Peak resident set size of the largest process in the tree.
    pub peak_rss_bytes: u64,
}

impl From<crate::v1::ExecUsage> for ExecUsage {
    fn from(u: crate::v1::ExecUsage) -> Self {
        let seconds = |s: f64| std::time::Duration::try_from_secs_f64(s).unwrap_or_default();
        ExecUsage {
            wall_time: seconds(u.wall_time_s),
            user_cpu: seconds(u.user_cpu_s),
            system_cpu: seconds(u.system_cpu_s),
            peak_rss_bytes: u.peak_rss_bytes,
        }
    }
}

impl From<ExecUsage> for crate::v1::ExecUsage {
    fn from(u: ExecUsage) -> Self {
        crate::v1::ExecUsage {
            wall_time_s: u.wall_time.as_secs_f64(),
            user_cpu_s: u.user_cpu.as_secs_f64(),
            system_cpu_s: u.system_cpu.as_secs_f64(),
            peak_rss_bytes: u.peak_rss_bytes,
        }
    }
}

/// What a command did. A failing command is a result, never an error.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecResult {
    /// Standard output, byte for byte (the merged terminal output for a terminal's exec).
    pub stdout: Vec<u8>,
    /// Standard error, byte for byte.
    pub stderr: Vec<u8>,
    /// The exit code; 125 with an `error_type`.
    pub return_code: i32,
    /// `None` when the command ran to its exit; why it did not otherwise.
    pub error_type: Option<ExecErrorType>,
    /// What the command's process tree used, when the exec engine measures it.
    pub usage: Option<ExecUsage>,
    /// Why the command produced no result of its own (`None`: it ran to its exit).
    pub failure_kind: Option<FailureKind>,
}

impl ExecResult {
    /// A command that did not reach its own exit: 125 and why.
    pub fn failed(error_type: ExecErrorType, stderr: impl Into<Vec<u8>>) -> Self {
        Self {
            stdout: Vec::new(),
            stderr: stderr.into(),
            return_code: SANDBOX_RUNTIME_RETURN_CODE,
            error_type: Some(error_type),
            usage: None,
            failure_kind: Some(match error_type {
                ExecErrorType::Timeout => FailureKind::Timeout,
                _ => FailureKind::Internal,
            }),
        }
    }

    /// `stdout` as text (invalid UTF-8 replaced).
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// `stderr` as text (invalid UTF-8 replaced).
    pub fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }

    /// True when the command ran and exited 0.
    pub fn success(&self) -> bool {
        self.return_code == 0 && self.error_type.is_none()
    }
}

impl From<crate::v1::ExecResponse> for ExecResult {
    fn from(r: crate::v1::ExecResponse) -> Self {
        ExecResult {
            stdout: r.stdout,
            stderr: r.stderr,
            return_code: r.return_code,
            error_type: ExecErrorType::from_response(&r.error_type),
            usage: r.usage.map(ExecUsage::from),
            failure_kind: FailureKind::from_wire(r.failure_kind),
        }
    }
}

impl From<ExecResult> for crate::v1::ExecResponse {
    fn from(r: ExecResult) -> Self {
        crate::v1::ExecResponse {
            stdout: r.stdout,
            stderr: r.stderr,
            return_code: r.return_code,
            error_type: ExecErrorType::to_wire(r.error_type),
            usage: r.usage.map(Into::into),
            failure_kind: FailureKind::to_wire(r.failure_kind),
        }
    }
}

/// How a streamed command ended (`ExecExit`): an [`ExecResult`] without its output, which went
/// out as it was produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecExit {
    /// The exit code; 125 with an `error_type`.
    pub return_code: i32,
    /// `None` when the command ran to its exit; why it did not otherwise.
    pub error_type: Option<ExecErrorType>,
    /// What the command's process tree used, when the exec engine measures it.
    pub usage: Option<ExecUsage>,
    /// As [`ExecResult::failure_kind`].
    pub failure_kind: Option<FailureKind>,
    /// Why the command did not run to its exit (a missing cwd, an unknown user, a timeout);
    /// empty when it did.
    pub message: String,
}

/// The result of a streamed command: its output already went out, so a failure's reason
/// (which both exec engines put in `stderr`, as unary `Exec` returns it) becomes `message`.
impl From<ExecResult> for ExecExit {
    fn from(r: ExecResult) -> Self {
        let message = match r.error_type {
            Some(_) => String::from_utf8_lossy(&r.stderr).trim().to_string(),
            None => String::new(),
        };
        ExecExit {
            return_code: r.return_code,
            error_type: r.error_type,
            usage: r.usage,
            failure_kind: r.failure_kind,
            message,
        }
    }
}

impl From<crate::v1::ExecExit> for ExecExit {
    fn from(x: crate::v1::ExecExit) -> Self {
        ExecExit {
            return_code: x.return_code,
            error_type: ExecErrorType::from_response(&x.error_type),
            usage: x.usage.map(ExecUsage::from),
            failure_kind: FailureKind::from_wire(x.failure_kind),
            message: x.message,
        }
    }
}

impl From<ExecExit> for crate::v1::ExecExit {
    fn from(x: ExecExit) -> Self {
        crate::v1::ExecExit {
            return_code: x.return_code,
            error_type: ExecErrorType::to_wire(x.error_type),
            usage: x.usage.map(Into::into),
            failure_kind: FailureKind::to_wire(x.failure_kind),
            message: x.message,
        }
    }
}

/// One message of a streamed exec (`ExecStreamResponse`): output as it is produced, then how
/// the command ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecEvent {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    /// The last event.
    Exit(ExecExit),
}

/// An `ExecStreamResponse` with nothing in it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an empty ExecStreamResponse")]
pub struct EmptyResponse;

impl TryFrom<crate::v1::ExecStreamResponse> for ExecEvent {
    type Error = EmptyResponse;

    fn try_from(message: crate::v1::ExecStreamResponse) -> Result<Self, Self::Error> {
        use crate::v1::exec_stream_response::Response;
        match message.response.ok_or(EmptyResponse)? {
            Response::Stdout(data) => Ok(ExecEvent::Stdout(data)),
            Response::Stderr(data) => Ok(ExecEvent::Stderr(data)),
            Response::Exit(exit) => Ok(ExecEvent::Exit(exit.into())),
        }
    }
}

impl From<ExecEvent> for crate::v1::ExecStreamResponse {
    fn from(event: ExecEvent) -> Self {
        use crate::v1::exec_stream_response::Response;
        let response = match event {
            ExecEvent::Stdout(data) => Response::Stdout(data),
            ExecEvent::Stderr(data) => Response::Stderr(data),
            ExecEvent::Exit(exit) => Response::Exit(exit.into()),
        };
        crate::v1::ExecStreamResponse { response: Some(response) }
    }
}
