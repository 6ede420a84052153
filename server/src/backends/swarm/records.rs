//! What cluster mode keeps in Swarm's replicated state for warm pools, and how it is named and
//! read back. A pool's definition is the Swarm config `sandboxd-pool-<key>`; a claim of a pool
//! member is the config `sandboxd-claim-<sandbox id>`. Swarm refuses a second config of one
//! name, so creating the claim is the compare-and-swap that hands a member to exactly one
//! caller, whichever node it called. Members are sandbox services labelled with their pool's key
//! (`sandboxd.pool.key`) and, once started and adopted, `sandboxd.pool.ready=<shell>`.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::Digest;

use crate::core::claims::Claim;
use crate::core::pools::{PoolKey, PoolSpec};
use crate::core::spec::SandboxSpec;

/// On a pool definition's config.
pub const POOL_DEF_LABEL: &str = "sandboxd.pool.def";
/// On a member's service and container, and on a claim's config: the pool's [`pool_key`].
pub const POOL_KEY_LABEL: &str = "sandboxd.pool.key";
/// On a member's service once it is started and adopted: the shell its owning node found.
pub const POOL_READY_LABEL: &str = "sandboxd.pool.ready";
/// On a claim's config.
pub const CLAIM_LABEL: &str = "sandboxd.claim";
/// On a claim's config: the sandbox it hands out.
pub const CLAIM_SANDBOX_LABEL: &str = "sandboxd.claim.sandbox";

const POOL_PREFIX: &str = "sandboxd-pool-";
const CLAIM_PREFIX: &str = "sandboxd-claim-";

/// A pool's key: the same for its owner (a tenant, or the operator) and name on every node,
/// and fit for a config name and a label value whatever the tenant's name holds.
pub fn pool_key(key: &PoolKey) -> String {
    let mut hash = sha2::Sha256::new();
    hash.update(key.0.as_deref().unwrap_or("").as_bytes());
    hash.update([0u8, u8::from(key.0.is_some())]);
    hash.update(key.1.as_bytes());
    hash.finalize().iter().take(12).map(|b| format!("{b:02x}")).collect()
}

/// The config of a pool's definition.
pub fn pool_config_name(key: &str) -> String {
    format!("{POOL_PREFIX}{key}")
}

/// The config of a member's claim.
pub fn claim_config_name(sandbox_id: &str) -> String {
    format!("{CLAIM_PREFIX}{sandbox_id}")
}

/// A pool's definition as kept in Swarm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolRecord {
    pub name: String,
    pub tenant: Option<String>,
    pub target: u32,
    pub max: u32,
    pub template: SandboxSpec,
    /// The template's files (skipped by the spec's own serialization), base64.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
}

impl PoolRecord {
    pub fn new(tenant: Option<String>, spec: &PoolSpec) -> Self {
        let b64 = base64::engine::general_purpose::STANDARD;
        Self {
            name: spec.name.clone(),
            tenant,
            target: spec.target,
            max: spec.max,
            template: spec.template.clone(),
            files: spec
                .template
                .files
                .iter()
                .map(|(path, content)| (path.clone(), b64.encode(content)))
                .collect(),
        }
    }

    /// The pool it defines, with its owner; `None` when the record does not read.
    pub fn read(data: &[u8]) -> Option<(PoolKey, PoolSpec)> {
        let record: PoolRecord = serde_json::from_slice(data).ok()?;
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut template = record.template;
        for (path, content) in record.files {
            template.files.insert(path, b64.decode(content).ok()?);
        }
        // Recycling is a single host's (the cluster's pools remove what is closed).
        let spec = PoolSpec {
            name: record.name.clone(),
            template,
            target: record.target,
            max: record.max,
            recycle: false,
        };
        Some(((record.tenant, record.name), spec))
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The config's labels.
    pub fn labels(key: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            (POOL_DEF_LABEL.to_string(), "1".to_string()),
            (POOL_KEY_LABEL.to_string(), key.to_string()),
        ])
    }
}

/// A claim's config: the claim as data, its pool, sandbox and lease end as labels (what the
/// sweep and the clean-up read without decoding it).
pub fn claim_config(
    sandbox_id: &str,
    key: &str,
    claim: &Claim,
    expires_ms: Option<i64>,
) -> (BTreeMap<String, String>, Vec<u8>) {
    let mut labels = BTreeMap::from([
        (CLAIM_LABEL.to_string(), "1".to_string()),
        (CLAIM_SANDBOX_LABEL.to_string(), sandbox_id.to_string()),
        (POOL_KEY_LABEL.to_string(), key.to_string()),
    ]);
    if let Some(at) = expires_ms {
        labels.insert(crate::core::lease::EXPIRES_LABEL.to_string(), at.to_string());
    }
    (labels, serde_json::to_vec(claim).unwrap_or_default())
}

/// A claim's data read back.
pub fn read_claim(data: &[u8]) -> Option<Claim> {
    serde_json::from_slice(data).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_names_fit_swarm_and_tell_owners_apart() {
        let operator = pool_key(&(None, "p".into()));
        let tenant = pool_key(&(Some("p".into()), String::new()));
        let other = pool_key(&(Some("red".into()), "p".into()));
        assert_eq!(operator.len(), 24);
        assert!(operator.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(operator, tenant);
        assert_ne!(operator, other);
        assert_eq!(operator, pool_key(&(None, "p".into())));
        let id = "sandboxd-0123456789abcdef0123456789abcdef";
        assert!(claim_config_name(id).len() <= 64, "Swarm's limit on a config name");
        assert!(pool_config_name(&operator).len() <= 64);
    }

    #[test]
    fn records_round_trip() {
        let mut template = SandboxSpec::new("sandboxd-test/busybox:1");
        template.env.insert("A".into(), "1".into());
        template.files.insert("/etc/motd".into(), vec![0, 1, 255]);
        let spec = PoolSpec { name: "p".into(), template, target: 2, max: 5, recycle: false };
        let record = PoolRecord::new(Some("red".into()), &spec);
        let (key, back) = PoolRecord::read(&record.to_bytes()).unwrap();
        assert_eq!(key, (Some("red".to_string()), "p".to_string()));
        assert_eq!(back, spec);
        assert!(PoolRecord::read(b"{}").is_none());

        let claim =
            Claim { pool: "p".into(), tenant: Some("red".into()), claimed_ms: 5, ..Default::default() };
        let (labels, data) = claim_config("sandboxd-x", "k", &claim, Some(9));
        assert_eq!(labels.get(crate::core::lease::EXPIRES_LABEL).map(String::as_str), Some("9"));
        assert_eq!(labels.get(CLAIM_SANDBOX_LABEL).map(String::as_str), Some("sandboxd-x"));
        assert_eq!(read_claim(&data), Some(claim));
    }
}
