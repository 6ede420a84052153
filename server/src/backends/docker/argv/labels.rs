//! The label flags of `docker run` (a spec's metadata, a pool member's marks) and the label
//! filters of `docker ps` (metadata, tenant, a pool's members and this server's own).

use std::collections::BTreeMap;

use super::*;
use crate::backends::docker::labels::{METADATA_LABEL_PREFIX, POOL_LABEL, POOL_OWNER_LABEL};

/// `--label sandboxd.meta.KEY=VALUE` for each entry (validated first by the spec).
pub fn metadata_label_args(metadata: &BTreeMap<String, String>) -> Vec<String> {
    metadata
        .iter()
        .flat_map(|(k, v)| ["--label".to_string(), format!("{METADATA_LABEL_PREFIX}{k}={v}")])
        .collect()
}

/// `--label sandboxd.pool=NAME --label sandboxd.pool.owner=OWNER` for a pool's sandbox.
pub fn pool_label_args(member: Option<&crate::core::spec::PoolMember>) -> Vec<String> {
    member
        .map(|m| {
            vec![
                "--label".to_string(),
                format!("{POOL_LABEL}={}", m.pool),
                "--label".to_string(),
                format!("{POOL_OWNER_LABEL}={}", m.owner),
            ]
        })
        .unwrap_or_default()
}

/// `--filter label=sandboxd.meta.KEY=VALUE` for each entry: docker ANDs label filters.
pub fn metadata_filter_args(labels: &BTreeMap<String, String>) -> Vec<String> {
    labels
        .iter()
        .flat_map(|(k, v)| ["--filter".to_string(), format!("label={METADATA_LABEL_PREFIX}{k}={v}")])
        .collect()
}

/// `--filter label=sandboxd.tenant=NAME`: only that tenant's containers (ANDed with the rest).
pub fn tenant_filter_args(tenant: &str) -> Vec<String> {
    vec!["--filter".to_string(), format!("label={}={tenant}", crate::auth::TENANT_LABEL)]
}

/// The pools' start-up cleanup: this server's members (`owner`) of this deployment only (the
/// operator's own labels of `extra_run_args`).
pub fn pool_owner_filter_args(owner: &str, extra_run_args: &[String]) -> Vec<String> {
    let mut a = vec![s("--filter"), format!("label={POOL_OWNER_LABEL}={owner}")];
    for label in operator_labels(extra_run_args) {
        a.extend([s("--filter"), format!("label={label}")]);
    }
    a
}

/// Every pool member, claimed or not.
pub fn pool_member_filter_args() -> Vec<String> {
    vec![s("--filter"), format!("label={POOL_LABEL}")]
}
