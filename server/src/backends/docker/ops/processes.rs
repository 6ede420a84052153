//! `StartProcess`, `ListProcesses`, `AttachProcess`, `SignalProcess` and `PortForward` on the
//! Docker backend: the argument checks, then the agent (`agent/procs.rs`, `agent/forward.rs`).
//! The docker exec engine cannot do them: a `docker exec` process dies with its client's
//! stream and reaches the sandbox's network only through a shell tool the image may lack.

use super::provider::DockerProvider;
use crate::agent_client::AgentEngine;
use crate::core::processes::{
    ForwardConnection, ForwardTarget, ProcessInfo, ProcessStart, ProcessStream, Started,
};
use crate::core::spec::SandboxHandle;
use crate::error::{ProviderError, Result};

impl DockerProvider {
    /// The agent engine, or why this server has none.
    fn process_engine(&self) -> Result<&AgentEngine> {
        self.agent.as_deref().ok_or_else(|| {
            ProviderError::FailedPrecondition(
                "processes and port forwarding need the sandbox agent, and this server runs exec.engine: \
                 docker (or could not install the agent): docker exec cannot keep a process running past \
                 its client nor connect from inside the sandbox's network"
                    .into(),
            )
        })
    }

    pub async fn start_process(&self, handle: &SandboxHandle, start: &ProcessStart) -> Result<Started> {
        let user = start.check()?;
        let engine = self.process_engine()?;
        self.refuse_known_paused(&handle.sandbox_id)?;
        self.note_started(&handle.sandbox_id);
        engine.start_process(&handle.sandbox_id, &handle.shell, start, user.as_deref()).await
    }

    pub async fn list_processes(&self, handle: &SandboxHandle) -> Result<Vec<ProcessInfo>> {
        let engine = self.process_engine()?;
        self.refuse_known_paused(&handle.sandbox_id)?;
        engine.list_processes(&handle.sandbox_id).await
    }

    pub async fn attach_process(
        &self,
        handle: &SandboxHandle,
        process_id: &str,
        since: Option<u64>,
    ) -> Result<ProcessStream> {
        check_process_id(process_id)?;
        let engine = self.process_engine()?;
        self.refuse_known_paused(&handle.sandbox_id)?;
        engine.attach_process(&handle.sandbox_id, process_id, since).await
    }

    pub async fn signal_process(&self, handle: &SandboxHandle, process_id: &str, signal: i32) -> Result<()> {
        check_process_id(process_id)?;
        let engine = self.process_engine()?;
        self.refuse_known_paused(&handle.sandbox_id)?;
        engine.signal_process(&handle.sandbox_id, process_id, signal).await
    }

    pub async fn port_forward(
        &self,
        handle: &SandboxHandle,
        target: &ForwardTarget,
    ) -> Result<ForwardConnection> {
        let engine = self.process_engine()?;
        self.refuse_known_paused(&handle.sandbox_id)?;
        engine.port_forward(&handle.sandbox_id, target).await
    }
}

fn check_process_id(id: &str) -> Result<()> {
    if id.is_empty()
        || id.len() > 128
        || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(ProviderError::invalid(
            "process_id",
            format!("must be an id from StartProcess or ListProcesses (got {id:?})"),
        ));
    }
    Ok(())
}
