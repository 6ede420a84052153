//! Warm pools: sandboxes started ahead of the calls that get them, above any backend.
//!
//! A pool keeps `target` started, ready, unclaimed sandboxes of its template (the config file's
//! `pools:`, or `CreatePool`). A `Create` naming the pool (or matching its template, see
//! [`template`]) pops one, writes the call's files into it, records the claim (env, metadata,
//! tenant: `crate::core::claims`) and starts its lease; the refill task starts a replacement in the
//! background. An empty pool (or one at its `max`) never fails a claim: the caller's sandbox is
//! created on demand from the template. Members are labelled `sandboxd.pool=<name>` and
//! `sandboxd.pool.owner=<this server>`; unclaimed ones are hidden from `List`, and a server's
//! start removes the unclaimed members it left behind (and prunes claims of sandboxes gone).
//!
//! Pools belong to the tenant that created them (`None`: the operator's and the config
//! file's, which every caller may claim from); a tenant never sees another tenant's pool.
//! Everything goes through `Lifecycle` and `SandboxBackend`, so any backend gets pools.
//!
//! In a cluster the pools are the cluster's, not one process's: the wiring hands [`Pools`] a
//! [`SharedPools`] (kept in the cluster's replicated state) and every call goes there; the
//! single-host registry below is then unused. What stays here for both is the caller's lease
//! policy and the rule that a claim the caller left behind is removed.

pub mod rules;
pub mod shared;
pub mod template;

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tracing::Instrument;

use crate::core::claims::Claim;
use crate::core::inventory::ListQuery;
use crate::core::lifecycle::Lifecycle;
use crate::core::spec::{PoolMember, SandboxHandle, SandboxId, SandboxSpec};
use crate::error::{ProviderError, Result};
pub use shared::SharedPools;
pub use template::PoolSpec;

/// How many members of one pool are started at once.
const REFILLS_AT_ONCE: usize = 4;
/// A pool whose member failed to start waits this long before the next try.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(5);
/// The refill task looks at every pool at least this often.
const REFILL_TICK: Duration = Duration::from_secs(1);
/// How long `DeletePool` waits for its member starts under way (a create has its own bounds;
/// this one keeps a wedged daemon from holding the call forever).
const POOL_WORK_WAIT: Duration = Duration::from_secs(120);
/// Pools one owner (a tenant, or the operator) may define.
pub const MAX_POOLS_PER_OWNER: usize = 64;

/// A pool is found by its owner (a tenant, `None` for the operator) and name.
pub type PoolKey = (Option<String>, String);

/// Why a pool call failed (the service maps each to its status code).
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("pool {0:?} not found")]
    NotFound(String),
    #[error("pool {0:?} already exists")]
    Exists(String),
    #[error("pool {0:?} is defined in the server's config file (pools:); remove it there")]
    FromConfig(String),
    #[error("limit reached: at most {MAX_POOLS_PER_OWNER} pools per tenant")]
    TooMany,
    #[error(transparent)]
    Provider(#[from] ProviderError),
}

/// A pool and its state in this process.
struct Pool {
    spec: PoolSpec,
    from_config: bool,
    /// Bumped when the pool is deleted, so a refill finishing late removes what it made.
    generation: u64,
    ready: VecDeque<SandboxHandle>,
    starting: usize,
    /// Popped from `ready`, claim not yet recorded (still counted against `max`).
    claiming: usize,
    claimed: u64,
    created: u64,
    /// Closed members being reset before they go back to `ready` (counted against `max`).
    recycling: usize,
    recycled: u64,
    retry_at: Option<tokio::time::Instant>,
    /// Its member starts and recycles under way: `DeletePool` waits for them (each removes
    /// what it made once it finds the pool gone), so what the pool held is closed when the
    /// call answers (a snapshot it was made from can then be deleted).
    work: tokio_util::task::TaskTracker,
}

/// The metrics' labels of pool `key`.
fn fill_labels(key: &PoolKey) -> crate::metrics::PoolLabels {
    crate::metrics::PoolLabels { tenant: key.0.clone().unwrap_or_default(), pool: key.1.clone() }
}

