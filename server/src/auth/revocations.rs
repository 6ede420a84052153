//! The revoked token ids, kept in `<state_dir>/revoked-tokens` (one JSON line each, appended
//! and synced before `Revoke` answers) so a restarted server still refuses them. The only
//! lookup a token's verification makes; entries past their token's expiry are dropped at load.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Entry {
    jti: String,
    /// The token's expiry (Unix seconds): past it the entry is no longer needed.
    exp: u64,
}

/// The set, in memory and on disk.
pub struct Revocations {
    path: PathBuf,
    revoked: RwLock<HashMap<String, u64>>,
    /// Serialises appends.
    file: std::sync::Mutex<()>,
}

impl Revocations {
    /// Reads the file under `state_dir` (missing: none revoked), keeping live entries only.
    pub fn open(state_dir: &Path) -> std::io::Result<Self> {
        let path = state_dir.join("revoked-tokens");
        let now = now_s();
        let mut revoked = HashMap::new();
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                for line in text.lines() {
                    if let Ok(e) = serde_json::from_str::<Entry>(line) {
                        if e.exp > now {
                            revoked.insert(e.jti, e.exp);
                        }
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let this = Self { path, revoked: RwLock::new(revoked), file: std::sync::Mutex::new(()) };
        this.rewrite()?;
        Ok(this)
    }

    pub fn is_revoked(&self, jti: &str) -> bool {
        self.revoked.read().map(|r| r.contains_key(jti)).unwrap_or(true)
    }

    /// Revokes `jti` until `exp`; on disk before it returns.
    pub fn revoke(&self, jti: &str, exp: u64) -> std::io::Result<()> {
        let _guard = self.file.lock().map_err(|_| std::io::Error::other("revocation lock poisoned"))?;
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&self.path)?;
        let line = serde_json::to_string(&Entry { jti: jti.into(), exp }).map_err(std::io::Error::other)?;
        file.write_all(format!("{line}\n").as_bytes())?;
        file.sync_all()?;
        if let Ok(mut r) = self.revoked.write() {
            r.insert(jti.into(), exp);
        }
        Ok(())
    }

    /// The file with only the live entries (at open: it never grows past what is revoked).
    fn rewrite(&self) -> std::io::Result<()> {
        let revoked = self.revoked.read().map_err(|_| std::io::Error::other("revocation lock poisoned"))?;
        let mut text = String::new();
        for (jti, exp) in revoked.iter() {
            text.push_str(
                &serde_json::to_string(&Entry { jti: jti.clone(), exp: *exp })
                    .map_err(std::io::Error::other)?,
            );
            text.push('\n');
        }
        let tmp = self.path.with_extension(format!("tmp-{}", uuid::Uuid::new_v4().simple()));
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &self.path)
    }
}

pub fn now_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_revocation_survives_reopening_and_an_expired_one_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let set = Revocations::open(dir.path()).unwrap();
        set.revoke("live", now_s() + 3600).unwrap();
        set.revoke("old", now_s().saturating_sub(1)).unwrap();
        assert!(set.is_revoked("live") && !set.is_revoked("other"));
        let again = Revocations::open(dir.path()).unwrap();
        assert!(again.is_revoked("live"));
        assert!(!again.is_revoked("old"));
    }
}
