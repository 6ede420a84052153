//! `Create`, `Connect`, `Status`, `Endpoint` and `Close`: a sandbox's life as the caller sees
//! it. Create checks the operator's policy, the tenant's quotas and a snapshot's owner before
//! `Lifecycle::create`, and returns the owner token.

use crate::service::rpc_table::name as rpc;
use sandboxd_proto::v1 as pb;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use super::status::invalid;
use super::{convert, deadline, span, SandboxApi};
use crate::auth::Principal;
use crate::core::spec::SandboxId;

pub(super) async fn create(
    api: &SandboxApi,
    request: Request<pb::CreateRequest>,
) -> Result<Response<pb::CreateResponse>, Status> {
    let span = tracing::info_span!(
        "rpc",
        rpc = rpc::CREATE,
        image = tracing::field::Empty,
        sandbox_id = tracing::field::Empty
    );
    async {
        let deadline = deadline::grpc_timeout(request.metadata());
        let principal = Principal::of(&request);
        SandboxApi::require_key(&principal, rpc::CREATE)?;
        let origin = super::origin(&principal, &request);
        let mut spec = request.into_inner().spec.ok_or_else(|| invalid("spec", "is required"))?;
        tracing::Span::current().record("image", spec.image.as_str());
        api.check_policy(&spec)?;
        let network_policy = spec.network_policy.take();
        let pool = spec.pool.take();
        let mut spec = convert::spec_from_proto(spec)?;
        spec.tenant = principal.tenant().map(String::from);
        api.bind_runtime(&principal, "spec.runtime", &mut spec.runtime)?;
        if let Some(snapshot_id) = &spec.snapshot_id {
            api.check_snapshot(&principal, snapshot_id).await?;
        }
        let network_policy = api.plan_network(network_policy, &mut spec).await?;
        let plan = spec.egress.clone();
        let pooled =
            super::pools::create_from_pool(api, &principal, pool.as_deref(), &spec, deadline, &origin)
                .await?;
        let handle = match pooled {
            Some(handle) => {
                // A pool member started before this claim: its egress rules are the claim's.
                if let Some(plan) = &plan {
                    if let Err(e) = api.backend().apply_egress(&handle.id(), plan).await {
                        let _ = api.lifecycle.close(&handle.id()).await;
                        return Err(e.into());
                    }
                }
                handle
            }
            None => {
                spec.validate()?;
                let _permit = api.quotas.create_spec_allowed(api, &principal, &spec).await?;
                api.lifecycle.create(spec, deadline, &origin).await?
            }
        };
        api.record_network(&handle, network_policy, plan.as_ref());
        crate::audit::note_sandbox(&handle.sandbox_id);
        tracing::Span::current().record("sandbox_id", handle.sandbox_id.as_str());
        let mut sandbox = convert::sandbox_ref(&handle);
        sandbox.token = api.owner_token(&handle.sandbox_id, handle.tenant.clone());
        Ok(Response::new(pb::CreateResponse { sandbox: Some(sandbox) }))
    }
    .instrument(span)
    .await
}

pub(super) async fn connect(
    api: &SandboxApi,
    request: Request<pb::ConnectRequest>,
) -> Result<Response<pb::ConnectResponse>, Status> {
    let span = tracing::info_span!("rpc", rpc = rpc::CONNECT, sandbox_id = tracing::field::Empty);
    async {
        let principal = Principal::of(&request);
        let sandbox = request.into_inner().sandbox.ok_or_else(|| invalid("sandbox", "is required"))?;
        tracing::Span::current().record("sandbox_id", sandbox.sandbox_id.as_str());
        SandboxId::parse("sandbox.sandbox_id", &sandbox.sandbox_id)?;
        api.authorize(&principal, &sandbox.sandbox_id, const { super::rpc_table::scope(rpc::CONNECT) })
            .await?;
        // The descriptor keeps the token it came with (serialize() carries it).
        let token = sandbox.token.clone();
        let descriptor = convert::descriptor(sandbox)?;
        let handle = api.claimed(api.backend().connect(&descriptor).await?);
        let mut sandbox = convert::sandbox_ref(&handle);
        sandbox.token = token;
        Ok(Response::new(pb::ConnectResponse {
            sandbox: Some(sandbox),
            image: handle.image.clone(),
            shell: handle.shell.clone(),
        }))
    }
    .instrument(span)
    .await
}

