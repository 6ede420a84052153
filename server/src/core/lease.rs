//! Leases: when the server removes a sandbox.
//!
//! A sandbox's first lease is a container label set at `docker run` (`sandboxd.expires_ms`), so
//! any server on the daemon enforces it, whatever the entrypoint. Labels cannot change after
//! create, so a lease moved by `SetTimeout` is kept as one small file per sandbox in the
//! server's state directory (`<state_dir>/leases/<sandbox_id>`, the end in ms since the epoch):
//! a restarted server, or another replica on the same host sharing that directory, finds it.
//! The file wins over the label.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::config::ServerSection;

/// Milliseconds since the Unix epoch when the container was created.
pub const CREATED_LABEL: &str = "sandboxd.created_ms";
/// End of the lease set at create, in ms since the epoch; absent: no lease.
pub const EXPIRES_LABEL: &str = "sandboxd.expires_ms";
/// A create not finished by then never will be: the sweep may remove its container.
pub const CREATE_DEADLINE_LABEL: &str = "sandboxd.create_deadline_ms";

/// Now, in milliseconds since the Unix epoch.
/// A lease's length in seconds, from a sandbox's lease labels (`None` without a lease): what a
/// fork's children get, as long as their source's was at its create.
pub fn length_s(labels: &std::collections::BTreeMap<String, String>) -> Option<f64> {
    let ms = |label: &str| labels.get(label).and_then(|v| v.parse::<i64>().ok());
    let length = ms(EXPIRES_LABEL)? - ms(CREATED_LABEL)?;
    (length > 0).then(|| length as f64 / 1000.0)
}

pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// `now_ms + d`, saturating.
pub fn after_ms(now_ms: i64, d: Duration) -> i64 {
    now_ms.saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The operator's lease policy: a cap and a default.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LeasePolicy {
    pub max_ttl: Option<Duration>,
    pub default_ttl: Option<Duration>,
}

impl LeasePolicy {
    pub fn from_config(server: &ServerSection) -> Self {
        Self { max_ttl: server.max_ttl, default_ttl: server.default_ttl }
    }

    /// The lease a sandbox gets: the one asked for, else the default, capped by the maximum.
    pub fn ttl(&self, requested: Option<Duration>) -> Option<Duration> {
        let ttl = requested.or(self.default_ttl);
        match (ttl, self.max_ttl) {
            (Some(t), Some(max)) => Some(t.min(max)),
            (None, Some(max)) => Some(max),
            (t, None) => t,
        }
    }
}

/// Leases moved after create, one file per sandbox.
#[derive(Debug, Clone)]
pub struct LeaseStore {
    dir: PathBuf,
}

impl LeaseStore {
    /// Open (creating, owner-only) `<state_dir>/leases`.
    pub fn open(state_dir: &Path) -> std::io::Result<Self> {
        let dir = state_dir.join("leases");
        std::fs::create_dir_all(&dir)?;
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(state_dir, std::fs::Permissions::from_mode(0o700));
        Ok(Self { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The moved lease of `sandbox_id`, if any. The id was checked by shape by the caller.
    pub fn get(&self, sandbox_id: &str) -> Option<i64> {
        std::fs::read_to_string(self.dir.join(sandbox_id)).ok()?.trim().parse().ok()
    }

    /// Record a new end, atomically (temp file then rename), durable before it returns.
    pub fn set(&self, sandbox_id: &str, expires_ms: i64) -> std::io::Result<()> {
        let mut tmp = tempfile::NamedTempFile::new_in(&self.dir)?;
        tmp.write_all(expires_ms.to_string().as_bytes())?;
        tmp.as_file().sync_all()?;
        tmp.persist(self.dir.join(sandbox_id)).map_err(|e| e.error)?;
        Ok(())
    }

    /// Forget a sandbox's moved lease (it was removed).
    pub fn remove(&self, sandbox_id: &str) {
        let _ = std::fs::remove_file(self.dir.join(sandbox_id));
    }

    /// Ids with a moved lease whose file is older than `age` (pruning candidates: a file for
    /// a sandbox created since the last listing is young).
    pub fn ids_older_than(&self, age: Duration) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        entries
            .filter_map(|e| e.ok())
            .filter(|e| {
                e.metadata()
                    .ok()
                    .and_then(|m| m.modified().ok())
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|elapsed| elapsed >= age)
            })
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|name| !name.starts_with('.'))
            .collect()
    }
}

/// What the sweep reports, where the expiry rule lives (the names kept here for callers).
pub use crate::core::expiry::{SweepReason, SweepReport};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_caps_and_defaults() {
        let s = Duration::from_secs;
        let none = LeasePolicy::default();
        assert_eq!(none.ttl(None), None);
        assert_eq!(none.ttl(Some(s(5))), Some(s(5)));
        let p = LeasePolicy { max_ttl: Some(s(60)), default_ttl: Some(s(30)) };
        assert_eq!(p.ttl(None), Some(s(30)));
        assert_eq!(p.ttl(Some(s(10))), Some(s(10)));
        assert_eq!(p.ttl(Some(s(600))), Some(s(60)));
        let capped = LeasePolicy { max_ttl: Some(s(60)), default_ttl: None };
        assert_eq!(capped.ttl(None), Some(s(60)), "a cap bounds sandboxes created without ttl too");
    }

    #[test]
    fn store_round_trips_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let store = LeaseStore::open(dir.path()).unwrap();
        assert_eq!(store.get("sandboxd-x"), None);
        store.set("sandboxd-x", 1234).unwrap();
        store.set("sandboxd-x", 5678).unwrap();
        let reopened = LeaseStore::open(dir.path()).unwrap();
        assert_eq!(reopened.get("sandboxd-x"), Some(5678));
        assert_eq!(reopened.ids_older_than(Duration::ZERO), vec!["sandboxd-x".to_string()]);
        assert!(reopened.ids_older_than(Duration::from_secs(3600)).is_empty());
        reopened.remove("sandboxd-x");
        assert_eq!(store.get("sandboxd-x"), None);
    }
}
