//! `CreatePool`, `ListPools`, `DeletePool`, and the hand-off of a `Create` to a warm pool
//! (`crate::core::pools` does the work; this is the wire and the caller's rights).

use crate::service::rpc_table::name as rpc;
use sandboxd_proto::v1 as pb;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use super::status::invalid;
use super::{convert, SandboxApi};
use crate::auth::Principal;
use crate::core::pools::{Claimed, PoolError};
use crate::core::spec::{SandboxHandle, SandboxSpec};

impl From<PoolError> for Status {
    fn from(e: PoolError) -> Self {
        match e {
            PoolError::NotFound(_) => Status::not_found(e.to_string()),
            PoolError::Exists(_) => Status::already_exists(e.to_string()),
            PoolError::FromConfig(_) => Status::failed_precondition(e.to_string()),
            PoolError::TooMany => Status::resource_exhausted(e.to_string()),
            PoolError::Provider(p) => Status::from(p),
        }
    }
}

/// A `Create` that names a pool (`spec.pool`) or matches one's template: a ready sandbox of
/// it (or one made on demand from its template when none is ready), with the caller's quota
/// checked first. `None`: no pool is concerned, the create goes on as usual.
pub(super) async fn create_from_pool(
    api: &SandboxApi,
    principal: &Principal,
    named: Option<&str>,
    call: &SandboxSpec,
    deadline: Option<std::time::Duration>,
    origin: &crate::core::admission::Origin,
) -> Result<Option<SandboxHandle>, Status> {
    if let Some(name) = named {
        crate::core::pools::rules::check_name("spec.pool", name).map_err(|(f, m)| invalid(&f, m))?;
    }
    let Some((key, pool)) = api.pools.pool_for(call.tenant.as_deref(), named, call).await? else {
        return Ok(None);
    };
    let effective = pool.claimed_spec(call);
    effective.validate()?;
    let _permit = api.quotas.create_spec_allowed(api, principal, &effective).await?;
    tracing::Span::current().record("image", effective.image.as_str());
    let handle = match api.pools.claim(&key, &pool, call).await? {
        Claimed::Ready(handle) => {
            tracing::info!(pool = %key.1, sandbox_id = %handle.sandbox_id, "claimed from a warm pool");
            handle
        }
        Claimed::OnDemand(spec) => {
            tracing::info!(pool = %key.1, "pool empty: creating on demand");
            api.lifecycle.create(*spec, deadline, origin).await?
        }
    };
    tracing::Span::current().record("sandbox_id", handle.sandbox_id.as_str());
    Ok(Some(handle))
}

pub(super) async fn create_pool(
    api: &SandboxApi,
    request: Request<pb::CreatePoolRequest>,
) -> Result<Response<pb::CreatePoolResponse>, Status> {
    let principal = Principal::of(&request);
    SandboxApi::require_key(&principal, rpc::CREATE_POOL)?;
    let pool = request.into_inner().pool.ok_or_else(|| invalid("pool", "is required"))?;
    async move {
        if let Some(template) = &pool.template {
            api.check_policy(template)?;
        }
        let mut spec = convert::pool_spec_from_proto(pool)?;
        api.bind_runtime(&principal, "pool.template.runtime", &mut spec.template.runtime)?;
        if let Some(snapshot_id) = &spec.template.snapshot_id {
            // A live pool: its members are restored from the caller's live snapshot.
            api.check_snapshot(&principal, snapshot_id).await?;
            let live = api.backend().list_snapshots(&Default::default()).await?;
            if !live.iter().any(|s| &s.snapshot_id == snapshot_id && s.live) {
                return Err(invalid(
                    "pool.template.snapshot_id",
                    "must name a live snapshot (Checkpoint): a live pool's claims are restores",
                ));
            }
        }
        let status = api.pools.create(principal.tenant().map(String::from), spec).await?;
        tracing::info!(pool = %status.spec.name, target = status.spec.target, max = status.spec.max, "pool created");
        Ok(Response::new(pb::CreatePoolResponse { pool: Some(convert::pool_info(status)) }))
    }
    .instrument(tracing::info_span!("rpc", rpc = rpc::CREATE_POOL))
    .await
}

pub(super) async fn list_pools(
    api: &SandboxApi,
    request: Request<pb::ListPoolsRequest>,
) -> Result<Response<pb::ListPoolsResponse>, Status> {
    let principal = Principal::of(&request);
    SandboxApi::require_key(&principal, rpc::LIST_POOLS)?;
    let pools = api.pools.list(principal.tenant()).await?.into_iter().map(convert::pool_info).collect();
    Ok(Response::new(pb::ListPoolsResponse { pools }))
}

pub(super) async fn delete_pool(
    api: &SandboxApi,
    request: Request<pb::DeletePoolRequest>,
) -> Result<Response<pb::DeletePoolResponse>, Status> {
    let principal = Principal::of(&request);
    SandboxApi::require_key(&principal, rpc::DELETE_POOL)?;
    let name = request.into_inner().name;
    async move {
        crate::core::pools::rules::check_name("name", &name).map_err(|(f, m)| invalid(&f, m))?;
        let removed = api.pools.delete(principal.tenant(), &name).await?;
        Ok(Response::new(pb::DeletePoolResponse { removed }))
    }
    .instrument(tracing::info_span!("rpc", rpc = rpc::DELETE_POOL))
    .await
}
