//! `List` and `SetTimeout`: what this service owns, and how long each sandbox may live.

use sandboxd_proto::v1 as pb;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use super::{convert, SandboxApi};
use crate::spec::SandboxId;

pub(super) async fn list(
    _api: &SandboxApi,
    _request: Request<pb::ListRequest>,
) -> Result<Response<pb::ListResponse>, Status> {
    Err(Status::unimplemented("List is not implemented yet"))
}

/// Move a sandbox's lease to `ttl_s` from now (capped by `server.max_ttl_s`); it survives a
/// server restart (see `lease`).
pub(super) async fn set_timeout(
    api: &SandboxApi,
    request: Request<pb::SetTimeoutRequest>,
) -> Result<Response<pb::SetTimeoutResponse>, Status> {
    let req = request.into_inner();
    let span = super::span("SetTimeout", &req.sandbox_id);
    async move {
        let id = SandboxId::parse("sandbox_id", &req.sandbox_id)?;
        let ttl = convert::seconds("ttl_s", req.ttl_s)?;
        let expires_at_unix_ms = api.lifecycle().set_timeout(&id, ttl).await?;
        tracing::info!(expires_at_unix_ms, "lease moved");
        Ok(Response::new(pb::SetTimeoutResponse { expires_at_unix_ms }))
    }
    .instrument(span)
    .await
}
