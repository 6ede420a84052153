//! Files in and out of a sandbox, streamed through `docker cp -` as one-entry tars so neither
//! direction holds a file in memory.

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tracing::Instrument;

use super::agent;
use super::argv;
use super::cli::Pool;
use super::failure::CliError;
use super::failure::DockerFailureKind;
use super::provider::DockerProvider;
use super::state::ContainerState;
use super::tarstream::{self, FirstEntry};
use crate::error::{ProviderError, Result};
use crate::spec::validate_abs_path;
use crate::spec::SandboxHandle;

/// Largest download served through the agent: its channel (a `docker exec` stdout, about
/// 110 MB/s here) wins on small files by skipping `docker cp`'s fixed cost, `docker cp` wins on
/// large ones (about 220 MB/s out).
const AGENT_DOWNLOAD_MAX: u64 = 8 << 20;

/// Copy buffer for file transfers.
const CHUNK: usize = 256 * 1024;

impl DockerProvider {
    /// The sandbox's agent channel when the agent engine runs and the sandbox has an agent.
    async fn agent_channel(&self, name: &str) -> Option<std::sync::Arc<agent::channel::AgentChannel>> {
        self.agent.as_ref()?.channel(name).await
    }

    /// Stream exactly `size` bytes from `reader` into `target` (mode default 0644), without
    /// holding the file in memory: one `docker cp -` fed a tar that names the full path.
    pub async fn upload_reader<R: AsyncBufRead + Unpin>(
        &self,
        handle: &SandboxHandle,
        mut reader: R,
        size: u64,
        target: &str,
        mode: Option<u32>,
    ) -> Result<u64> {
        validate_abs_path("path", target)?;
        if target.ends_with('/') {
            return Err(ProviderError::invalid(
                "path",
                format!("must name a file, not a directory (got {target:?})"),
            ));
        }
        let mode = mode.unwrap_or(0o644);
        if mode > 0o7777 {
            return Err(ProviderError::invalid(
                "mode",
                format!("must be permission bits <= 0o7777 (got {mode:o})"),
            ));
        }
        if let Some(channel) = self.agent_channel(&handle.sandbox_id).await {
            let copied = agent::files_upload(&channel, &handle.sandbox_id, reader, size, target, mode).await;
            return match copied {
                Err(e) => Err(self.explain_by_state(&handle.sandbox_id, e).await),
                ok => ok,
            };
        }
        let prefix =
            tarstream::file_prefix(target, size, mode).map_err(|e| ProviderError::invalid("path", e))?;
        let args = argv::cp_in_args(&handle.sandbox_id);
        if size > 0 {
            // A transfer permit is taken only once data flows: a client that announces a file
            // and then stalls holds no permit.
            reader.fill_buf().await.map_err(upload_source_error)?;
        }
        let mut child = self.cli.in_pool(Pool::Transfer).spawn(&args, true, true).await?;
        let mut stdin =
            child.child.stdin.take().ok_or_else(|| ProviderError::Docker("no stdin pipe".into()))?;
        child.drain_stderr();
        let feed = async {
            stdin.write_all(&prefix).await?;
            let copied = copy_exact(&mut reader, &mut stdin, size).await?;
            if copied != size {
                return Ok::<_, std::io::Error>(Some(copied));
            }
            stdin.write_all(&tarstream::file_suffix(size)).await?;
            stdin.shutdown().await?;
            Ok(None)
        };
        let fed = feed.instrument(child.span.clone()).await;
        drop(stdin);
        if !matches!(fed, Ok(None)) {
            // Never let docker finish a truncated archive.
            child.kill_group();
        }
        let finished = child.finish().await;
        match fed {
            Ok(Some(copied)) => {
                return Err(ProviderError::invalid(
                    "size",
                    format!("declared {size} bytes but the stream had {copied}"),
                ))
            }
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return Err(upload_source_error(e)),
            Err(e) if finished.is_ok() => return Err(e.into()),
            _ => {}
        }
        if let Err(e) = finished {
            return Err(self.transfer_error(&handle.sandbox_id, target, e).await);
        }
        Ok(size)
    }

    /// Open a streaming download: errors about the path (missing, a directory) come here, before
    /// the first byte, so a caller can still answer with a clean status.
    pub async fn download_stream(&self, handle: &SandboxHandle, source: &str) -> Result<Download> {
        validate_abs_path("path", source)?;
        if let Some(channel) = self.agent_channel(&handle.sandbox_id).await {
            let download = match agent::AgentDownload::open(&channel, &handle.sandbox_id, source).await {
                Ok(download) => download,
                Err(e) => return Err(self.explain_by_state(&handle.sandbox_id, e).await),
            };
            if download.size() <= AGENT_DOWNLOAD_MAX {
                return Ok(Download { source: Source::Agent(download) });
            }
            // A large file: `docker cp` streams it faster than the agent's stdio channel (the
            // agent has already checked the path); dropping the agent's read cancels it.
        }
        let args = argv::cp_out_args(&handle.sandbox_id, source);
        let mut child = self.cli.in_pool(Pool::Transfer).spawn(&args, false, true).await?;
        let mut stdout =
            child.child.stdout.take().ok_or_else(|| ProviderError::Docker("no stdout pipe".into()))?;
        child.drain_stderr();
        let first = tarstream::read_first_entry(&mut stdout).instrument(child.span.clone()).await;
        let size = match first {
            Ok(FirstEntry::File { size, .. }) => size,
            Ok(FirstEntry::Directory) => {
                return Err(ProviderError::invalid("path", format!("{source} is a directory, not a file")))
            }
            Ok(FirstEntry::Other(kind)) => {
                return Err(ProviderError::invalid(
                    "path",
                    format!("{source} is not a regular file ({kind})"),
                ))
            }
            Ok(FirstEntry::Empty) | Err(_) => {
                return Err(match child.finish().await {
                    Err(e) => self.transfer_error(&handle.sandbox_id, source, e).await,
                    Ok(()) => ProviderError::Docker(format!("docker cp {source}: no file in its output")),
                });
            }
        };
        Ok(Download { source: Source::Docker(Box::new(CpDownload { child, stdout, remaining: size, size })) })
    }

