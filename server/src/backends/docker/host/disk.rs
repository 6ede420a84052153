//! A sandbox's disk bound (`resources.disk_gib`, else `create.default_disk_gib`) where the
//! storage driver cannot take `--storage-opt size=` (fuse-overlayfs; overlay2 without project
//! quotas): `create.disk_bound: loop`. The container is created (not started), its writable
//! layer's directory (the parent of the driver's `UpperDir`, holding `diff` and `work`) is
//! copied into a sparse ext4 file of the bound's size (`mkfs.ext4 -d`) under
//! `<state_dir>/disks/<container-id>.img`, that file is loop-mounted over the directory, and
//! only then the container starts: every write to its root filesystem lands in the ext4 file,
//! and a full one answers ENOSPC to the sandbox alone. `docker rm` unmounts the layer as it
//! removes it (the loop device goes with the mount); the file is removed on close, and files
//! whose container is gone (a crash, a removal from outside) by the sweep.
//!
//! Needs the server as root in the daemon's mount namespace (a local daemon); anything else is
//! FAILED_PRECONDITION naming `docker.create.disk_bound`, never an unbounded sandbox.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::argv;
use super::provider::DockerProvider;
use super::records::DiskState;
use crate::config::DiskBound;
use crate::core::spec::SandboxSpec;
use crate::error::{ProviderError, Result};

/// How often the sweep looks for disk files whose container is gone.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// Written at create when `create.disk_bound` is `loop`: [`LOOP_DISK`] or [`NO_LOOP_DISK`], so
/// a removal knows whether there is a disk to detach without asking the daemon (a container
/// without the label, made by an older server, is looked at as before).
pub const DISK_LABEL: &str = "sandboxd.disk";
pub const LOOP_DISK: &str = "loop";
pub const NO_LOOP_DISK: &str = "none";

impl DockerProvider {
    /// The loop disk's size for a create of `spec`, or `None` when it needs none (no bound, or
    /// another way bounds it). A bound the server cannot enforce is refused here.
    pub(in crate::backends::docker) fn loop_disk_for(&self, spec: &SandboxSpec) -> Result<Option<u64>> {
        let create = &self.config.create;
        let Some(bytes) = argv::disk_bound_bytes(create, spec) else { return Ok(None) };
        match create.disk_bound {
            DiskBound::Loop => Ok(Some(bytes)),
            DiskBound::StorageOpt => Ok(None),
            DiskBound::Refuse => Err(ProviderError::FailedPrecondition(
                "spec.resources.disk_gib: this server cannot bound a sandbox's disk (docker.create.disk_bound is refuse); leave it unset".into(),
            )),
        }
    }

    /// Put the writable layer of the created (not started) container `name` on an ext4 file
    /// of `bytes`; idempotent (a layer already mounted is left as it is). Returns the file.
    pub(in crate::backends::docker) async fn attach_disk(
        &self,
        name: &str,
        bytes: u64,
    ) -> Result<(PathBuf, PathBuf)> {
        let facts = self.layer_facts(name).await?;
        let refuse = |why: String| {
            ProviderError::FailedPrecondition(format!(
                "spec.resources.disk_gib: cannot bound the disk ({why}); docker.create.disk_bound loop needs a local daemon whose storage driver has an upper dir (overlay2, fuse-overlayfs) and a root server: use disk_bound storage_opt where the driver takes --storage-opt size=, or refuse"
            ))
        };
        let Some(layer) = facts.layer_dir() else {
            return Err(refuse(format!("the storage driver {:?} names no upper dir", facts.driver)));
        };
        if !layer.is_dir() {
            return Err(refuse(format!("the layer {} is not visible to this server", layer.display())));
        }
        let id = facts.id.as_str();
        if !id.bytes().all(|b| b.is_ascii_hexdigit()) || id.is_empty() {
            return Err(ProviderError::Docker(format!("docker inspect of {name} gave no container id")));
        }
        let image = self.disks_dir.join(format!("{id}.img"));
        if super::loop_mount::is_mount_point(&layer) {
            return Ok((image, layer));
        }
        std::fs::create_dir_all(&self.disks_dir)?;
        // A formatted file from the stock when one is ready (`disk_stock.rs`), then one more
        // is made in the background.
        self.disk_stock.refill(bytes);
        if self.disk_stock.claim(bytes, &image) {
            match super::disk_stock::mount_over(&image, &layer).await {
                Ok(true) => return Ok((image, layer)),
                Ok(false) => {
                    tracing::debug!(sandbox_id = %name, "a layer the stock cannot carry: formatting")
                }
                Err(e) => {
                    tracing::warn!(sandbox_id = %name, error = %e, "a stock disk did not mount: formatting")
                }
            }
            let _ = std::fs::remove_file(&image);
        }
        let file = std::fs::File::create(&image)?;
        file.set_len(bytes).map_err(|e| {
            ProviderError::invalid(
                "spec.resources.disk_gib",
                format!("cannot make a {bytes}-byte disk file: {e}"),
            )
        })?;
        drop(file);
        let result = async {
            super::loop_mount::format(&image.to_string_lossy(), Some(&layer.to_string_lossy())).await?;
            super::loop_mount::mount_loop(&image, &layer).await
        }
        .await;
        if let Err(why) = result {
            let _ = std::fs::remove_file(&image);
            if why.contains("loop device") {
                return Err(ProviderError::FailedPrecondition(format!(
                    "spec.resources.disk_gib: no loop device for the disk bound ({why}); every sandbox with a disk bound holds one: raise the kernel's limit (the loop module's max_loop, /dev/loop-control reachable), or set docker.create.disk_bound storage_opt or refuse"
                )));
            }
            return Err(refuse(why));
        }
        Ok((image, layer))
    }

