//! `sandboxd_sandboxes{state}`: how many of this service's sandboxes are in each state, for
//! the dashboards. Refreshed periodically (only with `--metrics-listen`) from one listing
//! (`Lifecycle::list`: claims applied, unclaimed pool members left out, every tenant's), never
//! on a call's path.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::core::inventory::ListQuery;
use crate::core::lifecycle::Lifecycle;
use crate::core::spec::SandboxStatus;
use crate::metrics::StateLabels;

/// Time between two refreshes: one listing (one `docker ps`) each.
pub const REFRESH_EVERY: Duration = Duration::from_secs(5);

/// Every `every` until `shutdown` turns true: count the sandboxes by state.
pub async fn refresh_periodically(
    lifecycle: Arc<Lifecycle>,
    every: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        refresh(&lifecycle).await;
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shutdown.changed() => return,
        }
        if *shutdown.borrow() {
            return;
        }
    }
}

/// One refresh. Every state is exported (0 when none is in it), so a series never vanishes
/// from a graph; a failed listing keeps the last values.
pub async fn refresh(lifecycle: &Lifecycle) {
    let mut counts: BTreeMap<&'static str, i64> =
        SandboxStatus::ALL.iter().map(|s| (s.as_str(), 0)).collect();
    let mut query = ListQuery { page_size: 1000, ..Default::default() };
    loop {
        let page = match lifecycle.list(query.clone()).await {
            Ok(page) => page,
            Err(e) => {
                tracing::debug!(error = %e, "state metrics: cannot list sandboxes; keeping the last values");
                return;
            }
        };
        for sandbox in &page.sandboxes {
            *counts.entry(sandbox.status.as_str()).or_default() += 1;
        }
        match page.next {
            Some(next) => query.after = Some(next),
            None => break,
        }
    }
    let family = &crate::metrics::global().sandboxes_by_state;
    for (state, n) in counts {
        family.get_or_create(&StateLabels { state: state.to_string() }).set(n);
    }
}
