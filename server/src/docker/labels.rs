//! The service's own label keys, and `spec.metadata` as container labels (already checked by `crate::metadata`): stored under a
//! prefix of their own (so a caller can never set or fake the service's own labels), and read
//! back from `docker inspect`.

use std::collections::BTreeMap;

/// Ownership label: only containers carrying it are ever reused, connected to or driven.
pub const SANDBOX_LABEL: &str = "sandboxd.sandbox";

/// Declared ports, kept on the container so a restarted server still knows them.
pub const PORTS_LABEL: &str = "sandboxd.ports";

/// Ownership label of snapshot images (containers carry `SANDBOX_LABEL` instead).
pub const SNAPSHOT_LABEL: &str = "sandboxd.snapshot";

/// The sandbox a snapshot was taken from.
pub const SNAPSHOT_SOURCE_LABEL: &str = "sandboxd.snapshot.source";

/// The caller's labels of a snapshot: base64url of their JSON object (no quoting to get wrong).
pub const SNAPSHOT_LABELS_LABEL: &str = "sandboxd.snapshot.labels";

/// When the snapshot was taken, in milliseconds since the Unix epoch.
pub const SNAPSHOT_CREATED_LABEL: &str = "sandboxd.snapshot.created_ms";

/// The warm pool a sandbox was started for, ahead of a claim (`crate::pools`).
pub const POOL_LABEL: &str = "sandboxd.pool";

/// Which server (state directory) started a pool's sandbox: its start-up cleanup removes only
/// its own unclaimed ones.
pub const POOL_OWNER_LABEL: &str = "sandboxd.pool.owner";

/// Prefix of every label that carries a `spec.metadata` entry.
pub const METADATA_LABEL_PREFIX: &str = "sandboxd.meta.";
/// `--label sandboxd.meta.KEY=VALUE` for each entry (validated first by the spec).
pub fn run_args(metadata: &BTreeMap<String, String>) -> Vec<String> {
    metadata
        .iter()
        .flat_map(|(k, v)| ["--label".to_string(), format!("{METADATA_LABEL_PREFIX}{k}={v}")])
        .collect()
}

/// `--filter label=sandboxd.tenant=NAME`: only that tenant's containers (ANDed with the rest).
pub fn tenant_filter_args(tenant: &str) -> Vec<String> {
    vec!["--filter".to_string(), format!("label={}={tenant}", crate::auth::TENANT_LABEL)]
}

/// `--label sandboxd.pool=NAME --label sandboxd.pool.owner=OWNER` for a pool's sandbox.
pub fn pool_run_args(member: Option<&crate::spec::PoolMember>) -> Vec<String> {
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
pub fn filter_args(labels: &BTreeMap<String, String>) -> Vec<String> {
    labels
        .iter()
        .flat_map(|(k, v)| ["--filter".to_string(), format!("label={METADATA_LABEL_PREFIX}{k}={v}")])
        .collect()
}

/// The metadata entries among a container's labels, prefix removed.
pub fn metadata_from_labels(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    labels
        .iter()
        .filter_map(|(k, v)| k.strip_prefix(METADATA_LABEL_PREFIX).map(|k| (k.to_string(), v.clone())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn round_trip_through_labels() {
        let meta = map(&[("run", "r1"), ("team", "a=b")]);
        assert_eq!(run_args(&meta), ["--label", "sandboxd.meta.run=r1", "--label", "sandboxd.meta.team=a=b"]);
        assert_eq!(filter_args(&map(&[("run", "r1")])), ["--filter", "label=sandboxd.meta.run=r1"]);
        let mut labels = map(&[("sandboxd.sandbox", "1"), ("sandboxd.ports", "80")]);
        labels.insert("sandboxd.meta.run".into(), "r1".into());
        assert_eq!(metadata_from_labels(&labels), map(&[("run", "r1")]));
    }
}
