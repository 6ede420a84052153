//! `CreateBatch`: `count` sandboxes of one spec (or one pool) in one call. One pass of the
//! control plane: the request is checked once, the tenant's quota once for the whole batch
//! (held until the last create ends, as a fork's is), ready pool members are claimed first,
//! and the rest are created concurrently; each sandbox is streamed back as it is ready, a
//! failed one as an item with its error and failure kind. A caller that leaves mid-batch does
//! not leave sandboxes behind: one made after it left is closed.

use crate::service::rpc_table::name as rpc;
use futures_util::stream::{FuturesUnordered, StreamExt};
use sandboxd_proto::v1 as pb;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use super::status::invalid;
use super::{convert, deadline, BoxStream, SandboxApi};
use crate::auth::Principal;
use crate::core::pools::Claimed;
use crate::core::spec::SandboxHandle;

/// The most sandboxes one call may ask for.
pub const MAX_BATCH: u32 = 256;

pub(super) async fn create_batch(
    api: &SandboxApi,
    request: Request<pb::CreateBatchRequest>,
) -> Result<Response<BoxStream<pb::CreateBatchResponse>>, Status> {
    let span = tracing::info_span!("rpc", rpc = rpc::CREATE_BATCH, count = request.get_ref().count);
    let deadline = deadline::grpc_timeout(request.metadata());
    let principal = Principal::of(&request);
    let origin = super::origin(&principal, &request);
    let api = api.clone();
    let (ready, to_create, permit, plan, network_policy) = async {
        SandboxApi::require_key(&principal, rpc::CREATE_BATCH)?;
        let req = request.into_inner();
        if req.count == 0 || req.count > MAX_BATCH {
            return Err(invalid("count", format!("must be 1 to {MAX_BATCH} (got {})", req.count)));
        }
        let count = req.count as usize;
        let mut spec = req.spec.ok_or_else(|| invalid("spec", "is required"))?;
        api.check_policy(&spec)?;
        let network_policy = spec.network_policy.take();
        let pool = spec.pool.take();
        let mut spec = convert::spec_from_proto(spec)?;
        spec.tenant = principal.tenant().map(String::from);
        if let Some(snapshot_id) = &spec.snapshot_id {
            api.check_snapshot(&principal, snapshot_id).await?;
        }
        let network_policy = api.plan_network(network_policy, &mut spec).await?;
        let plan = spec.egress.clone();
        if let Some(name) = pool.as_deref() {
            crate::core::pools::rules::check_name("spec.pool", name).map_err(|(f, m)| invalid(&f, m))?;
        }
        let pooled = api.pools.pool_for(spec.tenant.as_deref(), pool.as_deref(), &spec).await?;
        let effective = match &pooled {
            Some((_, pool)) => pool.claimed_spec(&spec),
            None => spec.clone(),
        };
        effective.validate()?;
        // One quota check for the whole batch: past it, nothing is made.
        let reserves = (effective.resources.cpu.unwrap_or(0.0), effective.resources.memory_mib.unwrap_or(0));
        let permit = api.quotas.create_allowed(&api, &principal, Some(reserves), count as u64).await?;
        let mut ready = Vec::new();
        let mut to_create = Vec::new();
        match pooled {
            Some((key, pool)) => {
                for _ in 0..count {
                    match api.pools.claim(&key, &pool, &spec).await {
                        Ok(Claimed::Ready(handle)) => ready.push(Ok(handle)),
                        Ok(Claimed::OnDemand(spec)) => to_create.push(*spec),
                        Err(e) => ready.push(Err(Status::from(e))),
                    }
                }
            }
            None => to_create = vec![spec; count],
        }
        Ok::<_, Status>((ready, to_create, permit, plan, network_policy))
    }
    .instrument(span.clone())
    .await?;

    let (tx, rx) = tokio::sync::mpsc::channel(ready.len() + to_create.len());
    tokio::spawn(
        async move {
            let _permit = permit;
            let mut index = 0u32;
            for claimed in ready {
                let claimed = match claimed {
                    // A pool member started before this claim: its egress rules are the claim's.
                    Ok(handle) => match &plan {
                        Some(plan) => match api.backend().apply_egress(&handle.id(), plan).await {
                            Ok(()) => Ok(handle),
                            Err(e) => {
                                let _ = api.lifecycle.close(&handle.id()).await;
                                Err(Status::from(e))
                            }
                        },
                        None => Ok(handle),
                    },
                    Err(status) => Err(status),
                };
                deliver(&api, &tx, index, claimed, network_policy.clone(), plan.as_ref()).await;
                index += 1;
            }
            let mut creating: FuturesUnordered<_> = to_create
                .into_iter()
                .map(|spec| {
                    let lifecycle = api.lifecycle.clone();
                    let origin = origin.clone();
                    async move { lifecycle.create(spec, deadline, &origin).await.map_err(Status::from) }
                })
                .collect();
            while let Some(made) = creating.next().await {
                deliver(&api, &tx, index, made, network_policy.clone(), plan.as_ref()).await;
                index += 1;
            }
        }
        .instrument(span),
    );
    Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
}

/// Sends one item; a sandbox made for a caller that has left is closed again.
async fn deliver(
    api: &SandboxApi,
    tx: &tokio::sync::mpsc::Sender<Result<pb::CreateBatchResponse, Status>>,
    index: u32,
    made: Result<SandboxHandle, Status>,
    network_policy: Option<crate::egress::NetworkPolicy>,
    plan: Option<&crate::egress::EgressPlan>,
) {
    use pb::create_batch_response::Result as Item;
    let (item, made) = match made {
        Ok(handle) => {
            api.record_network(&handle, network_policy, plan);
            let mut sandbox = convert::sandbox_ref(&handle);
            sandbox.token = api.owner_token(&handle.sandbox_id, handle.tenant.clone());
            (Item::Sandbox(sandbox), Some(handle))
        }
        Err(status) => (
            Item::Error(pb::BatchItemError {
                code: status.code() as i32,
                message: status.message().to_string(),
                failure_kind: crate::core::failure::FailureKind::to_wire(
                    crate::core::failure::kind_of_status(&status),
                ),
            }),
            None,
        ),
    };
    let response = pb::CreateBatchResponse { index, result: Some(item) };
    if tx.send(Ok(response)).await.is_err() {
        if let Some(handle) = made {
            tracing::info!(sandbox_id = %handle.sandbox_id, "the batch's caller left: closing the sandbox made for it");
            let _ = api.lifecycle.close(&handle.id()).await;
        }
    }
}
