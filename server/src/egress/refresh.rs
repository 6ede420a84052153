//! `Egress`: the service's side of egress policy. It picks a new sandbox's policy (its own, else
//! `network.default_policy`), resolves its domains into a plan, records it, applies live changes
//! through the backend, and re-resolves domains every `network.domain_refresh_s`, re-applying a
//! sandbox's plan when its addresses changed.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::store::PolicyStore;
use super::{resolve, EgressPlan, NetworkPolicy};
use crate::config::NetworkSection;
use crate::core::backend::SandboxBackend;
use crate::core::spec::SandboxId;
use crate::error::{ProviderError, Result};

/// How long one name may take to resolve.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

pub struct Egress {
    default_policy: Option<NetworkPolicy>,
    refresh: Duration,
    store: PolicyStore,
    /// What each sandbox's domains resolved to when its plan was last applied by this process.
    applied: Mutex<HashMap<String, BTreeMap<String, Vec<IpAddr>>>>,
}

impl Egress {
    pub fn new(config: &NetworkSection, state_dir: &Path) -> Self {
        Self {
            default_policy: config.default_policy.clone(),
            refresh: config.domain_refresh,
            store: PolicyStore::open(state_dir),
            applied: Mutex::default(),
        }
    }

    /// The policy a new sandbox gets: `requested` (checked, naming `field`), else the default;
    /// `None`: neither, so nothing is enforced (everything allowed, as without this feature).
    pub async fn plan_for(
        &self,
        requested: Option<NetworkPolicy>,
        field: &str,
    ) -> Result<Option<(NetworkPolicy, EgressPlan)>> {
        let (policy, field) = match requested {
            Some(p) => (p, field),
            None => match &self.default_policy {
                Some(p) => (p.clone(), "network.default_policy"),
                None => return Ok(None),
            },
        };
        let plan = Self::plan(&policy, field).await?;
        Ok(Some((policy, plan)))
    }

    /// Check `policy` and resolve its domains.
    pub async fn plan(policy: &NetworkPolicy, field: &str) -> Result<EgressPlan> {
        let checked = policy.check(field)?;
        let resolved = resolve(&checked.domains, RESOLVE_TIMEOUT).await;
        Ok(EgressPlan { policy: checked, resolved })
    }

    /// The sandbox got `policy` (applied as `plan`): keep it for refreshes, forks and restarts.
    pub fn remember(&self, id: &SandboxId, policy: &NetworkPolicy, plan: &EgressPlan) -> Result<()> {
        self.store.set(id.as_str(), policy).map_err(|e| {
            ProviderError::Io(std::io::Error::other(format!("cannot record the network policy of {id}: {e}")))
        })?;
        if let Ok(mut applied) = self.applied.lock() {
            applied.insert(id.to_string(), plan.resolved.clone());
        }
        Ok(())
    }

    /// The policy recorded for `id`, if any.
    pub fn policy_of(&self, id: &SandboxId) -> Option<NetworkPolicy> {
        self.store.get(id.as_str())
    }

    /// `id` is gone.
    pub fn forget(&self, id: &str) {
        self.store.remove(id);
        if let Ok(mut applied) = self.applied.lock() {
            applied.remove(id);
        }
    }

    /// Replace the policy of a running sandbox (`SetNetworkPolicy`): enforced before this
    /// returns, then recorded.
    pub async fn set(
        &self,
        backend: &dyn SandboxBackend,
        id: &SandboxId,
        policy: NetworkPolicy,
    ) -> Result<()> {
        let plan = Self::plan(&policy, "policy").await?;
        backend.apply_egress(id, &plan).await?;
        self.remember(id, &policy, &plan)
    }

    /// Give freshly made sandboxes (a fork's children) `policy`, or the default when `None`.
    pub async fn apply_to_new(
        &self,
        backend: &dyn SandboxBackend,
        ids: &[SandboxId],
        policy: Option<NetworkPolicy>,
    ) -> Result<()> {
        let Some((policy, plan)) = self.plan_for(policy, "policy").await? else { return Ok(()) };
        for id in ids {
            backend.apply_egress(id, &plan).await?;
            self.remember(id, &policy, &plan)?;
        }
        Ok(())
    }

    /// One refresh: every recorded sandbox with domains is resolved again, and its plan applied
    /// when the addresses changed (or this process never applied it: after a restart). A
    /// sandbox that is gone is forgotten.
    pub async fn refresh_once(&self, backend: &dyn SandboxBackend) {
        for id in self.store.ids() {
            let Ok(sandbox) = SandboxId::parse("sandbox_id", &id) else { continue };
            let Some(policy) = self.store.get(&id) else { continue };
            if policy.allow_domains.is_empty() {
                // Nothing to resolve; a record whose sandbox is gone (the sweep, `docker rm`)
                // is dropped.
                if let Err(ProviderError::SandboxNotFound(_)) = backend.lookup(&sandbox).await {
                    self.forget(&id);
                }
                continue;
            }
            let plan = match Self::plan(&policy, "policy").await {
                Ok(plan) => plan,
                Err(e) => {
                    tracing::warn!(sandbox_id = %id, error = %e, "a recorded network policy no longer checks");
                    continue;
                }
            };
            let unchanged =
                self.applied.lock().ok().and_then(|a| a.get(&id).cloned()) == Some(plan.resolved.clone());
            if unchanged {
                continue;
            }
            match backend.apply_egress(&sandbox, &plan).await {
                Ok(()) => {
                    tracing::info!(sandbox_id = %id, "allowed domains resolved anew; egress rules updated");
                    if let Ok(mut applied) = self.applied.lock() {
                        applied.insert(id.clone(), plan.resolved);
                    }
                }
                Err(ProviderError::SandboxNotFound(_)) => self.forget(&id),
                Err(e) => tracing::warn!(sandbox_id = %id, error = %e, "cannot refresh the egress rules"),
            }
        }
    }

    /// Refresh every `network.domain_refresh_s` until the shutdown.
    pub async fn refresh_forever(
        self: Arc<Self>,
        backend: Arc<dyn SandboxBackend>,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.refresh) => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
            self.refresh_once(backend.as_ref()).await;
        }
    }
}
