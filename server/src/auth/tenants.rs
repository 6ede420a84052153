//! Tenants (`server.auth.tenants_file`, YAML or JSON): each a name, the hex SHA-256 of the key
//! its clients present, and quotas (a quota left out is unlimited). The server keeps only the
//! digests; a presented key is hashed and compared with each in constant time. The operator
//! changes tenants and their limits without a restart (`reload`, on SIGHUP): a file with a bad
//! entry is refused naming the field, and the tenants in force stay as they were.

use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// A tenant's limits; `None` is unlimited.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quotas {
    /// Sandboxes at once.
    pub sandboxes: Option<u64>,
    /// Execs (unary and streamed) running at once.
    pub execs_in_flight: Option<u64>,
    /// CPUs reserved by its sandboxes (`resources.cpu`) together.
    pub cpus: Option<f64>,
    /// Memory reserved by its sandboxes (`resources.memory_mib`) together.
    pub memory_mib: Option<u64>,
    /// Creates (and forks) started in any 60 seconds.
    pub creates_per_minute: Option<u64>,
    /// Snapshots at once.
    pub snapshots: Option<u64>,
    /// Creates (and forks) per second, sustained: a token bucket refilled at this rate.
    pub creates_per_second: Option<f64>,
    /// The bucket's size (creates at once after a quiet spell); default: one second's worth,
    /// at least one.
    pub creates_burst: Option<u64>,
    /// Sandbox-seconds (its sandboxes' wall time, from their usage receipts) per budget period.
    pub sandbox_seconds_per_period: Option<f64>,
    /// CPU-seconds (its sandboxes' CPU time, from their usage receipts) per budget period.
    pub cpu_seconds_per_period: Option<f64>,
    /// The budget period in seconds, periods aligned to the Unix epoch; default one hour.
    pub period_s: Option<f64>,
}

/// The budget period when a tenant names none: one hour.
pub const DEFAULT_PERIOD_S: f64 = 3600.0;

impl Quotas {
    /// The budget period.
    pub fn period(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.period_s.unwrap_or(DEFAULT_PERIOD_S))
    }

    /// Every limit in range, or the first one that is not, named (`quotas.<field>`).
    fn check(&self) -> Result<(), String> {
        let positive = |name: &str, v: Option<f64>| match v {
            Some(x) if !(x.is_finite() && x > 0.0) => Err(format!("quotas.{name}: a number > 0 (got {x})")),
            _ => Ok(()),
        };
        if matches!(self.cpus, Some(c) if !(c.is_finite() && c >= 0.0)) {
            return Err("quotas.cpus: a number >= 0".into());
        }
        positive("creates_per_second", self.creates_per_second)?;
        positive("sandbox_seconds_per_period", self.sandbox_seconds_per_period)?;
        positive("cpu_seconds_per_period", self.cpu_seconds_per_period)?;
        positive("period_s", self.period_s)?;
        if matches!(self.period_s, Some(p) if p > crate::config::MAX_CLIENT_SECONDS) {
            return Err(format!("quotas.period_s: at most {} seconds", crate::config::MAX_CLIENT_SECONDS));
        }
        if self.creates_burst == Some(0) {
            return Err("quotas.creates_burst: a number >= 1 (got 0)".into());
        }
        if self.creates_burst.is_some() && self.creates_per_second.is_none() {
            return Err(
                "quotas.creates_burst: needs quotas.creates_per_second (the bucket's refill rate)".into()
            );
        }
        Ok(())
    }

    /// The token bucket's size.
    pub fn creates_burst(&self) -> f64 {
        match (self.creates_burst, self.creates_per_second) {
            (Some(b), _) => b as f64,
            (None, Some(rate)) => rate.ceil().max(1.0),
            (None, None) => 0.0,
        }
    }
}

