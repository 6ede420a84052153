//! Finding sandboxes: `docker inspect` read once into `Inspected`, ownership checked, handles
//! rebuilt from the container so any replica can serve any id.

use std::collections::BTreeMap;

use super::argv;
use super::engine_api::LayerFacts;
use super::failure::DockerFailureKind;
use super::provider::DockerProvider;
use super::state::ContainerState;
use crate::core::spec::{SandboxDescriptor, SandboxHandle, SandboxId};
use crate::error::{ProviderError, Result};

/// What one `docker inspect` says about a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::backends::docker) struct Inspected {
    pub(in crate::backends::docker) owned: bool,
    pub(in crate::backends::docker) image: String,
    pub(in crate::backends::docker) state: ContainerState,
    pub(in crate::backends::docker) workdir: Option<String>,
    pub(in crate::backends::docker) ports: Vec<u16>,
    pub(in crate::backends::docker) metadata: BTreeMap<String, String>,
    pub(in crate::backends::docker) tenant: Option<String>,
    /// Its service network (`spec.network`), from its runtime label.
    pub(in crate::backends::docker) network: Option<String>,
    /// Its OCI runtime (`sandboxd.oci_runtime`).
    pub(in crate::backends::docker) runtime: Option<String>,
    /// Its create said it has no loop disk (`disk.rs`'s label).
    pub(in crate::backends::docker) no_loop_disk: bool,
}

/// Where `name`'s layers are: one Engine API request where the daemon is local (a `docker
/// inspect` process costs tens of ms of CPU), else, or where the request fails, the CLI (whose
/// error is the classified one). Creates, removals and resets all ask this way.
pub(in crate::backends::docker) async fn layer_facts(
    cli: &super::cli::DockerCli,
    api: Option<&super::engine_api::EngineApi>,
    name: &str,
    timeout: Option<std::time::Duration>,
) -> std::result::Result<LayerFacts, super::failure::CliError> {
    if let Some(api) = api {
        if let Ok(facts) = api.layer(name).await {
            return Ok(facts);
        }
    }
    let out = cli.run(&argv::layer_facts_args(name), timeout, None).await?;
    Ok(LayerFacts::parse(&out.stdout_text()))
}

impl DockerProvider {
    /// [`layer_facts`] with this provider's control pool and bound.
    pub(in crate::backends::docker) async fn layer_facts(
        &self,
        name: &str,
    ) -> std::result::Result<LayerFacts, super::failure::CliError> {
        let cli = self.cli.in_pool(super::cli::Pool::Control);
        layer_facts(&cli, self.engine_api.as_ref(), name, self.control_timeout()).await
    }

