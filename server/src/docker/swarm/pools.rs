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

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::backend::SwarmBackend;
use super::engine::{Config, Engine, Service};
use super::placement::{NodeInfo, Placement};
use super::records::{self, PoolRecord};
use crate::claims::{Claim, ClaimStore};
use crate::error::{ProviderError, Result};
use crate::pools::{Claimed, PoolError, PoolKey, PoolSpec, PoolStatus, SharedPools, MAX_POOLS_PER_OWNER};
use crate::spec::{PoolMember, SandboxHandle, SandboxSpec};

/// How often each node reads the pools again (the leader refills on the same beat).
const TICK: Duration = Duration::from_secs(1);
/// Members of one pool the leader starts at once.
const STARTS_AT_ONCE: usize = 4;
/// A pool whose member failed to start waits this long before the next try.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(5);
/// A claim record younger than this is never cleaned away (its claim may be under way).
const CLAIM_GRACE: Duration = Duration::from_secs(10);

/// One pool as this node knows it.
#[derive(Debug, Clone)]
struct Def {
    spec: PoolSpec,
    key: String,
    from_config: bool,
}

/// A member ready to be claimed.
#[derive(Debug, Clone, PartialEq)]
struct Member {
    id: String,
    /// The node it runs on.
    node: NodeInfo,
    image: String,
    workdir: Option<String>,
    shell: String,
}

/// What one reading of Swarm says, per pool key.
#[derive(Debug, Default, Clone, PartialEq)]
struct Counts {
    ready: usize,
    claimed: usize,
    /// Members alive but not ready (starting, or whose start was abandoned).
    unready: usize,
}

/// This node's view of the pools, as of the last reading.
#[derive(Default)]
struct View {
    read_at: Option<Instant>,
    defs: BTreeMap<PoolKey, Def>,
    ready: HashMap<String, VecDeque<Member>>,
    counts: HashMap<String, Counts>,
    leader: bool,
    /// Members being claimed through this node right now: never offered twice here.
    taking: HashSet<String>,
    /// The leader's starts under way, and its back-off after a failed one, per pool key.
    starting: HashMap<String, usize>,
    retry_at: HashMap<String, Instant>,
}

/// One full reading of the pools' state in Swarm.
struct Reading {
    defs: BTreeMap<PoolKey, Def>,
    members: Vec<Service>,
    claims: Vec<Config>,
    /// Service id → (node id, task state) of every task Swarm wants running.
    tasks: HashMap<String, (String, String)>,
    /// Every node, by id.
    nodes: HashMap<String, NodeInfo>,
    leader: bool,
}

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
        })
    }

    /// The leader's round: start what each pool lacks, remove what no longer belongs.
    async fn lead(self: &Arc<Self>, r: &Reading) {
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

    /// The pool `tenant` names `name` (its own, else everyone's), as [`crate::pools::Pools`] does.
    fn find(&self, tenant: Option<&str>, name: &str) -> Option<(PoolKey, Def)> {
        let view = self.lock();
        let own = tenant.map(|t| (Some(t.to_string()), name.to_string()));
        let global = (None, name.to_string());
        let key = own.filter(|k| view.defs.contains_key(k)).unwrap_or(global);
        view.defs.get(&key).map(|d| (key, d.clone()))
    }
}

/// The view from one reading: each pool's ready members (oldest first) and counts.
fn take_into(view: &mut View, r: &Reading) {
    let claimed: HashSet<&str> =
        r.claims.iter().filter_map(|c| c.label(records::CLAIM_SANDBOX_LABEL)).collect();
    let mut ready: HashMap<String, VecDeque<Member>> = HashMap::new();
    let mut counts: HashMap<String, Counts> = HashMap::new();
    let mut members: Vec<&Service> = r.members.iter().collect();
    members.sort_by(|a, b| a.created_at.cmp(&b.created_at));
    for service in members {
        let Some(key) = service.label(records::POOL_KEY_LABEL) else { continue };
        // A member without a task Swarm wants running is over (the sweep removes it).
        let Some((node_id, state)) = r.tasks.get(&service.id) else { continue };
        let count = counts.entry(key.to_string()).or_default();
        if claimed.contains(service.name()) {
            count.claimed += 1;
            continue;
        }
        let node = r.nodes.get(node_id).filter(|n| !n.is_down());
        match (service.label(records::POOL_READY_LABEL), node) {
            (Some(shell), Some(node)) if state == "running" => {
                count.ready += 1;
                let container = &service.spec.task_template.container;
                ready.entry(key.to_string()).or_default().push_back(Member {
                    id: service.name().to_string(),
                    node: node.clone(),
                    image: container.image.clone(),
                    workdir: Some(container.dir.clone()).filter(|d| !d.is_empty()),
                    shell: shell.to_string(),
                });
            }
            _ => count.unready += 1,
        }
    }
    for queue in ready.values_mut() {
        queue.retain(|m| !view.taking.contains(&m.id));
    }
    view.defs = r.defs.clone();
    view.ready = ready;
    view.counts = counts;
    view.leader = r.leader;
    view.read_at = Some(Instant::now());
}

