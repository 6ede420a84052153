//! The transport seam: how this process reaches into a sandbox. [`ExecEngine`] is the one
//! trait (`exec`, `exec_stream`, `upload`, `download`, `open_terminal`); Docker implements it
//! with `docker exec`/`docker cp` (`backends::docker::transport::cli`) and the agent client
//! (`agent_client::AgentEngine`) with the sandbox's resident agent, falling back per sandbox to
//! the engine its host gives. Both give the same results, shaped here. Nothing here names a
//! backend.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::core::backend::{ExecStream, FileDownload, StreamEvent, TerminalSession, UploadSource};
use crate::core::fs::Xattr;
use crate::core::spec::{ExecErrorType, ExecParams, ExecResult, PtySpec, SandboxHandle};
use crate::core::terminal::{AttachSpec, TerminalInfo};
use crate::error::{ProviderError, Result};

/// One command for an engine: `<shell> -c <command>` in container `name`, with `params`, as
/// `user` (already normalised; `None`: the image's user). `params.timeout` is final: the service
/// resolved the configured default (`exec.default_timeout`) once; `None` runs unbounded.
#[derive(Debug, Clone, Copy)]
pub struct ExecSpec<'a> {
    pub name: &'a str,
    pub shell: &'a str,
    pub command: &'a str,
    pub params: &'a ExecParams,
    pub user: Option<&'a str>,
}

impl<'a> ExecSpec<'a> {
    /// The command in the sandbox of `handle`, with its shell.
    pub fn on(
        handle: &'a SandboxHandle,
        command: &'a str,
        params: &'a ExecParams,
        user: Option<&'a str>,
    ) -> Self {
        Self { name: &handle.sandbox_id, shell: &handle.shell, command, params, user }
    }
}

/// How a command reaches a sandbox.
#[tonic::async_trait]
pub trait ExecEngine: Send + Sync {
    /// Run the command to its end, the timeout, or a transport failure. Output beyond
    /// `exec.max_output_bytes` per stream is dropped and said so on stderr.
    async fn exec(&self, spec: ExecSpec<'_>) -> ExecResult;

    /// As `exec`, with output delivered as it is produced (no output bound: nothing accumulates).
    async fn exec_stream(&self, spec: ExecSpec<'_>) -> ExecStream;

    /// Stream exactly `size` bytes from `source` into file `path` (owned by root, `mode`, with
    /// `xattrs`) of container `name`; the arguments are already checked. A short or long
    /// stream is INVALID_ARGUMENT on `size` and leaves no truncated file.
    async fn upload(
        &self,
        name: &str,
        source: UploadSource<'_>,
        size: u64,
        path: &str,
        mode: u32,
        xattrs: &[Xattr],
    ) -> Result<u64>;

    /// Open file `path` of container `name` for reading: errors about the path (missing, a
    /// directory) come here, before the first byte.
    async fn download(&self, name: &str, path: &str) -> Result<Box<dyn FileDownload>>;

    /// Open a terminal (or pipes) running `spec` (already checked) in container `name` with
    /// its `shell`, as `user` (normalised); returns as soon as its process runs.
    async fn open_terminal(
        &self,
        name: &str,
        shell: &str,
        spec: &PtySpec,
        user: Option<&str>,
    ) -> Result<Arc<dyn TerminalSession>>;

    /// Hold a session the sandbox's agent keeps (see `SandboxBackend::attach_terminal`).
    async fn attach_terminal(&self, name: &str, _attach: &AttachSpec) -> Result<Arc<dyn TerminalSession>> {
        Err(no_sessions(name))
    }

    /// The sessions the sandbox's agent keeps, oldest first.
    async fn list_terminals(&self, name: &str) -> Result<Vec<TerminalInfo>> {
        Err(no_sessions(name))
    }

    /// Forget what the engine holds for a sandbox that was closed.
    fn forget(&self, _name: &str) {}

    /// The container `from` is now named `to` (a create renames it when it is ready).
    fn renamed(&self, _from: &str, _to: &str) {}
}

/// What an engine without sessions in the sandbox says to an attach or a listing.
pub fn no_sessions(name: &str) -> ProviderError {
    ProviderError::Unimplemented(format!(
        "sandbox {name} runs terminals through docker exec: its sessions live in the server, not in \
         the sandbox, and cannot be attached to or listed"
    ))
}

// ----- how an exec ends: the one place every engine shapes results -----

/// Output past `limit` was dropped: logged, and said at the end of stderr.
pub fn note_dropped(stderr: &mut Vec<u8>, limit: usize, dropped: u64) {
    if dropped == 0 {
        return;
    }
    tracing::warn!(dropped, limit, "exec output over the limit was dropped");
    stderr.extend_from_slice(
        format!(
            "\n[sandboxd: output past {limit} bytes per stream was dropped ({dropped} bytes); \
             exec.max_output_bytes sets the limit]\n"
        )
        .as_bytes(),
    );
}

/// The command ran past its timeout, and what was stopped: the agent stops everything it
/// started (`client: None`); the docker engine can only kill its client, named by its
/// (masked) command line.
pub fn timed_out(after: Option<Duration>, client: Option<&str>) -> ExecResult {
    let after = after.unwrap_or_default();
    let stopped = match client {
        None => "it and everything it started were stopped".to_string(),
        Some(client) => format!("its docker exec client was killed: {client}"),
    };
    ExecResult::failed(ExecErrorType::Timeout, format!("the command timed out after {after:?}; {stopped}"))
}

/// An `ExecStream` whose events `task` sends; `task`'s `stop` fires when the stream is dropped
/// before its exit (the task then stops the command).
pub fn spawn_stream<F, Fut>(task: F) -> ExecStream
where
    F: FnOnce(mpsc::Sender<StreamEvent>, oneshot::Receiver<()>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(16);
    let (stop_tx, stop_rx) = oneshot::channel();
    tokio::spawn(task(tx, stop_rx));
    ExecStream::new(
        rx,
        Box::new(move || {
            let _ = stop_tx.send(());
        }),
    )
}

/// A failure of the upload's source: a client that stopped sending is a timeout.
pub fn upload_source_error(e: std::io::Error) -> ProviderError {
    if e.kind() == std::io::ErrorKind::TimedOut {
        ProviderError::Timeout(e.to_string())
    } else {
        ProviderError::Io(e)
    }
}
