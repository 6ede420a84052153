//! The docker transport's `open_terminal`: one `docker exec -i [-t]` client per session, under
//! the launcher that records its pid, and the in-container runner the session uses to read that
//! record and to deliver signals.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use super::{
    fallback_pid_file_for, launcher_argv, pid_file_for, session_marker, spawn, RunInContainer, SpawnOptions,
    TerminalMode, TerminalProcess,
};
use crate::backends::docker::argv::{self, ExecOptions};
use crate::backends::docker::classify;
use crate::backends::docker::cli::{DockerCli, Pool};
use crate::backends::docker::mask;
use crate::backends::docker::state::ContainerState;
use crate::backends::docker::transport::{ExecEngine, ExecSpec};
use crate::config::DockerConfig;
use crate::core::spec::{ExecParams, ExecResult, PtySpec};
use crate::error::{ProviderError, Result};

/// Runs the session's helper commands (`<shell> -c …`) in its container, through `engine`
/// (the docker transport in the control pool: pid reads, signals and cleanup never wait
/// behind execs).
struct ContainerRunner {
    engine: Arc<dyn ExecEngine>,
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
            self.engine.exec(spec).await
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

/// Open `spec` (already checked; `user` normalised) in container `name` with `shell`: returns
/// as soon as the client is spawned. The session's marker is the last `--env` flag, so no spec
/// env can override it. `control` runs the session's helper commands.
pub(crate) async fn open_terminal(
    cli: &DockerCli,
    control: Arc<dyn ExecEngine>,
    config: &DockerConfig,
    name: &str,
    shell: &str,
    spec: &PtySpec,
    user: Option<&str>,
) -> Result<Arc<TerminalProcess>> {
    let session_id = uuid::Uuid::new_v4().simple().to_string();
    let marker = session_marker(&session_id);
    let pid_file = pid_file_for(&session_id);
    let fallback = fallback_pid_file_for(&session_id);
    let (env, prefix) = argv::exec_env(&spec.env);
    let mut program = launcher_argv(
        shell,
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
        user,
        interactive: true,
        tty: spec.mode == TerminalMode::Pty,
        last_env: Some(&marker),
    };
    let args = argv::exec_args(&config.exec, name, &opts, &program);
    let runner = ContainerRunner {
        engine: control,
        cli: cli.in_pool(Pool::Control),
        config: Arc::new(config.clone()),
        name: name.to_string(),
        shell: shell.to_string(),
    };
    let span = tracing::info_span!("pty", sandbox_id = %name, session_id = %session_id);
    span.in_scope(|| tracing::info!(cmd = %mask::masked(&cli.argv(&args)), "opening pty session"));
    spawn(SpawnOptions {
        // Spawned on a pty of its own, not through `DockerCli::command`: the aliases apply here.
        argv: cli.argv(&cli.aliases().apply(&args)),
        env,
        use_pty: spec.mode == TerminalMode::Pty,
        rows: spec.rows,
        cols: spec.cols,
        session_id,
        container: Some(Arc::new(runner)),
        user: user.map(str::to_string),
        pid_file: Some(pid_file),
        fallback_pid_file: Some(fallback),
        runtime_failure: Some(classify::is_runtime_failure),
    })
    .instrument(span)
    .await
    .map_err(|e| ProviderError::Pty(e.to_string()))
}
