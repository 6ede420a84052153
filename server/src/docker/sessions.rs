//! `create_pty`: one `docker exec -i [-t]` client per terminal session, under the launcher that
//! records its pid; and the in-container runner the session uses to read that record and to
//! deliver signals.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use super::argv::{self, ExecOptions};
use super::classify;
use super::cli::{DockerCli, Pool};
use super::provider::{DockerProvider, LiveSession};
use super::state::ContainerState;
use super::transport::cli::docker_exec;
use super::transport::ExecSpec;
use crate::config::DockerConfig;
use crate::docker::pty::{self, RunInContainer, TerminalMode, TerminalProcess};
use crate::error::{ProviderError, Result};
use crate::spec::{validate_abs_path, validate_env, ExecParams, ExecResult, PtySpec, SandboxHandle, User};

/// Runs the session's helper commands (`<shell> -c …`) in its container.
struct ContainerRunner {
    cli: DockerCli,
    config: Arc<DockerConfig>,
    name: String,
    shell: String,
}

impl RunInContainer for ContainerRunner {
    fn run<'a>(
        &'a self,
        command: String,
        user: Option<String>,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = ExecResult> + Send + 'a>> {
        Box::pin(async move {
            let params = ExecParams { timeout: Some(timeout), ..Default::default() };
            let spec = ExecSpec {
                name: &self.name,
                shell: &self.shell,
                command: &command,
                params: &params,
                user: user.as_deref(),
            };
            docker_exec(&self.cli, &self.config, spec).await
        })
    }

    fn running(&self) -> Pin<Box<dyn Future<Output = bool> + Send + '_>> {
        Box::pin(async move {
            let args = argv::inspect_args(&self.name);
            let timeout = self.config.exec.default_timeout;
            match self.cli.run(&args, timeout, None).await {
                Ok(out) => {
                    let state = out.stdout_text();
                    state.split('\t').nth(2).is_some_and(|s| ContainerState::parse(s).is_running())
                }
                // Gone, or the daemon cannot say: either way the session cannot go on.
                _ => false,
            }
        })
    }
}

impl LiveSession for TerminalProcess {
    fn closed(&self) -> bool {
        TerminalProcess::closed(self)
    }

    fn close(&self) -> Pin<Box<dyn Future<Output = std::result::Result<(), String>> + Send + '_>> {
        Box::pin(async move { TerminalProcess::close(self).await.map_err(|e| e.to_string()) })
    }

    fn abandon(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(TerminalProcess::abandon(self))
    }
}

impl DockerProvider {
    /// Open a terminal in the sandbox: returns as soon as the client is spawned. The session's
    /// marker is the last `--env` flag, so no spec env can override it.
    pub async fn create_pty(&self, handle: &SandboxHandle, spec: &PtySpec) -> Result<Arc<TerminalProcess>> {
        if spec.rows == 0 || spec.cols == 0 {
            return Err(ProviderError::invalid("rows/cols", "must be > 0"));
        }
        if let Some(cwd) = &spec.cwd {
            validate_abs_path("cwd", cwd)?;
        }
        validate_env("env", &spec.env)?;
        argv::check_docker_env(&spec.env, false).map_err(|m| ProviderError::invalid("env", m))?;
        if spec.command.as_deref().is_some_and(|c| c.contains('\0')) {
            return Err(ProviderError::invalid("command", "must not contain NUL bytes"));
        }
        let user = spec.user.as_deref().map(|u| User::parse("user", u)).transpose()?;
        self.refuse_if_paused(&handle.sandbox_id).await?;
        let session_id = uuid::Uuid::new_v4().simple().to_string();
        let marker = pty::session_marker(&session_id);
        let pid_file = pty::pid_file_for(&session_id);
        let fallback = pty::fallback_pid_file_for(&session_id);
        let (env, prefix) = argv::exec_env(&spec.env);
        let mut program = pty::launcher_argv(
            &handle.shell,
            &pid_file,
            &fallback,
            spec.command.as_deref(),
            spec.rows,
            spec.cols,
            spec.mode == TerminalMode::Pty,
        );
        // The launcher script (`<shell> -c SCRIPT …`) first renames the aliased variables back.
        program[2].insert_str(0, &prefix);
        let opts = ExecOptions {
            cwd: spec.cwd.as_deref(),
            env: (!spec.env.is_empty()).then_some(&spec.env),
            user: user.as_deref(),
            interactive: true,
            tty: spec.mode == TerminalMode::Pty,
            last_env: Some(&marker),
        };
        let args = argv::exec_args(&self.config().exec, &handle.sandbox_id, &opts, &program);
        let runner = ContainerRunner {
            // Pid reads, signals and cleanup are control commands: never behind execs.
            cli: self.cli().in_pool(Pool::Control),
            config: Arc::new(self.config().clone()),
            name: handle.sandbox_id.clone(),
            shell: handle.shell.clone(),
        };
        let span = tracing::info_span!("pty", sandbox_id = %handle.sandbox_id, session_id = %session_id);
        span.in_scope(
            || tracing::info!(cmd = %super::mask::masked(&self.cli().argv(&args)), "opening pty session"),
        );
        let session = pty::spawn(pty::SpawnOptions {
            argv: self.cli().argv(&args),
            env,
            use_pty: spec.mode == TerminalMode::Pty,
            rows: spec.rows,
            cols: spec.cols,
            session_id,
            container: Some(Arc::new(runner)),
            user: user.map(|u| u.to_string()),
            pid_file: Some(pid_file),
            fallback_pid_file: Some(fallback),
            runtime_failure: Some(classify::is_runtime_failure),
        })
        .instrument(span)
        .await
        .map_err(|e| ProviderError::Pty(e.to_string()))?;
        self.track_pty_session(&handle.sandbox_id, session.clone());
        if self.was_closed(&handle.sandbox_id) {
            // The sandbox was closed while the session opened: nothing in it to clean up.
            session.abandon().await;
            return Err(ProviderError::Pty(format!(
                "sandbox {} was closed while the session opened",
                handle.sandbox_id
            )));
        }
        Ok(session)
    }
}
