//! Snapshots and forks in cluster mode. A snapshot is an image on the node where its sandbox
//! ran: `Snapshot` and `Fork` are relayed to that node (`rpc_table`), which commits the task's
//! container there. A sandbox started from a snapshot (a fork's child, or a `Create` naming
//! `spec.snapshot_id` on any node) is a Swarm service like any other, placed on the node that
//! holds the image, so the cluster places, relays, lists, watches and sweeps it as any sandbox.
//! `ListSnapshots` and `DeleteSnapshot` ask every ready node (`SandboxPeer.LocalSnapshots`,
//! `DeleteLocalSnapshot`); each node expires its own. There is no registry, so a snapshot never
//! moves between nodes, and a live snapshot (a checkpoint) is not offered here.

use std::collections::{BTreeMap, HashMap};

use sandboxd_proto::v1 as pb;
use sandboxd_proto::v1::sandbox_peer_client::SandboxPeerClient;

use super::backend::SwarmBackend;
use super::peer_calls::{peer_request, ASK_TIMEOUT};
use super::placement::NodeInfo;
use crate::backends::docker::DockerProvider;
use crate::core::backend::{CreatePolicy, SandboxBackend};
use crate::core::branching::{Forked, SnapshotInfo};
use crate::core::lease;
use crate::core::spec::{SandboxId, SandboxSpec};
use crate::error::{ProviderError, Result};

/// How long another node may take to remove a snapshot (it may first wait for the removals of
/// sandboxes closed a moment ago that used it).
const DELETE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// This node's snapshots carrying every one of `labels` (only `snapshot_id` when given): what
/// `SandboxPeer.LocalSnapshots` answers.
pub(super) async fn local_snapshots(
    local: &DockerProvider,
    labels: HashMap<String, String>,
    snapshot_id: Option<String>,
) -> Result<Vec<SnapshotInfo>> {
    let filter: BTreeMap<String, String> = labels.into_iter().collect();
    match snapshot_id {
        Some(id) => match local.snapshot_info(&id).await {
            Ok(info) if info.carries(&filter) => Ok(vec![info]),
            Ok(_) | Err(ProviderError::SnapshotNotFound(_)) => Ok(Vec::new()),
            Err(e) => Err(e),
        },
        None => local.list_snapshots(&filter).await,
    }
}

