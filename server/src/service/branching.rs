//! Snapshot, fork, diff, pause and resume: branching a sandbox and grading it by what changed.

use sandboxd_proto::v1 as pb;
use tonic::{Request, Response, Status};

use super::{BoxStream, SandboxApi};

pub(super) async fn snapshot(
    _api: &SandboxApi,
    _request: Request<pb::SnapshotRequest>,
) -> Result<Response<pb::SnapshotResponse>, Status> {
    Err(Status::unimplemented("Snapshot is not implemented yet"))
}

pub(super) async fn list_snapshots(
    _api: &SandboxApi,
    _request: Request<pb::ListSnapshotsRequest>,
) -> Result<Response<pb::ListSnapshotsResponse>, Status> {
    Err(Status::unimplemented("ListSnapshots is not implemented yet"))
}

pub(super) async fn delete_snapshot(
    _api: &SandboxApi,
    _request: Request<pb::DeleteSnapshotRequest>,
) -> Result<Response<pb::DeleteSnapshotResponse>, Status> {
    Err(Status::unimplemented("DeleteSnapshot is not implemented yet"))
}

pub(super) async fn fork(
    _api: &SandboxApi,
    _request: Request<pb::ForkRequest>,
) -> Result<Response<pb::ForkResponse>, Status> {
    Err(Status::unimplemented("Fork is not implemented yet"))
}

pub(super) async fn diff(
    _api: &SandboxApi,
    _request: Request<pb::DiffRequest>,
) -> Result<Response<BoxStream<pb::DiffResponse>>, Status> {
    Err(Status::unimplemented("Diff is not implemented yet"))
}

pub(super) async fn pause(
    _api: &SandboxApi,
    _request: Request<pb::PauseRequest>,
) -> Result<Response<pb::PauseResponse>, Status> {
    Err(Status::unimplemented("Pause is not implemented yet"))
}

pub(super) async fn resume(
    _api: &SandboxApi,
    _request: Request<pb::ResumeRequest>,
) -> Result<Response<pb::ResumeResponse>, Status> {
    Err(Status::unimplemented("Resume is not implemented yet"))
}
