//! Tenants (`server.auth.tenants_file`, YAML or JSON): each a name, the hex SHA-256 of the key
//! its clients present, and quotas (a quota left out is unlimited). The server keeps only the
//! digests; a presented key is hashed and compared with each in constant time.

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

/// All tenants of the server.
#[derive(Debug, Clone)]
pub struct Tenants {
    tenants: Vec<Arc<Tenant>>,
}

impl Tenants {
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
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
            if matches!(entry.quotas.cpus, Some(c) if !(c.is_finite() && c >= 0.0)) {
                return Err(format!("tenants[{i}].quotas.cpus: a number >= 0"));
            }
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
        Ok(Self { tenants })
    }

    /// The tenant whose key is `key` (every digest compared, in constant time each).
    pub fn by_key(&self, key: &str) -> Option<Arc<Tenant>> {
        let digest: [u8; 32] = Sha256::digest(key.as_bytes()).into();
        let mut found = None;
        for t in &self.tenants {
            if bool::from(t.digest.ct_eq(&digest)) {
                found = Some(t.clone());
            }
        }
        found
    }

    pub fn by_name(&self, name: &str) -> Option<&Arc<Tenant>> {
        self.tenants.iter().find(|t| t.name == name)
    }

    pub fn all(&self) -> &[Arc<Tenant>] {
        &self.tenants
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
