//! The service's own label keys, and `spec.metadata` as container labels (already checked by `crate::core::metadata`): stored under a
//! prefix of their own (so a caller can never set or fake the service's own labels), and read
//! back from `docker inspect`.

use std::collections::BTreeMap;

/// The label the Docker engine puts on a Swarm task's container: the service it belongs to.
/// Docker's event reader needs it (a task's container is its service's sandbox), so it lives on
/// this side of the seam; `backends/swarm` uses it from here, never the reverse.
pub const SERVICE_NAME_LABEL: &str = "com.docker.swarm.service.name";

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
/// `1` on a live snapshot (`Checkpoint`): its checkpoint lies beside it
/// (`<data root>/sandboxd-checkpoints/<hex>`), and a sandbox from it is restored.
pub const SNAPSHOT_LIVE_LABEL: &str = "sandboxd.snapshot.live";

/// The warm pool a sandbox was started for, ahead of a claim (`crate::core::pools`).
pub const POOL_LABEL: &str = "sandboxd.pool";

/// Which server (state directory) started a pool's sandbox: its start-up cleanup removes only
/// its own unclaimed ones.
pub const POOL_OWNER_LABEL: &str = "sandboxd.pool.owner";

/// The OCI runtime a sandbox runs on, by the name the server offers (`docker.runtimes`): what
/// `List`, `Status`, `Watch` and the metrics show; a snapshot image keeps its sandbox's.
pub const OCI_RUNTIME_LABEL: &str = "sandboxd.oci_runtime";

/// Prefix of every label that carries a `spec.metadata` entry.
pub const METADATA_LABEL_PREFIX: &str = "sandboxd.meta.";

/// The metadata entries among a container's labels, prefix removed.
pub fn metadata_from_labels(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    labels
        .iter()
        .filter_map(|(k, v)| k.strip_prefix(METADATA_LABEL_PREFIX).map(|k| (k.to_string(), v.clone())))
        .collect()
}

/// The flags these labels are set and filtered with, under their old names (the command lines
/// are built in `argv/labels.rs`).
pub use super::argv::{
    metadata_filter_args as filter_args, metadata_label_args as run_args, pool_label_args as pool_run_args,
    tenant_filter_args,
};

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn round_trip_through_labels() {
        let meta = map(&[("run", "r1"), ("team", "a=b")]);
        assert_eq!(
            super::super::argv::metadata_label_args(&meta),
            ["--label", "sandboxd.meta.run=r1", "--label", "sandboxd.meta.team=a=b"]
        );
        assert_eq!(
            super::super::argv::metadata_filter_args(&map(&[("run", "r1")])),
            ["--filter", "label=sandboxd.meta.run=r1"]
        );
        let mut labels = map(&[("sandboxd.sandbox", "1"), ("sandboxd.ports", "80")]);
        labels.insert("sandboxd.meta.run".into(), "r1".into());
        assert_eq!(metadata_from_labels(&labels), map(&[("run", "r1")]));
    }
}
