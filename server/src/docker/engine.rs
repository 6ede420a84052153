//! The exec engine seam: how a command reaches a sandbox. `DockerExecEngine` runs one
//! `docker exec` per command; `agent::AgentEngine` sends it to the sandbox's resident agent and
//! falls back to the docker engine where the agent cannot run. Both give the same results.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::argv::{self, ExecOptions};
use super::cli::DockerCli;
use super::exec::docker_exec;
pub use crate::backend::{ExecStream, StreamEvent};
use crate::config::DockerConfig;
use crate::spec::{ExecErrorType, ExecParams, ExecResult};

/// Where a command runs: the container and the shell that runs `<shell> -c <command>`.
#[derive(Debug, Clone, Copy)]
pub struct ExecTarget<'a> {
    pub name: &'a str,
    pub shell: &'a str,
}

/// How a command reaches a sandbox.
#[tonic::async_trait]
pub trait ExecEngine: Send + Sync {
    /// Run `<shell> -c <command>` to its end, the timeout, or a transport failure; `user` is
    /// already normalised. Output beyond `exec.max_output_bytes` per stream is dropped and said
    /// so on stderr.
    async fn exec(
        &self,
        target: ExecTarget<'_>,
        command: &str,
        params: &ExecParams,
        user: Option<&str>,
    ) -> ExecResult;

    /// As `exec`, with output delivered as it is produced (no output bound: nothing accumulates).
    async fn exec_stream(
        &self,
        target: ExecTarget<'_>,
        command: &str,
        params: &ExecParams,
        user: Option<&str>,
    ) -> ExecStream;

    /// Forget what the engine holds for a sandbox that was closed.
    fn forget(&self, _name: &str) {}

    /// The container `from` is now named `to` (a create renames it when it is ready).
    fn renamed(&self, _from: &str, _to: &str) {}
}

/// The note appended to stderr when output past the limit was dropped.
pub fn dropped_note(limit: usize, dropped: u64) -> String {
    format!(
        "\n[sandboxd: output past {limit} bytes per stream was dropped ({dropped} bytes); \
         exec.max_output_bytes sets the limit]\n"
    )
}

/// The effective timeout of a call: its own, else the configured default.
pub fn effective_timeout(config: &DockerConfig, params: &ExecParams) -> Option<Duration> {
    params.timeout.or(config.exec.default_timeout_s.map(Duration::from_secs_f64))
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
    async fn exec(
        &self,
        target: ExecTarget<'_>,
        command: &str,
        params: &ExecParams,
        user: Option<&str>,
    ) -> ExecResult {
        docker_exec(&self.cli, &self.config, target.name, target.shell, command, params, user).await
    }

    async fn exec_stream(
        &self,
        target: ExecTarget<'_>,
        command: &str,
        params: &ExecParams,
        user: Option<&str>,
    ) -> ExecStream {
        let opts = ExecOptions {
            cwd: params.cwd.as_deref(),
            env: (!params.env.is_empty()).then_some(&params.env),
            user,
            interactive: params.stdin.is_some(),
            tty: false,
            last_env: None,
        };
        let (env, prefix) = argv::exec_env(&params.env);
        let args = argv::exec_args(
            &self.config.exec,
            target.name,
            &opts,
            &argv::shell_command(target.shell, &format!("{prefix}{command}")),
        );
        let mut child = match self.cli.with_env(env).spawn(&args, params.stdin.is_some(), true).await {
            Ok(child) => child,
            Err(e) => return ExecStream::finished(ExecResult::failed(ExecErrorType::Sandbox, e.to_string())),
        };
        let timeout = effective_timeout(&self.config, params);
        let (tx, rx) = mpsc::channel(16);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (cli, name, input) = (self.cli.clone(), target.name.to_string(), params.stdin.clone());
        tokio::spawn(async move {
            let mut stdin = child.child.stdin.take();
            let mut stdout = child.child.stdout.take();
            let mut stderr = child.child.stderr.take();
            let feed = async {
                if let (Some(pipe), Some(data)) = (stdin.as_mut(), input) {
                    let _ = pipe.write_all(&data).await;
                    let _ = pipe.shutdown().await;
                }
                drop(stdin);
            };
            let out_tx = tx.clone();
            let pump_out = async {
                let mut head = Vec::new();
                let mut buf = vec![0u8; 64 * 1024];
                while let Some(Ok(n @ 1..)) = match stdout.as_mut() {
                    Some(s) => Some(s.read(&mut buf).await),
                    None => None,
                } {
                    if head.len() < 4096 {
                        head.extend_from_slice(&buf[..n.min(4096)]);
                    }
                    if out_tx.send(StreamEvent::Stdout(buf[..n].to_vec())).await.is_err() {
                        break;
                    }
                }
                head
            };
            let err_tx = tx.clone();
            let pump_err = async {
                // The tail of stderr tells a docker failure from the command's own.
                let mut tail = Vec::new();
                let mut buf = vec![0u8; 64 * 1024];
                while let Some(Ok(n @ 1..)) = match stderr.as_mut() {
                    Some(s) => Some(s.read(&mut buf).await),
                    None => None,
                } {
                    tail.extend_from_slice(&buf[..n]);
                    if tail.len() > 8192 {
                        tail.drain(..tail.len() - 8192);
                    }
                    if err_tx.send(StreamEvent::Stderr(buf[..n].to_vec())).await.is_err() {
                        break;
                    }
                }
                tail
            };
            let work = async {
                let ((), head, tail) = tokio::join!(feed, pump_out, pump_err);
                (child.child.wait().await, tail, head)
            };
            let limited = async {
                match timeout {
                    Some(t) => tokio::time::timeout(t, work).await.ok(),
                    None => Some(work.await),
                }
            };
            let result = tokio::select! {
                r = limited => r,
                _ = stop_rx => return, // the stream was dropped: `child` is killed as it drops
            };
            let exit = match result {
                Some((Ok(status), tail, head)) => {
                    child.disarm();
                    let code = super::cli::exit_code(status);
                    let (tail, head) = (String::from_utf8_lossy(&tail), String::from_utf8_lossy(&head));
                    classify_docker_exit(&cli, &name, code, &tail, &head).await
                }
                Some((Err(e), _, _)) => ExecResult::failed(ExecErrorType::Sandbox, e.to_string()),
                None => {
                    child.kill_group();
                    ExecResult::failed(
                        ExecErrorType::Timeout,
                        format!("the command timed out after {:?}", timeout.unwrap_or_default()),
                    )
                }
            };
            let _ = tx.send(StreamEvent::Exit(exit)).await;
        });
        ExecStream::new(
            rx,
            Box::new(move || {
                let _ = stop_tx.send(());
            }),
        )
    }
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
        Ok(out) if out.success() && out.stdout_text().trim() == "true false")
}
