//! One sweep: ask the backend what it owns, decide with the one rule (`expiry.rs`), tell it what
//! to remove (each removal logged with its reason, a lease's end announced to watchers first),
//! and forget moved leases of sandboxes that no longer exist. `Lifecycle::sweep` runs it.

use std::time::Duration;

use crate::core::backend::SandboxBackend;
use crate::core::expiry::{self, Decision, SweepReason, SweepReport};
use crate::core::lease::{self, LeaseStore};
use crate::core::spec::SandboxId;
use crate::error::Result;

/// Moved-lease files older than this whose sandbox no longer exists are pruned (a file for a
/// sandbox created since the listing is young).
const PRUNE_AFTER: Duration = Duration::from_secs(300);

/// One pass over everything `backend` owns; `leases` holds the leases `SetTimeout` moved.
pub async fn sweep(backend: &dyn SandboxBackend, leases: &LeaseStore) -> Result<SweepReport> {
    let listing = backend.list_owned().await?;
    let now = lease::now_ms();
    let mut report = SweepReport { gone: listing.gone, ..SweepReport::default() };
    for item in &listing.owned {
        let reason = match expiry::decide(item, now, |id| leases.get(id)) {
            Decision::Keep { expires_ms } => {
                if let Some(at) = expires_ms {
                    report.next_expiry_ms = Some(report.next_expiry_ms.map_or(at, |n| n.min(at)));
                }
                continue;
            }
            Decision::Remove(reason) => reason,
        };
        // Watchers learn why a sandbox went (an unfinished create was never one).
        if reason != SweepReason::CreateAbandoned {
            if let Some(hub) = backend.event_hub() {
                if reason == SweepReason::LeaseExpired {
                    hub.expect_expiry(&item.name);
                }
                hub.expect_removal(&item.name, reason.as_str());
            }
        }
        match backend.remove_owned(item).await {
            Ok(()) => {
                leases.remove(&item.name);
                tracing::info!(sandbox_id = %item.name, reason = reason.as_str(), "sweep removed a sandbox");
                report.removed.push((item.name.clone(), reason));
            }
            Err(e) => {
                tracing::warn!(sandbox_id = %item.name, reason = reason.as_str(), error = %e, "sweep could not remove a sandbox");
            }
        }
    }
    for id in leases.ids_older_than(PRUNE_AFTER) {
        if SandboxId::has_valid_shape(&id) && !listing.owned.iter().any(|o| o.name == id) {
            leases.remove(&id);
        }
    }
    Ok(report)
}
