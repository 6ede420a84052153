//! Warm pools in the cluster (`SharedPools` for `cluster.mode: swarm`). Definitions and claims
//! are records in Swarm's replicated state (`records.rs`), so every node sees the same pools and
//! a member is handed to one caller whichever node it called: a claim is creating the member's
//! claim config, which Swarm refuses to a second caller. Members are sandbox services that
//! Swarm places like any other. The Swarm leader alone refills the pools and removes stale
//! records (claims of sandboxes gone, members of pools deleted, members whose start was
//! abandoned); every node keeps a view of the pools and their ready members, read again every
//! second through the Engine API, so a claim asks Swarm nothing but that one write.
//!
//! The config file's pools are the operator's on every node (each node reads its own file, so
//! they must be the same on every node); pools made by `CreatePool` live in Swarm.

mod lead;
mod view;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::backend::SwarmBackend;
use super::engine::{Engine, Service};
use super::placement::{NodeInfo, Placement};
use super::records::{self, PoolRecord};
use crate::core::claims::{Claim, ClaimStore};
use crate::core::pools::{
    Claimed, PoolError, PoolKey, PoolSpec, PoolStatus, SharedPools, MAX_POOLS_PER_OWNER,
};
use crate::core::spec::{SandboxHandle, SandboxSpec};
use crate::error::{ProviderError, Result};
use view::{take_into, Def, Member, Reading, View};

/// How often each node reads the pools again (the leader refills on the same beat).
const TICK: Duration = Duration::from_secs(1);
/// Why a cluster's pool does not recycle.
const NO_RECYCLING: &str =
    "is not offered in cluster mode (cluster.mode swarm): a closed pool sandbox is removed \
                            there (Reset in place works on any sandbox of the cluster)";

/// The cluster's pools, as one node serves them.
pub struct ClusterPools {
    backend: Arc<SwarmBackend>,
    engine: Engine,
    claims: ClaimStore,
    config_pools: Vec<PoolSpec>,
    create_timeout: Duration,
    view: Mutex<View>,
    wake: tokio::sync::Notify,
}

