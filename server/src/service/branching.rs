//! Snapshot, fork, diff, pause and resume: branching a sandbox and grading it by what changed.

use crate::service::rpc_table::name as rpc;
use std::collections::{BTreeMap, HashMap};

use sandboxd_proto::v1 as pb;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use super::{convert, span, BoxStream, SandboxApi};
use crate::auth::{Principal, TENANT_LABEL};
use crate::core::spec::SandboxId;

/// Paths per `DiffResponse` message.
const DIFF_BATCH: usize = 1000;

fn labels(map: HashMap<String, String>) -> BTreeMap<String, String> {
    convert::sorted(map)
}

fn sandbox_id(id: &str) -> Result<SandboxId, Status> {
    Ok(SandboxId::parse("sandbox_id", id)?)
}

/// A snapshot's labels as the caller sent them, with the caller's tenant set (and any
/// `sandboxd.tenant` the caller sent replaced), so a tenant's snapshots are found by label.
fn tenant_labels(principal: &Principal, map: HashMap<String, String>) -> BTreeMap<String, String> {
    let mut labels = labels(map);
    match principal.tenant() {
        Some(tenant) => {
            labels.insert(TENANT_LABEL.into(), tenant.into());
        }
        None if !matches!(principal, Principal::Operator) => {}
        None => {}
    }
    labels
}

impl SandboxApi {
    /// A snapshot this caller may use: any for the operator, its tenant's for a tenant (any
    /// other is NOT_FOUND, as an unknown id is).
    pub(super) async fn check_snapshot(
        &self,
        principal: &Principal,
        snapshot_id: &str,
    ) -> Result<(), Status> {
        let Some(tenant) = principal.tenant() else { return Ok(()) };
        let filter = BTreeMap::from([(TENANT_LABEL.to_string(), tenant.to_string())]);
        let mine = self.backend().list_snapshots(&filter).await?;
        if mine.iter().any(|s| s.snapshot_id == snapshot_id) {
            Ok(())
        } else {
            Err(Status::not_found(format!("no snapshot {snapshot_id:?}")))
        }
    }
}

impl SandboxApi {
    fn max_snapshots(&self) -> usize {
        self.policy.max_snapshots as usize
    }
}

pub(super) async fn snapshot(
    api: &SandboxApi,
    request: Request<pb::SnapshotRequest>,
) -> Result<Response<pb::SnapshotResponse>, Status> {
    let principal = Principal::of(&request);
    let req = request.into_inner();
    async {
        let id = sandbox_id(&req.sandbox_id)?;
        api.authorize(&principal, id.as_str(), const { super::rpc_table::scope(rpc::SNAPSHOT) }).await?;
        api.quotas.snapshot_allowed(api, &principal).await?;
        let labels = tenant_labels(&principal, req.labels);
        let info = api.backend().snapshot(&id, &labels, api.max_snapshots()).await?;
        Ok(Response::new(pb::SnapshotResponse { snapshot: Some(info.into()) }))
    }
    .instrument(span(rpc::SNAPSHOT, &req.sandbox_id))
    .await
}

pub(super) async fn list_snapshots(
    api: &SandboxApi,
    request: Request<pb::ListSnapshotsRequest>,
) -> Result<Response<pb::ListSnapshotsResponse>, Status> {
    let principal = Principal::of(&request);
    SandboxApi::require_key(&principal, rpc::LIST_SNAPSHOTS)?;
    let req = request.into_inner();
    async {
        let found = api.backend().list_snapshots(&tenant_labels(&principal, req.labels)).await?;
        Ok(Response::new(pb::ListSnapshotsResponse {
            snapshots: found.into_iter().map(Into::into).collect(),
        }))
    }
    .instrument(tracing::info_span!("rpc", rpc = rpc::LIST_SNAPSHOTS))
    .await
}

pub(super) async fn delete_snapshot(
    api: &SandboxApi,
    request: Request<pb::DeleteSnapshotRequest>,
) -> Result<Response<pb::DeleteSnapshotResponse>, Status> {
    let principal = Principal::of(&request);
    SandboxApi::require_key(&principal, rpc::DELETE_SNAPSHOT)?;
    let req = request.into_inner();
    api.check_snapshot(&principal, &req.snapshot_id).await?;
    let span = tracing::info_span!("rpc", rpc = rpc::DELETE_SNAPSHOT, snapshot_id = %req.snapshot_id);
    api.backend().delete_snapshot(&req.snapshot_id).instrument(span).await?;
    Ok(Response::new(pb::DeleteSnapshotResponse {}))
}

