//! Pools kept by a cluster rather than by this process: the calls [`super::Pools`] hands over
//! when the wiring gave it one. An implementation keeps definitions and claims where every node
//! sees them, hands one member to one caller whichever node it called, and refills from one
//! place; the rules of a pool (what matches, names, sizes, the claimed spec) stay [`PoolSpec`]'s.

use std::sync::Arc;
use std::time::Duration;

use super::{Claimed, PoolError, PoolKey, PoolSpec, PoolStatus};
use crate::core::spec::SandboxSpec;
use crate::error::Result;

#[async_trait::async_trait]
pub trait SharedPools: Send + Sync {
    /// `CreatePool` (the spec already checked).
    async fn create(&self, tenant: Option<String>, spec: PoolSpec) -> Result<PoolStatus, PoolError>;

    /// `SetPoolTargets`' entry, as [`super::Pools::set_target`] says (the spec already checked).
    async fn set_target(
        &self,
        tenant: Option<String>,
        spec: PoolSpec,
    ) -> Result<(PoolStatus, bool), PoolError>;

    /// `ListPools`: the pools `tenant` can claim from (`None`: every pool).
    async fn list(&self, tenant: Option<&str>) -> Result<Vec<PoolStatus>, PoolError>;

    /// `DeletePool`: the pool goes and its unclaimed members are removed (how many).
    async fn delete(&self, tenant: Option<&str>, name: &str) -> Result<u32, PoolError>;

    /// The pool a `Create` is for, as [`super::Pools::pool_for`] says.
    async fn pool_for(
        &self,
        tenant: Option<&str>,
        named: Option<&str>,
        call: &SandboxSpec,
    ) -> Result<Option<(PoolKey, PoolSpec)>, PoolError>;

    /// Hand a ready member of `key` to `call` (its files written, its claim recorded with a
    /// lease of `ttl`), or say what to create on demand when none is ready.
    async fn claim(
        &self,
        key: &PoolKey,
        spec: &PoolSpec,
        call: &SandboxSpec,
        ttl: Option<Duration>,
    ) -> Result<Claimed>;

    /// Keep the pools filled and their records clean until `shutdown` turns true.
    async fn run(self: Arc<Self>, shutdown: tokio::sync::watch::Receiver<bool>);
}