#[async_trait::async_trait]
impl SharedPools for ClusterPools {
    async fn create(&self, tenant: Option<String>, spec: PoolSpec) -> Result<PoolStatus, PoolError> {
        super::argv::check_spec(&spec.template)?;
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
        let now = crate::lease::now_ms();
        let claim = Claim {
            pool: key.1.clone(),
            tenant: call.tenant.clone(),
            env: call.env.clone(),
            metadata: spec.claim_metadata(call),
            claimed_ms: now,
        };
        let expires_ms = ttl.map(|t| crate::lease::after_ms(now, t));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn service(name: &str, key: &str, ready: Option<&str>, created: &str) -> Service {
        let mut labels = serde_json::json!({ records::POOL_KEY_LABEL: key });
        if let Some(shell) = ready {
            labels[records::POOL_READY_LABEL] = serde_json::json!(shell);
        }
        serde_json::from_value(serde_json::json!({
            "ID": format!("svc-{name}"),
            "CreatedAt": created,
            "Spec": { "Name": name, "Labels": labels, "TaskTemplate": { "ContainerSpec": { "Image": "img", "Dir": "" } } }
        }))
        .unwrap()
    }

    fn claim(id: &str) -> Config {
        serde_json::from_value(serde_json::json!({
            "ID": format!("cfg-{id}"),
            "CreatedAt": "2026-12-01T00:00:00Z",
            "Spec": { "Name": records::claim_config_name(id), "Labels": { records::CLAIM_LABEL: "1", records::CLAIM_SANDBOX_LABEL: id }, "Data": "" }
        }))
        .unwrap()
    }

    /// The view a reading gives: ready members oldest first, only running ones on ready nodes,
    /// claimed and unready ones counted apart, members without a running task left out.
    #[test]
    fn a_reading_becomes_ready_members_and_counts() {
        let members = vec![
            service("b", "k", Some("/bin/sh"), "2026-12-01T00:00:02Z"),
            service("a", "k", Some("/bin/sh"), "2026-12-01T00:00:01Z"),
            service("starting", "k", None, "2026-12-01T00:00:03Z"),
            service("claimed", "k", Some("sh"), "2026-12-01T00:00:00Z"),
            service("on-down-node", "k", Some("sh"), "2026-12-01T00:00:00Z"),
            service("over", "k", Some("sh"), "2026-12-01T00:00:00Z"),
        ];
        let running = |node: &str| (node.to_string(), "running".to_string());
        let tasks = HashMap::from([
            ("svc-a".to_string(), running("n1")),
            ("svc-b".to_string(), running("n2")),
            ("svc-starting".to_string(), ("n1".to_string(), "preparing".to_string())),
            ("svc-claimed".to_string(), running("n1")),
            ("svc-on-down-node".to_string(), running("n3")),
        ]);
        let node = |id: &str, state: &str| {
            let info = NodeInfo {
                id: id.into(),
                hostname: format!("h{}", &id[1..]),
                state: state.into(),
                addr: String::new(),
                availability: "active".into(),
            };
            (id.to_string(), info)
        };
        let nodes = HashMap::from([node("n1", "ready"), node("n2", "ready"), node("n3", "down")]);
        let reading = Reading {
            defs: BTreeMap::new(),
            members,
            claims: vec![claim("claimed")],
            tasks,
            nodes,
            leader: true,
        };
        let mut view = View::default();
        take_into(&mut view, &reading);
        let ready: Vec<(&str, &str)> =
            view.ready["k"].iter().map(|m| (m.id.as_str(), m.node.hostname.as_str())).collect();
        assert_eq!(ready, [("a", "h1"), ("b", "h2")]);
        assert_eq!(view.counts["k"], Counts { ready: 2, claimed: 1, unready: 2 });
        assert!(view.leader);
    }
}
