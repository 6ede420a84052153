//! The exec engine seam: how a command reaches a sandbox. `DockerExecEngine` runs one
//! `docker exec` per command; `agent::AgentEngine` sends it to the sandbox's resident agent and
//! falls back to the docker engine where the agent cannot run. Both give the same results.

use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, oneshot};

use super::cli::{feed_stdin, DockerCli};
use super::exec::{docker_exec, exec_argv};
pub use crate::backend::{ExecStream, StreamEvent};
use crate::config::DockerConfig;
use crate::spec::{ExecErrorType, ExecParams, ExecResult, SandboxHandle};

/// One command for an engine: `<shell> -c <command>` in container `name`, with `params`, as
/// `user` (already normalised; `None`: the image's user).
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

    /// Forget what the engine holds for a sandbox that was closed.
    fn forget(&self, _name: &str) {}

    /// The container `from` is now named `to` (a create renames it when it is ready).
    fn renamed(&self, _from: &str, _to: &str) {}
}

// ----- how an exec ends: the one place both engines shape results -------------------------

/// The effective timeout of a call: its own, else the configured default.
pub fn effective_timeout(config: &DockerConfig, params: &ExecParams) -> Option<Duration> {
    params.timeout.or(config.exec.default_timeout)
}

/// Bytes one `exec` keeps per stream (`exec.max_output_bytes`).
pub fn output_limit(config: &DockerConfig) -> usize {
    usize::try_from(config.exec.max_output_bytes).unwrap_or(usize::MAX)
}

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

/// One `docker exec` per command.
#[derive(Clone)]
pub struct DockerExecEngine {
    pub(super) cli: DockerCli,
    pub(super) config: DockerConfig,
}

impl DockerExecEngine {
    pub fn new(cli: DockerCli, config: DockerConfig) -> Self {
        Self { cli, config }
    }
}

#[tonic::async_trait]
impl ExecEngine for DockerExecEngine {
    async fn exec(&self, spec: ExecSpec<'_>) -> ExecResult {
        docker_exec(&self.cli, &self.config, spec).await
    }

    async fn exec_stream(&self, spec: ExecSpec<'_>) -> ExecStream {
        let (args, env) = exec_argv(&self.config, spec);
        let mut child = match self.cli.with_env(env).spawn(&args, spec.params.stdin.is_some(), true).await {
            Ok(child) => child,
            Err(e) => return ExecStream::finished(ExecResult::failed(ExecErrorType::Sandbox, e.to_string())),
        };
        let timeout = effective_timeout(&self.config, spec.params);
        let (cli, name, input) = (self.cli.clone(), spec.name.to_string(), spec.params.stdin.clone());
        spawn_stream(move |tx, stop| async move {
            let stdin = child.child.stdin.take();
            let (stdout, stderr) = (child.child.stdout.take(), child.child.stderr.take());
            let work = async {
                // The head of stdout and tail of stderr tell a docker failure from the command's.
                let ((), head, tail) = tokio::join!(
                    feed_stdin(stdin, input),
                    pump(stdout, &tx, StreamEvent::Stdout, Keep::Head(4096)),
                    pump(stderr, &tx, StreamEvent::Stderr, Keep::Tail(8192)),
                );
                (child.wait().await, tail, head)
            };
            let limited = async {
                match timeout {
                    Some(t) => tokio::time::timeout(t, work).await.ok(),
                    None => Some(work.await),
                }
            };
            let result = tokio::select! {
                r = limited => r,
                _ = stop => return, // the stream was dropped: `child` is killed as it drops
            };
            let exit = match result {
                Some((Ok(code), tail, head)) => {
                    let (tail, head) = (String::from_utf8_lossy(&tail), String::from_utf8_lossy(&head));
                    classify_docker_exit(&cli, &name, code, &tail, &head).await
                }
                Some((Err(e), _, _)) => ExecResult::failed(ExecErrorType::Sandbox, e.to_string()),
                None => {
                    child.abort().await;
                    timed_out(timeout, Some(&child.command))
                }
            };
            let _ = tx.send(StreamEvent::Exit(exit)).await;
        })
    }
}

/// Which bytes of a pumped stream to keep.
enum Keep {
    Head(usize),
    Tail(usize),
}

/// Forward `reader` as events until it ends or the receiver goes away; returns what `keep` asks.
async fn pump<R: tokio::io::AsyncRead + Unpin>(
    reader: Option<R>,
    tx: &mpsc::Sender<StreamEvent>,
    event: fn(Vec<u8>) -> StreamEvent,
    keep: Keep,
) -> Vec<u8> {
    let mut kept = Vec::new();
    let Some(mut reader) = reader else { return kept };
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n @ 1..) = reader.read(&mut buf).await {
        match keep {
            Keep::Head(max) if kept.len() < max => kept.extend_from_slice(&buf[..n.min(max - kept.len())]),
            Keep::Head(_) => {}
            Keep::Tail(max) => {
                kept.extend_from_slice(&buf[..n]);
                if kept.len() > max {
                    kept.drain(..kept.len() - max);
                }
            }
        }
        if tx.send(event(buf[..n].to_vec())).await.is_err() {
            break;
        }
    }
    kept
}

/// How a finished `docker exec` ended: the command's own code, or 125 with `sandbox` when the
/// docker client failed it (decided by the daemon's view of the container, not by the text).
pub async fn classify_docker_exit(
    cli: &DockerCli,
    name: &str,
    code: i32,
    stderr: &str,
    stdout: &str,
) -> ExecResult {
    // The OCI runtime's own failures (exit 126) land on the client's stdout.
    if let Some(cwd) =
        super::classify::missing_cwd(code, stdout).or_else(|| super::classify::missing_cwd(code, stderr))
    {
        return ExecResult::failed(
            ExecErrorType::Sandbox,
            format!("cwd {cwd:?} does not exist in the sandbox"),
        );
    }
    if code != 0
        && super::classify::looks_like_docker_failure(code, stderr)
        && !container_running(cli, name).await
    {
        return ExecResult::failed(ExecErrorType::Sandbox, stderr.trim().to_string());
    }
    ExecResult { return_code: code, ..Default::default() }
}

/// Whether the daemon reports the container running and not paused, so a command can run in
/// it (false when the daemon cannot be asked).
pub async fn container_running(cli: &DockerCli, name: &str) -> bool {
    let args = vec![
        "inspect".into(),
        "--type".into(),
        "container".into(),
        "-f".into(),
        "{{.State.Running}} {{.State.Paused}}".into(),
        name.to_string(),
    ];
    matches!(cli.in_pool(super::cli::Pool::Control).run(&args, Some(Duration::from_secs(30)), None).await,
        Ok(out) if out.stdout_text().trim() == "true false")
}
