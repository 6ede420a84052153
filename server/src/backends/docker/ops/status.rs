//! Status, endpoint and close: what a sandbox is doing, how to reach its ports, and its end.

use std::collections::BTreeMap;

use super::argv;
use super::failure::DockerFailureKind;
use super::provider::DockerProvider;
use crate::core::spec::{SandboxEndpoint, SandboxHandle, SandboxId, SandboxStatus};
use crate::error::{ProviderError, Result};

impl DockerProvider {
    /// The status of a sandbox by id. A sandbox that is gone (closed, expired, or removed
    /// behind the service's back) is `stopped`, as Gym's Docker provider reports a missing
    /// container: decided by the daemon, not by this process's memory, so the answer is the
    /// same after a restart and on another replica. `NotFound` is for an id of another shape
    /// and a container this service does not own.
    /// Answered from the events table when it knows the container, else by asking docker.
    pub async fn status(&self, id: &SandboxId) -> Result<SandboxStatus> {
        let sandbox_id = id.as_str();
        if !SandboxId::has_valid_shape(sandbox_id) {
            return Err(ProviderError::SandboxNotFound(sandbox_id.into()));
        }
        if self.closing_now(sandbox_id) {
            return Ok(SandboxStatus::Stopped);
        }
        if !self.was_closed(sandbox_id) {
            if let Some(state) = self.states.state(sandbox_id) {
                return Ok(self.hibernated_or(id, state.sandbox_status()).await);
            }
        }
        match self.inspect(sandbox_id).await? {
            None => Ok(SandboxStatus::Stopped),
            Some(found) if found.owned => Ok(self.hibernated_or(id, found.state.sandbox_status()).await),
            Some(_) => Err(ProviderError::SandboxNotFound(sandbox_id.into())),
        }
    }

    /// `running|paused` running, `created|restarting` starting, gone or exited stopped,
    /// error or timeout unknown.
    pub async fn container_status(&self, handle: &SandboxHandle) -> SandboxStatus {
        match self.inspect(&handle.sandbox_id).await {
            Ok(Some(found)) => found.state.sandbox_status(),
            Ok(None) => SandboxStatus::Stopped,
            Err(_) => SandboxStatus::Unknown,
        }
    }

    /// The host URL of a declared, published port.
    pub async fn endpoint(&self, handle: &SandboxHandle, port: u16) -> Result<SandboxEndpoint> {
        if !handle.ports.contains(&port) {
            return Err(ProviderError::invalid(
                "port",
                format!("port {port} was not declared in spec.ports; declared ports: {:?}", handle.ports),
            ));
        }
        let out = match self.control(argv::port_args(&handle.sandbox_id, port)).await {
            Err(e) if e.kind() == Some(DockerFailureKind::MissingContainer) => {
                return Err(ProviderError::Stopped(handle.sandbox_id.clone()))
            }
            result => result?,
        };
        let text = out.stdout_text();
        let bindings: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        let preferred =
            bindings.iter().find(|b| b.starts_with("127.0.0.1:")).or(bindings.first()).ok_or_else(|| {
                ProviderError::Docker(format!("docker returned no host binding for port {port}"))
            })?;
        let (mut host, host_port) = argv::parse_port_binding(preferred).map_err(ProviderError::Docker)?;
        if host == "0.0.0.0" || host == "::" {
            host = self.config.create.publish_host.clone();
        }
        Ok(SandboxEndpoint { endpoint: argv::http_endpoint(&host, host_port), headers: BTreeMap::new() })
    }

    /// Release the sandbox's terminal sessions, then force-remove it; already gone is success.
    pub async fn remove(&self, handle: &SandboxHandle) -> Result<()> {
        self.remove_with(handle, false).await
    }

    /// As `remove`; `background`: once nothing in the sandbox runs and the close is recorded,
    /// its removal finishes in the background (`closing.rs`).
    pub async fn remove_with(&self, handle: &SandboxHandle, background: bool) -> Result<()> {
        // Everything kept of it goes at once; what the removal needs comes from the record: a
        // close ends the sandbox through its container's id, unless it is paused (its processes
        // cannot die until thawed; Docker's kill does both) or on another runtime than runc
        // (Docker's kill waits until Docker, too, sees it stopped, so every replica reads it so
        // once the close answered).
        let paused = self.states.state(&handle.sandbox_id) == Some(super::state::ContainerState::Paused);
        let record = self.forget_all(&handle.sandbox_id).await;
        let init_id = record.init.map(|(id, _)| id);
        let init_id = init_id.filter(|_| !paused && self.on_built_in_runtime(handle.runtime.as_deref()));
        self.remember_closed(&handle.sandbox_id);
        self.states.record(&handle.sandbox_id, None);
        if background && self.close_in_background(&handle.sandbox_id, init_id, &record.disk).await? {
            tracing::info!(sandbox_id = %handle.sandbox_id, "sandbox closed (removal in the background)");
            return Ok(());
        }
        self.remove_container_with(&handle.sandbox_id, &record.disk).await?;
        super::disk::remove_disk_file(&record.disk);
        tracing::info!(sandbox_id = %handle.sandbox_id, "sandbox closed");
        Ok(())
    }

    /// Remove a sandbox and end its terminal sessions; already gone is success. Returns once
    /// nothing in it runs and its id is free; Docker's removal may finish in the background.
    pub async fn close(&self, id: &SandboxId) -> Result<()> {
        self.remove_by_id_with(id.as_str(), true).await
    }

    /// Close by id: already gone is success, a container this service does not own is
    /// `SandboxNotFound` and is left untouched.
    pub async fn remove_by_id(&self, sandbox_id: &str) -> Result<()> {
        self.remove_by_id_with(sandbox_id, false).await
    }

    async fn remove_by_id_with(&self, sandbox_id: &str, background: bool) -> Result<()> {
        if !SandboxId::has_valid_shape(sandbox_id) {
            return Err(ProviderError::SandboxNotFound(sandbox_id.into()));
        }
        let cached = self.records.read(sandbox_id, |r| r.handle.clone()).flatten();
        let handle = match cached {
            Some(h) => h,
            None => match self.inspect(sandbox_id).await? {
                None => {
                    self.forget_all(sandbox_id).await;
                    return Ok(());
                }
                Some(found) if !found.owned => return Err(ProviderError::SandboxNotFound(sandbox_id.into())),
                Some(found) => SandboxHandle {
                    sandbox_id: sandbox_id.into(),
                    image: found.image,
                    shell: "sh".into(),
                    ports: found.ports,
                    workdir: found.workdir,
                    metadata: found.metadata,
                    tenant: found.tenant,
                    runtime: found.runtime,
                },
            },
        };
        self.remove_with(&handle, background).await
    }
}
