//! `List` and `SetTimeout`: what this service owns, and how long each sandbox may live.

use sandboxd_proto::v1 as pb;
use tonic::{Request, Response, Status};

use super::SandboxApi;

pub(super) async fn list(
    _api: &SandboxApi,
    _request: Request<pb::ListRequest>,
) -> Result<Response<pb::ListResponse>, Status> {
    Err(Status::unimplemented("List is not implemented yet"))
}

pub(super) async fn set_timeout(
    _api: &SandboxApi,
    _request: Request<pb::SetTimeoutRequest>,
) -> Result<Response<pb::SetTimeoutResponse>, Status> {
    Err(Status::unimplemented("SetTimeout is not implemented yet"))
}