pub(super) async fn fork(
    api: &SandboxApi,
    request: Request<pb::ForkRequest>,
) -> Result<Response<pb::ForkResponse>, Status> {
    let principal = Principal::of(&request);
    let req = request.into_inner();
    if req.live {
        return fork_live(api, principal, req).await;
    }
    if req.snapshot_id.is_some() {
        return Err(Status::invalid_argument(
            "snapshot_id: only a live fork (live: true) starts from a given snapshot",
        ));
    }
    let span = span(rpc::FORK, &req.sandbox_id);
    let id = sandbox_id(&req.sandbox_id)?;
    let source = id.clone();
    api.authorize_fork(&principal, id.as_str()).await?;
    let _permit = api.quotas.fork_allowed(api, &principal, req.count).await?;
    api.quotas.snapshot_allowed(api, &principal).await?;
    let fork_labels = tenant_labels(&principal, req.labels);
    let lifecycle = api.lifecycle().clone();
    let max = api.max_snapshots();
    // Its own task: a caller that goes away mid-fork still gets all or nothing (the children
    // are kept or rolled back, never left half made).
    let work =
        tokio::spawn(async move { lifecycle.fork(&id, req.count, &fork_labels, max).await }.instrument(span));
    let forked = work.await.map_err(|e| Status::internal(format!("fork task failed: {e}")))??;
    api.inherit_network(&source, &forked.sandboxes).await?;
    Ok(Response::new(pb::ForkResponse {
        sandboxes: forked.sandboxes.iter().map(convert::sandbox_ref).collect(),
        snapshot_id: forked.snapshot.snapshot_id,
    }))
}

/// `Fork { live }`: children restored from a live snapshot, a fresh one of `sandbox_id` or the
/// given `snapshot_id` (then `sandbox_id` may be empty).
async fn fork_live(
    api: &SandboxApi,
    principal: Principal,
    req: pb::ForkRequest,
) -> Result<Response<pb::ForkResponse>, Status> {
    let span = span(rpc::FORK, &req.sandbox_id);
    let id = match (req.sandbox_id.is_empty(), &req.snapshot_id) {
        (true, Some(_)) => None,
        _ => Some(sandbox_id(&req.sandbox_id)?),
    };
    match &id {
        Some(id) => {
            api.authorize_fork(&principal, id.as_str()).await?;
        }
        None => SandboxApi::require_key(&principal, "Fork from a snapshot")?,
    }
    if let Some(snapshot_id) = &req.snapshot_id {
        api.check_snapshot(&principal, snapshot_id).await?;
    }
    let _permit = api.quotas.fork_allowed(api, &principal, req.count).await?;
    if req.snapshot_id.is_none() {
        api.quotas.snapshot_allowed(api, &principal).await?;
    }
    let fork_labels = tenant_labels(&principal, req.labels);
    let lifecycle = api.lifecycle().clone();
    let max = api.max_snapshots();
    let source = id.clone();
    let snapshot_id = req.snapshot_id.clone();
    let count = req.count;
    // Its own task, as `fork`'s: all or nothing even when the caller goes away.
    let work =
        tokio::spawn(
            async move {
                lifecycle.fork_live(id.as_ref(), snapshot_id.as_deref(), count, &fork_labels, max).await
            }
            .instrument(span),
        );
    let forked = work.await.map_err(|e| Status::internal(format!("fork task failed: {e}")))??;
    if let Some(source) = &source {
        api.inherit_network(source, &forked.sandboxes).await?;
    }
    Ok(Response::new(pb::ForkResponse {
        sandboxes: forked.sandboxes.iter().map(convert::sandbox_ref).collect(),
        snapshot_id: forked.snapshot.snapshot_id,
    }))
}

