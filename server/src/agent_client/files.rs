//! Upload and Download through the agent: one request each on the sandbox's channel, the file
//! written beside its target and renamed on success, reads paced by credit.

use sandboxd_agent::protocol::{self, Event, FailureKind, Request, Xattr};
use tokio::io::AsyncBufReadExt;

use super::channel::{AgentChannel, Call};
use crate::core::backend::{FileDownload, UploadSource};
use crate::error::{ProviderError, Result};

/// The provider error for a failure the agent reported about `path` in sandbox `name`.
fn file_error(name: &str, path: &str, kind: FailureKind, message: String) -> ProviderError {
    match kind {
        FailureKind::NotFound => {
            ProviderError::FileNotFound(format!("{path}: no such file in sandbox {name}"))
        }
        FailureKind::IsDirectory => {
            ProviderError::invalid("path", format!("{path} is a directory in the sandbox, not a file"))
        }
        FailureKind::NotDirectory => {
            ProviderError::invalid("path", format!("{path}: a parent is not a directory"))
        }
        FailureKind::ReadOnly => {
            ProviderError::invalid("path", format!("{path}: the sandbox's filesystem is read-only there"))
        }
        FailureKind::NotRegular => ProviderError::invalid("path", format!("{path} is not a regular file")),
        FailureKind::Invalid => ProviderError::invalid("size", message),
        FailureKind::Unsupported => ProviderError::FailedPrecondition(message),
        _ => ProviderError::Docker(format!("{path}: {message}")),
    }
}

fn lost(name: &str) -> ProviderError {
    ProviderError::Docker(format!("the exec agent of sandbox {name} went away during the transfer"))
}

/// Stream exactly `size` bytes from `reader` into `path` (owned by root, `mode`).
pub async fn upload(
    channel: &AgentChannel,
    name: &str,
    mut reader: UploadSource<'_>,
    size: u64,
    path: &str,
    mode: u32,
    xattrs: &[Xattr],
) -> Result<u64> {
    let start = Request::PutStart { path: path.to_string(), mode, xattrs: xattrs.to_vec() };
    let mut call = channel.call(start).await.ok_or_else(|| lost(name))?;
    let mut copied = 0u64;
    loop {
        if let Ok(Event::Failed { kind, message }) = call.events.try_recv() {
            call.finish();
            return Err(file_error(name, path, kind, message));
        }
        // A client that stopped sending is DEADLINE_EXCEEDED, as on the docker engine; dropping
        // the call aborts the transfer in the sandbox (the old file stays).
        let buf = reader.fill_buf().await.map_err(crate::core::exec_engine::upload_source_error)?;
        if buf.is_empty() {
            break;
        }
        let n = buf.len().min(protocol::MAX_CHUNK);
        copied += n as u64;
        if copied > size {
            break;
        }
        if !call.send(Request::PutData(buf[..n].to_vec())).await {
            return Err(lost(name));
        }
        reader.consume(n);
    }
    if copied != size {
        call.send(Request::PutAbort).await;
        call.finish();
        let had = if copied > size { format!("more than {size}") } else { copied.to_string() };
        return Err(ProviderError::invalid(
            "size",
            format!("declared {size} bytes but the stream had {had}"),
        ));
    }
    call.send(Request::PutEnd { size }).await;
    let result = match call.events.recv().await {
        Some(Event::PutDone { size }) => Ok(size),
        Some(Event::Failed { kind, message }) => Err(file_error(name, path, kind, message)),
        _ => Err(lost(name)),
    };
    call.finish();
    result
}

/// A file coming out of a sandbox through its agent.
pub struct AgentDownload {
    call: Call,
    name: String,
    path: String,
    size: u64,
    ended: bool,
}

impl AgentDownload {
    /// Open `path`; errors about it (missing, a directory) come here, before the first byte.
    pub async fn open(channel: &AgentChannel, name: &str, path: &str) -> Result<Self> {
        let mut call =
            channel.call(Request::Get { path: path.to_string() }).await.ok_or_else(|| lost(name))?;
        match call.events.recv().await {
            Some(Event::GetStart { size }) => {
                Ok(Self { call, name: name.into(), path: path.into(), size, ended: false })
            }
            Some(Event::Failed { kind, message }) => {
                call.finish();
                Err(match kind {
                    FailureKind::IsDirectory => {
                        ProviderError::invalid("path", format!("{path} is a directory, not a file"))
                    }
                    kind => file_error(name, path, kind, message),
                })
            }
            _ => {
                call.finish();
                Err(lost(name))
            }
        }
    }
}

#[async_trait::async_trait]
impl FileDownload for AgentDownload {
    fn size(&self) -> u64 {
        self.size
    }

    async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>> {
        if self.ended {
            return Ok(None);
        }
        match self.call.events.recv().await {
            Some(Event::GetData(data)) => {
                self.call.send(Request::Credit(data.len() as u64)).await;
                Ok(Some(data))
            }
            Some(Event::GetEnd) => {
                self.ended = true;
                self.call.finish();
                Ok(None)
            }
            Some(Event::Failed { kind, message }) => {
                self.call.finish();
                Err(file_error(&self.name, &self.path, kind, message))
            }
            _ => {
                self.call.finish();
                Err(lost(&self.name))
            }
        }
    }
}
