//! Running one command: `ExecParams::check` and the docker env rule, then the configured
//! transport (`transport/`).

use super::argv;
use super::provider::DockerProvider;
use super::transport::ExecSpec;
use crate::core::backend::ExecStream;
use crate::core::spec::{ExecParams, ExecResult, SandboxHandle, User};
use crate::error::{ProviderError, Result};

impl DockerProvider {
    /// Run `<shell> -c <command>`; command failure is a result. Only bad arguments are errors.
    pub async fn exec(
        &self,
        handle: &SandboxHandle,
        command: &str,
        params: &ExecParams,
    ) -> Result<ExecResult> {
        let user = self.admit(handle, command, params)?;
        self.note_started(&handle.sandbox_id);
        let result = self.engine.exec(ExecSpec::on(handle, command, params, user.as_deref())).await;
        // No inspect before every exec: only a failure (or a SIGKILL) asks the daemon why,
        // and a pause is the `Paused` error (usage.rs).
        self.settle_exec(&handle.sandbox_id, result).await
    }

    /// As `run_command`, with output delivered as it is produced; dropping the stream stops
    /// the command. Only bad arguments are errors.
    pub async fn exec_stream(
        &self,
        handle: &SandboxHandle,
        command: &str,
        params: &ExecParams,
    ) -> Result<ExecStream> {
        let user = self.admit(handle, command, params)?;
        self.note_started(&handle.sandbox_id);
        Ok(self.engine.exec_stream(ExecSpec::on(handle, command, params, user.as_deref())).await)
    }

    /// As whom the command runs (normalised), once its arguments pass and the sandbox is not
    /// known to be paused.
    fn admit(&self, handle: &SandboxHandle, command: &str, params: &ExecParams) -> Result<Option<User>> {
        let user = params.check(command)?;
        argv::check_docker_env(&params.env, false).map_err(|m| ProviderError::invalid("env", m))?;
        self.refuse_closing(&handle.sandbox_id)?;
        self.refuse_known_paused(&handle.sandbox_id)?;
        Ok(user)
    }
}
