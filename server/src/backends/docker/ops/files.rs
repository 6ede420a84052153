//! Files in and out of a sandbox through `docker cp -`, streamed as one-entry tars so neither
//! direction holds a file in memory: the docker transport's `upload` and `download`, and the
//! reading of a transfer's failure that both transports share.

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tracing::Instrument;

use super::argv;
use super::cli::{DockerCli, Pool};
use super::failure::CliError;
use super::failure::DockerFailureKind;
use super::state::ContainerState;
use super::tarstream::{self, FirstEntry};
use crate::core::backend::{FileDownload, UploadSource};
use crate::error::{ProviderError, Result};

/// Copy buffer for file transfers.
const CHUNK: usize = 256 * 1024;

/// Stream exactly `size` bytes from `reader` into `target` of container `name` (arguments
/// already checked): one `docker cp -` fed a tar that names the full path.
pub(crate) async fn cp_upload(
    cli: &DockerCli,
    name: &str,
    mut reader: UploadSource<'_>,
    size: u64,
    target: &str,
    mode: u32,
) -> Result<u64> {
    let prefix = tarstream::file_prefix(target, size, mode).map_err(|e| ProviderError::invalid("path", e))?;
    let args = argv::cp_in_args(name);
    if size > 0 {
        // A transfer permit is taken only once data flows: a client that announces a file
        // and then stalls holds no permit.
        reader.fill_buf().await.map_err(upload_source_error)?;
    }
    let mut child = cli.in_pool(Pool::Transfer).spawn(&args, true, true).await?;
    let mut stdin = child.child.stdin.take().ok_or_else(|| ProviderError::Docker("no stdin pipe".into()))?;
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
        return Err(transfer_error(cli, name, target, e).await);
    }
    Ok(size)
}

/// Open a streaming `docker cp NAME:SOURCE -`: errors about the path (missing, a directory) come
/// here, before the first byte.
pub(crate) async fn cp_download(cli: &DockerCli, name: &str, source: &str) -> Result<Box<dyn FileDownload>> {
    let args = argv::cp_out_args(name, source);
    let mut child = cli.in_pool(Pool::Transfer).spawn(&args, false, true).await?;
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
            return Err(ProviderError::invalid("path", format!("{source} is not a regular file ({kind})")))
        }
        Ok(FirstEntry::Empty) | Err(_) => {
            return Err(match child.finish().await {
                Err(e) => transfer_error(cli, name, source, e).await,
                Ok(()) => ProviderError::Docker(format!("docker cp {source}: no file in its output")),
            });
        }
    };
    Ok(Box::new(CpDownload { child, stdout, remaining: size, size }))
}

/// The state of container `name`: `Ok(None)` when no container has that name.
async fn container_state(cli: &DockerCli, name: &str) -> Result<Option<ContainerState>> {
    let args = argv::inspect_args(name);
    match cli.in_pool(Pool::Control).run(&args, Some(std::time::Duration::from_secs(30)), None).await {
        Ok(out) => Ok(out.stdout_text().trim().split('\t').nth(2).map(ContainerState::parse)),
        Err(e) if e.kind() == Some(DockerFailureKind::MissingContainer) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// A transfer that failed in docker (its agent channel went away, say) because the sandbox
/// stopped or was removed under it is the sandbox's state, not an internal error: NOT_FOUND
/// or FAILED_PRECONDITION. Other errors, and a sandbox still running, stay as they are.
pub(crate) async fn explain_by_state(cli: &DockerCli, name: &str, e: ProviderError) -> ProviderError {
    if !matches!(e, ProviderError::Docker(_)) {
        return e;
    }
    match container_state(cli, name).await {
        Ok(None) => ProviderError::SandboxNotFound(name.into()),
        Ok(Some(ContainerState::Paused)) => ProviderError::Paused(name.into()),
        Ok(Some(state)) if state != ContainerState::Running => ProviderError::Stopped(name.into()),
        _ => e,
    }
}

/// Why a `docker cp` failed. The client words a missing container in several ways (one
/// is "destination must be a directory"), so a failure it does not name is checked by name.
async fn transfer_error(cli: &DockerCli, name: &str, path: &str, e: CliError) -> ProviderError {
    let CliError::Failed(f) = e else { return e.into() };
    if f.kind == DockerFailureKind::MissingContainer || matches!(container_state(cli, name).await, Ok(None)) {
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

/// The file inside the tar a `docker cp NAME:PATH -` client writes.
struct CpDownload {
    child: super::cli::DockerChild,
    stdout: tokio::process::ChildStdout,
    remaining: u64,
    size: u64,
}

#[async_trait::async_trait]
impl FileDownload for CpDownload {
    fn size(&self) -> u64 {
        self.size
    }

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

pub(crate) use crate::core::exec_engine::upload_source_error;

/// Copy up to `size` bytes straight from the reader's own buffer (no copy of ours in between);
/// returns how many the reader had, `size + 1` when it had more.
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
