//! Tenant quotas (`tenants[].quotas`): checked before anything is made, so a refusal leaves
//! nothing behind. Sandboxes, CPUs, memory and snapshots are counted from the daemon (the
//! tenant's labels, so a restart or another replica counts the same); creates per minute and
//! execs in flight are this process's. A tenant's quota checks are serialised, and each create
//! that passed holds a reservation (a sandbox, its CPUs and memory) until it ends, so two at
//! once cannot both pass the last free place while the creates themselves run side by side (a
//! burst of one tenant's creates is not one at a time). Past a quota: RESOURCE_EXHAUSTED naming
//! the quota, its limit and the current use.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tonic::Status;

use super::SandboxApi;
use crate::auth::{Principal, Tenant, TENANT_LABEL};
use crate::core::inventory::ListQuery;
use crate::core::spec::SandboxSpec;
use crate::metrics::TenantLabels;

const WINDOW: Duration = Duration::from_secs(60);

#[derive(Default)]
struct Usage {
    creates: VecDeque<Instant>,
    execs: u64,
    /// Creates past their check and not yet ended: what they will hold.
    reserved: Reserved,
    /// `creates_per_second`'s bucket: tokens left and when it was last filled.
    bucket: Option<(f64, Instant)>,
}

/// What creates under way will hold once made.
#[derive(Default, Clone, Copy)]
struct Reserved {
    sandboxes: u64,
    millicpus: u64,
    memory_mib: u64,
}

