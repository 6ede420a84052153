//! Snapshots a call is making. A `Snapshot`, `Fork` or `Checkpoint` writes down the snapshot id
//! (`<state_dir>/snapshotting/<snapshot id>`, held by this server: `held_files.rs`) before its
//! `docker commit` and takes the record back once it answers. A server killed in between, or a
//! call whose caller went away, leaves the record unheld: the sweeps over the state directory
//! remove that snapshot, which no caller was told of, once no container uses it (a child of
//! the cut fork runs until its lease ends).

use std::time::Duration;

use super::argv;
use super::failure::DockerFailureKind;
use super::held_files::{self, Held};
use super::provider::DockerProvider;

/// A snapshot under way, recorded. Dropped without [`SnapshotMaking::answered`] (an error
/// path, a cancelled call), the record stays for the sweep.
pub(in crate::backends::docker) struct SnapshotMaking(Option<Held>);

impl SnapshotMaking {
    /// The call answered with the snapshot (or removed it itself): nothing left to sweep.
    pub fn answered(mut self) {
        if let Some(held) = self.0.take() {
            held.finish();
        }
    }
}

impl Drop for SnapshotMaking {
    fn drop(&mut self) {
        if let Some(held) = self.0.take() {
            held.release();
        }
    }
}

impl DockerProvider {
    /// The longest a commit runs: a call's own commit is cut at this bound.
    fn commit_bound(&self) -> Duration {
        self.config.create.start_timeout.unwrap_or(Duration::from_secs(600))
    }

    /// Record that this call makes `snapshot_id`. Without a record (the state directory
    /// refused it) the call goes on; only the sweep after a crash loses it.
    pub(in crate::backends::docker) fn making_snapshot(&self, snapshot_id: &str) -> SnapshotMaking {
        match Held::create(&self.snapshotting_dir.join(snapshot_id), snapshot_id.as_bytes()) {
            Ok(held) => SnapshotMaking(Some(held)),
            Err(e) => {
                tracing::warn!(snapshot_id, error = %e, "cannot record a snapshot under way");
                SnapshotMaking(None)
            }
        }
    }

    /// The sweep's part: remove the snapshots whose call never answered.
    pub(in crate::backends::docker) async fn remove_abandoned_snapshots(&self) {
        for held in held_files::unheld(&self.snapshotting_dir, Duration::from_secs(60)) {
            let snapshot_id =
                held.read().map(|b| String::from_utf8_lossy(&b).trim().to_string()).unwrap_or_default();
            if !argv::is_valid_snapshot_id(&snapshot_id) {
                held.finish();
                continue;
            }
            match self.control(argv::rmi_args(&snapshot_id)).await {
                Ok(_) => {
                    self.drop_live_checkpoint(&snapshot_id).await;
                    tracing::info!(snapshot_id, "removed a snapshot whose call never answered");
                    held.finish();
                }
                // No image yet: a `docker commit` the dead server started may still make it
                // (the daemon goes on without its client), so the record stays until no
                // commit could still be running.
                Err(e) if e.kind() == Some(DockerFailureKind::MissingImage) => {
                    if held.age().unwrap_or(Duration::MAX) < self.commit_bound() {
                        held.release();
                        continue;
                    }
                    self.drop_live_checkpoint(&snapshot_id).await;
                    held.finish();
                }
                // In use (a child of the cut fork, which nobody was told of either, runs until
                // its lease ends): tried again by the next sweeps until it is free.
                Err(e) => {
                    tracing::debug!(snapshot_id, error = %e, "an abandoned snapshot's removal failed; the next sweep tries again");
                    held.release();
                }
            }
        }
    }
}
