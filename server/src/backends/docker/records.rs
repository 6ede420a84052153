//! One record per sandbox: everything this process keeps about a sandbox (its handle, its
//! container's id, its disk, what a reset restores, its terminal sessions, its usage counts,
//! whether it hibernates), in one map under one lock, so that one `take` lets go of all of it.
//! (These were eleven maps, each cleared in its own place; a sandbox removed behind the
//! server's back left entries in some of them.)

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use super::layers::Layers;
use crate::core::backend::TerminalSession;
use crate::core::record_map::{Record, RecordMap};
use crate::core::spec::{SandboxHandle, SandboxSpec};
use crate::core::usage::UsageCounts;

/// What this process knows of a sandbox's loop disk (`disk.rs`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) enum DiskState {
    /// Not known here: its container's label or layer says.
    #[default]
    Unknown,
    /// It has none (its create said so, or its label).
    None,
    /// The disk file and the layer directory it is mounted on.
    Attached { file: PathBuf, layer: PathBuf },
}

/// Everything kept about one sandbox. A record whose every part is empty is dropped.
#[derive(Default)]
pub(super) struct SandboxRecord {
    /// Its handle, cached while it runs (`lookup.rs`).
    pub(super) handle: Option<SandboxHandle>,
    /// Its container's full id and when this process started it: a close ends it from the
    /// host (`init_kill.rs`) and its usage is read without the daemon.
    pub(super) init: Option<(String, SystemTime)>,
    pub(super) disk: DiskState,
    /// What a reset restores beyond the image: the spec it was created from (`reset.rs`).
    pub(super) baseline: Option<Arc<SandboxSpec>>,
    /// Its layer directories, read at its first reset.
    pub(super) layers: Option<Layers>,
    /// This process hibernated it and has not woken it (`live.rs`).
    pub(super) hibernated: bool,
    /// Its terminal sessions this process holds streams of.
    pub(super) terminals: Vec<Arc<dyn TerminalSession>>,
    /// Processes started, OOM kills attributed (`usage.rs`).
    pub(super) usage: UsageCounts,
}

impl Record for SandboxRecord {
    fn is_empty(&self) -> bool {
        self.handle.is_none()
            && self.init.is_none()
            && self.disk == DiskState::Unknown
            && self.baseline.is_none()
            && self.layers.is_none()
            && !self.hibernated
            && self.terminals.is_empty()
            && self.usage == UsageCounts::default()
    }
}

/// The records of every sandbox this process knows, by sandbox id (or, during a create, by
/// the container's creating name until its rename).
pub(super) type Records = RecordMap<SandboxRecord>;

impl RecordMap<SandboxRecord> {
    /// Drop the terminal sessions that ended (and the records left empty by it).
    pub(super) fn drop_ended_terminals(&self) {
        self.update_all(|record| record.terminals.retain(|s| !s.closed()));
    }

    /// Ids whose record holds terminal sessions.
    pub(super) fn with_terminals(&self) -> Vec<String> {
        self.survey(|m| m.iter().filter(|(_, r)| !r.terminals.is_empty()).map(|(id, _)| id.clone()).collect())
    }

    /// How many records there are, how many hold a handle, and the terminal sessions held.
    pub(super) fn sizes(&self) -> (usize, usize, usize, usize) {
        self.survey(|m| {
            let handles = m.values().filter(|r| r.handle.is_some()).count();
            let with_terminals = m.values().filter(|r| !r.terminals.is_empty()).count();
            let terminals = m.values().map(|r| r.terminals.len()).sum();
            (m.len(), handles, with_terminals, terminals)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_left_empty_is_dropped() {
        let records = Records::default();
        records.update("a", |r| r.hibernated = true);
        records.update("a", |r| r.usage.started());
        assert_eq!(records.sizes().0, 1);
        records.update("a", |r| r.hibernated = false);
        assert_eq!(records.sizes().0, 1, "its usage counts are still kept");
        let taken = records.take("a").unwrap();
        assert_eq!(taken.usage.processes_started(), 1);
        assert_eq!(records.sizes().0, 0);
        // Reading or clearing a part of a missing record makes none.
        assert!(records.read("b", |r| r.hibernated).is_none());
        records.update("b", |r| r.baseline = None);
        assert_eq!(records.sizes().0, 0);
    }
}
