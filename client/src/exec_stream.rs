//! [`Sandbox::exec_stream`]: a command's output as it is produced, then how it ended.
//! Dropping the stream cancels the call, and the server stops the command and everything it
//! started.

use std::time::Duration;

use crate::error::{ClientError, Result};
use crate::proto;
use crate::sandbox::{ExecOptions, Sandbox};

/// What one command's process tree used (when the server's exec engine can measure it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecUsage {
    /// Wall-clock time from start to exit.
    pub wall_time: Duration,
    /// User CPU time of the command and its waited-for descendants.
    pub user_cpu: Duration,
    /// System CPU time of the command and its waited-for descendants.
    pub system_cpu: Duration,
    /// Peak resident set size of the largest process in the tree.
    pub peak_rss_bytes: u64,
}

impl From<proto::ExecUsage> for ExecUsage {
    fn from(u: proto::ExecUsage) -> Self {
        let seconds = |s: f64| Duration::try_from_secs_f64(s).unwrap_or_default();
        ExecUsage {
            wall_time: seconds(u.wall_time_s),
            user_cpu: seconds(u.user_cpu_s),
            system_cpu: seconds(u.system_cpu_s),
            peak_rss_bytes: u.peak_rss_bytes,
        }
    }
}

/// How a streamed command ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecExit {
    /// The exit code; 125 with an `error_type`.
    pub return_code: i32,
    /// `None` when the command ran to its exit; `timeout` or `sandbox` otherwise.
    pub error_type: Option<String>,
    pub usage: Option<ExecUsage>,
}

/// One message of a streamed exec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecEvent {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    /// The last event.
    Exit(ExecExit),
}

/// The events of one [`Sandbox::exec_stream`] call.
pub struct ExecEventStream {
    inner: tonic::Streaming<proto::ExecStreamResponse>,
    ended: bool,
}

impl ExecEventStream {
    /// The next event; `None` after [`ExecEvent::Exit`].
    pub async fn next(&mut self) -> Result<Option<ExecEvent>> {
        if self.ended {
            return Ok(None);
        }
        let Some(message) = self.inner.message().await? else {
            return Err(ClientError::Protocol("the ExecStream ended without an exit".to_string()));
        };
        Ok(Some(match message.response {
            Some(proto::exec_stream_response::Response::Stdout(d)) => ExecEvent::Stdout(d),
            Some(proto::exec_stream_response::Response::Stderr(d)) => ExecEvent::Stderr(d),
            Some(proto::exec_stream_response::Response::Exit(x)) => {
                self.ended = true;
                ExecEvent::Exit(ExecExit {
                    return_code: x.return_code,
                    error_type: Some(x.error_type).filter(|e| !e.is_empty()),
                    usage: x.usage.map(ExecUsage::from),
                })
            }
            None => return Err(ClientError::Protocol("an empty ExecStreamResponse".to_string())),
        }))
    }
}

impl Sandbox {
    /// Runs `<shell> -c command`, delivering stdout and stderr as they are produced. Drop the
    /// stream to cancel: the command and everything it started are stopped.
    pub async fn exec_stream(
        &self,
        command: impl Into<String>,
        options: ExecOptions,
    ) -> Result<ExecEventStream> {
        self.ensure_live()?;
        let req = proto::ExecRequest {
            sandbox_id: self.id().to_string(),
            command: command.into(),
            cwd: options.cwd,
            env: options.env,
            timeout_s: options.timeout_s,
            user: options.user,
            stdin: options.stdin,
        };
        let inner = self.rpc().exec_stream(req).await?.into_inner();
        Ok(ExecEventStream { inner, ended: false })
    }
}
