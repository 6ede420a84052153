//! `Usage`: a live sandbox's totals so far (read scope); `Close` returns the same, read just
//! before the sandbox is removed.

use sandboxd_proto::v1 as pb;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use super::{span, SandboxApi};
use crate::auth::Principal;
use crate::core::spec::SandboxId;

pub(super) async fn usage(
    api: &SandboxApi,
    request: Request<pb::UsageRequest>,
) -> Result<Response<pb::UsageResponse>, Status> {
    let principal = Principal::of(&request);
    let req = request.into_inner();
    let span = span("Usage", &req.sandbox_id);
    async move {
        let id = SandboxId::parse("sandbox_id", &req.sandbox_id)?;
        api.authorize(&principal, id.as_str(), const { super::rpc_table::scope("Usage") }).await?;
        let usage = api.backend().usage(&id).await?;
        Ok(Response::new(pb::UsageResponse { usage: Some(usage.into()) }))
    }
    .instrument(span)
    .await
}

/// The totals of a sandbox about to be closed; `None` when they cannot be read (it stopped
/// already, or the backend cannot tell): the close goes on regardless.
pub(super) async fn before_close(api: &SandboxApi, id: &SandboxId) -> Option<pb::SandboxUsage> {
    match api.backend().usage(id).await {
        Ok(usage) => Some(usage.into()),
        Err(e) => {
            tracing::debug!(sandbox_id = %id, error = %e, "no usage at close");
            None
        }
    }
}
