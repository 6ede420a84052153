//! Snapshot, fork, diff, pause and resume: branching a sandbox and grading it by what changed.

use std::collections::{BTreeMap, HashMap};

use sandboxd_proto::v1 as pb;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use super::{convert, span, BoxStream, SandboxApi};
use crate::branching::SnapshotInfo;
use crate::spec::SandboxId;

/// Paths per `DiffResponse` message.
const DIFF_BATCH: usize = 1000;

fn snapshot_info(info: SnapshotInfo) -> pb::SnapshotInfo {
    pb::SnapshotInfo {
        snapshot_id: info.snapshot_id,
        source_sandbox_id: info.source_sandbox_id,
        labels: info.labels.into_iter().collect(),
        created_at_unix_ms: info.created_at_unix_ms,
        size_bytes: info.size_bytes,
    }
}

fn labels(map: HashMap<String, String>) -> BTreeMap<String, String> {
    convert::sorted(map)
}

fn sandbox_id(id: &str) -> Result<SandboxId, Status> {
    Ok(SandboxId::parse("sandbox_id", id)?)
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
    let req = request.into_inner();
    async {
        let id = sandbox_id(&req.sandbox_id)?;
        let info = api.backend().snapshot(&id, &labels(req.labels), api.max_snapshots()).await?;
        Ok(Response::new(pb::SnapshotResponse { snapshot: Some(snapshot_info(info)) }))
    }
    .instrument(span("Snapshot", &req.sandbox_id))
    .await
}

pub(super) async fn list_snapshots(
    api: &SandboxApi,
    request: Request<pb::ListSnapshotsRequest>,
) -> Result<Response<pb::ListSnapshotsResponse>, Status> {
    let req = request.into_inner();
    async {
        let found = api.backend().list_snapshots(&labels(req.labels)).await?;
        Ok(Response::new(pb::ListSnapshotsResponse {
            snapshots: found.into_iter().map(snapshot_info).collect(),
        }))
    }
    .instrument(tracing::info_span!("rpc", rpc = "ListSnapshots"))
    .await
}

pub(super) async fn delete_snapshot(
    api: &SandboxApi,
    request: Request<pb::DeleteSnapshotRequest>,
) -> Result<Response<pb::DeleteSnapshotResponse>, Status> {
    let req = request.into_inner();
    let span = tracing::info_span!("rpc", rpc = "DeleteSnapshot", snapshot_id = %req.snapshot_id);
    api.backend().delete_snapshot(&req.snapshot_id).instrument(span).await?;
    Ok(Response::new(pb::DeleteSnapshotResponse {}))
}

pub(super) async fn fork(
    api: &SandboxApi,
    request: Request<pb::ForkRequest>,
) -> Result<Response<pb::ForkResponse>, Status> {
    let req = request.into_inner();
    let span = span("Fork", &req.sandbox_id);
    let id = sandbox_id(&req.sandbox_id)?;
    let lifecycle = api.lifecycle().clone();
    let max = api.max_snapshots();
    // Its own task: a caller that goes away mid-fork still gets all or nothing (the children
    // are kept or rolled back, never left half made).
    let work = tokio::spawn(
        async move { lifecycle.fork(&id, req.count, &labels(req.labels), max).await }.instrument(span),
    );
    let forked = work.await.map_err(|e| Status::internal(format!("fork task failed: {e}")))??;
    Ok(Response::new(pb::ForkResponse {
        sandboxes: forked.sandboxes.iter().map(convert::sandbox_ref).collect(),
        snapshot_id: forked.snapshot.snapshot_id,
    }))
}

pub(super) async fn diff(
    api: &SandboxApi,
    request: Request<pb::DiffRequest>,
) -> Result<Response<BoxStream<pb::DiffResponse>>, Status> {
    let req = request.into_inner();
    let entries = async {
        let id = sandbox_id(&req.sandbox_id)?;
        Ok::<_, Status>(api.backend().diff(&id, req.path_prefix.as_deref()).await?)
    }
    .instrument(span("Diff", &req.sandbox_id))
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
    let req = request.into_inner();
    async {
        api.backend().pause(&sandbox_id(&req.sandbox_id)?).await?;
        Ok(Response::new(pb::PauseResponse {}))
    }
    .instrument(span("Pause", &req.sandbox_id))
    .await
}

pub(super) async fn resume(
    api: &SandboxApi,
    request: Request<pb::ResumeRequest>,
) -> Result<Response<pb::ResumeResponse>, Status> {
    let req = request.into_inner();
    async {
        api.backend().resume(&sandbox_id(&req.sandbox_id)?).await?;
        Ok(Response::new(pb::ResumeResponse {}))
    }
    .instrument(span("Resume", &req.sandbox_id))
    .await
}
