//! [`Sandbox::exec_stream`]: a command's output as it is produced, then how it ended.
//! Dropping the stream cancels the call, and the server stops the command and everything it
//! started.

use crate::error::{ClientError, Result};
use crate::proto;
use crate::sandbox::{ExecOptions, Sandbox};
use sandboxd_proto::contract::{ExecErrorType, ExecUsage};

/// How a streamed command ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecExit {
    /// The exit code; 125 with an `error_type`.
    pub return_code: i32,
    /// `None` when the command ran to its exit; why it did not otherwise.
    pub error_type: Option<ExecErrorType>,
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
                    error_type: ExecErrorType::from_response(&x.error_type),
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
        let req = self.exec_request(command.into(), options);
        let inner = self.rpc().exec_stream(req).await?.into_inner();
        Ok(ExecEventStream { inner, ended: false })
    }
}
