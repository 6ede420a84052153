//! `sandboxctl cp SRC DST`: one side `ID:/path`, the other a local path or `-` (stdin, stdout).
//! Files stream in chunks; a progress bar shows on a terminal.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use sandboxd_client::{proto, Client, UPLOAD_CHUNK_BYTES};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::error::CtlError;
use crate::parse::{self, Location};

#[derive(Debug, Args)]
pub struct CpArgs {
    /// `ID:/path`, a local path, or `-` for stdin.
    src: String,
    /// `ID:/path`, a local path, or `-` for stdout.
    dst: String,
}

/// Files at least this large get a progress bar (on a terminal).
const PROGRESS_FROM: u64 = 1 << 20;

pub async fn run(client: &Client, args: CpArgs) -> Result<i32, CtlError> {
    match (parse::location(&args.src), parse::location(&args.dst)) {
        (from @ (Location::Local(_) | Location::Std), Location::Remote { sandbox_id, path }) => {
            let (written, path) = upload(client, from, &sandbox_id, &path).await?;
            eprintln!("{written} bytes copied to {sandbox_id}:{path}");
            Ok(0)
        }
        (Location::Remote { sandbox_id, path }, to @ (Location::Local(_) | Location::Std)) => {
            if let Some((read, target)) = download(client, &sandbox_id, &path, to).await? {
                eprintln!("{read} bytes copied from {sandbox_id}:{path} to {}", target.display());
            }
            Ok(0)
        }
        _ => Err(CtlError::local("cp copies between a sandbox (ID:/path) and a local path or -")),
    }
}

fn progress(len: Option<u64>) -> ProgressBar {
    if !std::io::stderr().is_terminal() || len.is_some_and(|l| l < PROGRESS_FROM) {
        return ProgressBar::hidden();
    }
    match len {
        Some(len) => ProgressBar::new(len).with_style(
            ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        ),
        None => ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{spinner} {bytes} {bytes_per_sec}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        ),
    }
}

/// Returns the bytes written and the path they went to.
async fn upload(
    client: &Client,
    from: Location,
    sandbox_id: &str,
    path: &str,
) -> Result<(u64, String), CtlError> {
    let (reader, size, mode, name): (Box<dyn AsyncRead + Unpin + Send>, Option<u64>, Option<u32>, _) =
        match from {
            Location::Local(local) => {
                let file = tokio::fs::File::open(&local)
                    .await
                    .map_err(|e| CtlError::local(format!("{}: {e}", local.display())))?;
                let meta = file.metadata().await?;
                if !meta.is_file() {
                    return Err(CtlError::local(format!("{} is not a regular file", local.display())));
                }
                use std::os::unix::fs::PermissionsExt;
                let name = local.file_name().map(|n| n.to_string_lossy().into_owned());
                (Box::new(file), Some(meta.len()), Some(meta.permissions().mode() & 0o7777), name)
            }
            _ => (Box::new(tokio::io::stdin()), None, None, None),
        };
    // `ID:/dir/` means into that directory, under the local file's name.
    let path = match (path.ends_with('/'), name) {
        (true, Some(name)) => format!("{path}{name}"),
        _ => path.to_string(),
    };
    let bar = progress(size);
    let header = proto::UploadRequest {
        request: Some(proto::upload_request::Request::Header(proto::UploadHeader {
            sandbox_id: sandbox_id.to_string(),
            path: path.clone(),
            mode,
            size,
        })),
    };
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let _ = tx.send(header).await;
    let counter = bar.clone();
    let reading = tokio::spawn(async move {
        let mut reader = reader;
        loop {
            let mut buf = vec![0u8; UPLOAD_CHUNK_BYTES];
            let n = reader.read(&mut buf).await?;
            if n == 0 {
                return Ok::<(), std::io::Error>(());
            }
            buf.truncate(n);
            counter.inc(n as u64);
            let chunk = proto::UploadRequest { request: Some(proto::upload_request::Request::Chunk(buf)) };
            if tx.send(chunk).await.is_err() {
                return Ok(());
            }
        }
    });
    let result = client.raw().upload(tokio_stream::wrappers::ReceiverStream::new(rx)).await;
    bar.finish_and_clear();
    if let Ok(Err(e)) = reading.await {
        return Err(CtlError::local(format!("reading the source: {e}")));
    }
    Ok((result?.into_inner().bytes_written, path))
}

/// Returns the bytes read and the local file they went to (`None` for stdout).
async fn download(
    client: &Client,
    sandbox_id: &str,
    path: &str,
    to: Location,
) -> Result<Option<(u64, PathBuf)>, CtlError> {
    let request = proto::DownloadRequest { sandbox_id: sandbox_id.to_string(), path: path.to_string() };
    let mut stream = client.raw().download(request).await?.into_inner();
    let bar = progress(None);
    match to {
        Location::Local(local) => {
            let target = into_dir(&local, path);
            let part = part_path(&target);
            let outcome = async {
                let mut file = tokio::fs::File::create(&part)
                    .await
                    .map_err(|e| CtlError::local(format!("{}: {e}", part.display())))?;
                let mut read = 0u64;
                while let Some(message) = stream.message().await? {
                    file.write_all(&message.chunk).await?;
                    bar.inc(message.chunk.len() as u64);
                    read += message.chunk.len() as u64;
                }
                file.flush().await?;
                drop(file);
                tokio::fs::rename(&part, &target)
                    .await
                    .map_err(|e| CtlError::local(format!("{}: {e}", target.display())))?;
                Ok::<u64, CtlError>(read)
            }
            .await;
            if outcome.is_err() {
                let _ = tokio::fs::remove_file(&part).await;
            }
            bar.finish_and_clear();
            Ok(Some((outcome?, target)))
        }
        _ => {
            let mut out = tokio::io::stdout();
            while let Some(message) = stream.message().await? {
                out.write_all(&message.chunk).await?;
                bar.inc(message.chunk.len() as u64);
            }
            out.flush().await?;
            bar.finish_and_clear();
            Ok(None)
        }
    }
}

/// A local directory means "into it, under the remote file's name".
fn into_dir(local: &Path, remote: &str) -> PathBuf {
    match remote.rsplit('/').next().filter(|n| !n.is_empty()) {
        Some(name) if local.is_dir() => local.join(name),
        _ => local.to_path_buf(),
    }
}

/// The sibling a download writes before renaming it into place (no half file under the name).
fn part_path(target: &Path) -> PathBuf {
    let name =
        target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "download".into());
    target.with_file_name(format!(".{name}.sandboxctl-part"))
}