/// Sets pool `key`'s fill gauges (`sandboxd_pool_ready`, `sandboxd_pool_target`).
fn export_fill(key: &PoolKey, pool: &Pool) {
    let m = crate::metrics::global();
    m.pool_ready.get_or_create(&fill_labels(key)).set(pool.ready.len() as i64);
    m.pool_target.get_or_create(&fill_labels(key)).set(i64::from(pool.spec.target));
}

/// What `ListPools` shows of one pool.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolStatus {
    pub spec: PoolSpec,
    pub tenant: Option<String>,
    pub from_config: bool,
    pub ready: u32,
    pub claimed: u64,
    pub created: u64,
    pub in_use: u32,
    /// Sandboxes handed back by a reset instead of removed (`PoolSpec::recycle`).
    pub recycled: u64,
    /// Ready members per node (one host: [`crate::core::images::ONE_HOST`]).
    pub shares: Vec<(String, u32)>,
}

/// What a claim gives the caller: a pool's ready sandbox, or (the pool being empty) the spec
/// to create on demand.
pub enum Claimed {
    Ready(SandboxHandle),
    OnDemand(Box<SandboxSpec>),
}

/// Every pool of this server.
pub struct Pools {
    lifecycle: Arc<Lifecycle>,
    /// This server's mark on the members it starts (`sandboxd.pool.owner`).
    owner: String,
    pools: Mutex<BTreeMap<PoolKey, Pool>>,
    next_generation: std::sync::atomic::AtomicU64,
    wake: tokio::sync::Notify,
    /// The cluster's pools, when this server is one node of a cluster.
    shared: OnceLock<Arc<dyn SharedPools>>,
}

impl Pools {
    /// No pools, with `owner` as this server's mark.
    pub fn new(lifecycle: Arc<Lifecycle>, owner: String) -> Arc<Self> {
        Arc::new(Self {
            lifecycle,
            owner,
            pools: Mutex::default(),
            next_generation: std::sync::atomic::AtomicU64::new(1),
            wake: tokio::sync::Notify::new(),
            shared: OnceLock::new(),
        })
    }

    /// From now on every pool call goes to `shared` (a cluster's pools); set once, before
    /// serving.
    pub fn share_through(&self, shared: Arc<dyn SharedPools>) {
        let _ = self.shared.set(shared);
    }

    fn shared(&self) -> Option<&Arc<dyn SharedPools>> {
        self.shared.get()
    }