pub(super) async fn status(
    api: &SandboxApi,
    request: Request<pb::StatusRequest>,
) -> Result<Response<pb::StatusResponse>, Status> {
    let span = span(rpc::STATUS, &request.get_ref().sandbox_id);
    async {
        let id = SandboxId::parse("sandbox_id", &request.get_ref().sandbox_id)?;
        let principal = Principal::of(&request);
        let needed = const { super::rpc_table::scope(rpc::STATUS) };
        // A tenant's check looks the handle up: the runtime comes from it. Others are not
        // looked up for the check (a sandbox gone by now is `Stopped`, not an error).
        let checked = match principal {
            Principal::Tenant(_) => Some(api.authorize_handle(&principal, id.as_str(), needed).await?),
            _ => {
                api.authorize(&principal, id.as_str(), needed).await?;
                None
            }
        };
        let status = api.backend().status(&id).await?;
        // The runtime from the handle (cached; one inspect after a restart); a sandbox gone
        // by now has none to show.
        let runtime = match (status, checked) {
            (crate::core::spec::SandboxStatus::Stopped, _) => String::new(),
            (_, Some(handle)) => handle.runtime.unwrap_or_default(),
            (_, None) => api.handle(id.as_str()).await.ok().and_then(|h| h.runtime).unwrap_or_default(),
        };
        Ok(Response::new(pb::StatusResponse { status: status.to_wire() as i32, runtime }))
    }
    .instrument(span)
    .await
}

pub(super) async fn endpoint(
    api: &SandboxApi,
    request: Request<pb::EndpointRequest>,
) -> Result<Response<pb::EndpointResponse>, Status> {
    let span = span(rpc::ENDPOINT, &request.get_ref().sandbox_id);
    async {
        let principal = Principal::of(&request);
        let req = request.into_inner();
        let port = convert::port("port", req.port)?;
        let handle = api
            .authorize_handle(&principal, &req.sandbox_id, const { super::rpc_table::scope(rpc::ENDPOINT) })
            .await?;
        let ep = api.backend().endpoint(&handle, port).await?;
        Ok(Response::new(pb::EndpointResponse {
            endpoint: ep.endpoint,
            headers: ep.headers.into_iter().collect(),
        }))
    }
    .instrument(span)
    .await
}

pub(super) async fn reset(
    api: &SandboxApi,
    request: Request<pb::ResetRequest>,
) -> Result<Response<pb::ResetResponse>, Status> {
    let span = span(rpc::RESET, &request.get_ref().sandbox_id);
    async {
        let id = SandboxId::parse("sandbox_id", &request.get_ref().sandbox_id)?;
        let principal = Principal::of(&request);
        api.authorize(&principal, id.as_str(), const { super::rpc_table::scope(rpc::RESET) }).await?;
        let started = std::time::Instant::now();
        let report = api.backend().reset(&id).await?;
        Ok(Response::new(pb::ResetResponse {
            paths_restored: report.paths_restored,
            processes_killed: report.processes_killed,
            duration_ms: started.elapsed().as_secs_f64() * 1000.0,
        }))
    }
    .instrument(span)
    .await
}

pub(super) async fn close(
    api: &SandboxApi,
    request: Request<pb::CloseRequest>,
) -> Result<Response<pb::CloseResponse>, Status> {
    let span = span(rpc::CLOSE, &request.get_ref().sandbox_id);
    async {
        let id = SandboxId::parse("sandbox_id", &request.get_ref().sandbox_id)?;
        let principal = Principal::of(&request);
        api.authorize(&principal, id.as_str(), const { super::rpc_table::scope(rpc::CLOSE) }).await?;
        // Whose receipt the sandbox's usage is: the caller's tenant, else the sandbox's own.
        let tenant = match principal.tenant() {
            Some(t) => Some(t.to_string()),
            None if api.access.tenants.is_some() => api.handle(id.as_str()).await.ok().and_then(|h| h.tenant),
            None => None,
        };
        // A recycling pool's sandbox (one whose claim set no network policy: its rules would
        // outlive the claim) goes back to the pool: every token of the claim revoked first, so
        // it is unreachable once this returns; the reset runs in the background.
        if let Some(claim) = api.pools.recycles(&id).filter(|_| api.egress.policy_of(&id).is_none()) {
            let longest = api.access.owner_token_ttl.max(api.access.grant_ttl).as_secs();
            let until = crate::auth::revocations::now_s().saturating_add(longest);
            api.access
                .tokens
                .revocations()
                .revoke(&claim.token_id(id.as_str()), until)
                .map_err(|e| Status::internal(format!("cannot record the revocation: {e}")))?;
            let usage = super::usage::before_close(api, &id, tenant.as_deref()).await;
            if api.pools.recycle(&id) {
                return Ok(Response::new(pb::CloseResponse { usage }));
            }
        }
        // Watchers learn who removed it (`SandboxEvent.reason`).
        api.lifecycle.announce_removal(&id, &super::watch::closed_by(&principal));
        let usage = super::usage::before_close(api, &id, tenant.as_deref()).await;
        api.lifecycle.close(&id).await?;
        api.egress.forget(id.as_str());
        Ok(Response::new(pb::CloseResponse { usage }))
    }
    .instrument(span)
    .await
}