/// One tenant.
#[derive(Debug, Clone, PartialEq)]
pub struct Tenant {
    pub name: String,
    pub quotas: Quotas,
    /// The OCI runtime every sandbox (and pool) of this tenant runs on (`runtime: runsc`):
    /// a create asking for another is PERMISSION_DENIED; `None`: any the server offers.
    pub runtime: Option<String>,
    digest: [u8; 32],
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEntry {
    name: String,
    key_sha256: String,
    #[serde(default)]
    quotas: Quotas,
    #[serde(default)]
    runtime: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    tenants: Vec<FileEntry>,
}

/// All tenants of the server (replaced whole by `reload`).
#[derive(Debug)]
pub struct Tenants {
    tenants: std::sync::RwLock<Vec<Arc<Tenant>>>,
}

impl Tenants {
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The tenants of `path` from now on (a call in flight keeps the tenant it started with);
    /// on any error nothing changes and the error names the file and the field.
    pub fn reload(&self, path: &Path) -> Result<usize, String> {
        let fresh = Self::load(path)?;
        let fresh = fresh.tenants.into_inner().unwrap_or_else(|p| p.into_inner());
        let count = fresh.len();
        *self.tenants.write().unwrap_or_else(|p| p.into_inner()) = fresh;
        Ok(count)
    }

