//! Snapshot, fork, diff, pause and resume: branch a sandbox (best-of-N, tree search) and grade
//! it by what changed on disk.
//!
//! ```no_run
//! # async fn demo() -> sandboxd_client::Result<()> {
//! use sandboxd_client::{spec, Client, Sandbox};
//! let client = Client::connect("http://127.0.0.1:50051").await?;
//! let root = Sandbox::start(&client, spec("python:3.12-slim")).await?;
//! root.exec("echo state > /work/state").await?;
//! let fork = root.fork(4, Default::default()).await?;
//! for child in &fork.sandboxes {
//!     child.exec("echo try >> /work/state").await?;
//!     let changed = child.diff(Some("/work")).await?;
//!     println!("{}: {} paths changed", child.id(), changed.len());
//! }
//! # Ok(()) }
//! ```

use std::collections::HashMap;

use crate::client::Client;
use crate::error::{ClientError, Result};
use crate::proto;
use crate::sandbox::Sandbox;

/// A snapshot the server owns: what `Sandbox::snapshot` and `Client::list_snapshots` return.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Its id (`SandboxSpec.snapshot_id`, `Client::delete_snapshot`).
    pub snapshot_id: String,
    /// The sandbox it was taken from.
    pub source_sandbox_id: String,
    /// Its labels.
    pub labels: HashMap<String, String>,
    /// When it was taken, in milliseconds since the Unix epoch.
    pub created_at_unix_ms: i64,
    /// Its size on the daemon.
    pub size_bytes: u64,
    /// The OCI runtime of the sandbox it was taken from: a sandbox from it runs on it too.
    pub runtime: String,
    /// A live snapshot ([`Sandbox::checkpoint`]): a sandbox from it is restored with its
    /// processes and memory.
    pub live: bool,
}

/// What [`Sandbox::hibernate`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hibernated {
    /// Bytes of the checkpoint on disk.
    pub checkpoint_bytes: u64,
    /// The sandbox's memory use just before it slept, now freed.
    pub memory_freed_bytes: u64,
}

impl From<proto::SnapshotInfo> for Snapshot {
    fn from(s: proto::SnapshotInfo) -> Self {
        Snapshot {
            snapshot_id: s.snapshot_id,
            source_sandbox_id: s.source_sandbox_id,
            labels: s.labels,
            created_at_unix_ms: s.created_at_unix_ms,
            size_bytes: s.size_bytes,
            runtime: s.runtime,
            live: s.live,
        }
    }
}

/// The children of a fork and the snapshot they started from.
#[derive(Clone, Debug)]
pub struct Fork {
    /// The new sandboxes, each started from `snapshot_id`.
    pub sandboxes: Vec<Sandbox>,
    /// The snapshot (delete it once the children are closed, or let it expire).
    pub snapshot_id: String,
}

/// How a path changed, and one changed path of [`Sandbox::diff`]: the shared contract's.
pub use sandboxd_proto::contract::{DiffEntry, DiffKind};

/// A wire entry as a [`DiffEntry`]; one without a known kind is a protocol error.
fn diff_entry(e: proto::DiffEntry) -> Result<DiffEntry> {
    DiffEntry::try_from(e).map_err(|e| ClientError::Protocol(e.to_string()))
}

impl Sandbox {
    /// Commits the sandbox's filesystem to a snapshot (`Snapshot`); the sandbox is paused for
    /// the commit and resumed after, unless it was paused already.
    pub async fn snapshot(&self, labels: HashMap<String, String>) -> Result<Snapshot> {
        self.ensure_live()?;
        let req = proto::SnapshotRequest { sandbox_id: self.id().to_string(), labels };
        let resp = self.rpc().snapshot(req).await?.into_inner();
        resp.snapshot
            .map(Snapshot::from)
            .ok_or_else(|| ClientError::Protocol("SnapshotResponse without a snapshot".to_string()))
    }

    /// Starts `count` (1..=64) new sandboxes from one fresh snapshot of this one (`Fork`),
    /// all or nothing; `labels` are added to the children's.
    pub async fn fork(&self, count: u32, labels: HashMap<String, String>) -> Result<Fork> {
        self.ensure_live()?;
        let req =
            proto::ForkRequest { sandbox_id: self.id().to_string(), count, labels, ..Default::default() };
        self.forked(req).await
    }

    /// Starts `count` (1..=64) sandboxes restored from a live snapshot of this one (`Fork` with
    /// `live`): `snapshot_id`'s (one [`Sandbox::checkpoint`] made), else a fresh one; their
    /// processes go on from it, each with its own memory. Needs a runtime that can checkpoint
    /// (gVisor's runsc).
    pub async fn fork_live(
        &self,
        count: u32,
        labels: HashMap<String, String>,
        snapshot_id: Option<&str>,
    ) -> Result<Fork> {
        self.ensure_live()?;
        let req = proto::ForkRequest {
            sandbox_id: self.id().to_string(),
            count,
            labels,
            live: true,
            snapshot_id: snapshot_id.map(str::to_string),
        };
        self.forked(req).await
    }

