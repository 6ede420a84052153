//! Running one command: argument checks, then the configured exec engine (`engine.rs`); and
//! `docker_exec`, the `docker exec` path with the seed's timeout rule and the output cap.

use std::time::Duration;

use super::argv::{self, ExecOptions};
use super::cli::{CliError, DockerCli};
use super::engine::{classify_docker_exit, dropped_note, ExecTarget};
use super::provider::DockerProvider;
use crate::backend::ExecStream;
use crate::config::DockerConfig;
use crate::error::{ProviderError, Result};
use crate::spec::{
    normalize_user, validate_abs_path, validate_env, ExecErrorType, ExecParams, ExecResult, SandboxHandle,
};

impl DockerProvider {
    /// Run `<shell> -c <command>`; command failure is a result. Only bad arguments are errors.
    pub async fn run_command(
        &self,
        handle: &SandboxHandle,
        command: &str,
        params: &ExecParams,
    ) -> Result<ExecResult> {
        let user = check_exec(command, params)?;
        self.refuse_known_paused(&handle.sandbox_id)?;
        let target = ExecTarget { name: &handle.sandbox_id, shell: &handle.shell };
        let result = self.engine.exec(target, command, params, user.as_deref()).await;
        // A failed exec is read for the daemon's paused refusal: no inspect before every exec.
        // The agent engine only sees its channel go quiet, so on that path one inspect tells
        // a paused sandbox from a stopped one.
        if result.error_type == Some(ExecErrorType::Sandbox)
            && (super::classify::is_paused_container(&result.stderr_str())
                || self.is_paused_now(&handle.sandbox_id).await)
        {
            return Err(ProviderError::Paused(handle.sandbox_id.clone()));
        }
        Ok(result)
    }

    /// Whether docker says the container is paused right now (unknown counts as not).
    async fn is_paused_now(&self, name: &str) -> bool {
        matches!(self.inspect(name).await, Ok(Some(found)) if found.state == super::state::ContainerState::Paused)
    }

    /// As `run_command`, with output delivered as it is produced; dropping the stream stops
    /// the command. Only bad arguments are errors.
    pub async fn stream_command(
        &self,
        handle: &SandboxHandle,
        command: &str,
        params: &ExecParams,
    ) -> Result<ExecStream> {
        let user = check_exec(command, params)?;
        self.refuse_known_paused(&handle.sandbox_id)?;
        let target = ExecTarget { name: &handle.sandbox_id, shell: &handle.shell };
        Ok(self.engine.exec_stream(target, command, params, user.as_deref()).await)
    }
}

/// Refuse what no engine may run; the normalised user.
fn check_exec(command: &str, params: &ExecParams) -> Result<Option<String>> {
    if command.trim().is_empty() {
        return Err(ProviderError::invalid("command", "must not be empty"));
    }
    if command.contains('\0') {
        return Err(ProviderError::invalid("command", "must not contain NUL bytes"));
    }
    if let Some(cwd) = &params.cwd {
        validate_abs_path("cwd", cwd)?;
    }
    validate_env("env", &params.env)?;
    argv::check_docker_env(&params.env, false).map_err(|m| ProviderError::invalid("env", m))?;
    let user = params.user.as_deref().map(|u| normalize_user("user", u)).transpose()?;
    if params.timeout.is_some_and(|t| t.is_zero()) {
        return Err(ProviderError::invalid("timeout_s", "must be > 0"));
    }
    Ok(user)
}

/// One `docker exec` of `<shell> -c <command>`: timeout kills the client's process group and
/// returns 125/`timeout`; a refusal by the daemon returns 125/`sandbox`.
pub(crate) async fn docker_exec(
    cli: &DockerCli,
    config: &DockerConfig,
    name: &str,
    shell: &str,
    command: &str,
    params: &ExecParams,
    user: Option<&str>,
) -> ExecResult {
    let opts = ExecOptions {
        cwd: params.cwd.as_deref(),
        env: (!params.env.is_empty()).then_some(&params.env),
        user,
        interactive: params.stdin.is_some(),
        tty: false,
        last_env: None,
    };
    let (env, prefix) = argv::exec_env(&params.env);
    let command = format!("{prefix}{command}");
    let args = argv::exec_args(&config.exec, name, &opts, &argv::shell_command(shell, &command));
    let cli = &cli.with_env(env);
    let timeout = params.timeout.or(config.exec.default_timeout_s.map(Duration::from_secs_f64));
    let limit = usize::try_from(config.exec.max_output_bytes).unwrap_or(usize::MAX);
    match cli.run_limited(&args, timeout, params.stdin.as_deref(), limit).await {
        Ok(mut out) => {
            if out.dropped > 0 {
                tracing::warn!(dropped = out.dropped, limit, "exec output over the limit was dropped");
                out.stderr.extend_from_slice(dropped_note(limit, out.dropped).as_bytes());
            }
            let ended =
                classify_docker_exit(cli, name, out.code, &out.stderr_text(), &out.stdout_text()).await;
            if ended.error_type.is_some() {
                ended
            } else {
                ExecResult { stdout: out.stdout, stderr: out.stderr, ..ended }
            }
        }
        Err(e @ CliError::Timeout { .. }) => ExecResult::failed(ExecErrorType::Timeout, e.to_string()),
        Err(e) => ExecResult::failed(ExecErrorType::Sandbox, e.to_string()),
    }
}