    /// YAML (JSON is YAML): `tenants: [{name, key_sha256, quotas: {...}, runtime}]`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let de = serde_yaml::Deserializer::from_str(text);
        let file: File = serde_path_to_error::deserialize(de).map_err(|e| {
            let at = e.path().to_string();
            format!("{at}: {}", e.into_inner())
        })?;
        let mut tenants: Vec<Arc<Tenant>> = Vec::new();
        for (i, entry) in file.tenants.into_iter().enumerate() {
            let name_ok = !entry.name.is_empty()
                && entry.name.len() <= 63
                && entry
                    .name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
            if !name_ok {
                return Err(format!(
                    "tenants[{i}].name {:?}: 1 to 63 lower-case letters, digits, '-' or '_'",
                    entry.name
                ));
            }
            let digest = parse_digest(&entry.key_sha256)
                .ok_or_else(|| format!("tenants[{i}].key_sha256: 64 hex digits (the SHA-256 of the key)"))?;
            if tenants.iter().any(|t| t.name == entry.name) {
                return Err(format!("tenants[{i}].name {:?} appears twice", entry.name));
            }
            if tenants.iter().any(|t| t.digest == digest) {
                return Err(format!("tenants[{i}].key_sha256 is another tenant's key"));
            }
            entry.quotas.check().map_err(|e| format!("tenants[{i}].{e}"))?;
            if let Some(runtime) = entry.runtime.as_deref().filter(|r| !crate::config::is_runtime_name(r)) {
                return Err(format!(
                    "tenants[{i}].runtime {runtime:?}: a runtime name the server offers (docker.runtimes, for example runsc)"
                ));
            }
            tenants.push(Arc::new(Tenant {
                name: entry.name,
                quotas: entry.quotas,
                runtime: entry.runtime,
                digest,
            }));
        }
        Ok(Self { tenants: std::sync::RwLock::new(tenants) })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<Tenant>>> {
        self.tenants.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The tenant whose key is `key` (every digest compared, in constant time each).
    pub fn by_key(&self, key: &str) -> Option<Arc<Tenant>> {
        let digest: [u8; 32] = Sha256::digest(key.as_bytes()).into();
        let mut found = None;
        for t in self.read().iter() {
            if bool::from(t.digest.ct_eq(&digest)) {
                found = Some(t.clone());
            }
        }
        found
    }

    pub fn by_name(&self, name: &str) -> Option<Arc<Tenant>> {
        self.read().iter().find(|t| t.name == name).cloned()
    }

    pub fn all(&self) -> Vec<Arc<Tenant>> {
        self.read().clone()
    }
}

fn parse_digest(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim();
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// The hex SHA-256 of a key, as the tenants file stores it.
pub fn key_sha256(key: &str) -> String {
    Sha256::digest(key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_by_digest_and_bad_entries_name_their_field() {
        let yaml = format!(
            "tenants:\n- name: red\n  key_sha256: {}\n  quotas: {{sandboxes: 2}}\n- name: blue\n  key_sha256: {}\n",
            key_sha256("red-key"),
            key_sha256("blue-key")
        );
        let tenants = Tenants::parse(&yaml).unwrap();
        assert_eq!(tenants.by_key("red-key").unwrap().name, "red");
        assert_eq!(tenants.by_key("red-key").unwrap().quotas.sandboxes, Some(2));
        assert_eq!(tenants.by_key("blue-key").unwrap().quotas, Quotas::default());
        assert!(tenants.by_key("nope").is_none());
        let bad = Tenants::parse("tenants: [{name: Red, key_sha256: x}]").unwrap_err();
        assert!(bad.contains("tenants[0].name"), "{bad}");
        let bad = Tenants::parse("tenants: [{name: red, key_sha256: abc}]").unwrap_err();
        assert!(bad.contains("key_sha256"), "{bad}");
        let bad = Tenants::parse(&format!(
            "{{\"tenants\": [{{\"name\": \"r\", \"key_sha256\": \"{}\", \"quotas\": {{\"sandbox\": 1}}}}]}}",
            key_sha256("k")
        ))
        .unwrap_err();
        assert!(bad.contains("quotas") && bad.contains("sandbox"), "{bad}");
    }

    #[test]
    fn budgets_out_of_range_are_refused_naming_the_field_and_a_reload_keeps_the_old_on_error() {
        let entry = |quotas: &str| {
            format!("tenants:\n- name: red\n  key_sha256: {}\n  quotas: {quotas}\n", key_sha256("k"))
        };
        for (quotas, field) in [
            ("{creates_per_second: 0}", "tenants[0].quotas.creates_per_second"),
            ("{creates_per_second: -1}", "tenants[0].quotas.creates_per_second"),
            ("{creates_per_second: 2, creates_burst: 0}", "tenants[0].quotas.creates_burst"),
            ("{creates_burst: 3}", "tenants[0].quotas.creates_burst"),
            ("{sandbox_seconds_per_period: 0}", "tenants[0].quotas.sandbox_seconds_per_period"),
            ("{cpu_seconds_per_period: .nan}", "tenants[0].quotas.cpu_seconds_per_period"),
            ("{period_s: 0}", "tenants[0].quotas.period_s"),
        ] {
            let err = Tenants::parse(&entry(quotas)).unwrap_err();
            assert!(err.contains(field), "{quotas}: {err}");
        }
        let good = Tenants::parse(&entry("{creates_per_second: 2.5}")).unwrap();
        let quotas = &good.by_name("red").unwrap().quotas;
        assert_eq!((quotas.creates_burst(), quotas.period().as_secs()), (3.0, 3600));

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tenants.yaml");
        std::fs::write(&path, entry("{creates_per_second: 5}")).unwrap();
        assert_eq!(good.reload(&path), Ok(1));
        assert_eq!(good.by_name("red").unwrap().quotas.creates_per_second, Some(5.0));
        std::fs::write(&path, entry("{creates_per_second: 0}")).unwrap();
        let err = good.reload(&path).unwrap_err();
        assert!(err.contains("quotas.creates_per_second") && err.contains("tenants.yaml"), "{err}");
        assert_eq!(good.by_name("red").unwrap().quotas.creates_per_second, Some(5.0), "unchanged");
    }

    #[test]
    fn a_tenant_may_be_bound_to_a_runtime_by_a_well_formed_name() {
        let yaml = format!("tenants:\n- name: red\n  key_sha256: {}\n  runtime: runsc\n", key_sha256("k"));
        let tenants = Tenants::parse(&yaml).unwrap();
        assert_eq!(tenants.by_name("red").unwrap().runtime.as_deref(), Some("runsc"));
        let bad = format!(
            "tenants:\n- name: red\n  key_sha256: {}\n  runtime: \"--privileged\"\n",
            key_sha256("k")
        );
        let err = Tenants::parse(&bad).unwrap_err();
        assert!(err.contains("tenants[0].runtime"), "{err}");
    }
}