    /// A transfer that failed in docker (its agent channel went away, say) because the sandbox
    /// stopped or was removed under it is the sandbox's state, not an internal error: NOT_FOUND
    /// or FAILED_PRECONDITION. Other errors, and a sandbox still running, stay as they are.
    async fn explain_by_state(&self, name: &str, e: ProviderError) -> ProviderError {
        if !matches!(e, ProviderError::Docker(_)) {
            return e;
        }
        match self.inspect(name).await {
            Ok(None) => ProviderError::SandboxNotFound(name.into()),
            Ok(Some(found)) if found.state == ContainerState::Paused => ProviderError::Paused(name.into()),
            Ok(Some(found)) if found.state != ContainerState::Running => ProviderError::Stopped(name.into()),
            _ => e,
        }
    }

    /// Why a `docker cp` failed. The client words a missing container in several ways (one
    /// is "destination must be a directory"), so a failure it does not name is checked by name.
    async fn transfer_error(&self, name: &str, path: &str, e: CliError) -> ProviderError {
        let CliError::Failed(f) = e else { return e.into() };
        if f.kind == DockerFailureKind::MissingContainer || matches!(self.inspect(name).await, Ok(None)) {
            return ProviderError::SandboxNotFound(name.into());
        }
        match f.kind {
            DockerFailureKind::DaemonUnreachable => ProviderError::Unavailable(f.stderr),
            DockerFailureKind::MissingPath => {
                ProviderError::FileNotFound(format!("{path}: no such file in sandbox {name}"))
            }
            DockerFailureKind::PathIsDirectory => {
                ProviderError::invalid("path", format!("{path} is a directory in the sandbox, not a file"))
            }
            DockerFailureKind::ParentNotDirectory => {
                ProviderError::invalid("path", format!("{path}: a parent is not a directory"))
            }
            DockerFailureKind::ReadOnlyPath => {
                ProviderError::invalid("path", format!("{path}: the sandbox's filesystem is read-only there"))
            }
            DockerFailureKind::NotRunning => ProviderError::Stopped(name.into()),
            _ => ProviderError::Docker(format!("docker cp {path}: {}", f.stderr)),
        }
    }
}

/// A file coming out of a sandbox, chunk by chunk.
pub struct Download {
    source: Source,
}

/// Where the bytes come from: the sandbox's agent, or a `docker cp` client's tar stream.
enum Source {
    Agent(agent::AgentDownload),
    Docker(Box<CpDownload>),
}

/// The file inside the tar a `docker cp NAME:PATH -` client writes.
struct CpDownload {
    child: super::cli::DockerChild,
    stdout: tokio::process::ChildStdout,
    remaining: u64,
    size: u64,
}

impl Download {
    /// The file's size in bytes.
    pub fn size(&self) -> u64 {
        match &self.source {
            Source::Agent(d) => d.size(),
            Source::Docker(d) => d.size,
        }
    }

    /// The next chunk, `None` at the end.
    pub async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>> {
        match &mut self.source {
            Source::Agent(d) => d.next_chunk().await,
            Source::Docker(d) => d.next_chunk().await,
        }
    }
}

impl CpDownload {
    async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>> {
        if self.remaining == 0 {
            self.child.abort().await;
            return Ok(None);
        }
        let want = self.remaining.min(CHUNK as u64) as usize;
        let mut buf = vec![0u8; want];
        let n = self.stdout.read(&mut buf).await?;
        if n == 0 {
            return Err(ProviderError::Docker(format!("download ended {} bytes early", self.remaining)));
        }
        buf.truncate(n);
        self.remaining -= n as u64;
        Ok(Some(buf))
    }
}

/// Copy up to `size` bytes straight from the reader's own buffer (no copy of ours in between);
/// returns how many the reader had, `size + 1` when it had more.
/// A failure of the upload's source: a client that stopped sending is a timeout.
pub(in crate::docker) fn upload_source_error(e: std::io::Error) -> ProviderError {
    if e.kind() == std::io::ErrorKind::TimedOut {
        ProviderError::Timeout(e.to_string())
    } else {
        ProviderError::Io(e)
    }
}

async fn copy_exact<R, W>(reader: &mut R, writer: &mut W, size: u64) -> std::io::Result<u64>
where
    R: AsyncBufRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut copied = 0u64;
    while copied < size {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(copied);
        }
        let n = buf.len().min((size - copied).min(usize::MAX as u64) as usize);
        writer.write_all(&buf[..n]).await?;
        reader.consume(n);
        copied += n as u64;
    }
    if !reader.fill_buf().await?.is_empty() {
        return Ok(size + 1);
    }
    Ok(copied)
}