/// What this process counts per tenant.
#[derive(Default)]
pub struct QuotaBook {
    usage: Mutex<HashMap<String, Usage>>,
    create_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// Held for the length of a create: its reservation counts against the tenant's quotas until
/// the sandbox is made (and counted from the daemon) or the create failed.
pub struct CreatePermit {
    held: Option<(Arc<QuotaBook>, String, Reserved)>,
}

impl Drop for CreatePermit {
    fn drop(&mut self) {
        let Some((book, tenant, r)) = self.held.take() else { return };
        let mut usage = book.usage.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(u) = usage.get_mut(&tenant) {
            u.reserved.sandboxes = u.reserved.sandboxes.saturating_sub(r.sandboxes);
            u.reserved.millicpus = u.reserved.millicpus.saturating_sub(r.millicpus);
            u.reserved.memory_mib = u.reserved.memory_mib.saturating_sub(r.memory_mib);
        }
    }
}

/// One exec in flight; given back on drop.
pub struct ExecSlot {
    book: Arc<QuotaBook>,
    tenant: Option<String>,
}

impl Drop for ExecSlot {
    fn drop(&mut self) {
        if let Some(t) = &self.tenant {
            if let Ok(mut usage) = self.book.usage.lock() {
                if let Some(u) = usage.get_mut(t) {
                    u.execs = u.execs.saturating_sub(1);
                    crate::metrics::global()
                        .tenant_execs_in_flight
                        .get_or_create(&TenantLabels::of(t))
                        .set(u.execs as i64);
                }
            }
        }
    }
}

/// RESOURCE_EXHAUSTED (QUOTA) for a limit over time, saying when it frees (`retry_after`,
/// also the status's `google.rpc.RetryInfo`).
fn exhausted_until(tenant: &str, quota: &str, detail: String, retry_after: Duration) -> Status {
    crate::core::failure::status_retry_after(
        tonic::Code::ResourceExhausted,
        format!(
            "tenant {tenant:?} is at its quota {quota}: {detail}; it frees in {:.3} s",
            retry_after.as_secs_f64()
        ),
        Some(crate::core::failure::FailureKind::Quota),
        retry_after,
    )
}

fn exhausted(
    tenant: &str,
    quota: &str,
    limit: impl std::fmt::Display,
    used: impl std::fmt::Display,
) -> Status {
    crate::core::failure::status(
        tonic::Code::ResourceExhausted,
        format!("tenant {tenant:?} is at its quota {quota}: limit {limit}, in use {used}"),
        Some(crate::core::failure::FailureKind::Quota),
    )
}

/// The tenant whose quotas apply to this caller (a token of a tenant's sandbox counts too).
fn tenant_of(api: &SandboxApi, principal: &Principal) -> Option<Arc<Tenant>> {
    match principal {
        Principal::Tenant(t) => Some(t.clone()),
        Principal::Token(c) => {
            let name = c.ten.as_deref()?;
            api.access.tenants.as_ref()?.by_name(name)
        }
        Principal::Operator => None,
    }
}

impl QuotaBook {
    /// `sandboxes`, `cpus`, `memory_mib`, `creates_per_minute`, `creates_per_second` and the
    /// period budgets for `count` new sandboxes shaped like `spec` (`Fork` passes its
    /// children's count).
    pub async fn create_allowed(
        self: &Arc<Self>,
        api: &SandboxApi,
        principal: &Principal,
        reserves: Option<(f64, u64)>,
        count: u64,
    ) -> Result<CreatePermit, Status> {
        let Some(tenant) = tenant_of(api, principal) else { return Ok(CreatePermit { held: None }) };
        let lock = {
            let mut locks = self.create_locks.lock().map_err(|_| Status::internal("quota lock poisoned"))?;
            locks.entry(tenant.name.clone()).or_default().clone()
        };
        let _checking = lock.lock_owned().await;
        let q = &tenant.quotas;
        let pending = self.usage.lock().map(|u| u.get(&tenant.name).map(|u| u.reserved).unwrap_or_default());
        let pending = pending.map_err(|_| Status::internal("quota lock poisoned"))?;
        if let Some(limit) = q.creates_per_minute {
            let mut usage = self.usage.lock().map_err(|_| Status::internal("quota lock poisoned"))?;
            let u = usage.entry(tenant.name.clone()).or_default();
            while u.creates.front().is_some_and(|t| t.elapsed() >= WINDOW) {
                u.creates.pop_front();
            }
            let used = u.creates.len() as u64;
            if used + count > limit {
                return Err(exhausted(&tenant.name, "creates_per_minute", limit, used));
            }
        }
        if let Some(rate) = q.creates_per_second {
            let burst = q.creates_burst();
            let mut usage = self.usage.lock().map_err(|_| Status::internal("quota lock poisoned"))?;
            let u = usage.entry(tenant.name.clone()).or_default();
            let now = Instant::now();
            let (tokens, at) = u.bucket.unwrap_or((burst, now));
            let tokens = (tokens + rate * now.duration_since(at).as_secs_f64()).min(burst);
            u.bucket = Some((tokens, now));
            if tokens + 1e-9 < count as f64 {
                let wait = Duration::from_secs_f64(((count as f64 - tokens) / rate).max(0.001));
                let detail =
                    format!("{rate} creates a second, bursts of {burst}; {} asked, {tokens:.2} left", count);
                return Err(exhausted_until(&tenant.name, "creates_per_second", detail, wait));
            }
        }
        self.check_budgets(api, &tenant).await?;
        if q.sandboxes.is_some() || q.cpus.is_some() || q.memory_mib.is_some() {
            let query =
                ListQuery { page_size: usize::MAX, tenant: Some(tenant.name.clone()), ..Default::default() };
            let live = api.lifecycle.list(query).await?.sandboxes;
            let live: Vec<_> =
                live.into_iter().filter(|s| s.status != crate::core::spec::SandboxStatus::Stopped).collect();
            if let Some(limit) = q.sandboxes {
                let used = live.len() as u64 + pending.sandboxes;
                if used + count > limit {
                    return Err(exhausted(&tenant.name, "sandboxes", limit, used));
                }
            }
            let (spec_cpu, spec_memory_mib) = reserves.unwrap_or_default();
            if let (Some(limit), Some(_)) = (q.cpus, reserves) {
                let used = (live.iter().map(|s| s.reserved_millicpus).sum::<u64>() + pending.millicpus)
                    as f64
                    / 1000.0;
                if used + spec_cpu * count as f64 > limit + 1e-9 {
                    return Err(exhausted(&tenant.name, "cpus", limit, used));
                }
                if spec_cpu == 0.0 {
                    return Err(Status::resource_exhausted(format!(
                        "tenant {:?} has a cpus quota ({limit}): spec.resources.cpu is required",
                        tenant.name
                    )));
                }
            }
            if let (Some(limit), Some(_)) = (q.memory_mib, reserves) {
                let used: u64 = live.iter().map(|s| s.reserved_memory_mib).sum::<u64>() + pending.memory_mib;
                if used + spec_memory_mib * count > limit {
                    return Err(exhausted(&tenant.name, "memory_mib", limit, used));
                }
                if spec_memory_mib == 0 {
                    return Err(Status::resource_exhausted(format!(
                        "tenant {:?} has a memory_mib quota ({limit}): spec.resources.memory_mib is required",
                        tenant.name
                    )));
                }
            }
        }
        let (cpu, mib) = reserves.unwrap_or_default();
        let reserved = Reserved {
            sandboxes: count,
            millicpus: (cpu * 1000.0).round() as u64 * count,
            memory_mib: mib * count,
        };
        if let Ok(mut usage) = self.usage.lock() {
            let u = usage.entry(tenant.name.clone()).or_default();
            for _ in 0..count {
                u.creates.push_back(Instant::now());
            }
            if let Some((tokens, _)) = u.bucket.as_mut() {
                *tokens -= count as f64;
            }
            u.reserved.sandboxes += reserved.sandboxes;
            u.reserved.millicpus += reserved.millicpus;
            u.reserved.memory_mib += reserved.memory_mib;
        }
        crate::metrics::global().tenant_creates.get_or_create(&TenantLabels::of(&tenant.name)).inc_by(count);
        Ok(CreatePermit { held: Some((self.clone(), tenant.name.clone(), reserved)) })
    }