    /// The [`DISK_LABEL`] of a create with a loop disk of `disk` bytes (or none), when the
    /// server bounds disks with loop files; a create without one is noted as such.
    pub(in crate::backends::docker) fn disk_label(
        &self,
        name: &str,
        disk: Option<u64>,
    ) -> Option<(&'static str, String)> {
        if self.config.create.disk_bound != DiskBound::Loop {
            return None;
        }
        if disk.is_none() {
            self.note_no_disk(name);
        }
        Some((DISK_LABEL, if disk.is_some() { LOOP_DISK } else { NO_LOOP_DISK }.to_string()))
    }

    /// How many creates of this process took a formatted disk file from the stock.
    pub fn disk_stock_claims(&self) -> u64 {
        self.disk_stock.claims()
    }

    /// Sandbox `name` has no loop disk (its create said so, or its label).
    pub(in crate::backends::docker) fn note_no_disk(&self, name: &str) {
        self.records.update(name, |r| r.disk = DiskState::None);
    }

    /// What this process knows of `name`'s disk.
    pub(in crate::backends::docker) fn disk_of(&self, name: &str) -> DiskState {
        self.records.read(name, |r| r.disk.clone()).unwrap_or_default()
    }

    /// Lazily unmount the loop disk under `name`'s writable layer, if one is mounted there:
    /// the daemon's removal then deletes the layer beneath it, and the disk goes when the last
    /// user of it (a lost container's overlay) does. A sandbox known to have none (`disk`, or
    /// its [`DISK_LABEL`]) costs no `docker inspect`.
    pub(in crate::backends::docker) async fn detach_disk(&self, name: &str, disk: &DiskState) {
        if self.config.create.disk_bound != DiskBound::Loop {
            return;
        }
        let layer = match disk {
            DiskState::None => return,
            DiskState::Attached { layer, .. } => layer.clone(),
            DiskState::Unknown => match self.layer_facts(name).await.ok().and_then(|f| f.layer_dir()) {
                Some(layer) => layer,
                None => return,
            },
        };
        super::loop_mount::detach_layer(name, &layer).await;
    }

    /// Remember the disk file of sandbox `sandbox_id` (removed at its close).
    pub(in crate::backends::docker) fn note_disk(&self, sandbox_id: &str, (file, layer): (PathBuf, PathBuf)) {
        self.records.update(sandbox_id, |r| r.disk = DiskState::Attached { file, layer });
    }

    /// After a create failed: the disk file made for its container goes.
    pub(in crate::backends::docker) fn release_disk(&self, name: &str) {
        let disk = self.records.update(name, |r| std::mem::take(&mut r.disk));
        remove_disk_file(&disk);
    }

    /// The sweep's part: every [`PRUNE_EVERY`], remove disk files whose container no longer
    /// exists (a crash between a removal and its clean-up, a `docker rm` from outside). The
    /// files are listed before the containers, so a file of a create in progress (made after
    /// its container) is never taken for a leftover.
    pub(in crate::backends::docker) async fn prune_disks_due(&self) {
        if self.config.create.disk_bound == DiskBound::Loop {
            if let Some(gib) = self.config.create.default_disk_gib {
                self.disk_stock.refill(gib.saturating_mul(1 << 30));
            }
        }
        let now = crate::core::lease::now_ms();
        let last = self.disks_pruned_ms.load(Ordering::Relaxed);
        if now - last < PRUNE_EVERY.as_millis() as i64 {
            return;
        }
        self.disks_pruned_ms.store(now, Ordering::Relaxed);
        self.disk_stock.prune_abandoned();
        let Ok(entries) = std::fs::read_dir(&self.disks_dir) else { return };
        let files: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        if files.is_empty() {
            return;
        }
        let Ok(out) = self.control(argv::all_container_ids_args()).await else { return };
        let live: HashSet<String> = out.stdout_text().lines().map(|l| l.trim().to_string()).collect();
        for file in files {
            let id = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
            if file.extension().is_some_and(|e| e == "img") && !live.contains(id) {
                tracing::info!(file = %file.display(), "removing the disk file of a container that is gone");
                let _ = std::fs::remove_file(&file);
            }
        }
    }
}

/// Remove the disk file of a sandbox whose container is gone (its layer unmounted by Docker).
pub(in crate::backends::docker) fn remove_disk_file(disk: &DiskState) {
    if let DiskState::Attached { file, .. } = disk {
        if let Err(e) = std::fs::remove_file(file) {
            tracing::debug!(file = %file.display(), error = %e, "disk file already gone");
        }
    }
}
