//! `Usage`: a live sandbox's totals so far (read scope); `Close` returns the same, read just
//! before the sandbox is removed, and keeps it as the sandbox's receipt; `TenantUsage`: a
//! tenant's receipts over a budget period and their exact sum.

use crate::service::rpc_table::name as rpc;
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
    let span = span(rpc::USAGE, &req.sandbox_id);
    async move {
        let id = SandboxId::parse("sandbox_id", &req.sandbox_id)?;
        api.authorize(&principal, id.as_str(), const { super::rpc_table::scope(rpc::USAGE) }).await?;
        let usage = api.backend().usage(&id).await?;
        Ok(Response::new(pb::UsageResponse { usage: Some(usage.into()) }))
    }
    .instrument(span)
    .await
}

/// The totals of a sandbox about to be closed, kept as its receipt for `tenant`
/// (`crate::core::receipts`); `None` when they cannot be read (it stopped already, or the
/// backend cannot tell): the close goes on regardless.
pub(super) async fn before_close(
    api: &SandboxApi,
    id: &SandboxId,
    tenant: Option<&str>,
) -> Option<pb::SandboxUsage> {
    match api.backend().usage(id).await {
        Ok(usage) => {
            let receipt = crate::core::receipts::Receipt {
                sandbox_id: id.as_str().to_string(),
                closed_at_ms: crate::core::lease::now_ms(),
                usage: usage.clone(),
            };
            api.lifecycle.receipts().record(tenant, receipt);
            Some(usage.into())
        }
        Err(e) => {
            tracing::debug!(sandbox_id = %id, error = %e, "no usage at close");
            None
        }
    }
}

pub(super) async fn tenant_usage(
    api: &SandboxApi,
    request: Request<pb::TenantUsageRequest>,
) -> Result<Response<pb::TenantUsageResponse>, Status> {
    let principal = Principal::of(&request);
    SandboxApi::require_key(&principal, rpc::TENANT_USAGE)?;
    let req = request.into_inner();
    let tenant = match principal.tenant() {
        Some(own) if req.tenant.is_empty() || req.tenant == own => own.to_string(),
        Some(_) => {
            return Err(Status::permission_denied(format!(
                "tenant: a tenant key reads its own tenant's usage only (asked for {:?})",
                req.tenant
            )))
        }
        None => req.tenant,
    };
    let quotas = api
        .access
        .tenants
        .as_ref()
        .and_then(|t| t.by_name(&tenant))
        .map(|t| t.quotas.clone())
        .unwrap_or_default();
    let at = req.at_unix_ms.unwrap_or_else(crate::core::lease::now_ms);
    let (from_ms, to_ms) = crate::core::receipts::period_of(at, quotas.period());
    let spend = api.lifecycle.receipts().spend(
        Some(&tenant).filter(|t| !t.is_empty()).map(String::as_str),
        from_ms,
        to_ms,
    );
    Ok(Response::new(pb::TenantUsageResponse {
        tenant,
        period_start_unix_ms: from_ms,
        period_end_unix_ms: to_ms,
        receipts: spend
            .receipts
            .into_iter()
            .map(|r| pb::UsageReceipt {
                sandbox_id: r.sandbox_id,
                closed_at_unix_ms: r.closed_at_ms,
                usage: Some(r.usage.into()),
            })
            .collect(),
        sandbox_seconds: spend.sandbox_seconds,
        cpu_seconds: spend.cpu_seconds,
        sandbox_seconds_limit: quotas.sandbox_seconds_per_period.unwrap_or(0.0),
        cpu_seconds_limit: quotas.cpu_seconds_per_period.unwrap_or(0.0),
    }))
}
