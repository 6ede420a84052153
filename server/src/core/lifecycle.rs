//! What this process owns across calls, above any one backend: the sandboxes it created (so
//! `--remove-on-shutdown` removes exactly those), leases (the operator's policy and the store of
//! moved leases), creates that always finish or clean up, and the order of shutdown.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::Instrument;

use crate::core::admission::{Admission, AdmissionLimits, Origin};
use crate::core::backend::{CreatePlan, CreatePolicy, SandboxBackend};
use crate::core::branching::Forked;
use crate::core::claims::ClaimStore;
use crate::core::expiry::SweepReport;
use crate::core::inventory::{ListPage, ListQuery};
use crate::core::lease::{self, LeasePolicy, LeaseStore};
use crate::core::spec::{SandboxHandle, SandboxId, SandboxSpec};
use crate::error::{ProviderError, Result};
use crate::metrics::{self, GaugeGuard};

/// How many sandboxes a shutdown removes at once.
const SHUTDOWN_REMOVALS_AT_ONCE: usize = 8;

/// The sandboxes this process created, and whether a shutdown is removing them: one lock, so a
/// create that completes during the shutdown either is in the shutdown's list or sees the flag
/// and removes itself.
#[derive(Default)]
struct Created {
    ids: HashSet<SandboxId>,
    removing: bool,
}

/// The lease policy, where moved leases live, and the bound on one create.
pub struct LeaseOptions {
    pub policy: LeasePolicy,
    pub store: LeaseStore,
    pub create_timeout: Duration,
}

/// The backend plus this process's bookkeeping.
pub struct Lifecycle {
    backend: Arc<dyn SandboxBackend>,
    created: Mutex<Created>,
    leases: LeaseOptions,
    /// Wakes the sweeper when a lease moved (it may now end before the next sweep), with the
    /// earliest end among the leases moved since it last looked (`i64::MAX`: none).
    sweep_wake: tokio::sync::Notify,
    moved_lease_end: std::sync::atomic::AtomicI64,
    /// The create tasks still running: a removing shutdown waits for them, so a create that
    /// completes during it removes its sandbox before the process exits.
    creates: tokio_util::task::TaskTracker,
    /// Claims of warm-pool sandboxes (their env, metadata and tenant), read by every call.
    claims: ClaimStore,
    /// This host's start slots and the fair queue for them: every create and pool refill
    /// starts under a slot.
    admission: Arc<Admission>,
    /// What every closed sandbox used, by tenant.
    receipts: crate::core::receipts::Receipts,
}

impl Lifecycle {
    pub fn new(backend: Arc<dyn SandboxBackend>, leases: LeaseOptions) -> Self {
        Self {
            backend,
            created: Mutex::default(),
            leases,
            sweep_wake: tokio::sync::Notify::new(),
            moved_lease_end: std::sync::atomic::AtomicI64::new(i64::MAX),
            creates: tokio_util::task::TaskTracker::new(),
            claims: ClaimStore::default(),
            admission: Admission::new(AdmissionLimits::default()),
            receipts: Default::default(),
        }
    }

    /// The usage receipts of closed sandboxes.
    pub fn receipts(&self) -> &crate::core::receipts::Receipts {
        &self.receipts
    }

    /// The same lifecycle admitting creates under `limits` (`server.admission`).
    pub fn with_admission(self, limits: AdmissionLimits) -> Self {
        Self { admission: Admission::new(limits), ..self }
    }

    /// This host's admission queue.
    pub fn admission(&self) -> &Arc<Admission> {
        &self.admission
    }

    /// The same lifecycle keeping pool claims in `claims` (the state directory's).
    pub fn with_claims(self, claims: ClaimStore) -> Self {
        Self { claims, ..self }
    }

    /// The claims of warm-pool sandboxes.
    pub fn claims(&self) -> &ClaimStore {
        &self.claims
    }

    /// One page of `List` through the backend, with claimed pool members shown as claimed and
    /// unclaimed ones left out.
    pub async fn list(&self, mut query: ListQuery) -> Result<ListPage> {
        if query.claims.is_empty() && !self.claims.is_empty() {
            query.claims = Arc::new(self.claims.snapshot());
        }
        self.backend.list(&query).await
    }