impl ClusterPools {
    /// The pools of the swarm `backend` is a node of; `config_pools` are the config file's,
    /// `claims` the node's claim store (claims this node hands out are kept there at once).
    pub fn new(
        backend: Arc<SwarmBackend>,
        config_pools: Vec<PoolSpec>,
        claims: ClaimStore,
        create_timeout: Duration,
    ) -> Arc<Self> {
        let engine = backend.engine.clone();
        let config_pools = config_pools
            .into_iter()
            .map(|mut spec| {
                if spec.recycle {
                    tracing::warn!(pool = %spec.name, "pools[].recycle {NO_RECYCLING}: ignored");
                    spec.recycle = false;
                }
                spec
            })
            .collect();
        Arc::new(Self {
            backend,
            engine,
            claims,
            config_pools,
            create_timeout,
            view: Mutex::default(),
            wake: tokio::sync::Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, View> {
        self.view.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads Swarm's pools, members, claims, the members' tasks and the nodes (five Engine API
    /// calls; three when there is neither a pool nor a member nor a claim) into the view.
    async fn refresh(&self) -> Result<Reading> {
        let mut defs: BTreeMap<PoolKey, Def> = BTreeMap::new();
        for config in self.engine.configs(&[&format!("{}=1", records::POOL_DEF_LABEL)]).await? {
            match PoolRecord::read(&config.data()) {
                Some((key, spec)) => {
                    let hash = records::pool_key(&key);
                    defs.insert(key, Def { spec, key: hash, from_config: false });
                }
                None => {
                    tracing::warn!(config = config.name(), "unreadable pool definition in Swarm; skipped")
                }
            }
        }
        for spec in &self.config_pools {
            let key = (None, spec.name.clone());
            let hash = records::pool_key(&key);
            defs.insert(key, Def { spec: spec.clone(), key: hash, from_config: true });
        }
        let members = self.engine.services(&[records::POOL_KEY_LABEL]).await?;
        let claims = self.engine.configs(&[&format!("{}=1", records::CLAIM_LABEL)]).await?;
        let (mut tasks, mut nodes, mut leader) = (HashMap::new(), HashMap::new(), false);
        if !defs.is_empty() || !members.is_empty() || !claims.is_empty() {
            let names: Vec<&str> = members.iter().map(Service::name).collect();
            for task in self.engine.running_tasks(&names).await? {
                tasks.insert(task.service_id.clone(), (task.node_id.clone(), task.status.state.clone()));
            }
            for node in self.engine.nodes().await? {
                if node.id == self.backend.swarm.self_id() {
                    leader = node.is_leader();
                }
                nodes.insert(node.id.clone(), NodeInfo::from_engine(&node, self.backend.cluster.peer_port));
            }
        }
        let reading = Reading { defs, members, claims, tasks, nodes, leader };
        self.take(&reading);
        Ok(reading)
    }

    fn take(&self, r: &Reading) {
        take_into(&mut self.lock(), r);
    }

    /// The view, read again unless it is younger than `fresh`.
    async fn fresh(&self, fresh: Duration) -> Result<()> {
        let stale = self.lock().read_at.is_none_or(|at| at.elapsed() >= fresh);
        if stale {
            self.refresh().await?;
        }
        Ok(())
    }

    fn status_of(&self, owner: &Option<String>, def: &Def) -> PoolStatus {
        let view = self.lock();
        let counts = view.counts.get(&def.key).cloned().unwrap_or_default();
        let ready = view.ready.get(&def.key).map_or(0, VecDeque::len);
        PoolStatus {
            spec: def.spec.clone(),
            tenant: owner.clone(),
            from_config: def.from_config,
            ready: ready as u32,
            // What exists now, cluster-wide (no node counts every claim ever made).
            claimed: counts.claimed as u64,
            created: (counts.ready + counts.claimed + counts.unready) as u64,
            in_use: counts.claimed as u32,
            recycled: 0,
            shares: shares(view.ready.get(&def.key)),
        }
    }

    /// Pops a ready member of pool `key` (held as "taking" until the claim settles).
    fn take_ready(&self, key: &str) -> Option<Member> {
        let mut view = self.lock();
        let member = view.ready.get_mut(key)?.pop_front()?;
        view.taking.insert(member.id.clone());
        Some(member)
    }

    /// Tries to claim `member`: its claim config made (the compare-and-swap) and its service
    /// still there. `Ok(false)`: another caller has it, or it went.
    async fn win(&self, member: &Member, key: &str, claim: &Claim, expires_ms: Option<i64>) -> Result<bool> {
        let (labels, data) = records::claim_config(&member.id, key, claim, expires_ms);
        let name = records::claim_config_name(&member.id);
        // The record and the check that the member is still there, at once (one round trip).
        let (made, service) =
            tokio::join!(self.engine.create_config(&name, &labels, &data), self.engine.service(&member.id));
        if !made? {
            return Ok(false);
        }
        if service?.is_none() {
            let _ = self.engine.remove_config(&name).await;
            return Ok(false);
        }
        Ok(true)
    }

    /// The claimed member made the caller's: its files written through its node, its claim
    /// kept on this node. Removed when that fails.
    async fn hand_over(&self, member: &Member, claim: Claim, call: &SandboxSpec) -> Result<SandboxHandle> {
        let written = async {
            let local = member.node.id == self.backend.swarm.self_id();
            let placement = Placement { node: member.node.clone(), local };
            for (path, content) in &call.files {
                self.backend.upload_on(&placement, &member.id, path, content).await?;
            }
            self.claims.set(&member.id, claim.clone()).map_err(ProviderError::Io)
        }
        .await;
        if let Err(e) = written {
            self.backend.remove_service(&member.id).await;
            let _ = self.engine.remove_config(&records::claim_config_name(&member.id)).await;
            return Err(e);
        }
        Ok(SandboxHandle {
            sandbox_id: member.id.clone(),
            image: member.image.clone(),
            shell: member.shell.clone(),
            ports: Vec::new(),
            workdir: member.workdir.clone(),
            metadata: claim.metadata,
            tenant: claim.tenant,
            runtime: None,
        })
    }

    /// The pool `tenant` names `name` (its own, else everyone's), as [`crate::core::pools::Pools`] does.
    fn find(&self, tenant: Option<&str>, name: &str) -> Option<(PoolKey, Def)> {
        let view = self.lock();
        let own = tenant.map(|t| (Some(t.to_string()), name.to_string()));
        let global = (None, name.to_string());
        let key = own.filter(|k| view.defs.contains_key(k)).unwrap_or(global);
        view.defs.get(&key).map(|d| (key, d.clone()))
    }
}

/// Ready members per node (by hostname, sorted).
fn shares(ready: Option<&VecDeque<Member>>) -> Vec<(String, u32)> {
    let mut by_node: BTreeMap<String, u32> = BTreeMap::new();
    for member in ready.into_iter().flatten() {
        *by_node.entry(member.node.hostname.clone()).or_default() += 1;
    }
    by_node.into_iter().collect()
}

#[async_trait::async_trait]
impl SharedPools for ClusterPools {
    async fn create(&self, tenant: Option<String>, spec: PoolSpec) -> Result<PoolStatus, PoolError> {
        super::argv::check_spec(&spec.template)?;
        if spec.recycle {
            return Err(ProviderError::invalid("pool.recycle", NO_RECYCLING).into());
        }
        self.refresh().await?;
        let key = (tenant.clone(), spec.name.clone());
        {
            let view = self.lock();
            if view.defs.contains_key(&key)
                || (tenant.is_some() && view.defs.contains_key(&(None, spec.name.clone())))
            {
                return Err(PoolError::Exists(spec.name));
            }
            if view.defs.keys().filter(|(t, _)| *t == tenant).count() >= MAX_POOLS_PER_OWNER {
                return Err(PoolError::TooMany);
            }
        }
        let hash = records::pool_key(&key);
        let record = PoolRecord::new(tenant.clone(), &spec);
        let made = self
            .engine
            .create_config(&records::pool_config_name(&hash), &PoolRecord::labels(&hash), &record.to_bytes())
            .await
            .map_err(ProviderError::from)?;
        if !made {
            return Err(PoolError::Exists(spec.name));
        }
        self.refresh().await?;
        self.wake.notify_one();
        let def = Def { spec, key: hash, from_config: false };
        Ok(self.status_of(&tenant, &def))
    }

    async fn set_target(
        &self,
        tenant: Option<String>,
        spec: PoolSpec,
    ) -> Result<(PoolStatus, bool), PoolError> {
        let reading = self.refresh().await?;
        let key = (tenant.clone(), spec.name.clone());
        let Some(def) = reading.defs.get(&key).cloned() else {
            let status = SharedPools::create(self, tenant, spec).await?;
            return Ok((status, true));
        };
        if def.from_config {
            return Err(PoolError::FromConfig(spec.name));
        }
        let mut wanted = def.spec.clone();
        wanted.target = spec.target;
        wanted.max = wanted.max.max(spec.target).max(1);
        if wanted.target != def.spec.target || wanted.max != def.spec.max {
            // A Swarm config cannot change: the record is made again under its name (same key,
            // so the members stay the pool's; the leader reads either the old or the new one).
            let name = records::pool_config_name(&def.key);
            let record = PoolRecord::new(tenant.clone(), &wanted);
            self.engine.remove_config(&name).await.map_err(ProviderError::from)?;
            self.engine
                .create_config(&name, &PoolRecord::labels(&def.key), &record.to_bytes())
                .await
                .map_err(ProviderError::from)?;
            self.refresh().await?;
            self.wake.notify_one();
        }
        let def = Def { spec: wanted, ..def };
        Ok((self.status_of(&tenant, &def), false))
    }

    async fn list(&self, tenant: Option<&str>) -> Result<Vec<PoolStatus>, PoolError> {
        self.refresh().await?;
        let defs: Vec<(PoolKey, Def)> = self.lock().defs.clone().into_iter().collect();
        let mut found: Vec<PoolStatus> = defs
            .iter()
            .filter(|((owner, _), _)| tenant.is_none() || owner.is_none() || owner.as_deref() == tenant)
            .map(|((owner, _), def)| self.status_of(owner, def))
            .collect();
        found.sort_by(|a, b| (&a.spec.name, &a.tenant).cmp(&(&b.spec.name, &b.tenant)));
        Ok(found)
    }

    async fn delete(&self, tenant: Option<&str>, name: &str) -> Result<u32, PoolError> {
        let reading = self.refresh().await?;
        let key = (tenant.map(String::from), name.to_string());
        let def = match reading.defs.get(&key) {
            None => return Err(PoolError::NotFound(name.into())),
            Some(d) if d.from_config => return Err(PoolError::FromConfig(name.into())),
            Some(d) => d.clone(),
        };
        self.engine.remove_config(&records::pool_config_name(&def.key)).await.map_err(ProviderError::from)?;
        let claimed: HashSet<&str> =
            reading.claims.iter().filter_map(|c| c.label(records::CLAIM_SANDBOX_LABEL)).collect();
        let mut removed = 0;
        for service in &reading.members {
            let ours = service.label(records::POOL_KEY_LABEL) == Some(def.key.as_str());
            if ours && !claimed.contains(service.name()) && self.backend.remove_service(service.name()).await
            {
                removed += 1;
            }
        }
        self.refresh().await?;
        tracing::info!(pool = name, removed, "pool deleted");
        Ok(removed)
    }

    async fn pool_for(
        &self,
        tenant: Option<&str>,
        named: Option<&str>,
        call: &SandboxSpec,
    ) -> Result<Option<(PoolKey, PoolSpec)>, PoolError> {
        // Every create asks: one that names no pool must not fail because Swarm's state could
        // not be read just now (the view a moment old serves).
        if let Err(e) = self.fresh(TICK * 5).await {
            tracing::warn!(error = %e, "cannot read the pools from Swarm; using the last reading");
        }
        if let Some(name) = named {
            // A pool made through another node a moment ago is read before it is refused.
            let found = match self.find(tenant, name) {
                Some(found) => found,
                None => {
                    self.refresh().await?;
                    self.find(tenant, name).ok_or_else(|| PoolError::NotFound(name.into()))?
                }
            };
            found.1.spec.check_named(call)?;
            return Ok(Some((found.0, found.1.spec)));
        }
        let view = self.lock();
        let visible = |k: &PoolKey| k.0.is_none() || k.0.as_deref() == tenant;
        Ok(view
            .defs
            .iter()
            .filter(|(k, d)| visible(k) && d.spec.matches(call))
            .min_by_key(|(k, _)| (k.0.is_none(), k.1.clone()))
            .map(|(k, d)| (k.clone(), d.spec.clone())))
    }

    async fn claim(
        &self,
        key: &PoolKey,
        spec: &PoolSpec,
        call: &SandboxSpec,
        ttl: Option<Duration>,
    ) -> Result<Claimed> {
        let hash = records::pool_key(key);
        let now = crate::core::lease::now_ms();
        let claim = Claim {
            pool: key.1.clone(),
            tenant: call.tenant.clone(),
            env: call.env.clone(),
            metadata: spec.claim_metadata(call),
            claimed_ms: now,
        };
        let expires_ms = ttl.map(|t| crate::core::lease::after_ms(now, t));
        for round in 0..2 {
            while let Some(member) = self.take_ready(&hash) {
                let won = self.win(&member, &hash, &claim, expires_ms).await;
                let result = match won {
                    Ok(true) => Some(self.hand_over(&member, claim.clone(), call).await),
                    Ok(false) => None,
                    Err(e) => Some(Err(e)),
                };
                self.lock().taking.remove(&member.id);
                if let Some(result) = result {
                    self.wake.notify_one();
                    return result.map(Claimed::Ready);
                }
            }
            // Nothing ready in the view: read Swarm once more before creating on demand.
            if round == 0 {
                self.refresh().await?;
            }
        }
        self.wake.notify_one();
        Ok(Claimed::OnDemand(Box::new(spec.claimed_spec(call))))
    }

    async fn run(self: Arc<Self>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let mut failing = false;
        loop {
            if *shutdown.borrow() {
                return;
            }
            match self.refresh().await {
                Ok(reading) => {
                    failing = false;
                    if reading.leader {
                        self.lead(&reading).await;
                    }
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!(error = %e, "cannot read the pools from Swarm; retrying");
                    }
                    failing = true;
                }
            }
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(TICK) => {}
                _ = shutdown.changed() => return,
            }
        }
    }
}
