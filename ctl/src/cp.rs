//! `sandboxctl cp [-r] SRC DST`: one side `ID:/path`, the other a local path or `-` (stdin,
//! stdout). Files stream in chunks; a progress bar shows on a terminal (from 1 MiB: bytes, total,
//! rate and ETA; a download's total is the file's size from `Stat`).
//!
//! `-r` copies a directory tree as one tar stream (`tree.rs` packs and checks it here): up, it
//! is sent with `Upload` to a uniquely named file in the sandbox's `/tmp` and unpacked there by
//! the sandbox's `tar` (as root, owned by root as `Upload` leaves files), the archive removed
//! either way; down, the sandbox's `tar` writes the tree to stdout (`ExecStream`) and it is
//! unpacked here. A remote path that is a file is copied as a file, `-r` or not.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use sandboxd_client::{proto, Client, UPLOAD_CHUNK_BYTES};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::error::CtlError;
use crate::parse::{self, Location};
use crate::tree;

#[derive(Debug, Args)]
pub struct CpArgs {
    /// `ID:/path`, a local path, or `-` for stdin.
    src: String,
    /// `ID:/path`, a local path, or `-` for stdout.
    dst: String,
    /// Copy directories and everything in them (modes and links kept; a link out of the tree
    /// is refused). `ID:/dir/` (a trailing `/`) means into that directory under the source's name.
    #[arg(long, short = 'r')]
    recursive: bool,
}

/// Files at least this large get a progress bar (on a terminal).
const PROGRESS_FROM: u64 = 1 << 20;