    /// Start a warm pool's sandbox (`spec.pool_member` set, no lease: it has none until
    /// claimed). It counts as created by this process, so `--remove-on-shutdown` removes it and
    /// one that completes during such a shutdown removes itself.
    pub async fn create_member(&self, spec: &SandboxSpec) -> Result<SandboxHandle> {
        spec.validate()?;
        // No lease until it is claimed (`claimed` starts it under the same policy).
        let plan = CreatePlan { ttl: None, ..self.create_policy().plan(None, None) };
        // A refill takes its turn in the queue as one more client of the operator's.
        let _slot = self.admission.admit(&Origin::new(None, Some("pool refill".into())), None).await?;
        let _in_progress = GaugeGuard::hold(&metrics::global().creates_in_progress);
        let handle = self.backend.create_planned(spec, &plan).await?;
        let keep = {
            let mut created = self.lock_created();
            let keep = !created.removing && created.ids.insert(plan.id.clone());
            metrics::global().sandboxes_live.set(created.ids.len() as i64);
            keep
        };
        if !keep {
            let _ = self.backend.close(&plan.id).await;
            return Err(ProviderError::Unavailable("the server is shutting down".into()));
        }
        Ok(handle)
    }

    /// The lease a sandbox asking for `ttl_s` gets under the one TTL policy (`None`: none).
    pub fn lease_ttl(&self, ttl_s: Option<f64>) -> Option<Duration> {
        self.leases.policy.ttl(ttl_s.map(Duration::from_secs_f64))
    }

    /// A pool's sandbox was handed out: its lease starts now under the one TTL policy, as a
    /// create's does.
    pub fn claimed(&self, id: &SandboxId, ttl_s: Option<f64>) {
        if let Some(ttl) = self.leases.policy.ttl(ttl_s.map(Duration::from_secs_f64)) {
            let expires_ms = self.start_lease(id, ttl);
            self.lease_moved_to(expires_ms);
        }
    }

    pub fn backend(&self) -> &Arc<dyn SandboxBackend> {
        &self.backend
    }