    /// A live snapshot of the running sandbox (`Checkpoint`): its processes, memory and files of
    /// one moment. With `leave_running` (the server's default) the sandbox goes on; without,
    /// it is left stopped.
    pub async fn checkpoint(&self, labels: HashMap<String, String>, leave_running: bool) -> Result<Snapshot> {
        self.ensure_live()?;
        let req = proto::CheckpointRequest {
            sandbox_id: self.id().to_string(),
            labels,
            leave_running: Some(leave_running),
        };
        let resp = self.rpc().checkpoint(req).await?.into_inner();
        resp.snapshot
            .map(Snapshot::from)
            .ok_or_else(|| ClientError::Protocol("CheckpointResponse without a snapshot".to_string()))
    }

    /// Checkpoints the sandbox to disk and stops it (`Hibernate`): its memory is freed until
    /// [`Sandbox::resume`] wakes it.
    pub async fn hibernate(&self) -> Result<Hibernated> {
        self.ensure_live()?;
        let resp =
            self.rpc().hibernate(proto::HibernateRequest { sandbox_id: self.id().to_string() }).await?;
        let resp = resp.into_inner();
        Ok(Hibernated {
            checkpoint_bytes: resp.checkpoint_bytes,
            memory_freed_bytes: resp.memory_freed_bytes,
        })
    }

    async fn forked(&self, req: proto::ForkRequest) -> Result<Fork> {
        let resp = self.rpc().fork(req).await?.into_inner();
        let client = self.client();
        let sandboxes = resp
            .sandboxes
            .into_iter()
            .map(|reference| Sandbox::from_ref(client, reference, Some(resp.snapshot_id.clone()), None))
            .collect();
        Ok(Fork { sandboxes, snapshot_id: resp.snapshot_id })
    }

    /// The paths added, changed and deleted since the sandbox started (or since the snapshot
    /// it started from), only at or below `path_prefix` (absolute) when given (`Diff`).
    pub async fn diff(&self, path_prefix: Option<&str>) -> Result<Vec<DiffEntry>> {
        self.ensure_live()?;
        let req = proto::DiffRequest {
            sandbox_id: self.id().to_string(),
            path_prefix: path_prefix.map(str::to_string),
        };
        let mut stream = self.rpc().diff(req).await?.into_inner();
        let mut entries = Vec::new();
        while let Some(batch) = stream.message().await? {
            for entry in batch.entries {
                entries.push(diff_entry(entry)?);
            }
        }
        Ok(entries)
    }

    /// Freezes every process of the sandbox (`Pause`); exec and terminals are refused with
    /// FAILED_PRECONDITION until [`Sandbox::resume`]. Pausing a paused sandbox succeeds.
    pub async fn pause(&self) -> Result<()> {
        self.ensure_live()?;
        self.rpc().pause(proto::PauseRequest { sandbox_id: self.id().to_string() }).await?;
        Ok(())
    }

    /// Thaws a paused sandbox, or wakes a hibernated one (`Resume`); resuming a running sandbox
    /// succeeds.
    pub async fn resume(&self) -> Result<()> {
        self.ensure_live()?;
        self.rpc().resume(proto::ResumeRequest { sandbox_id: self.id().to_string() }).await?;
        Ok(())
    }

    /// Starts a sandbox from a snapshot: `spec.snapshot_id` is set, `spec.image` must be empty.
    pub async fn start_from_snapshot(
        client: &Client,
        snapshot_id: impl Into<String>,
        mut spec: proto::SandboxSpec,
    ) -> Result<Sandbox> {
        spec.snapshot_id = Some(snapshot_id.into());
        Sandbox::start(client, spec).await
    }
}

impl Client {
    /// The snapshots the server owns carrying every one of `labels`, oldest first.
    pub async fn list_snapshots(&self, labels: HashMap<String, String>) -> Result<Vec<Snapshot>> {
        let resp = self.raw().list_snapshots(proto::ListSnapshotsRequest { labels }).await?.into_inner();
        Ok(resp.snapshots.into_iter().map(Snapshot::from).collect())
    }

    /// Removes a snapshot; FAILED_PRECONDITION while a sandbox still runs from it, NOT_FOUND for
    /// an id the server does not own.
    pub async fn delete_snapshot(&self, snapshot_id: impl Into<String>) -> Result<()> {
        self.raw().delete_snapshot(proto::DeleteSnapshotRequest { snapshot_id: snapshot_id.into() }).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_kinds_map_and_unspecified_is_refused() {
        let e = proto::DiffEntry { path: "/a".into(), kind: proto::DiffKind::Deleted as i32 };
        assert_eq!(diff_entry(e).unwrap(), DiffEntry { path: "/a".into(), kind: DiffKind::Deleted });
        let bad = proto::DiffEntry { path: "/a".into(), kind: 0 };
        assert!(matches!(diff_entry(bad), Err(ClientError::Protocol(_))));
    }
}