pub async fn run(client: &Client, args: CpArgs) -> Result<i32, CtlError> {
    match (parse::location(&args.src), parse::location(&args.dst)) {
        (Location::Local(local), Location::Remote { sandbox_id, path })
            if args.recursive && local.is_dir() =>
        {
            let (entries, dest) = upload_tree(client, &local, &sandbox_id, &path).await?;
            eprintln!("{entries} entries copied to {sandbox_id}:{dest}");
            Ok(0)
        }
        (Location::Remote { sandbox_id, path }, Location::Local(local)) if args.recursive => {
            match download_tree(client, &sandbox_id, &path, &local).await? {
                Some((entries, target)) => {
                    eprintln!("{entries} entries copied from {sandbox_id}:{path} to {}", target.display())
                }
                None => {
                    if let Some((read, target)) =
                        download(client, &sandbox_id, &path, Location::Local(local)).await?
                    {
                        eprintln!("{read} bytes copied from {sandbox_id}:{path} to {}", target.display());
                    }
                }
            }
            Ok(0)
        }
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
                if meta.is_dir() {
                    return Err(CtlError::local(format!(
                        "{} is a directory (cp -r copies trees)",
                        local.display()
                    )));
                }
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
    let written = send(client, reader, size, mode, sandbox_id, &path).await?;
    Ok((written, path))
}

/// Streams `reader` (`size` bytes when known) to `path` in the sandbox; the bytes written.
async fn send(
    client: &Client,
    reader: Box<dyn AsyncRead + Unpin + Send>,
    size: Option<u64>,
    mode: Option<u32>,
    sandbox_id: &str,
    path: &str,
) -> Result<u64, CtlError> {
    let bar = progress(size);
    let header = proto::UploadRequest {
        request: Some(proto::upload_request::Request::Header(proto::UploadHeader {
            sandbox_id: sandbox_id.to_string(),
            path: path.to_string(),
            mode,
            size,
            xattrs: Default::default(),
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
    Ok(result?.into_inner().bytes_written)
}

/// `cp -r DIR ID:/path`: the tree becomes `/path` (`/path/` + its name with a trailing `/`).
/// Returns the entries copied and where they went.
async fn upload_tree(
    client: &Client,
    local: &Path,
    sandbox_id: &str,
    path: &str,
) -> Result<(u64, String), CtlError> {
    absolute(path)?;
    let dest = match (path.ends_with('/'), local.canonicalize()?.file_name()) {
        (true, Some(name)) => format!("{path}{}", name.to_string_lossy()),
        _ => path.to_string(),
    };
    let (archive, entries) = tree::pack(local)?;
    let size = archive.metadata()?.len();
    let spool = format!("/tmp/.sandboxctl-{}.tar", uuid::Uuid::new_v4().simple());
    send(client, Box::new(tokio::fs::File::from_std(archive)), Some(size), Some(0o600), sandbox_id, &spool)
        .await?;
    let (d, s) = (quote(&dest)?, quote(&spool)?);
    let script = format!("rc=0; mkdir -p -- {d} && tar -x -o -f {s} -C {d} || rc=$?; rm -f -- {s}; exit $rc");
    let result = as_root(client, sandbox_id, script).await?;
    if result.return_code != 0 || !result.error_type.is_empty() {
        let why = String::from_utf8_lossy(&result.stderr).trim().to_string();
        return Err(CtlError::local(format!("unpacking into {sandbox_id}:{dest} failed: {why}")));
    }
    Ok((entries, dest))
}

/// The exit code the pack script gives when the remote path is not a directory.
const NOT_A_DIRECTORY: i32 = 3;

/// `cp -r ID:/dir LOCAL`: `None` when `/dir` is not a directory (the caller copies it as a
/// file); else the entries copied and the local directory they went to.
async fn download_tree(
    client: &Client,
    sandbox_id: &str,
    path: &str,
    local: &Path,
) -> Result<Option<(u64, PathBuf)>, CtlError> {
    use proto::exec_stream_response::Response;
    absolute(path)?;
    let p = quote(path)?;
    let script = format!("[ -d {p} ] || exit {NOT_A_DIRECTORY}; cd -- {p} && exec tar -c -f - .");
    let request = exec_request(sandbox_id, script);
    let mut stream = client.raw().exec_stream(request).await?.into_inner();
    let mut spool = tokio::fs::File::from_std(tempfile::tempfile()?);
    let (mut stderr, bar) = (Vec::new(), progress(None));
    let exit = loop {
        match stream.message().await?.and_then(|m| m.response) {
            Some(Response::Stdout(bytes)) => {
                spool.write_all(&bytes).await?;
                bar.inc(bytes.len() as u64);
            }
            Some(Response::Stderr(bytes)) => stderr.extend_from_slice(&bytes),
            Some(Response::Exit(exit)) => break exit,
            None => return Err(CtlError::local("the exec stream ended without an exit")),
        }
    };
    bar.finish_and_clear();
    if exit.return_code == NOT_A_DIRECTORY && exit.error_type.is_empty() {
        return Ok(None);
    }
    if exit.return_code != 0 || !exit.error_type.is_empty() {
        let why = [exit.message.trim(), String::from_utf8_lossy(&stderr).trim()].join(" ");
        return Err(CtlError::local(format!("packing {sandbox_id}:{path} failed: {}", why.trim())));
    }
    spool.flush().await?;
    let mut archive = spool.into_std().await;
    std::io::Seek::seek(&mut archive, std::io::SeekFrom::Start(0))?;
    let target = into_dir(local, path.trim_end_matches('/'));
    let entries = tokio::task::spawn_blocking(move || tree::unpack(archive, &target).map(|n| (n, target)))
        .await
        .map_err(|e| CtlError::local(format!("unpacking: {e}")))??;
    Ok(Some(entries))
}

/// The size of the file at `path` in the sandbox, for a download's bar (its total and ETA): asked
/// only when a bar can show (stderr is a terminal); `None` when unknown (the bar counts bytes).
async fn remote_size(client: &Client, sandbox_id: &str, path: &str) -> Option<u64> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let request = proto::StatRequest {
        sandbox_id: sandbox_id.to_string(),
        path: path.as_bytes().to_vec(),
        follow_links: true,
        ..Default::default()
    };
    let entry = client.raw().stat(request).await.ok()?.into_inner().entry?;
    (entry.r#type == proto::FileType::File as i32).then_some(entry.size)
}

fn absolute(path: &str) -> Result<(), CtlError> {
    match path.starts_with('/') {
        true => Ok(()),
        false => Err(CtlError::local(format!("the sandbox path must be absolute (ID:/path), got {path:?}"))),
    }
}

/// A path as one shell word; a NUL cannot be quoted (and cannot be in a path).
fn quote(path: &str) -> Result<String, CtlError> {
    shlex::try_quote(path)
        .map(|q| q.into_owned())
        .map_err(|e| CtlError::local(format!("cannot quote {path:?}: {e}")))
}

/// A `sh -c` script of this module's own, run as root (the tree's files are root's, as
/// `Upload` leaves them).
fn exec_request(sandbox_id: &str, script: String) -> proto::ExecRequest {
    proto::ExecRequest {
        sandbox_id: sandbox_id.to_string(),
        command: script,
        user: Some("0".into()),
        // A large tree takes its time; the server caps this by its own limit.
        timeout_s: Some(3600.0),
        ..Default::default()
    }
}

async fn as_root(client: &Client, sandbox_id: &str, script: String) -> Result<proto::ExecResponse, CtlError> {
    Ok(client.raw().exec(exec_request(sandbox_id, script)).await?.into_inner())
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
    let bar = progress(remote_size(client, sandbox_id, path).await);
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
