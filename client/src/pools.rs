//! Warm pools: `CreatePool`, `ListPools`, `DeletePool`, and the spec of a claim
//! ([`from_pool`]; `Sandbox::start` with it is handed a ready sandbox of the pool).

use crate::client::Client;
use crate::error::{ClientError, Result};
use crate::proto;

/// A pool to create: `target` ready sandboxes of `image` started from `template` (a spec
/// without image, ttl or snapshot), at most `max` of them alive, claimed ones included.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoolDefinition {
    pub name: String,
    pub image: String,
    pub template: proto::SandboxSpec,
    pub target: u32,
    pub max: u32,
    /// A closed sandbox of the pool is reset and handed back to it instead of removed.
    pub recycle: bool,
}

impl PoolDefinition {
    /// A pool of `target` (at most `max`) sandboxes of `image` with the default template.
    pub fn new(name: impl Into<String>, image: impl Into<String>, target: u32, max: u32) -> Self {
        Self {
            name: name.into(),
            image: image.into(),
            target,
            max,
            template: Default::default(),
            recycle: false,
        }
    }
}

/// A pool as `ListPools` reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolInfo {
    pub name: String,
    pub image: String,
    pub target: u32,
    pub max: u32,
    /// Started, ready, unclaimed now.
    pub ready: u32,
    /// Handed out from ready ones since the server started.
    pub claimed: u64,
    /// Started by the pool since the server started.
    pub created: u64,
    /// Claimed from it and still alive.
    pub in_use: u32,
    /// Sandboxes handed back to the pool by a reset instead of removed.
    pub recycled: u64,
    /// From the server's config file (DeletePool refuses it).
    pub from_config: bool,
    /// The tenant it belongs to; empty: everyone's.
    pub tenant: String,
    /// Its definition as the server keeps it.
    pub spec: proto::PoolSpec,
}

impl PoolInfo {
    fn from_proto(info: proto::PoolInfo) -> Result<PoolInfo> {
        let spec = info.spec.ok_or_else(|| ClientError::Protocol("PoolInfo without a spec".into()))?;
        Ok(PoolInfo {
            name: info.name,
            image: spec.image.clone(),
            target: info.target,
            max: info.max,
            ready: info.ready,
            claimed: info.claimed,
            created: info.created,
            in_use: info.in_use,
            recycled: info.recycled,
            from_config: info.from_config,
            tenant: info.tenant,
            spec,
        })
    }
}

/// The spec of a claim from pool `name`: set `env`, `files`, `metadata` and `ttl_s` on it as
/// for any create; every other field is the pool's template.
pub fn from_pool(name: impl Into<String>) -> proto::SandboxSpec {
    proto::SandboxSpec { pool: Some(name.into()), ..Default::default() }
}

impl Client {
    /// Add a warm pool (`CreatePool`); the server starts filling it at once.
    pub async fn create_pool(&self, pool: PoolDefinition) -> Result<PoolInfo> {
        let spec = proto::PoolSpec {
            name: pool.name,
            image: pool.image,
            template: Some(pool.template),
            target: pool.target,
            max: pool.max,
            recycle: pool.recycle,
        };
        let response =
            self.raw().create_pool(proto::CreatePoolRequest { pool: Some(spec) }).await?.into_inner();
        PoolInfo::from_proto(
            response.pool.ok_or_else(|| ClientError::Protocol("CreatePoolResponse without a pool".into()))?,
        )
    }

    /// The pools this caller can claim from (`ListPools`), by name.
    pub async fn list_pools(&self) -> Result<Vec<PoolInfo>> {
        let response = self.raw().list_pools(proto::ListPoolsRequest {}).await?.into_inner();
        response.pools.into_iter().map(PoolInfo::from_proto).collect()
    }

    /// Remove a pool and its unclaimed sandboxes (`DeletePool`); returns how many went.
    pub async fn delete_pool(&self, name: impl Into<String>) -> Result<u32> {
        let response =
            self.raw().delete_pool(proto::DeletePoolRequest { name: name.into() }).await?.into_inner();
        Ok(response.removed)
    }
}
