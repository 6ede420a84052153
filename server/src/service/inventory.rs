//! `List` and `SetTimeout`: what this service owns, and how long each sandbox may live.

use sandboxd_proto::v1 as pb;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use super::{convert, SandboxApi};
use crate::lease;

pub(super) async fn list(
    _api: &SandboxApi,
    _request: Request<pb::ListRequest>,
) -> Result<Response<pb::ListResponse>, Status> {
    Err(Status::unimplemented("List is not implemented yet"))
}

/// Move a sandbox's lease to `ttl_s` from now (capped by `server.max_ttl_s`), kept in the lease
/// store so a restarted server enforces it; the sweeper wakes in case it now ends sooner.
pub(super) async fn set_timeout(
    api: &SandboxApi,
    request: Request<pb::SetTimeoutRequest>,
) -> Result<Response<pb::SetTimeoutResponse>, Status> {
    let req = request.into_inner();
    let span = super::span("SetTimeout", &req.sandbox_id);
    async move {
        let ttl = convert::seconds("ttl_s", req.ttl_s)?;
        let ttl = api.lease_policy.ttl(Some(ttl)).unwrap_or(ttl);
        api.handle(&req.sandbox_id).await?;
        let expires_at_unix_ms = lease::after_ms(lease::now_ms(), ttl);
        api.leases.set(&req.sandbox_id, expires_at_unix_ms).map_err(|e| {
            Status::internal(format!("cannot record the lease in {}: {e}", api.leases.dir().display()))
        })?;
        api.sweep_wake.notify_one();
        tracing::info!(expires_at_unix_ms, "lease moved");
        Ok(Response::new(pb::SetTimeoutResponse { expires_at_unix_ms }))
    }
    .instrument(span)
    .await
}
