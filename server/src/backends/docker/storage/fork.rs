//! Fork: `count` new sandboxes from one fresh snapshot of a source, all or nothing.
//!
//! What a child gets from the source: its filesystem, env and workdir through the snapshot
//! image (`docker commit` records the container's `Env` and `WorkingDir`), its declared ports
//! (published anew on new host ports), cpu / memory / gpu limits (read back from the container)
//! and its lease length (`sandboxd.expires_ms` - `sandboxd.created_ms`: a child's lease is
//! as long as the source's was at its create, under the operator's policy the caller passes;
//! a lease moved by `SetTimeout` is not read).
//! Children run the service's keep-alive like any
//! sandbox.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::argv;
use super::failure::CliError;
use super::provider::DockerProvider;
use super::snapshot::validate_labels;
use crate::core::backend::CreatePolicy;
use crate::core::branching::{Forked, MAX_FORK_COUNT};
use crate::core::lease;
use crate::core::spec::{SandboxId, SandboxResources, SandboxSpec};
use crate::error::{ProviderError, Result};

/// The parts of `docker inspect` a fork copies.
#[derive(Debug, Default, Deserialize)]
pub(in crate::backends::docker) struct ContainerJson {
    /// The container's full id.
    #[serde(rename = "Id", default)]
    pub(in crate::backends::docker) id: String,
    #[serde(rename = "Config", default)]
    pub(in crate::backends::docker) config: ConfigJson,
    #[serde(rename = "HostConfig", default)]
    pub(in crate::backends::docker) host: HostJson,
}

#[derive(Debug, Default, Deserialize)]
pub(in crate::backends::docker) struct ConfigJson {
    #[serde(rename = "Labels", default)]
    pub(in crate::backends::docker) labels: Option<BTreeMap<String, String>>,
    #[serde(rename = "WorkingDir", default)]
    working_dir: String,
}

#[derive(Debug, Default, Deserialize)]
pub(in crate::backends::docker) struct HostJson {
    #[serde(rename = "NanoCpus", default)]
    nano_cpus: i64,
    #[serde(rename = "Memory", default)]
    memory: i64,
    #[serde(rename = "DeviceRequests", default)]
    device_requests: Option<Vec<DeviceRequest>>,
    /// The daemon runtime it runs on (`runsc_direct.rs` asks whether runsc is called directly).
    #[serde(rename = "Runtime", default)]
    pub(in crate::backends::docker) runtime: String,
}

#[derive(Debug, Default, Deserialize)]
struct DeviceRequest {
    #[serde(rename = "Count", default)]
    count: i64,
}

