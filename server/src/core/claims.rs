//! Claims of warm-pool sandboxes: what a `Create` set on a pool member when it was handed out.
//!
//! A pool member is started before anyone asks for it, so the caller's `env`, `metadata` and
//! tenant cannot be container settings (labels and the container's env are fixed at
//! `docker run`). They are kept here, one small JSON file per claimed sandbox in
//! `<state_dir>/claims/<sandbox_id>` (written atomically), and held in memory: `List`, `Status`,
//! authorization and every exec read them from here. A pool member without a claim is
//! unclaimed: never listed, and removed by its server's next start.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

/// What one claim set on its sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    /// The pool it came from.
    pub pool: String,
    /// The tenant that claimed it (`None`: the operator).
    pub tenant: Option<String>,
    /// Added under every exec's and terminal's own env (the call's env wins).
    pub env: BTreeMap<String, String>,
    /// The sandbox's metadata from the claim on (the container's labels are the template's).
    pub metadata: BTreeMap<String, String>,
    /// When it was claimed, in ms since the Unix epoch (its `created_at` from then on).
    pub claimed_ms: i64,
}

impl Claim {
    /// The id every token of this claim carries in its chain (`Tokens::claims`' `chain`): its
    /// revocation ends them all when the sandbox goes back to its pool.
    pub fn token_id(&self, sandbox_id: &str) -> String {
        let id: String = sandbox_id.chars().filter(char::is_ascii_alphanumeric).collect();
        format!("claim{}{id}", self.claimed_ms)
    }
}

/// The claims of this server's state directory, in memory and on disk.
#[derive(Debug, Clone)]
pub struct ClaimStore {
    dir: Option<PathBuf>,
    claims: Arc<RwLock<BTreeMap<String, Claim>>>,
}

impl Default for ClaimStore {
    /// In memory only (tests, a backend without a state directory).
    fn default() -> Self {
        Self { dir: None, claims: Arc::default() }
    }
}

impl ClaimStore {
    /// Open (creating) `<state_dir>/claims` and read every claim in it; an unreadable file is
    /// skipped with a warning (its sandbox then counts as unclaimed).
    pub fn open(state_dir: &Path) -> std::io::Result<Self> {
        let dir = state_dir.join("claims");
        std::fs::create_dir_all(&dir)?;
        let mut claims = BTreeMap::new();
        for entry in std::fs::read_dir(&dir)?.filter_map(|e| e.ok()) {
            let Ok(name) = entry.file_name().into_string() else { continue };
            if !crate::core::spec::SandboxId::has_valid_shape(&name) {
                continue;
            }
            match std::fs::read(entry.path()).map(|b| serde_json::from_slice::<Claim>(&b)) {
                Ok(Ok(claim)) => {
                    claims.insert(name, claim);
                }
                _ => tracing::warn!(file = %entry.path().display(), "unreadable claim record skipped"),
            }
        }
        Ok(Self { dir: Some(dir), claims: Arc::new(RwLock::new(claims)) })
    }

    /// The claim of `sandbox_id`, if it is a claimed pool member.
    pub fn get(&self, sandbox_id: &str) -> Option<Claim> {
        self.read().get(sandbox_id).cloned()
    }

    /// Record a claim (atomically: temp file then rename; not synced, a claim lost to a power
    /// cut leaves an unclaimed member the next start removes).
    pub fn set(&self, sandbox_id: &str, claim: Claim) -> std::io::Result<()> {
        if let Some(dir) = &self.dir {
            let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
            tmp.write_all(&serde_json::to_vec(&claim).map_err(std::io::Error::other)?)?;
            tmp.persist(dir.join(sandbox_id)).map_err(|e| e.error)?;
        }
        self.write().insert(sandbox_id.to_string(), claim);
        Ok(())
    }

    /// Forget a claim (its sandbox was removed).
    pub fn remove(&self, sandbox_id: &str) {
        if self.write().remove(sandbox_id).is_some() {
            if let Some(dir) = &self.dir {
                let _ = std::fs::remove_file(dir.join(sandbox_id));
            }
        }
    }

    /// Every claim, as `List` overlays them.
    pub fn snapshot(&self) -> BTreeMap<String, Claim> {
        self.read().clone()
    }

    /// How many live claims came from `pool` of `tenant`.
    pub fn count(&self, tenant: Option<&str>, pool: &str) -> usize {
        self.read().values().filter(|c| c.pool == pool && c.tenant.as_deref() == tenant).count()
    }

    /// Whether there is any claim at all (List skips its pool pass without).
    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Claim>> {
        self.claims.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Claim>> {
        self.claims.write().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_survive_a_reopen_and_removal_forgets_them() {
        let dir = tempfile::tempdir().unwrap();
        let id = crate::core::spec::SandboxId::generate();
        let store = ClaimStore::open(dir.path()).unwrap();
        let claim = Claim {
            pool: "p".into(),
            env: [("A".to_string(), "1".to_string())].into(),
            claimed_ms: 5,
            ..Claim::default()
        };
        store.set(id.as_str(), claim.clone()).unwrap();
        assert_eq!(store.count(None, "p"), 1);
        let again = ClaimStore::open(dir.path()).unwrap();
        assert_eq!(again.get(id.as_str()), Some(claim));
        again.remove(id.as_str());
        assert!(ClaimStore::open(dir.path()).unwrap().get(id.as_str()).is_none());
    }
}
