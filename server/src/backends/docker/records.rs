//! One record per sandbox: everything this process keeps about a sandbox (its handle, its
//! container's id, its disk, what a reset restores, its terminal sessions, its usage counts,
//! whether it hibernates), in one map under one lock, so that one `take` lets go of all of it.
//! (These were eleven maps, each cleared in its own place; a sandbox removed behind the
//! server's back left entries in some of them.)

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use super::layers::Layers;
use crate::core::backend::TerminalSession;
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

impl SandboxRecord {
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
#[derive(Default)]
pub(super) struct Records {
    map: Mutex<HashMap<String, SandboxRecord>>,
}

impl Records {
    /// Read a part of `id`'s record (`None`: no record).
    pub(super) fn read<T>(&self, id: &str, f: impl FnOnce(&SandboxRecord) -> T) -> Option<T> {
        self.map.lock().ok()?.get(id).map(f)
    }

    /// Change `id`'s record (made if missing, dropped if left empty).
    pub(super) fn update<T: Default>(&self, id: &str, f: impl FnOnce(&mut SandboxRecord) -> T) -> T {
        let Ok(mut map) = self.map.lock() else { return T::default() };
        let record = map.entry(id.to_string()).or_default();
        let out = f(record);
        if record.is_empty() {
            map.remove(id);
        }
        out
    }

    /// Take `id`'s whole record (an empty one when there is none).
    pub(super) fn take(&self, id: &str) -> SandboxRecord {
        self.map.lock().ok().and_then(|mut m| m.remove(id)).unwrap_or_default()
    }

    /// The create's rename: what was kept under the creating name is the sandbox's now.
    pub(super) fn rename(&self, from: &str, to: &str) {
        if let Ok(mut map) = self.map.lock() {
            if let Some(record) = map.remove(from) {
                map.insert(to.to_string(), record);
            }
        }
    }

    /// Drop the terminal sessions that ended (and the records left empty by it).
    pub(super) fn drop_ended_terminals(&self) {
        if let Ok(mut map) = self.map.lock() {
            map.retain(|_, record| {
                record.terminals.retain(|s| !s.closed());
                !record.is_empty()
            });
        }
    }

    /// Ids whose record holds terminal sessions.
    pub(super) fn with_terminals(&self) -> Vec<String> {
        self.map
            .lock()
            .map(|m| m.iter().filter(|(_, r)| !r.terminals.is_empty()).map(|(id, _)| id.clone()).collect())
            .unwrap_or_default()
    }

    /// How many records there are, how many hold a handle, and the terminal sessions held.
    pub(super) fn sizes(&self) -> (usize, usize, usize, usize) {
        self.map.lock().map_or((0, 0, 0, 0), |m| {
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
        let taken = records.take("a");
        assert_eq!(taken.usage.processes_started(), 1);
        assert_eq!(records.sizes().0, 0);
        // Reading or clearing a part of a missing record makes none.
        assert!(records.read("b", |r| r.hibernated).is_none());
        records.update("b", |r| r.baseline = None);
        assert_eq!(records.sizes().0, 0);
    }

    #[test]
    fn the_rename_moves_the_whole_record() {
        let records = Records::default();
        records.update("creating-x", |r| r.disk = DiskState::None);
        records.rename("creating-x", "x");
        assert!(records.read("creating-x", |_| ()).is_none());
        assert_eq!(records.read("x", |r| r.disk.clone()), Some(DiskState::None));
    }
}