/// The spec a child of this container is created with (image and snapshot filled in later).
pub(in crate::backends::docker) fn child_spec(
    source: &ContainerJson,
    labels: &BTreeMap<String, String>,
) -> SandboxSpec {
    let container_labels = source.config.labels.clone().unwrap_or_default();
    let ports = container_labels
        .get(argv::PORTS_LABEL)
        .map(|p| p.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_default();
    let gpus: i64 = source.host.device_requests.iter().flatten().map(|d| d.count.max(0)).sum();
    let mut spec = SandboxSpec {
        ttl_s: lease::length_s(&container_labels),
        workdir: Some(source.config.working_dir.clone()).filter(|w| !w.is_empty()),
        metadata: labels.clone(),
        resources: SandboxResources {
            cpu: (source.host.nano_cpus > 0).then(|| source.host.nano_cpus as f64 / 1e9),
            memory_mib: (source.host.memory > 0).then_some((source.host.memory as u64) >> 20),
            gpu: u32::try_from(gpus).ok().filter(|g| *g > 0),
            ..Default::default()
        },
        ports,
        // A child belongs to its source's tenant.
        tenant: container_labels.get(crate::auth::TENANT_LABEL).cloned(),
        ..Default::default()
    };
    // Its network, capabilities, /dev/shm and volumes too (a snapshot holds none of them).
    if let Some(label) = container_labels.get(argv::RUNTIME_LABEL) {
        argv::RuntimeLabel::parse(label).apply(&mut spec);
    }
    spec
}

impl DockerProvider {
    /// Snapshot `sandbox_id` once, then start `count` children from it in parallel, each
    /// planned by `policy` (the source's lease length under the operator's cap, the create
    /// bound). When any child fails, the others and the snapshot are removed and the first
    /// failure is returned. The source keeps running (or stays paused).
    pub async fn fork(
        &self,
        id: &SandboxId,
        count: u32,
        labels: &BTreeMap<String, String>,
        max_snapshots: usize,
        policy: &CreatePolicy,
    ) -> Result<Forked> {
        let sandbox_id = id.as_str();
        let spec = self.fork_plan(sandbox_id, count, labels).await?;
        let (snapshot, making) = self.commit_owned(sandbox_id, labels, max_snapshots).await?;
        let spec = SandboxSpec { snapshot_id: Some(snapshot.snapshot_id.clone()), ..spec };
        let spec = &spec;
        let started =
            policy.start_children(spec, count, |plan| async move { self.create_planned(spec, &plan).await });
        let sandboxes = match started.await {
            Ok(sandboxes) => sandboxes,
            Err((first, started)) => {
                tracing::warn!(sandbox_id, error = %first, "a fork child failed; removing the others and the snapshot");
                futures_util::future::join_all(started.iter().map(|h| self.remove(h))).await;
                self.remove_snapshot_image(&snapshot.snapshot_id).await;
                return Err(first);
            }
        };
        making.answered();
        tracing::info!(sandbox_id, count, snapshot_id = %snapshot.snapshot_id, "sandbox forked");
        Ok(Forked { snapshot, sandboxes, ttl: policy.children_ttl(spec) })
    }

    /// A fork's checks (`count`, `labels`, a source this service owns) and the spec each child
    /// is created with, its snapshot left for the caller to fill in. The cluster's fork uses it
    /// too: it commits on the source's node and places the children as services.
    pub async fn fork_plan(
        &self,
        sandbox_id: &str,
        count: u32,
        labels: &BTreeMap<String, String>,
    ) -> Result<SandboxSpec> {
        if !(1..=MAX_FORK_COUNT).contains(&count) {
            return Err(ProviderError::invalid(
                "count",
                format!("must be in 1..={MAX_FORK_COUNT} (got {count})"),
            ));
        }
        validate_labels("labels", labels)?;
        let source = self.inspect_source(sandbox_id).await?;
        Ok(child_spec(&source, labels))
    }

    /// The full inspect of a sandbox this service owns.
    pub(in crate::backends::docker) async fn inspect_source(
        &self,
        sandbox_id: &str,
    ) -> Result<ContainerJson> {
        if !SandboxId::has_valid_shape(sandbox_id) {
            return Err(ProviderError::SandboxNotFound(sandbox_id.into()));
        }
        let out = match self.control(argv::inspect_full_args(sandbox_id)).await {
            Err(CliError::Failed(_)) => return Err(ProviderError::SandboxNotFound(sandbox_id.into())),
            result => result?,
        };
        let mut found: Vec<ContainerJson> = serde_json::from_slice(&out.stdout)
            .map_err(|e| ProviderError::Docker(format!("unexpected docker inspect output: {e}")))?;
        let source = found.pop().ok_or_else(|| ProviderError::SandboxNotFound(sandbox_id.into()))?;
        let owned =
            source.config.labels.as_ref().and_then(|l| l.get(argv::SANDBOX_LABEL)).is_some_and(|v| v == "1");
        if !owned {
            return Err(ProviderError::SandboxNotFound(sandbox_id.into()));
        }
        Ok(source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_copy_ports_limits_workdir_and_lease() {
        let json = r#"[{"Config": {"Labels": {"sandboxd.sandbox": "1", "sandboxd.ports": "80,8080",
            "sandboxd.created_ms": "1000", "sandboxd.expires_ms": "301000"}, "WorkingDir": "/work", "Env": ["A=1"]},
            "HostConfig": {"NanoCpus": 1500000000, "Memory": 268435456,
            "DeviceRequests": [{"Count": 1}]}}]"#;
        let mut parsed: Vec<ContainerJson> = serde_json::from_str(json).unwrap();
        let labels: BTreeMap<String, String> = [("branch".to_string(), "a".to_string())].into();
        let spec = child_spec(&parsed.pop().unwrap(), &labels);
        assert_eq!(spec.ports, vec![80, 8080]);
        assert_eq!(spec.workdir.as_deref(), Some("/work"));
        assert_eq!(spec.ttl_s, Some(300.0));
        assert_eq!(spec.resources.cpu, Some(1.5));
        assert_eq!(spec.resources.memory_mib, Some(256));
        assert_eq!(spec.resources.gpu, Some(1));
        assert_eq!(spec.metadata, labels);
        let bare = child_spec(&ContainerJson::default(), &BTreeMap::new());
        assert_eq!((bare.ports.len(), bare.ttl_s, bare.resources), (0, None, SandboxResources::default()));
    }
}
