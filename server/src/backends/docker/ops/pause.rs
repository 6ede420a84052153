//! Pause and resume: `docker pause` / `unpause` freeze and thaw every process of a sandbox.
//! Both are idempotent (pausing a paused sandbox or resuming a running one succeeds), so a
//! caller retrying after a lost answer never sees an error for a state it already reached.

use super::argv;
use super::failure::DockerFailureKind;
use super::provider::DockerProvider;
use super::state::ContainerState;
use crate::core::spec::SandboxId;
use crate::error::{ProviderError, Result};

impl DockerProvider {
    /// Freeze the sandbox. Its lease keeps running; exec and terminals are refused until
    /// [`DockerProvider::unpause_container`].
    pub async fn pause(&self, id: &SandboxId) -> Result<()> {
        let sandbox_id = id.as_str();
        self.handle(sandbox_id).await?;
        self.freeze_control(sandbox_id, argv::pause_args(sandbox_id), DockerFailureKind::AlreadyPaused)
            .await?;
        self.states.record(sandbox_id, Some(ContainerState::Paused));
        Ok(())
    }

    /// Thaw a paused sandbox, or wake a hibernated one (`live.rs`).
    pub async fn resume(&self, id: &SandboxId) -> Result<()> {
        let sandbox_id = id.as_str();
        if SandboxId::has_valid_shape(sandbox_id) && self.wake(id).await? {
            self.states.record(sandbox_id, Some(ContainerState::Running));
            return Ok(());
        }
        self.handle(sandbox_id).await?;
        self.freeze_control(sandbox_id, argv::unpause_args(sandbox_id), DockerFailureKind::NotPaused).await?;
        self.states.record(sandbox_id, Some(ContainerState::Running));
        Ok(())
    }

    /// Refuse a sandbox the events table knows to be frozen (memory only, so every exec can
    /// afford it; the agent engine would otherwise wait on a frozen agent until its timeout).
    pub(in crate::backends::docker) fn refuse_known_paused(&self, sandbox_id: &str) -> Result<()> {
        if self.is_known_hibernated(sandbox_id) {
            return Err(super::live::hibernated_error(sandbox_id));
        }
        match self.states.state(sandbox_id) {
            Some(ContainerState::Paused) => Err(ProviderError::Paused(sandbox_id.into())),
            _ => Ok(()),
        }
    }

    /// Refuse a frozen sandbox with `Paused`, from the events table (an inspect when it does
    /// not know): a terminal session opens asynchronously, so its exec failure cannot be read
    /// in time as it is for `exec`.
    pub async fn refuse_if_paused(&self, sandbox_id: &str) -> Result<()> {
        let state = match self.states.state(sandbox_id) {
            Some(state) => Some(state),
            None => self.inspect(sandbox_id).await?.map(|found| found.state),
        };
        match state {
            Some(ContainerState::Paused) => Err(ProviderError::Paused(sandbox_id.into())),
            _ => Ok(()),
        }
    }

    async fn freeze_control(
        &self,
        sandbox_id: &str,
        args: Vec<String>,
        already: DockerFailureKind,
    ) -> Result<()> {
        match self.control(args).await {
            Ok(_) => Ok(()),
            Err(e) => match e.kind() {
                Some(kind) if kind == already => Ok(()),
                Some(DockerFailureKind::MissingContainer) => {
                    Err(ProviderError::SandboxNotFound(sandbox_id.into()))
                }
                Some(DockerFailureKind::NotRunning) => Err(ProviderError::Stopped(sandbox_id.into())),
                _ => Err(e.into()),
            },
        }
    }
}