pub(super) async fn checkpoint(
    api: &SandboxApi,
    request: Request<pb::CheckpointRequest>,
) -> Result<Response<pb::CheckpointResponse>, Status> {
    let principal = Principal::of(&request);
    let req = request.into_inner();
    async {
        let id = sandbox_id(&req.sandbox_id)?;
        api.authorize(&principal, id.as_str(), const { super::rpc_table::scope(rpc::CHECKPOINT) }).await?;
        api.quotas.snapshot_allowed(api, &principal).await?;
        let labels = tenant_labels(&principal, req.labels);
        let leave_running = req.leave_running.unwrap_or(true);
        let backend = api.backend().clone();
        let max = api.max_snapshots();
        // Its own task: a caller that goes away never leaves the sandbox stopped mid-way.
        let work = tokio::spawn(async move { backend.checkpoint(&id, &labels, leave_running, max).await });
        let info = work.await.map_err(|e| Status::internal(format!("checkpoint task failed: {e}")))??;
        Ok(Response::new(pb::CheckpointResponse { snapshot: Some(info.into()) }))
    }
    .instrument(span(rpc::CHECKPOINT, &req.sandbox_id))
    .await
}

pub(super) async fn hibernate(
    api: &SandboxApi,
    request: Request<pb::HibernateRequest>,
) -> Result<Response<pb::HibernateResponse>, Status> {
    let principal = Principal::of(&request);
    let req = request.into_inner();
    async {
        let id = sandbox_id(&req.sandbox_id)?;
        api.authorize(&principal, id.as_str(), const { super::rpc_table::scope(rpc::HIBERNATE) }).await?;
        let backend = api.backend().clone();
        let work = tokio::spawn(async move { backend.hibernate(&id).await });
        let done = work.await.map_err(|e| Status::internal(format!("hibernate task failed: {e}")))??;
        Ok(Response::new(pb::HibernateResponse {
            checkpoint_bytes: done.checkpoint_bytes,
            memory_freed_bytes: done.memory_freed_bytes,
        }))
    }
    .instrument(span(rpc::HIBERNATE, &req.sandbox_id))
    .await
}

pub(super) async fn diff(
    api: &SandboxApi,
    request: Request<pb::DiffRequest>,
) -> Result<Response<BoxStream<pb::DiffResponse>>, Status> {
    let principal = Principal::of(&request);
    let req = request.into_inner();
    let entries = async {
        let id = sandbox_id(&req.sandbox_id)?;
        api.authorize(&principal, id.as_str(), const { super::rpc_table::scope(rpc::DIFF) }).await?;
        Ok::<_, Status>(api.backend().diff(&id, req.path_prefix.as_deref()).await?)
    }
    .instrument(span(rpc::DIFF, &req.sandbox_id))
    .await?;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        let mut entries = entries.into_iter().map(pb::DiffEntry::from).peekable();
        while entries.peek().is_some() {
            let batch: Vec<pb::DiffEntry> = entries.by_ref().take(DIFF_BATCH).collect();
            if tx.send(Ok(pb::DiffResponse { entries: batch })).await.is_err() {
                break; // the caller went away
            }
        }
    });
    Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
}

pub(super) async fn pause(
    api: &SandboxApi,
    request: Request<pb::PauseRequest>,
) -> Result<Response<pb::PauseResponse>, Status> {
    let principal = Principal::of(&request);
    let req = request.into_inner();
    async {
        api.authorize(&principal, &req.sandbox_id, const { super::rpc_table::scope(rpc::PAUSE) }).await?;
        api.backend().pause(&sandbox_id(&req.sandbox_id)?).await?;
        Ok(Response::new(pb::PauseResponse {}))
    }
    .instrument(span(rpc::PAUSE, &req.sandbox_id))
    .await
}

pub(super) async fn resume(
    api: &SandboxApi,
    request: Request<pb::ResumeRequest>,
) -> Result<Response<pb::ResumeResponse>, Status> {
    let principal = Principal::of(&request);
    let req = request.into_inner();
    async {
        api.authorize(&principal, &req.sandbox_id, const { super::rpc_table::scope(rpc::RESUME) }).await?;
        api.backend().resume(&sandbox_id(&req.sandbox_id)?).await?;
        Ok(Response::new(pb::ResumeResponse {}))
    }
    .instrument(span(rpc::RESUME, &req.sandbox_id))
    .await
}
