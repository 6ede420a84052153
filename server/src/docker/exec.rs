//! Running one command through `docker exec`: argument checks, the seed's timeout and
//! runtime-failure rules, and the output cap.

use std::time::Duration;

use super::argv::{self, ExecOptions};
use super::classify;
use super::cli::{CliError, DockerCli};
use super::provider::DockerProvider;
use crate::config::DockerConfig;
use crate::error::{ProviderError, Result};
use crate::spec::{
    normalize_user, validate_abs_path, validate_env, ExecErrorType, ExecParams, ExecResult, SandboxHandle,
    SANDBOX_RUNTIME_RETURN_CODE,
};

impl DockerProvider {
    /// Run `<shell> -c <command>`; command failure is a result. Only bad arguments are errors.
    pub async fn run_command(
        &self,
        handle: &SandboxHandle,
        command: &str,
        params: &ExecParams,
    ) -> Result<ExecResult> {
        if command.contains('\0') {
            return Err(ProviderError::invalid("command", "must not contain NUL bytes"));
        }
        if let Some(cwd) = &params.cwd {
            validate_abs_path("cwd", cwd)?;
        }
        validate_env("env", &params.env)?;
        let user = params.user.as_deref().map(|u| normalize_user("user", u)).transpose()?;
        if params.timeout.is_some_and(|t| t.is_zero()) {
            return Err(ProviderError::invalid("timeout_s", "must be > 0"));
        }
        let result = docker_exec(
            &self.cli,
            &self.config,
            &handle.sandbox_id,
            &handle.shell,
            command,
            params,
            user.as_deref(),
        )
        .await;
        // Only a failed exec is read for the paused refusal: no inspect before every exec.
        if result.error_type == Some(ExecErrorType::Sandbox)
            && classify::is_paused_container(&result.stderr_lossy())
        {
            return Err(ProviderError::Paused(handle.sandbox_id.clone()));
        }
        Ok(result)
    }
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
    let args = argv::exec_args(&config.exec, name, &opts, &argv::shell_command(shell, command));
    let timeout = params.timeout.or(config.exec.default_timeout_s.map(Duration::from_secs_f64));
    let limit = usize::try_from(config.exec.max_output_bytes).unwrap_or(usize::MAX);
    match cli.run_limited(&args, timeout, params.stdin.as_deref(), limit).await {
        Ok(mut out) => {
            if out.dropped > 0 {
                tracing::warn!(dropped = out.dropped, limit, "exec output over the limit was dropped");
                out.stderr.extend_from_slice(
                    format!(
                        "\n[sandboxd: output past {limit} bytes per stream was dropped ({} bytes); \
                         exec.max_output_bytes sets the limit]\n",
                        out.dropped
                    )
                    .as_bytes(),
                );
            }
            let err = out.stderr_text();
            if out.code != 0 && classify::is_runtime_failure(&err) {
                ExecResult {
                    stdout: out.stdout,
                    stderr: out.stderr,
                    return_code: SANDBOX_RUNTIME_RETURN_CODE,
                    error_type: Some(ExecErrorType::Sandbox),
                }
            } else {
                ExecResult { stdout: out.stdout, stderr: out.stderr, return_code: out.code, error_type: None }
            }
        }
        Err(e @ CliError::Timeout { .. }) => ExecResult::failed(ExecErrorType::Timeout, e.to_string()),
        Err(e) => ExecResult::failed(ExecErrorType::Sandbox, e.to_string()),
    }
}
