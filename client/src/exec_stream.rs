//! [`Sandbox::exec_stream`]: a command's output as it is produced, then how it ended.
//! Dropping the stream cancels the call, and the server stops the command and everything it
//! started.

use crate::error::{ClientError, Result};
use crate::proto;
use crate::sandbox::{ExecOptions, Sandbox};
pub use sandboxd_proto::contract::{ExecEvent, ExecExit};

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
        let event = ExecEvent::try_from(message).map_err(|e| ClientError::Protocol(e.to_string()))?;
        self.ended = matches!(event, ExecEvent::Exit(_));
        Ok(Some(event))
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
