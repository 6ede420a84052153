//! The Swarm leader's part of the cluster's pools: start what each pool lacks, remove what no
//! longer belongs (claims of sandboxes gone, unclaimed members of pools gone, members whose start
//! nobody finishes). Only the leader does it, so two nodes never fill one pool twice.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::super::engine::Service;
use super::super::records;
use super::view::{Def, Reading};
use super::ClusterPools;
use crate::core::pools::PoolKey;
use crate::core::spec::PoolMember;

/// Members of one pool the leader starts at once.
const STARTS_AT_ONCE: usize = 4;
/// A pool whose member failed to start waits this long before the next try.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(5);
/// A claim record younger than this is never cleaned away (its claim may be under way).
const CLAIM_GRACE: Duration = Duration::from_secs(10);

impl ClusterPools {
    /// The leader's round: start what each pool lacks, remove what no longer belongs.
    pub(super) async fn lead(self: &Arc<Self>, r: &Reading) {
        self.refill(r);
        self.clean(r).await;
    }

    /// Starts up to `target` ready members per pool within `max` alive, a few at a time.
    fn refill(self: &Arc<Self>, r: &Reading) {
        let now = Instant::now();
        let mut starts = Vec::new();
        {
            let mut view = self.lock();
            for (owner, def) in &r.defs {
                if view.retry_at.get(&def.key).is_some_and(|at| *at > now) {
                    continue;
                }
                let counts = view.counts.get(&def.key).cloned().unwrap_or_default();
                let starting = view.starting.get(&def.key).copied().unwrap_or(0);
                // A start under way is either not in Swarm yet (`starting`) or unready there.
                let coming = counts.unready.max(starting);
                let wanted = (def.spec.target as usize).saturating_sub(counts.ready + coming);
                let room = (def.spec.max as usize).saturating_sub(counts.ready + counts.claimed + coming);
                let n = wanted.min(room).min(STARTS_AT_ONCE.saturating_sub(starting));
                if n > 0 {
                    *view.starting.entry(def.key.clone()).or_default() += n;
                    starts.extend(std::iter::repeat_n((owner.clone(), def.clone()), n));
                }
            }
        }
        for (owner, def) in starts {
            let this = self.clone();
            tokio::spawn(async move { this.start_member(owner, def).await });
        }
    }

    async fn start_member(self: Arc<Self>, owner: PoolKey, def: Def) {
        let mut spec = def.spec.template.clone();
        spec.tenant = owner.0.clone();
        spec.pool_member = Some(PoolMember { pool: owner.1.clone(), owner: def.key.clone() });
        let made = self.backend.create_member(&spec, self.create_timeout).await;
        {
            let mut view = self.lock();
            if let Some(n) = view.starting.get_mut(&def.key) {
                *n = n.saturating_sub(1);
            }
            match &made {
                Ok(handle) => {
                    view.retry_at.remove(&def.key);
                    tracing::info!(pool = %owner.1, sandbox_id = %handle.sandbox_id, "pool member ready");
                }
                Err(e) => {
                    tracing::warn!(pool = %owner.1, error = %e, "a pool's sandbox failed to start; retrying later");
                    view.retry_at.insert(def.key.clone(), Instant::now() + RETRY_AFTER_FAILURE);
                }
            }
        }
        self.wake.notify_one();
    }

    /// Removes claims of sandboxes gone, unclaimed members of pools that are gone, and
    /// members whose start nobody is finishing.
    async fn clean(&self, r: &Reading) {
        let services: HashSet<&str> = r.members.iter().map(Service::name).collect();
        for config in &r.claims {
            let gone = config.label(records::CLAIM_SANDBOX_LABEL).is_none_or(|id| !services.contains(id));
            if gone && config.age().is_some_and(|a| a > CLAIM_GRACE) {
                match self.engine.remove_config(config.name()).await {
                    Ok(()) => {
                        tracing::info!(config = config.name(), "removed the claim of a sandbox that is gone")
                    }
                    Err(e) => {
                        tracing::warn!(config = config.name(), error = %e, "cannot remove a stale claim")
                    }
                }
            }
        }
        let claimed: HashSet<&str> =
            r.claims.iter().filter_map(|c| c.label(records::CLAIM_SANDBOX_LABEL)).collect();
        let keys: HashSet<&str> = r.defs.values().map(|d| d.key.as_str()).collect();
        let starting = self.lock().starting.values().sum::<usize>();
        for service in &r.members {
            if claimed.contains(service.name()) {
                continue;
            }
            let orphan = service.label(records::POOL_KEY_LABEL).is_some_and(|k| !keys.contains(k));
            // Unready past the create bound while this leader starts nothing: its starter died.
            let abandoned = service.label(records::POOL_READY_LABEL).is_none()
                && starting == 0
                && service.age().is_some_and(|a| a > self.create_timeout + CLAIM_GRACE);
            if orphan || abandoned {
                let why = if orphan { "its pool is gone" } else { "its start was abandoned" };
                if self.backend.remove_service(service.name()).await {
                    tracing::info!(sandbox_id = %service.name(), why, "removed an unclaimed pool sandbox");
                }
            }
        }
    }
}
