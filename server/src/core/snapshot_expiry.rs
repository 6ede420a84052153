//! The periodic removal of unreferenced snapshots past `server.snapshot_ttl_s`.

use std::sync::Arc;
use std::time::Duration;

use crate::core::backend::SandboxBackend;
use crate::core::capabilities::Capability;

/// Every `every`, remove the snapshots taken more than `ttl` ago that no sandbox uses, until
/// `shutdown` turns true.
pub async fn expire_periodically(
    backend: Arc<dyn SandboxBackend>,
    ttl: Duration,
    every: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    if !backend.capabilities().has(Capability::Snapshots) {
        return;
    }
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shutdown.changed() => return,
        }
        if *shutdown.borrow() {
            return;
        }
        match backend.remove_expired_snapshots(ttl).await {
            Ok(removed) if !removed.is_empty() => tracing::info!(?removed, "expired snapshots removed"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "snapshot expiry sweep failed"),
        }
    }
}
