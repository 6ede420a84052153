//! `server.metrics.per_sandbox`: every live sandbox's usage as Prometheus gauges labelled by
//! `sandbox_id`, refreshed periodically from the backend's `stats` (one cgroup read each, no
//! `docker stats`); a sandbox that is gone loses its series at the next refresh.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crate::core::backend::SandboxBackend;
use crate::core::inventory::ListQuery;
use crate::core::spec::{SandboxId, SandboxStatus};

/// Every `every` until `shutdown` turns true: list the sandboxes this service owns, read
/// each running or paused one's usage, set its gauges, and drop those of the rest.
pub async fn refresh_periodically(
    backend: Arc<dyn SandboxBackend>,
    every: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut exported = HashSet::new();
    loop {
        exported = refresh(backend.as_ref(), exported).await;
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shutdown.changed() => return,
        }
        if *shutdown.borrow() {
            return;
        }
    }
}

/// One refresh; returns the ids that have series now.
pub async fn refresh(backend: &dyn SandboxBackend, before: HashSet<String>) -> HashSet<String> {
    let gauges = &crate::metrics::global().sandbox_usage;
    let mut query = ListQuery {
        labels: Default::default(),
        statuses: vec![SandboxStatus::Running, SandboxStatus::Paused],
        page_size: 1000,
        after: None,
        tenant: None,
        ..Default::default()
    };
    let mut now = HashSet::new();
    loop {
        let page = match backend.list(&query).await {
            Ok(page) => page,
            Err(e) => {
                tracing::warn!(error = %e, "per-sandbox metrics: cannot list sandboxes; keeping the last values");
                return before;
            }
        };
        for sandbox in &page.sandboxes {
            let Ok(id) = SandboxId::parse("sandbox_id", &sandbox.sandbox_id) else { continue };
            match backend.stats(&id).await {
                Ok(stats) => {
                    gauges.set(id.as_str(), &stats);
                    gauges.set_runtime(id.as_str(), sandbox.runtime.as_deref().unwrap_or_default());
                    now.insert(id.as_str().to_string());
                }
                Err(e) => tracing::debug!(sandbox_id = %id, error = %e, "per-sandbox metrics: no usage"),
            }
        }
        match page.next {
            Some(next) => query.after = Some(next),
            None => break,
        }
    }
    for gone in before.difference(&now) {
        gauges.remove(gone);
    }
    now
}