    /// `Ok(None)` when no container has that name.
    pub(in crate::backends::docker) async fn inspect(&self, name: &str) -> Result<Option<Inspected>> {
        match self.control(argv::inspect_args(name)).await {
            Ok(out) => {
                let found = parse_inspect(&out.stdout_text())?;
                if found.owned && found.no_loop_disk {
                    self.note_no_disk(name);
                }
                Ok(Some(found))
            }
            Err(e) if e.kind() == Some(DockerFailureKind::MissingContainer) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The handle of a sandbox this service owns: from this process's cache, else rebuilt from
    /// the container (a restarted server or another replica). Ids of another shape, unknown
    /// containers and containers without the ownership label are all `SandboxNotFound`.
    pub async fn handle(&self, sandbox_id: &str) -> Result<SandboxHandle> {
        // A sandbox this process closed is gone for every call, whatever its container's
        // removal still has to do (Swarm removes a closed service's task in its own time).
        if !SandboxId::has_valid_shape(sandbox_id)
            || self.closing_now(sandbox_id)
            || self.was_closed(sandbox_id)
        {
            return Err(ProviderError::SandboxNotFound(sandbox_id.into()));
        }
        if let Some(h) = self.records.read(sandbox_id, |r| r.handle.clone()).flatten() {
            return Ok(h);
        }
        let found = self.owned(sandbox_id).await?;
        let running = found.state.is_running();
        let shell =
            if running { self.detect_shell(self.engine.as_ref(), sandbox_id).await? } else { "sh".into() };
        let handle = SandboxHandle {
            sandbox_id: sandbox_id.into(),
            image: found.image,
            shell,
            ports: found.ports,
            workdir: found.workdir,
            metadata: found.metadata,
            tenant: found.tenant,
            runtime: found.runtime,
        };
        if running {
            self.remember(&handle);
        }
        Ok(handle)
    }

    pub(in crate::backends::docker) async fn owned(&self, sandbox_id: &str) -> Result<Inspected> {
        match self.inspect(sandbox_id).await? {
            Some(found) if found.owned => Ok(found),
            _ => Err(ProviderError::SandboxNotFound(sandbox_id.into())),
        }
    }

    /// Re-attach to a running sandbox from its descriptor, rediscovering image and shell.
    /// Containers without this service's ownership label are refused, and so is a sandbox
    /// closed here whose container's removal is still under way (it is gone for every caller);
    /// one a replica closed is `Stopped` from its close's answer on.
    pub async fn connect(&self, descriptor: &SandboxDescriptor) -> Result<SandboxHandle> {
        let id = descriptor.sandbox_id.as_str();
        if !SandboxId::has_valid_shape(id) || self.closing_now(id) {
            return Err(ProviderError::SandboxNotFound(id.into()));
        }
        let found = self.owned(id).await?;
        match found.state {
            // Closed by a replica: Docker may not have seen the killed sandbox's exit yet.
            ContainerState::Running if self.closed_by_any(id) => {
                return Err(ProviderError::Stopped(id.into()));
            }
            ContainerState::Running => {}
            // Connect finds the exec shell by running a command, which a frozen sandbox refuses.
            ContainerState::Paused => return Err(ProviderError::Paused(id.into())),
            _ => {
                // Stopped: its cached handle and container facts are stale (what a reset
                // restores stays until it is removed).
                self.records.update(id, |r| {
                    r.handle = None;
                    r.init = None;
                });
                return Err(ProviderError::Stopped(id.into()));
            }
        }
        let shell = self.detect_shell(self.engine.as_ref(), id).await?;
        let handle = SandboxHandle {
            sandbox_id: id.into(),
            image: found.image,
            shell,
            ports: descriptor.ports.clone().unwrap_or(found.ports),
            workdir: descriptor.workdir.clone().or(found.workdir),
            metadata: found.metadata,
            tenant: found.tenant,
            runtime: found.runtime,
        };
        self.remember(&handle);
        Ok(handle)
    }

    /// The descriptor another process reconnects from: id, declared ports, workdir.
    pub fn serialize_handle(&self, handle: &SandboxHandle) -> SandboxDescriptor {
        SandboxDescriptor {
            sandbox_id: handle.sandbox_id.clone(),
            ports: Some(handle.ports.clone()),
            workdir: handle.workdir.clone(),
        }
    }
}

fn parse_inspect(text: &str) -> Result<Inspected> {
    let line = text.trim_end_matches('\n');
    let mut parts = line.splitn(4, '\t');
    let labels_json = parts.next().unwrap_or("null");
    let image = parts.next().unwrap_or_default().to_string();
    let state = ContainerState::parse(parts.next().unwrap_or_default());
    let workdir = parts.next().map(str::trim).filter(|w| !w.is_empty()).map(String::from);
    let labels: BTreeMap<String, String> =
        serde_json::from_str::<Option<BTreeMap<String, String>>>(labels_json)
            .map_err(|e| ProviderError::Docker(format!("unexpected docker inspect output: {e}")))?
            .unwrap_or_default();
    let owned = labels.get(argv::SANDBOX_LABEL).is_some_and(|v| v == "1");
    let ports = labels
        .get(argv::PORTS_LABEL)
        .map(|p| p.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_default();
    let metadata = super::labels::metadata_from_labels(&labels);
    let tenant = labels.get(crate::auth::TENANT_LABEL).cloned();
    let network = labels.get(argv::RUNTIME_LABEL).and_then(|l| argv::RuntimeLabel::parse(l).network);
    let runtime = labels.get(super::labels::OCI_RUNTIME_LABEL).cloned();
    let no_loop_disk = labels.get(super::disk::DISK_LABEL).is_some_and(|d| d == super::disk::NO_LOOP_DISK);
    Ok(Inspected { owned, image, state, workdir, ports, metadata, tenant, network, runtime, no_loop_disk })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inspect_output_parses() {
        let text = "{\"sandboxd.sandbox\":\"1\",\"sandboxd.ports\":\"80,8080\"}\tsandboxd-test/busybox:1\trunning\t/work\n";
        let i = parse_inspect(text).unwrap();
        assert!(i.owned);
        assert_eq!(i.ports, vec![80, 8080]);
        assert_eq!(i.state, ContainerState::Running);
        assert_eq!(i.workdir.as_deref(), Some("/work"));
        let stranger = parse_inspect("null\timg\texited\t\n").unwrap();
        assert!(!stranger.owned);
        assert_eq!(stranger.workdir, None);
    }
}
