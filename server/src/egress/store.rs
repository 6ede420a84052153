//! Each sandbox's current policy, one JSON file per sandbox in `<state_dir>/network-policies/`
//! (written atomically and synced), so a restarted server (or a replica sharing the state
//! directory) keeps refreshing its domains and knows what a fork inherits. The rules themselves
//! live in the sandbox's network namespace and need no file to survive a restart.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::NetworkPolicy;

#[derive(Debug, Clone)]
pub struct PolicyStore {
    dir: PathBuf,
}

impl PolicyStore {
    /// `<state_dir>/network-policies`, made on the first write.
    pub fn open(state_dir: &Path) -> Self {
        Self { dir: state_dir.join("network-policies") }
    }

    /// The policy of `sandbox_id` (an id checked by shape), if one was recorded.
    pub fn get(&self, sandbox_id: &str) -> Option<NetworkPolicy> {
        let text = std::fs::read(self.dir.join(format!("{sandbox_id}.json"))).ok()?;
        serde_json::from_slice(&text).ok()
    }

    pub fn set(&self, sandbox_id: &str, policy: &NetworkPolicy) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let mut tmp = tempfile::NamedTempFile::new_in(&self.dir)?;
        tmp.write_all(&serde_json::to_vec(policy).map_err(std::io::Error::other)?)?;
        tmp.as_file().sync_all()?;
        tmp.persist(self.dir.join(format!("{sandbox_id}.json"))).map_err(|e| e.error)?;
        Ok(())
    }

    pub fn remove(&self, sandbox_id: &str) {
        let _ = std::fs::remove_file(self.dir.join(format!("{sandbox_id}.json")));
    }

    /// Every recorded sandbox id.
    pub fn ids(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter_map(|name| name.strip_suffix(".json").map(String::from))
            .filter(|id| crate::core::spec::SandboxId::has_valid_shape(id))
            .collect()
    }
}