    /// `sandbox_seconds_per_period` and `cpu_seconds_per_period`: what the tenant's sandboxes
    /// closed in this period used (their receipts) plus what its live ones used so far, under
    /// the limit; past it QUOTA until the period ends.
    async fn check_budgets(&self, api: &SandboxApi, tenant: &Tenant) -> Result<(), Status> {
        let q = &tenant.quotas;
        if q.sandbox_seconds_per_period.is_none() && q.cpu_seconds_per_period.is_none() {
            return Ok(());
        }
        let now_ms = crate::core::lease::now_ms();
        let (from_ms, to_ms) = crate::core::receipts::period_of(now_ms, q.period());
        let spend = api.lifecycle.receipts().spend(Some(&tenant.name), from_ms, to_ms);
        let (mut wall, mut cpu) = (spend.sandbox_seconds, spend.cpu_seconds);
        let query =
            ListQuery { page_size: usize::MAX, tenant: Some(tenant.name.clone()), ..Default::default() };
        for live in api.lifecycle.list(query).await?.sandboxes {
            let Ok(id) = crate::core::spec::SandboxId::parse("sandbox_id", &live.sandbox_id) else {
                continue;
            };
            if let Ok(usage) = api.backend().usage(&id).await {
                wall += usage.wall_time.as_secs_f64();
                cpu += usage.cpu_time.as_secs_f64();
            }
        }
        let frees = Duration::from_millis((to_ms - now_ms).max(1) as u64);
        for (quota, limit, used) in [
            ("sandbox_seconds_per_period", q.sandbox_seconds_per_period, wall),
            ("cpu_seconds_per_period", q.cpu_seconds_per_period, cpu),
        ] {
            if let Some(limit) = limit.filter(|limit| used >= *limit) {
                let detail = format!(
                    "limit {limit} per {} s period, used {used:.3} (closed sandboxes' receipts and live ones so far)",
                    q.period().as_secs_f64()
                );
                return Err(exhausted_until(&tenant.name, quota, detail, frees));
            }
        }
        Ok(())
    }

