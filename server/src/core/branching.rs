//! Neutral types of branching (snapshot, fork, diff), as they cross the `SandboxBackend` seam.

use std::collections::BTreeMap;

use crate::core::spec::SandboxHandle;

/// Most children one `Fork` may start.
pub const MAX_FORK_COUNT: u32 = 64;

/// Children of one `Fork` started at once (each a container made and started, restored or
/// placed by Swarm), on every backend.
pub const FORK_PARALLELISM: usize = 16;

/// A snapshot this service owns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// What `SandboxSpec::snapshot_id` and `delete_snapshot` take.
    pub snapshot_id: String,
    pub source_sandbox_id: String,
    pub labels: BTreeMap<String, String>,
    pub created_at_unix_ms: i64,
    pub size_bytes: u64,
    /// The OCI runtime of the sandbox it was taken from (`""`: not recorded).
    pub runtime: String,
    /// A live snapshot (`Checkpoint`): its processes and memory too, restored rather than booted.
    pub live: bool,
}

impl SnapshotInfo {
    /// It carries every `(key, value)` of `filter` (`ListSnapshots`' rule, on every backend).
    pub fn carries(&self, filter: &BTreeMap<String, String>) -> bool {
        filter.iter().all(|(k, v)| self.labels.get(k) == Some(v))
    }
}

impl From<SnapshotInfo> for sandboxd_proto::v1::SnapshotInfo {
    fn from(info: SnapshotInfo) -> Self {
        Self {
            snapshot_id: info.snapshot_id,
            source_sandbox_id: info.source_sandbox_id,
            labels: info.labels.into_iter().collect(),
            created_at_unix_ms: info.created_at_unix_ms,
            size_bytes: info.size_bytes,
            runtime: info.runtime,
            live: info.live,
        }
    }
}

/// A snapshot as another node of the cluster described it (`SandboxPeer.LocalSnapshots`).
impl From<sandboxd_proto::v1::SnapshotInfo> for SnapshotInfo {
    fn from(info: sandboxd_proto::v1::SnapshotInfo) -> Self {
        Self {
            snapshot_id: info.snapshot_id,
            source_sandbox_id: info.source_sandbox_id,
            labels: info.labels.into_iter().collect(),
            created_at_unix_ms: info.created_at_unix_ms,
            size_bytes: info.size_bytes,
            runtime: info.runtime,
            live: info.live,
        }
    }
}

/// What `Hibernate` did: the checkpoint on disk, the memory the sandbox held before it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hibernated {
    pub checkpoint_bytes: u64,
    pub memory_freed_bytes: u64,
}

/// The children of a fork and the snapshot they started from.
#[derive(Debug, Clone)]
pub struct Forked {
    pub snapshot: SnapshotInfo,
    pub sandboxes: Vec<SandboxHandle>,
    /// The children's lease: the source's length under the operator's policy (the
    /// `CreatePolicy` the fork was planned by); `Lifecycle::fork` starts it when the fork ends.
    pub ttl: Option<std::time::Duration>,
}

/// How a path changed, and one changed path: the shared contract's.
pub use sandboxd_proto::contract::{DiffEntry, DiffKind};
