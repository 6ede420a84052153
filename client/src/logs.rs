//! [`Client::logs`]: what a sandbox's main process (the keep-alive, or a custom entrypoint)
//! wrote, and with `follow` what it writes next. Dropping the stream cancels the call.

use crate::client::Client;
use crate::error::{ClientError, Result};
use crate::proto;
use crate::sandbox::Sandbox;

/// What [`Client::logs`] reads, and what it delivers: the contract's types.
pub use sandboxd_proto::contract::{LogChunk, LogOptions as LogsOptions};

/// The chunks of one `Logs` call, in order.
pub struct LogStream {
    inner: tonic::Streaming<proto::LogsResponse>,
}

impl LogStream {
    /// The next chunk; `None` at the end (without `follow`: everything written so far was
    /// delivered; with it: the sandbox stopped or the server shut down).
    pub async fn next(&mut self) -> Result<Option<LogChunk>> {
        use proto::logs_response::Output;
        match self.inner.message().await? {
            None => Ok(None),
            Some(proto::LogsResponse { output: Some(Output::Stdout(data)) }) => {
                Ok(Some(LogChunk::Stdout(data)))
            }
            Some(proto::LogsResponse { output: Some(Output::Stderr(data)) }) => {
                Ok(Some(LogChunk::Stderr(data)))
            }
            Some(proto::LogsResponse { output: None }) => {
                Err(ClientError::Protocol("an empty LogsResponse".to_string()))
            }
        }
    }
}

impl Client {
    /// The output of sandbox `sandbox_id`'s main process (`Logs`).
    pub async fn logs(&self, sandbox_id: impl Into<String>, options: LogsOptions) -> Result<LogStream> {
        let req = proto::LogsRequest {
            sandbox_id: sandbox_id.into(),
            follow: options.follow,
            tail_lines: options.tail_lines,
        };
        let inner = self.raw().logs(req).await?.into_inner();
        Ok(LogStream { inner })
    }
}

impl Sandbox {
    /// The output of this sandbox's main process (`Logs`).
    pub async fn logs(&self, options: LogsOptions) -> Result<LogStream> {
        self.ensure_live()?;
        self.client().logs(self.id(), options).await
    }
}