    /// Run a create to its end in a task of its own, so a caller that goes away or whose
    /// deadline passes cannot stop it halfway: a create nobody waits for any more, or one that
    /// completes while a shutdown removes this process's sandboxes, removes its sandbox. The
    /// create first waits its turn for one of the host's start slots (`crate::core::admission`:
    /// fair across tenants and `origin`'s clients, answered before `deadline` with a slot or
    /// CAPACITY and a retry delay), then is bounded by what is left of `deadline` (the call's)
    /// and the operator's create timeout.
    pub async fn create(
        self: &Arc<Self>,
        spec: SandboxSpec,
        deadline: Option<Duration>,
        origin: &Origin,
    ) -> Result<SandboxHandle> {
        spec.validate()?;
        let arrived = std::time::Instant::now();
        // The answer must leave before the caller's own timer fires, with room for a loaded
        // host's scheduling and the trip back (a tenth of the deadline, a second at most: at
        // load 30 on 2 cores the burst bench saw an answer sent half a second early reach its
        // caller after the caller's own timer).
        let answer_by = deadline.map(|d| arrived + d.saturating_sub((d / 10).min(Duration::from_secs(1))));
        let slot = self.admission.admit(origin, answer_by).await?;
        let deadline = answer_by.map(|at| at.saturating_duration_since(std::time::Instant::now()));
        let plan = self.create_policy().plan(spec.ttl_s.map(Duration::from_secs_f64), deadline);
        tracing::Span::current().record("sandbox_id", plan.id.as_str());
        let (tx, rx) = tokio::sync::oneshot::channel();
        let this = self.clone();
        let work = async move {
            let in_progress = GaugeGuard::hold(&metrics::global().creates_in_progress);
            let made = this.backend.create_planned(&spec, &plan).await;
            drop(slot);
            let handle = match made {
                Ok(handle) => handle,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            drop(in_progress);
            let keep = {
                let mut created = this.lock_created();
                let keep = !created.removing && created.ids.insert(plan.id.clone());
                metrics::global().sandboxes_live.set(created.ids.len() as i64);
                keep
            };
            if !keep {
                let _ = this.backend.close(&plan.id).await;
                let _ = tx.send(Err(ProviderError::Unavailable(
                    "the server is shutting down; the new sandbox was removed".into(),
                )));
                return;
            }
            if let Some(ttl) = plan.ttl {
                this.start_lease(&plan.id, ttl);
            }
            if tx.send(Ok(handle)).is_err() {
                tracing::warn!(sandbox_id = %plan.id, "the caller went away before its create finished; removing the sandbox");
                this.announce_removal(&plan.id, "its creator went away before the create finished");
                let _ = this.close(&plan.id).await;
            }
        };
        self.creates.spawn(work.instrument(tracing::Span::current()));
        let ended = || ProviderError::Docker("the create task ended without an answer".into());
        let Some(at) = answer_by else { return rx.await.unwrap_or_else(|_| Err(ended())) };
        // The answer leaves by the caller's deadline even when the backend's own timeout and its
        // clean-up run late (removing a half-started container takes seconds on a loaded host):
        // the task goes on and, finding nobody waiting, removes whatever it made.
        match tokio::time::timeout_at(at.into(), rx).await {
            Ok(answer) => answer.unwrap_or_else(|_| Err(ended())),
            Err(_) => Err(ProviderError::CreateTimeout(format!(
                "the sandbox was still starting when the call's deadline came ({} ms after the call); it is removed",
                at.saturating_duration_since(arrived).as_millis()
            ))),
        }
    }

    /// Fork through the backend, each child planned by the one create policy (its lease capped
    /// as a create's, on the backend's record too); the children count as created by this
    /// process (a fork that completes while a shutdown removes this process's sandboxes removes
    /// its children).
    pub async fn fork(
        &self,
        id: &SandboxId,
        count: u32,
        labels: &BTreeMap<String, String>,
        max_snapshots: usize,
    ) -> Result<Forked> {
        let forked = self.backend.fork(id, count, labels, max_snapshots, &self.create_policy()).await?;
        self.adopt_children(forked).await
    }

    /// As `fork`, the children restored from a live snapshot (`snapshot_id`'s, else a fresh
    /// one of `id`).
    pub async fn fork_live(
        &self,
        id: Option<&SandboxId>,
        snapshot_id: Option<&str>,
        count: u32,
        labels: &BTreeMap<String, String>,
        max_snapshots: usize,
    ) -> Result<Forked> {
        let policy = self.create_policy();
        let forked = self.backend.fork_live(id, snapshot_id, count, labels, max_snapshots, &policy).await?;
        self.adopt_children(forked).await
    }

    /// A fork's children become this process's (or are removed when it is shutting down) and
    /// their leases start.
    async fn adopt_children(&self, forked: Forked) -> Result<Forked> {
        let keep = {
            let mut created = self.lock_created();
            if !created.removing {
                created.ids.extend(forked.sandboxes.iter().map(SandboxHandle::id));
            }
            !created.removing
        };
        if !keep {
            for child in &forked.sandboxes {
                let _ = self.backend.close(&child.id()).await;
            }
            return Err(ProviderError::Unavailable(
                "the server is shutting down; the fork's children were removed".into(),
            ));
        }
        // As at create, each child's lease (already under the policy) runs from the end of the
        // fork.
        if let Some(ttl) = forked.ttl {
            for child in &forked.sandboxes {
                self.start_lease(&child.id(), ttl);
            }
        }
        Ok(forked)
    }

    /// The one policy every path that makes a sandbox is planned by: `server.max_ttl_s`,
    /// `server.default_ttl_s` and `server.create_timeout_s`.
    pub fn create_policy(&self) -> CreatePolicy {
        CreatePolicy { lease: self.leases.policy, timeout: self.leases.create_timeout }
    }

    /// Remove a sandbox (already gone is success), forget that this process made it and its
    /// moved lease.
    pub async fn close(&self, id: &SandboxId) -> Result<()> {
        self.backend.close(id).await?;
        {
            let mut created = self.lock_created();
            created.ids.remove(id);
            metrics::global().sandboxes_live.set(created.ids.len() as i64);
        }
        self.leases.store.remove(id.as_str());
        self.claims.remove(id.as_str());
        Ok(())
    }

    /// A claimed pool member goes back to its pool (`Pools::recycle`): its claim and lease end,
    /// it stays created by this process.
    pub fn unclaim(&self, id: &SandboxId) {
        self.leases.store.remove(id.as_str());
        self.claims.remove(id.as_str());
    }

    /// Move the lease of `id` to `ttl` from now (capped by the operator's maximum); returns its
    /// end in ms since the epoch. Kept in the lease store, so a restarted server enforces it.
    pub async fn set_timeout(&self, id: &SandboxId, ttl: Duration) -> Result<i64> {
        let ttl = self.leases.policy.ttl(Some(ttl)).unwrap_or(ttl);
        self.backend.lookup(id).await?;
        let expires_ms = lease::after_ms(lease::now_ms(), ttl);
        self.leases.store.set(id.as_str(), expires_ms).map_err(|e| {
            ProviderError::Io(std::io::Error::new(
                e.kind(),
                format!("cannot record the lease in {}: {e}", self.leases.store.dir().display()),
            ))
        })?;
        self.lease_moved_to(expires_ms);
        Ok(expires_ms)
    }

    /// Tell the sweeper a lease now ends at `expires_ms`: it sweeps then if that is before its
    /// next sweep (a moved lease alone never makes it list the daemon early: under a trainer's
    /// stream of pool claims that was a `docker ps` per claim).
    fn lease_moved_to(&self, expires_ms: i64) {
        self.moved_lease_end.fetch_min(expires_ms, std::sync::atomic::Ordering::SeqCst);
        self.sweep_wake.notify_one();
    }

    /// A new sandbox's lease runs from the moment its create completes: the label set before
    /// `docker run` counted the wait for a create slot, the run and the readiness probe against
    /// it, and under load a sandbox reached its caller with its lease nearly spent (the soak saw
    /// held sandboxes swept seconds after they were handed out). The label stays as the end a
    /// server that dies before this point leaves (earlier, never later).
    fn start_lease(&self, id: &SandboxId, ttl: Duration) -> i64 {
        let expires_ms = lease::after_ms(lease::now_ms(), ttl);
        if let Err(e) = self.leases.store.set(id.as_str(), expires_ms) {
            tracing::warn!(sandbox_id = %id, error = %e, dir = %self.leases.store.dir().display(),
                "cannot record the lease's start; it counts from the create's start");
        }
        expires_ms
    }

    /// When the lease of `id` ends: its moved lease if `SetTimeout` moved it, else `at_create`.
    pub fn lease_end(&self, id: &str, at_create: Option<i64>) -> Option<i64> {
        self.leases.store.get(id).or(at_create)
    }

    /// One sweep (`crate::core::sweep`: the backend lists, `crate::core::expiry` decides: expired leases,
    /// creates that never completed). Sandboxes this process created that the sweep removed or
    /// that were removed elsewhere are forgotten, so the set holds only live sandboxes.
    pub async fn sweep(&self) -> Result<SweepReport> {
        let report = crate::core::sweep::sweep(&*self.backend, &self.leases.store).await?;
        let ended = report.gone.iter().chain(report.removed.iter().map(|(name, _)| name));
        let mut created = self.lock_created();
        for name in ended {
            if let Ok(id) = SandboxId::parse("sandbox_id", name) {
                created.ids.remove(&id);
                self.claims.remove(id.as_str());
            }
        }
        metrics::global().sandboxes_live.set(created.ids.len() as i64);
        Ok(report)
    }

    /// Sandboxes this process created and has not seen end.
    pub fn created_count(&self) -> usize {
        self.lock_created().ids.len()
    }

    /// Resolves when a lease moved since the last call, with the earliest end (ms since the
    /// epoch) among the leases moved since then.
    pub async fn lease_moved(&self) -> i64 {
        self.sweep_wake.notified().await;
        self.moved_lease_end.swap(i64::MAX, std::sync::atomic::Ordering::SeqCst)
    }

    /// The first step of a shutdown: close terminal sessions and, when asked, remove every
    /// sandbox this process created, a few at a time, and wait for the creates under way (which
    /// remove what they made once they complete).
    pub async fn shutdown(&self, remove_created: bool) {
        let ids: Vec<SandboxId> = {
            let mut created = self.lock_created();
            if remove_created {
                created.removing = true;
                created.ids.drain().collect()
            } else {
                Vec::new()
            }
        };
        self.backend.close_terminals().await;
        // Creates under way finish (and, seeing the flag, remove what they made) beside the
        // removals.
        let creates = async {
            if remove_created {
                self.creates.close();
                self.creates.wait().await;
            }
        };
        tokio::join!(self.remove_at_shutdown(ids), creates);
        // Closes return before Docker's removal is done: a removing shutdown waits for it.
        if remove_created {
            self.backend.settle_removals().await;
        }
    }

    /// Remove `ids`, a few at a time, logging each.
    async fn remove_at_shutdown(&self, ids: Vec<SandboxId>) {
        use futures_util::StreamExt;
        futures_util::stream::iter(ids)
            .for_each_concurrent(SHUTDOWN_REMOVALS_AT_ONCE, |id| async move {
                self.announce_removal(&id, "removed at server shutdown (--remove-on-shutdown)");
                match self.backend.close(&id).await {
                    Ok(()) => tracing::info!(sandbox_id = %id, "removed at shutdown"),
                    Err(e) => {
                        tracing::warn!(sandbox_id = %id, error = %e, "could not remove sandbox at shutdown")
                    }
                }
            })
            .await;
    }

    /// Tell watchers why `id` is about to be removed (its REMOVED event carries `reason`).
    pub fn announce_removal(&self, id: &SandboxId, reason: &str) {
        if let Some(hub) = self.backend.event_hub() {
            hub.expect_removal(id.as_str(), reason);
        }
    }

    fn lock_created(&self) -> std::sync::MutexGuard<'_, Created> {
        self.created.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