    /// `Create` of `spec` for this caller.
    pub async fn create_spec_allowed(
        self: &Arc<Self>,
        api: &SandboxApi,
        principal: &Principal,
        spec: &SandboxSpec,
    ) -> Result<CreatePermit, Status> {
        let cpu = spec.resources.cpu.unwrap_or(0.0);
        let mib = spec.resources.memory_mib.unwrap_or(0);
        self.create_allowed(api, principal, Some((cpu, mib)), 1).await
    }

    /// `execs_in_flight`: a slot for one more exec, or RESOURCE_EXHAUSTED.
    pub fn exec_slot(self: &Arc<Self>, api: &SandboxApi, principal: &Principal) -> Result<ExecSlot, Status> {
        let Some(tenant) = tenant_of(api, principal) else {
            return Ok(ExecSlot { book: self.clone(), tenant: None });
        };
        let mut usage = self.usage.lock().map_err(|_| Status::internal("quota lock poisoned"))?;
        let u = usage.entry(tenant.name.clone()).or_default();
        if let Some(limit) = tenant.quotas.execs_in_flight {
            if u.execs >= limit {
                return Err(exhausted(&tenant.name, "execs_in_flight", limit, u.execs));
            }
        }
        u.execs += 1;
        crate::metrics::global()
            .tenant_execs_in_flight
            .get_or_create(&TenantLabels::of(&tenant.name))
            .set(u.execs as i64);
        Ok(ExecSlot { book: self.clone(), tenant: Some(tenant.name.clone()) })
    }

    /// `snapshots`: room for one more of the tenant's snapshots.
    pub async fn snapshot_allowed(&self, api: &SandboxApi, principal: &Principal) -> Result<(), Status> {
        let Some(tenant) = tenant_of(api, principal) else { return Ok(()) };
        let Some(limit) = tenant.quotas.snapshots else { return Ok(()) };
        let filter = BTreeMap::from([(TENANT_LABEL.to_string(), tenant.name.clone())]);
        let used = api.backend().list_snapshots(&filter).await?.len() as u64;
        if used >= limit {
            return Err(exhausted(&tenant.name, "snapshots", limit, used));
        }
        Ok(())
    }

    /// `Fork` of `count` children: the create quotas for them all.
    pub async fn fork_allowed(
        self: &Arc<Self>,
        api: &SandboxApi,
        principal: &Principal,
        count: u32,
    ) -> Result<CreatePermit, Status> {
        // Children reserve what their source did; the source already counts, so only the
        // number of sandboxes and the create rate are checked here.
        self.create_allowed(api, principal, None, u64::from(count.max(1))).await
    }
}

/// The usage metrics counted from the daemon (sandboxes, CPUs and memory reserved) for every
/// tenant, every `every` until the service shuts down; execs in flight and creates are set
/// where they happen. Without tenants there is nothing to label, and nothing runs.
pub async fn publish_usage_forever(api: SandboxApi, every: Duration) {
    let Some(tenants) = api.access.tenants.clone() else { return };
    let mut shutdown = api.shutdown.clone();
    loop {
        for tenant in tenants.all() {
            let query =
                ListQuery { page_size: usize::MAX, tenant: Some(tenant.name.clone()), ..Default::default() };
            let Ok(page) = api.backend().list(&query).await else { continue };
            let live: Vec<_> = page
                .sandboxes
                .into_iter()
                .filter(|s| s.status != crate::core::spec::SandboxStatus::Stopped)
                .collect();
            let m = crate::metrics::global();
            let labels = TenantLabels::of(&tenant.name);
            m.tenant_sandboxes.get_or_create(&labels).set(live.len() as i64);
            let millicpus: u64 = live.iter().map(|s| s.reserved_millicpus).sum();
            m.tenant_cpus.get_or_create(&labels).set(millicpus as f64 / 1000.0);
            let mib: u64 = live.iter().map(|s| s.reserved_memory_mib).sum();
            m.tenant_memory_mib.get_or_create(&labels).set(i64::try_from(mib).unwrap_or(i64::MAX));
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}