    /// This server's owner mark, kept in `<state_dir>/pool-owner` (made on first use), so a
    /// restarted server recognises the members it started.
    pub fn owner_of_state_dir(state_dir: &Path) -> std::io::Result<String> {
        let path = state_dir.join("pool-owner");
        if let Ok(text) = std::fs::read_to_string(&path) {
            let owner = text.trim();
            if !owner.is_empty() && owner.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Ok(owner.to_string());
            }
        }
        std::fs::create_dir_all(state_dir)?;
        let owner = uuid::Uuid::new_v4().simple().to_string();
        let tmp = tempfile::NamedTempFile::new_in(state_dir)?;
        std::fs::write(tmp.path(), &owner)?;
        tmp.persist(&path).map_err(|e| e.error)?;
        Ok(owner)
    }

    /// Add the config file's pools (checked by the config's validation already).
    pub fn add_from_config(&self, specs: &[PoolSpec]) {
        for spec in specs {
            let _ = self.insert(None, spec.clone(), true);
        }
    }

    /// `CreatePool`: a pool of `tenant`'s (`None`: everyone's).
    pub async fn create(&self, tenant: Option<String>, spec: PoolSpec) -> Result<PoolStatus, PoolError> {
        spec.validate("pool")?;
        if let Some(shared) = self.shared() {
            return shared.create(tenant, spec).await;
        }
        let key = (tenant.clone(), spec.name.clone());
        self.insert(tenant, spec, false)?;
        self.wake.notify_one();
        self.status_of(&key).ok_or_else(|| PoolError::NotFound(key.1.clone()))
    }

    fn insert(&self, tenant: Option<String>, spec: PoolSpec, from_config: bool) -> Result<(), PoolError> {
        let mut pools = self.lock();
        let key = (tenant.clone(), spec.name.clone());
        if pools.contains_key(&key) || (tenant.is_some() && pools.contains_key(&(None, spec.name.clone()))) {
            return Err(PoolError::Exists(spec.name));
        }
        if pools.keys().filter(|(t, _)| *t == tenant).count() >= MAX_POOLS_PER_OWNER {
            return Err(PoolError::TooMany);
        }
        let generation = self.next_generation.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        pools.insert(
            key,
            Pool {
                spec,
                from_config,
                generation,
                ready: VecDeque::new(),
                starting: 0,
                claiming: 0,
                claimed: 0,
                created: 0,
                recycling: 0,
                recycled: 0,
                retry_at: None,
                work: tokio_util::task::TaskTracker::new(),
            },
        );
        Ok(())
    }

    /// `SetPoolTargets`' entry: pool `spec.name` of `tenant`'s gets `spec.target` (its `max`
    /// raised to it when lower), or is made from `spec` when it does not exist; the status, and
    /// whether it was made.
    pub async fn set_target(
        &self,
        tenant: Option<String>,
        spec: PoolSpec,
    ) -> Result<(PoolStatus, bool), PoolError> {
        spec.validate("pool")?;
        if let Some(shared) = self.shared() {
            return shared.set_target(tenant, spec).await;
        }
        let key = (tenant.clone(), spec.name.clone());
        let existed = {
            let mut pools = self.lock();
            match pools.get_mut(&key) {
                Some(pool) if pool.from_config => return Err(PoolError::FromConfig(spec.name)),
                Some(pool) => {
                    pool.spec.target = spec.target;
                    pool.spec.max = pool.spec.max.max(spec.target).max(1);
                    export_fill(&key, pool);
                    true
                }
                None => false,
            }
        };
        if !existed {
            self.insert(tenant, spec, false)?;
        }
        self.wake.notify_one();
        let status = self.status_of(&key).ok_or_else(|| PoolError::NotFound(key.1.clone()))?;
        Ok((status, !existed))
    }

    /// The pools `tenant` can claim from (its own and everyone's); the operator (`None`) sees
    /// every pool.
    pub async fn list(&self, tenant: Option<&str>) -> Result<Vec<PoolStatus>, PoolError> {
        if let Some(shared) = self.shared() {
            return shared.list(tenant).await;
        }
        let keys: Vec<PoolKey> = self
            .lock()
            .keys()
            .filter(|(owner, _)| tenant.is_none() || owner.is_none() || owner.as_deref() == tenant)
            .cloned()
            .collect();
        let mut found: Vec<PoolStatus> = keys.iter().filter_map(|k| self.status_of(k)).collect();
        found.sort_by(|a, b| (&a.spec.name, &a.tenant).cmp(&(&b.spec.name, &b.tenant)));
        Ok(found)
    }

    fn status_of(&self, key: &PoolKey) -> Option<PoolStatus> {
        let in_use = self.lifecycle.claims().count(key.0.as_deref(), &key.1) as u32;
        let pools = self.lock();
        let pool = pools.get(key)?;
        Some(PoolStatus {
            spec: pool.spec.clone(),
            tenant: key.0.clone(),
            from_config: pool.from_config,
            ready: pool.ready.len() as u32,
            claimed: pool.claimed,
            created: pool.created,
            in_use,
            recycled: pool.recycled,
            shares: vec![(crate::core::images::ONE_HOST.to_string(), pool.ready.len() as u32)],
        })
    }

    /// `DeletePool`: the pool goes and its unclaimed sandboxes are removed (claimed ones stay);
    /// returns how many were removed. A tenant reaches only its own pools, the operator only
    /// everyone's.
    pub async fn delete(&self, tenant: Option<&str>, name: &str) -> Result<u32, PoolError> {
        if let Some(shared) = self.shared() {
            return shared.delete(tenant, name).await;
        }
        let key = (tenant.map(String::from), name.to_string());
        let pool = {
            let mut pools = self.lock();
            match pools.get(&key) {
                None => return Err(PoolError::NotFound(name.into())),
                Some(p) if p.from_config => return Err(PoolError::FromConfig(name.into())),
                Some(_) => pools.remove(&key).expect("present"),
            }
        };
        let m = crate::metrics::global();
        m.pool_ready.remove(&fill_labels(&key));
        m.pool_target.remove(&fill_labels(&key));
        pool.work.close();
        if tokio::time::timeout(POOL_WORK_WAIT, pool.work.wait()).await.is_err() {
            tracing::warn!(
                pool = name,
                "a member start outlasted the pool's deletion; it removes what it made when done"
            );
        }
        let mut removed = 0;
        for member in pool.ready {
            match self.lifecycle.close(&member.id()).await {
                Ok(()) => removed += 1,
                Err(e) => {
                    tracing::warn!(sandbox_id = %member.sandbox_id, error = %e, "could not remove a pool's sandbox")
                }
            }
        }
        tracing::info!(pool = name, removed, "pool deleted");
        Ok(removed)
    }

    /// The pool a `Create` is for: the one it names (`NotFound` when `tenant` sees none of that
    /// name; its other fields must fit the template), else the first, by name, whose template
    /// it matches; `None`: no pool, an ordinary create.
    pub async fn pool_for(
        &self,
        tenant: Option<&str>,
        named: Option<&str>,
        call: &SandboxSpec,
    ) -> Result<Option<(PoolKey, PoolSpec)>, PoolError> {
        if let Some(shared) = self.shared() {
            return shared.pool_for(tenant, named, call).await;
        }
        let pools = self.lock();
        if let Some(name) = named {
            let own = tenant.map(|t| (Some(t.to_string()), name.to_string()));
            let global = (None, name.to_string());
            let key = own.filter(|k| pools.contains_key(k)).unwrap_or(global);
            let pool = pools.get(&key).ok_or_else(|| PoolError::NotFound(name.into()))?;
            pool.spec.check_named(call)?;
            return Ok(Some((key, pool.spec.clone())));
        }
        let visible = |k: &PoolKey| k.0.is_none() || k.0.as_deref() == tenant;
        Ok(pools
            .iter()
            .filter(|(k, p)| visible(k) && p.spec.matches(call))
            .min_by_key(|(k, _)| (k.0.is_none(), k.1.clone()))
            .map(|(k, p)| (k.clone(), p.spec.clone())))
    }

    /// Hand out a ready sandbox of pool `key` for `call` (its env, files, metadata, ttl_s and
    /// tenant applied), or say what to create on demand when none is ready. The claim runs in a
    /// task of its own, so a caller that goes away halfway cannot strand a popped sandbox: it is
    /// removed instead.
    pub async fn claim(
        self: &Arc<Self>,
        key: &PoolKey,
        spec: &PoolSpec,
        call: &SandboxSpec,
    ) -> Result<Claimed> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (this, key, spec, call) = (self.clone(), key.clone(), spec.clone(), call.clone());
        let work = async move {
            let claimed = match this.shared() {
                Some(shared) => {
                    let ttl = this.lifecycle.lease_ttl(call.ttl_s);
                    shared.claim(&key, &spec, &call, ttl).await
                }
                None => this.claim_now(&key, &spec, &call).await,
            };
            if let Err(Ok(Claimed::Ready(handle))) = tx.send(claimed) {
                tracing::warn!(sandbox_id = %handle.sandbox_id, "the caller went away before its claim finished; removing the sandbox");
                let _ = this.lifecycle.close(&handle.id()).await;
            }
        };
        tokio::spawn(work.instrument(tracing::Span::current()));
        rx.await
            .unwrap_or_else(|_| Err(ProviderError::Docker("the claim task ended without an answer".into())))
    }

    async fn claim_now(&self, key: &PoolKey, spec: &PoolSpec, call: &SandboxSpec) -> Result<Claimed> {
        let member = {
            let mut pools = self.lock();
            match pools.get_mut(key) {
                Some(pool) => {
                    let member = pool.ready.pop_front();
                    if member.is_some() {
                        pool.claimed += 1;
                        pool.claiming += 1;
                    }
                    member
                }
                None => None,
            }
        };
        let Some(mut handle) = member else {
            self.wake.notify_one();
            return Ok(Claimed::OnDemand(Box::new(spec.claimed_spec(call))));
        };
        let id = handle.id();
        let claim = Claim {
            pool: key.1.clone(),
            tenant: call.tenant.clone(),
            env: call.env.clone(),
            metadata: spec.claim_metadata(call),
            claimed_ms: crate::core::lease::now_ms(),
        };
        let applied = async {
            for (path, content) in &call.files {
                let source = Box::new(content.as_slice());
                self.lifecycle
                    .backend()
                    .upload(&handle, source, content.len() as u64, path, None, &[])
                    .await?;
            }
            self.lifecycle.claims().set(id.as_str(), claim.clone()).map_err(ProviderError::Io)
        }
        .await;
        // Recorded (or failed): the claim now counts through the claim store, not here.
        if let Some(pool) = self.lock().get_mut(key) {
            pool.claiming = pool.claiming.saturating_sub(1);
        }
        self.wake.notify_one();
        if let Err(e) = applied {
            let _ = self.lifecycle.close(&id).await;
            return Err(e);
        }
        self.lifecycle.claimed(&id, call.ttl_s);
        handle.metadata = claim.metadata;
        handle.tenant = claim.tenant;
        Ok(Claimed::Ready(handle))
    }

    /// The pool a claim of `claim` came from, when it recycles (a single host's pools only).
    fn recycling_pool(&self, claim: &Claim) -> Option<PoolKey> {
        if self.shared().is_some() {
            return None;
        }
        let pools = self.lock();
        let own = claim.tenant.clone().map(|t| (Some(t), claim.pool.clone()));
        let key = own.filter(|k| pools.contains_key(k)).unwrap_or((None, claim.pool.clone()));
        pools.get(&key).filter(|p| p.spec.recycle).map(|_| key)
    }

    /// Whether a `Close` of the claimed sandbox `id` hands it back to its pool (`recycle`)
    /// instead of removing it; returns its claim then.
    pub fn recycles(&self, id: &SandboxId) -> Option<Claim> {
        let claim = self.lifecycle.claims().get(id.as_str())?;
        self.recycling_pool(&claim).map(|_| claim)
    }

    /// `Close` of a claimed member of a recycling pool: the claim and the lease end now (the
    /// sandbox is nobody's: the caller revoked its tokens), and in the background the sandbox
    /// is reset and put back among the pool's ready ones; one whose reset fails (or whose pool
    /// went meanwhile) is removed. `false`: not a recycling pool's, close it as usual.
    pub fn recycle(self: &Arc<Self>, id: &SandboxId) -> bool {
        let Some(claim) = self.lifecycle.claims().get(id.as_str()) else { return false };
        let Some(key) = self.recycling_pool(&claim) else { return false };
        let (generation, tracker) = {
            let mut pools = self.lock();
            let Some(pool) = pools.get_mut(&key) else { return false };
            pool.recycling += 1;
            (pool.generation, pool.work.clone())
        };
        self.lifecycle.unclaim(id);
        let (this, id) = (self.clone(), id.clone());
        let work = async move {
            let backend = this.lifecycle.backend().clone();
            let reset = match backend.reset(&id).await {
                Ok(_) => backend.lookup(&id).await,
                Err(e) => Err(e),
            };
            let orphan = {
                let mut pools = this.lock();
                match pools.get_mut(&key).filter(|p| p.generation == generation) {
                    Some(pool) => {
                        pool.recycling = pool.recycling.saturating_sub(1);
                        match reset {
                            Ok(handle) => {
                                pool.recycled += 1;
                                pool.ready.push_back(handle);
                                false
                            }
                            Err(e) => {
                                tracing::warn!(sandbox_id = %id, pool = %key.1, error = %e, "a closed pool sandbox could not be reset; removing it");
                                true
                            }
                        }
                    }
                    None => true,
                }
            };
            if orphan {
                let _ = this.lifecycle.close(&id).await;
            }
            this.wake.notify_one();
        };
        tracker.spawn(work.instrument(tracing::Span::current()));
        true
    }

    /// Keep every pool at its target until `shutdown` turns true. Before the first refill, the
    /// unclaimed members an earlier run of this server left are removed.
    pub async fn run(self: Arc<Self>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        if let Some(shared) = self.shared().cloned() {
            return shared.run(shutdown).await;
        }
        if let Err(e) = self.remove_leftovers().await {
            tracing::warn!(error = %e, "could not list the pools' sandboxes left by an earlier run");
        }
        loop {
            if *shutdown.borrow() {
                return;
            }
            self.refill();
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(REFILL_TICK) => {}
                _ = shutdown.changed() => return,
            }
        }
    }

    /// Remove the unclaimed members this server (its state directory, within the operator's
    /// labels) started in an earlier run. Claims of sandboxes gone are forgotten by `Close` and
    /// the sweep, as moved leases are.
    pub async fn remove_leftovers(&self) -> Result<usize> {
        let query =
            ListQuery { page_size: usize::MAX, pool_owner: Some(self.owner.clone()), ..Default::default() };
        let members = self.lifecycle.backend().list(&query).await?.sandboxes;
        let claims = self.lifecycle.claims();
        let mut removed = 0;
        for member in &members {
            if claims.get(&member.sandbox_id).is_some() {
                continue;
            }
            let Ok(id) = crate::core::spec::SandboxId::parse("sandbox_id", &member.sandbox_id) else {
                continue;
            };
            match self.lifecycle.backend().close(&id).await {
                Ok(()) => removed += 1,
                Err(e) => {
                    tracing::warn!(sandbox_id = %id, error = %e, "could not remove an unclaimed pool sandbox")
                }
            }
        }
        if removed > 0 {
            tracing::info!(removed, "removed unclaimed pool sandboxes left by an earlier run");
        }
        Ok(removed)
    }

    /// Start what each pool lacks: up to `target` ready, within `max` alive, a few at a time.
    fn refill(self: &Arc<Self>) {
        let now = tokio::time::Instant::now();
        let mut starts = Vec::new();
        {
            let keys: Vec<PoolKey> = self.lock().keys().cloned().collect();
            let in_use: BTreeMap<PoolKey, usize> = keys
                .iter()
                .map(|k| (k.clone(), self.lifecycle.claims().count(k.0.as_deref(), &k.1)))
                .collect();
            let mut pools = self.lock();
            for (key, pool) in pools.iter_mut() {
                export_fill(key, pool);
                if pool.retry_at.is_some_and(|at| at > now) {
                    continue;
                }
                let alive = pool.ready.len()
                    + pool.starting
                    + pool.claiming
                    + pool.recycling
                    + in_use.get(key).copied().unwrap_or(0);
                let wanted = (pool.spec.target as usize)
                    .saturating_sub(pool.ready.len() + pool.starting + pool.recycling);
                let room = (pool.spec.max as usize).saturating_sub(alive);
                let n = wanted.min(room).min(REFILLS_AT_ONCE.saturating_sub(pool.starting));
                for _ in 0..n {
                    pool.starting += 1;
                    starts.push((key.clone(), pool.generation, pool.spec.clone(), pool.work.clone()));
                }
            }
        }
        for (key, generation, spec, tracker) in starts {
            let this = self.clone();
            tracker.spawn(async move { this.start_member(key, generation, spec).await });
        }
    }

    /// Start one member of pool `key` and put it among the ready ones (or remove it, when the
    /// pool was deleted meanwhile).
    async fn start_member(self: Arc<Self>, key: PoolKey, generation: u64, spec: PoolSpec) {
        let mut member_spec = spec.template.clone();
        member_spec.tenant = key.0.clone();
        member_spec.pool_member = Some(PoolMember { pool: key.1.clone(), owner: self.owner.clone() });
        let made = self.lifecycle.create_member(&member_spec).await;
        let orphan = {
            let mut pools = self.lock();
            match pools.get_mut(&key).filter(|p| p.generation == generation) {
                Some(pool) => {
                    pool.starting = pool.starting.saturating_sub(1);
                    match made {
                        Ok(handle) => {
                            pool.created += 1;
                            pool.retry_at = None;
                            pool.ready.push_back(handle);
                            None
                        }
                        Err(e) => {
                            tracing::warn!(pool = %key.1, error = %e, "a pool's sandbox failed to start; retrying later");
                            pool.retry_at = Some(tokio::time::Instant::now() + RETRY_AFTER_FAILURE);
                            None
                        }
                    }
                }
                None => made.ok(),
            }
        };
        if let Some(handle) = orphan {
            let _ = self.lifecycle.close(&handle.id()).await;
        }
        self.wake.notify_one();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<PoolKey, Pool>> {
        self.pools.lock().unwrap_or_else(|p| p.into_inner())
    }
}