/// Removes snapshot `snapshot_id` when this node holds it: `Ok(false)` when it does not (what
/// `SandboxPeer.DeleteLocalSnapshot` answers).
pub(super) async fn delete_local(local: &DockerProvider, snapshot_id: &str) -> Result<bool> {
    match local.delete_snapshot(snapshot_id).await {
        Ok(()) => Ok(true),
        Err(ProviderError::SnapshotNotFound(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Another node's refusal of a snapshot call, as the error it stands for.
fn peer_snapshot_failure(node: &str, snapshot_id: &str, status: tonic::Status) -> ProviderError {
    let message = format!("node {node}: {}", status.message());
    match status.code() {
        tonic::Code::FailedPrecondition => ProviderError::SnapshotInUse(message),
        tonic::Code::NotFound => ProviderError::SnapshotNotFound(snapshot_id.into()),
        _ => ProviderError::Unavailable(message),
    }
}

impl SwarmBackend {
    /// The ready nodes other than this one (a node that is down answers nothing).
    async fn other_ready_nodes(&self) -> Result<Vec<NodeInfo>> {
        let me = self.swarm.self_id().to_string();
        Ok(self.all_nodes().await?.into_iter().filter(|n| n.id != me && !n.is_down()).collect())
    }

    /// The peer service of node `node`, over the node's shared channel (`Swarm::channel`).
    fn peer(&self, node: &NodeInfo) -> Result<SandboxPeerClient<tonic::transport::Channel>> {
        Ok(SandboxPeerClient::new(self.swarm.channel(&node.addr)?))
    }

    /// Node `node`'s snapshots as `LocalSnapshots` answers them.
    async fn snapshots_on(
        &self,
        node: &NodeInfo,
        labels: &BTreeMap<String, String>,
        snapshot_id: Option<&str>,
    ) -> Result<Vec<SnapshotInfo>> {
        let ask = async {
            let mut client = self.peer(node)?;
            let request = peer_request(
                self.swarm.token(),
                pb::LocalSnapshotsRequest {
                    labels: labels.clone().into_iter().collect(),
                    snapshot_id: snapshot_id.map(str::to_string),
                },
                Some(ASK_TIMEOUT),
            )?;
            let answer = client.local_snapshots(request).await.map_err(|s| {
                ProviderError::Unavailable(format!("node {}: {}", node.hostname, s.message()))
            })?;
            Ok(answer.into_inner().snapshots.into_iter().map(SnapshotInfo::from).collect())
        };
        match tokio::time::timeout(ASK_TIMEOUT, ask).await {
            Ok(answer) => answer,
            Err(_) => Err(ProviderError::Unavailable(format!(
                "node {} did not list its snapshots within {ASK_TIMEOUT:?}",
                node.hostname
            ))),
        }
    }

    /// Every ready node's snapshots carrying every label of `filter`, oldest first. A node that
    /// does not answer is left out (its snapshots cannot be used until it is back), with a
    /// warning.
    pub(super) async fn list_cluster_snapshots(
        &self,
        filter: &BTreeMap<String, String>,
    ) -> Result<Vec<SnapshotInfo>> {
        let mut found = self.local.list_snapshots(filter).await?;
        let others = self.other_ready_nodes().await?;
        let answers =
            futures_util::future::join_all(others.iter().map(|n| self.snapshots_on(n, filter, None))).await;
        for (node, answer) in others.iter().zip(answers) {
            match answer {
                Ok(snapshots) => found.extend(snapshots),
                Err(e) => {
                    tracing::warn!(node = %node.hostname, error = %e, "a node's snapshots are left out of ListSnapshots")
                }
            }
        }
        found.sort_by(|a, b| {
            (a.created_at_unix_ms, &a.snapshot_id).cmp(&(b.created_at_unix_ms, &b.snapshot_id))
        });
        Ok(found)
    }

    /// The node holding snapshot `snapshot_id`, and the snapshot; `SnapshotNotFound` when no
    /// ready node has it.
    pub(super) async fn snapshot_holder(&self, snapshot_id: &str) -> Result<(String, SnapshotInfo)> {
        match self.local.snapshot_info(snapshot_id).await {
            Ok(info) => return Ok((self.swarm.self_id().to_string(), info)),
            Err(ProviderError::SnapshotNotFound(_)) => {}
            Err(e) => return Err(e),
        }
        let none = BTreeMap::new();
        for node in self.other_ready_nodes().await? {
            match self.snapshots_on(&node, &none, Some(snapshot_id)).await {
                Ok(found) => {
                    if let Some(info) = found.into_iter().find(|s| s.snapshot_id == snapshot_id) {
                        return Ok((node.id, info));
                    }
                }
                Err(e) => {
                    tracing::warn!(node = %node.hostname, error = %e, "a node did not say whether it holds a snapshot")
                }
            }
        }
        Err(ProviderError::SnapshotNotFound(snapshot_id.into()))
    }

    /// Removes the snapshot from whichever node holds it. When no node that answered holds it
    /// but one did not answer, that is the error (the snapshot may be there), not NOT_FOUND.
    pub(super) async fn delete_cluster_snapshot(&self, snapshot_id: &str) -> Result<()> {
        if delete_local(&self.local, snapshot_id).await? {
            return Ok(());
        }
        let mut unanswered = None;
        for node in self.other_ready_nodes().await? {
            let mut client = self.peer(&node)?;
            let request = peer_request(
                self.swarm.token(),
                pb::DeleteLocalSnapshotRequest { snapshot_id: snapshot_id.to_string() },
                Some(DELETE_TIMEOUT),
            )?;
            match client.delete_local_snapshot(request).await {
                Ok(answer) if answer.get_ref().found => return Ok(()),
                Ok(_) => {}
                Err(status)
                    if matches!(
                        status.code(),
                        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::DeadlineExceeded
                    ) =>
                {
                    unanswered = Some(peer_snapshot_failure(&node.hostname, snapshot_id, status));
                }
                Err(status) => return Err(peer_snapshot_failure(&node.hostname, snapshot_id, status)),
            }
        }
        Err(unanswered.unwrap_or_else(|| ProviderError::SnapshotNotFound(snapshot_id.into())))
    }

    /// A spec to run from snapshot `spec.snapshot_id`: its image and runtime are the snapshot's,
    /// on the node that holds it (the returned constraint). A live snapshot is refused: its sandbox would be
    /// restored, which cluster mode does not offer.
    pub(super) async fn spec_from_snapshot(
        &self,
        spec: &SandboxSpec,
        snapshot_id: &str,
    ) -> Result<(SandboxSpec, String)> {
        let (holder, info) = self.snapshot_holder(snapshot_id).await?;
        if info.live {
            return Err(ProviderError::FailedPrecondition(format!(
                "spec.snapshot_id: {snapshot_id:?} is a live snapshot, and cluster mode does not restore \
                 sandboxes (the swarm backend does not offer live_checkpoints)"
            )));
        }
        // It runs on the runtime its snapshot's sandbox ran on (recorded when that sandbox named
        // one), which its node runs.
        let runtime = spec.runtime.clone().or_else(|| Some(info.runtime).filter(|r| !r.is_empty()));
        let spec = SandboxSpec { image: snapshot_id.to_string(), snapshot_id: None, runtime, ..spec.clone() };
        Ok((spec, format!("node.id=={holder}")))
    }

    /// `count` children of sandbox `id` (a sandbox of this node: the relay brought the call
    /// here) from one fresh snapshot committed here, each a service placed on this node; all
    /// or nothing.
    pub(super) async fn fork_in_swarm(
        &self,
        id: &SandboxId,
        count: u32,
        labels: &BTreeMap<String, String>,
        max_snapshots: usize,
        policy: &CreatePolicy,
    ) -> Result<Forked> {
        self.alias(id.as_str()).await?;
        let mut spec = self.local.fork_plan(id.as_str(), count, labels).await?;
        // The lease is a label of the sandbox's service, not of its task's container, and what
        // the sandbox asked for is its service's reservation (its container's limits add the
        // server's defaults, which would make every child reserve them).
        if let Some(service) = self.inspect_services(&[id.to_string()]).await?.into_iter().next() {
            spec.ttl_s = lease::length_s(&service.labels);
            spec.resources.cpu = service.reserved_nano_cpus.map(|n| n as f64 / 1e9);
            spec.resources.memory_mib = service.reserved_memory_mib;
        }
        let snapshot = self.local.snapshot(id, labels, max_snapshots).await?;
        let spec = SandboxSpec { snapshot_id: Some(snapshot.snapshot_id.clone()), ..spec };
        let spec = &spec;
        let started =
            policy.start_children(spec, count, |plan| async move { self.create_planned(spec, &plan).await });
        let sandboxes = match started.await {
            Ok(sandboxes) => sandboxes,
            Err((first, started)) => {
                tracing::warn!(sandbox_id = %id, error = %first, "a fork child failed; removing the others and the snapshot");
                futures_util::future::join_all(started.iter().map(|h| self.remove_service(&h.sandbox_id)))
                    .await;
                if let Err(e) = self.local.delete_snapshot(&snapshot.snapshot_id).await {
                    tracing::warn!(snapshot_id = %snapshot.snapshot_id, error = %e, "cannot remove the failed fork's snapshot; the expiry sweep will");
                }
                return Err(first);
            }
        };
        tracing::info!(sandbox_id = %id, count, snapshot_id = %snapshot.snapshot_id, "sandbox forked in the swarm");
        Ok(Forked { snapshot, sandboxes, ttl: policy.children_ttl(spec) })
    }
}
