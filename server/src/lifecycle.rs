//! What this process owns across calls, above any one backend: the sandboxes it created (so
//! `--remove-on-shutdown` removes exactly those), the create that seeds `spec.files` and
//! removes a half-made sandbox, and the order of shutdown.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use crate::backend::SandboxBackend;
use crate::branching::Forked;
use crate::error::Result;
use crate::spec::{SandboxHandle, SandboxId, SandboxSpec};

/// The backend plus this process's bookkeeping.
pub struct Lifecycle {
    backend: Arc<dyn SandboxBackend>,
    created: Mutex<HashSet<SandboxId>>,
}

impl Lifecycle {
    pub fn new(backend: Arc<dyn SandboxBackend>) -> Self {
        Self { backend, created: Mutex::default() }
    }

    pub fn backend(&self) -> &Arc<dyn SandboxBackend> {
        &self.backend
    }

    /// Create, then write `spec.files`; a sandbox whose files cannot be written is removed.
    pub async fn create(&self, spec: &SandboxSpec) -> Result<SandboxHandle> {
        let handle = self.backend.create(spec).await?;
        if let Err(e) = self.seed_files(&handle, spec).await {
            if let Err(close_error) = self.backend.close(&handle.id()).await {
                tracing::warn!(sandbox_id = %handle.sandbox_id, error = %close_error, "could not remove a sandbox whose files failed");
            }
            return Err(e);
        }
        self.lock_created().insert(handle.id());
        Ok(handle)
    }

    async fn seed_files(&self, handle: &SandboxHandle, spec: &SandboxSpec) -> Result<()> {
        for (path, content) in &spec.files {
            let source = Box::new(content.as_slice());
            self.backend.upload(handle, source, content.len() as u64, path, None).await?;
        }
        Ok(())
    }

    /// Fork through the backend; the children count as created by this process.
    pub async fn fork(
        &self,
        id: &SandboxId,
        count: u32,
        labels: &BTreeMap<String, String>,
        max_snapshots: usize,
    ) -> Result<Forked> {
        let forked = self.backend.fork(id, count, labels, max_snapshots).await?;
        self.lock_created().extend(forked.sandboxes.iter().map(SandboxHandle::id));
        Ok(forked)
    }

    /// Remove a sandbox (already gone is success) and forget that this process made it.
    pub async fn close(&self, id: &SandboxId) -> Result<()> {
        self.backend.close(id).await?;
        self.lock_created().remove(id);
        Ok(())
    }

    /// End terminal sessions and, when asked, remove the sandboxes this process created.
    pub async fn shutdown(&self, remove_created: bool) {
        self.backend.close_terminals().await;
        if remove_created {
            let ids: Vec<SandboxId> = self.lock_created().iter().cloned().collect();
            for id in ids {
                if let Err(e) = self.close(&id).await {
                    tracing::warn!(sandbox_id = %id, error = %e, "could not remove sandbox at shutdown");
                }
            }
        }
    }

    fn lock_created(&self) -> std::sync::MutexGuard<'_, HashSet<SandboxId>> {
        self.created.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
