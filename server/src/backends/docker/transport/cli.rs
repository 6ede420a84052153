//! The docker transport: one `docker exec` per command (`docker_exec`, `exec_stream`), with the
//! seed's timeout rule and the output cap, and `classify_docker_exit`, which tells a docker
//! failure from the command's own exit; files by `docker cp` (`files.rs`) and terminals by
//! `docker exec -it` (`pty/open.rs`).

use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

use super::{
    note_dropped, output_limit, spawn_stream, timed_out, ExecEngine, ExecSpec, FileDownload, TerminalSession,
    UploadSource,
};
use crate::backends::docker::argv::{self, ExecOptions};
use crate::backends::docker::classify;
use crate::backends::docker::cli::{feed_stdin, DockerCli, Pool};
use crate::backends::docker::failure::CliError;
use crate::backends::docker::files;
use crate::backends::docker::pty;
use crate::config::DockerConfig;
use crate::core::backend::{ExecStream, StreamEvent};
use crate::core::fs::Xattr;
use crate::core::spec::{ExecErrorType, ExecResult, PtySpec};
use crate::error::{ProviderError, Result};

/// One `docker exec` per command.
#[derive(Clone)]
pub struct DockerExecEngine {
    pub(crate) cli: DockerCli,
    pub(crate) config: DockerConfig,
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

    async fn upload(
        &self,
        name: &str,
        source: UploadSource<'_>,
        size: u64,
        path: &str,
        mode: u32,
        xattrs: &[Xattr],
    ) -> Result<u64> {
        if !xattrs.is_empty() {
            // `docker cp` carries a tar, and Docker drops the user. attributes it holds.
            return Err(ProviderError::FailedPrecondition(format!(
                "extended attributes on {path} need the sandbox's agent; sandbox {name} runs commands with docker exec"
            )));
        }
        files::cp_upload(&self.cli, name, source, size, path, mode).await
    }

    async fn download(&self, name: &str, path: &str) -> Result<Box<dyn FileDownload>> {
        files::cp_download(&self.cli, name, path).await
    }

    async fn open_terminal(
        &self,
        name: &str,
        shell: &str,
        spec: &PtySpec,
        user: Option<&str>,
    ) -> Result<Arc<dyn TerminalSession>> {
        if spec.detach_timeout.is_some() {
            return Err(crate::error::ProviderError::Unimplemented(format!(
                "detach_timeout_s needs the sandbox's agent; sandbox {name} runs terminals through docker exec"
            )));
        }
        let control = DockerExecEngine::new(self.cli.in_pool(Pool::Control), self.config.clone());
        let session =
            pty::open::open_terminal(&self.cli, Arc::new(control), &self.config, name, shell, spec, user)
                .await?;
        Ok(session)
    }

    async fn exec_stream(&self, spec: ExecSpec<'_>) -> ExecStream {
        let (args, env) = exec_argv(&self.config, spec);
        let mut child = match self.cli.with_env(env).spawn(&args, spec.params.stdin.is_some(), true).await {
            Ok(child) => child,
            Err(e) => return ExecStream::finished(ExecResult::failed(ExecErrorType::Sandbox, e.to_string())),
        };
        let timeout = spec.params.timeout;
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
    if let Some(cwd) = classify::missing_cwd(code, stdout).or_else(|| classify::missing_cwd(code, stderr)) {
        return ExecResult::failed(
            ExecErrorType::Sandbox,
            format!("cwd {cwd:?} does not exist in the sandbox"),
        );
    }
    if code != 0 && classify::looks_like_docker_failure(code, stderr) && !container_running(cli, name).await {
        return ExecResult::failed(ExecErrorType::Sandbox, stderr.trim().to_string());
    }
    ExecResult { return_code: code, ..Default::default() }
}

/// Whether the daemon reports the container running and not paused, so a command can run in
/// it (false when the daemon cannot be asked).
pub async fn container_running(cli: &DockerCli, name: &str) -> bool {
    let args = argv::running_args(name);
    matches!(cli.in_pool(Pool::Control).run(&args, Some(Duration::from_secs(30)), None).await,
        Ok(out) if out.stdout_text().trim() == "true false")
}

/// The `docker exec` command line of `<shell> -c <command>` (both ways the docker engine runs one),
/// and the env values that travel in the docker client's environment, never on its argv.
fn exec_argv(config: &DockerConfig, spec: ExecSpec<'_>) -> (Vec<String>, Vec<(String, String)>) {
    let params = spec.params;
    let opts = ExecOptions {
        cwd: params.cwd.as_deref(),
        env: (!params.env.is_empty()).then_some(&params.env),
        user: spec.user,
        interactive: params.stdin.is_some(),
        tty: false,
        last_env: None,
    };
    let (env, prefix) = argv::exec_env(&params.env);
    let command = format!("{prefix}{}", spec.command);
    (argv::exec_args(&config.exec, spec.name, &opts, &argv::shell_command(spec.shell, &command)), env)
}

/// One `docker exec` of `<shell> -c <command>`: timeout kills the client's process group and
/// returns 125/`timeout`; a refusal by the daemon returns 125/`sandbox`.
pub(crate) async fn docker_exec(cli: &DockerCli, config: &DockerConfig, spec: ExecSpec<'_>) -> ExecResult {
    let (args, env) = exec_argv(config, spec);
    let cli = &cli.with_env(env);
    let timeout = spec.params.timeout;
    let limit = output_limit(config);
    match cli.run_limited(&args, timeout, spec.params.stdin.as_deref(), limit).await {
        Ok(mut out) => {
            note_dropped(&mut out.stderr, limit, out.dropped);
            let ended =
                classify_docker_exit(cli, spec.name, out.code, &out.stderr_text(), &out.stdout_text()).await;
            if ended.error_type.is_some() {
                ended
            } else {
                ExecResult { stdout: out.stdout, stderr: out.stderr, ..ended }
            }
        }
        Err(CliError::Timeout { command, .. }) => timed_out(timeout, Some(&command)),
        Err(e) => ExecResult::failed(ExecErrorType::Sandbox, e.to_string()),
    }
}
