//! `CreatePool`, `ListPools`, `DeletePool`, and the hand-off of a `Create` to a warm pool
//! (`crate::pools` does the work; this is the wire and the caller's rights).

use sandboxd_proto::v1 as pb;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use super::status::invalid;
use super::{convert, SandboxApi};
use crate::auth::Principal;
use crate::pools::{Claimed, PoolError, PoolSpec, PoolStatus};
use crate::spec::{SandboxHandle, SandboxSpec};

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
) -> Result<Option<SandboxHandle>, Status> {
    if let Some(name) = named {
        crate::pools::rules::check_name("spec.pool", name).map_err(|(f, m)| invalid(&f, m))?;
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
            api.lifecycle.create(*spec, deadline).await?
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
    SandboxApi::require_key(&principal, "CreatePool")?;
    let pool = request.into_inner().pool.ok_or_else(|| invalid("pool", "is required"))?;
    async move {
        if let Some(template) = &pool.template {
            api.check_policy(template)?;
        }
        let spec = spec_from_proto(pool)?;
        let status = api.pools.create(principal.tenant().map(String::from), spec).await?;
        tracing::info!(pool = %status.spec.name, target = status.spec.target, max = status.spec.max, "pool created");
        Ok(Response::new(pb::CreatePoolResponse { pool: Some(info(status)) }))
    }
    .instrument(tracing::info_span!("rpc", rpc = "CreatePool"))
    .await
}

pub(super) async fn list_pools(
    api: &SandboxApi,
    request: Request<pb::ListPoolsRequest>,
) -> Result<Response<pb::ListPoolsResponse>, Status> {
    let principal = Principal::of(&request);
    SandboxApi::require_key(&principal, "ListPools")?;
    let pools = api.pools.list(principal.tenant()).await?.into_iter().map(info).collect();
    Ok(Response::new(pb::ListPoolsResponse { pools }))
}

pub(super) async fn delete_pool(
    api: &SandboxApi,
    request: Request<pb::DeletePoolRequest>,
) -> Result<Response<pb::DeletePoolResponse>, Status> {
    let principal = Principal::of(&request);
    SandboxApi::require_key(&principal, "DeletePool")?;
    let name = request.into_inner().name;
    async move {
        crate::pools::rules::check_name("name", &name).map_err(|(f, m)| invalid(&f, m))?;
        let removed = api.pools.delete(principal.tenant(), &name).await?;
        Ok(Response::new(pb::DeletePoolResponse { removed }))
    }
    .instrument(tracing::info_span!("rpc", rpc = "DeletePool"))
    .await
}

/// A wire `PoolSpec` as the pools take it (checked there, fields named `pool.…`).
fn spec_from_proto(pool: pb::PoolSpec) -> Result<PoolSpec, Status> {
    let template = pool.template.unwrap_or_default();
    if template.pool.is_some() {
        return Err(invalid("pool.template.pool", "must be unset"));
    }
    if !template.image.is_empty() && template.image != pool.image {
        return Err(invalid("pool.template.image", "must be unset or equal pool.image"));
    }
    let mut template = convert::spec_from_proto(template).map_err(|s| {
        Status::new(s.code(), s.message().replacen("invalid spec.", "invalid pool.template.", 1))
    })?;
    template.image = pool.image;
    Ok(PoolSpec { name: pool.name, template, target: pool.target, max: pool.max })
}

/// A pool's spec on the wire.
fn spec_to_proto(spec: &PoolSpec) -> pb::PoolSpec {
    let t = &spec.template;
    let template = pb::SandboxSpec {
        image: String::new(),
        ttl_s: None,
        ready_timeout_s: t.ready_timeout_s,
        workdir: t.workdir.clone(),
        env: t.env.clone().into_iter().collect(),
        files: t.files.clone().into_iter().collect(),
        metadata: t.metadata.clone().into_iter().collect(),
        resources: Some(pb::SandboxResources {
            cpu: t.resources.cpu,
            memory_mib: t.resources.memory_mib,
            disk_gib: t.resources.disk_gib,
            gpu: t.resources.gpu,
            gpu_type: t.resources.gpu_type.clone(),
        }),
        entrypoint: t.entrypoint.clone().unwrap_or_default(),
        ports: t.ports.iter().map(|p| u32::from(*p)).collect(),
        provider_options: Some(pb::ProviderOptions {
            volumes: t.provider_options.volumes.clone(),
            run_args: t.provider_options.run_args.clone(),
        }),
        snapshot_id: None,
        pool: None,
        network: t.network.clone(),
        cap_add: t.cap_add.clone(),
        shm_size_bytes: t.shm_size_bytes,
        volumes: t
            .volumes
            .iter()
            .map(|v| pb::VolumeMount {
                name: v.name.clone(),
                target: v.target.clone(),
                read_only: v.read_only,
                subpath: v.subpath.clone(),
            })
            .collect(),
        network_policy: None,
    };
    pb::PoolSpec {
        name: spec.name.clone(),
        image: t.image.clone(),
        template: Some(template),
        target: spec.target,
        max: spec.max,
    }
}

fn info(status: PoolStatus) -> pb::PoolInfo {
    pb::PoolInfo {
        name: status.spec.name.clone(),
        spec: Some(spec_to_proto(&status.spec)),
        target: status.spec.target,
        max: status.spec.max,
        ready: status.ready,
        claimed: status.claimed,
        created: status.created,
        in_use: status.in_use,
        from_config: status.from_config,
        tenant: status.tenant.unwrap_or_default(),
    }
}
