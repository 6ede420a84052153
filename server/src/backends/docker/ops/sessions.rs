//! `create_pty` and the backend's `open_terminal`: the terminal's one argument check, then the
//! transport's terminal, tracked so it is released with its sandbox.

use std::sync::Arc;

use super::argv;
use super::provider::DockerProvider;
use super::pty::{open, TerminalProcess};
use super::transport::cli::DockerExecEngine;
use crate::core::backend::TerminalSession;
use crate::core::spec::{PtySpec, SandboxHandle, TerminalCheck, User};
use crate::core::terminal::{AttachSpec, TerminalInfo};
use crate::error::{ProviderError, Result};

impl DockerProvider {
    /// Open a `docker exec -it` terminal in the sandbox (the docker transport's terminal, on
    /// either engine): returns as soon as the client is spawned.
    pub async fn create_pty(&self, handle: &SandboxHandle, spec: &PtySpec) -> Result<Arc<TerminalProcess>> {
        let user = self.admit_terminal(handle, spec).await?;
        let control =
            DockerExecEngine::new(self.cli().in_pool(super::cli::Pool::Control), self.config().clone());
        let session = open::open_terminal(
            self.cli(),
            Arc::new(control),
            self.config(),
            &handle.sandbox_id,
            &handle.shell,
            spec,
            user.as_deref(),
        )
        .await?;
        self.opened(&handle.sandbox_id, session.clone()).await?;
        Ok(session)
    }

    /// The `Pty` RPC's terminal: through the configured transport.
    pub(in crate::backends::docker) async fn open_engine_terminal(
        &self,
        handle: &SandboxHandle,
        spec: &PtySpec,
    ) -> Result<Arc<dyn TerminalSession>> {
        let user = self.admit_terminal(handle, spec).await?;
        let session =
            self.engine.open_terminal(&handle.sandbox_id, &handle.shell, spec, user.as_deref()).await?;
        self.opened(&handle.sandbox_id, session.clone()).await?;
        Ok(session)
    }

    /// `PtyAttach`: hold a session the sandbox's agent keeps, tracked like an opened one.
    pub(in crate::backends::docker) async fn attach_engine_terminal(
        &self,
        handle: &SandboxHandle,
        attach: &AttachSpec,
    ) -> Result<Arc<dyn TerminalSession>> {
        self.refuse_if_paused(&handle.sandbox_id).await?;
        let session = self.engine.attach_terminal(&handle.sandbox_id, attach).await?;
        self.opened(&handle.sandbox_id, session.clone()).await?;
        Ok(session)
    }

    /// `ListPtySessions`: the sessions the sandbox's agent keeps.
    pub(in crate::backends::docker) async fn list_engine_terminals(
        &self,
        handle: &SandboxHandle,
    ) -> Result<Vec<TerminalInfo>> {
        self.refuse_if_paused(&handle.sandbox_id).await?;
        self.engine.list_terminals(&handle.sandbox_id).await
    }

    /// Whether sessions outlive their caller here: only the agent engine keeps them.
    pub(in crate::backends::docker) fn keeps_terminal_sessions(&self) -> bool {
        self.agent.is_some()
    }

    /// Output each terminal session keeps for re-attaches (`server.pty.retain_bytes`); only the
    /// agent keeps sessions.
    pub fn set_pty_retain_bytes(&self, bytes: u64) {
        if let Some(agent) = &self.agent {
            agent.set_retain_bytes(bytes);
        }
    }

    /// As whom the terminal runs (normalised), once its arguments pass and the sandbox is not
    /// paused.
    async fn admit_terminal(&self, handle: &SandboxHandle, spec: &PtySpec) -> Result<Option<User>> {
        let user = spec.check()?;
        argv::check_docker_env(&spec.env, false).map_err(|m| ProviderError::invalid("env", m))?;
        self.refuse_if_paused(&handle.sandbox_id).await?;
        self.note_started(&handle.sandbox_id);
        // A sandbox whose agent runs as root (`-u 0`) has root as its container user: its
        // terminals run as the image's user, as `docker exec` would have run them.
        match user {
            Some(user) => Ok(Some(user)),
            None => Ok(match self.agent_started_as(&handle.sandbox_id).await {
                // The image's own config named it; anything odd there is refused, not passed on.
                Some(image_user) => Some(User::parse("user", &image_user)?),
                None => None,
            }),
        }
    }

    /// Track a session just opened; a sandbox closed while it opened has nothing in it to
    /// clean up, so the session is abandoned.
    async fn opened(&self, sandbox_id: &str, session: Arc<dyn TerminalSession>) -> Result<()> {
        self.track_pty_session(sandbox_id, session.clone());
        if self.was_closed(sandbox_id) {
            session.abandon().await;
            return Err(ProviderError::Pty(format!(
                "sandbox {sandbox_id} was closed while the session opened"
            )));
        }
        Ok(())
    }
}
