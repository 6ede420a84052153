//! Operations on a sandbox, one file each: create, exec, files, fs, transfers, logs, processes,
//! sessions, stats and usage, status, lookup, close and its removal records, the sweep's listing
//! (`owned`), `List` (`inventory`), pause and resume, the health ping and NeMo Gym's Compose helpers.

// The Docker backend's own modules, as `super::x` reaches them from the files here.
pub(in crate::backends::docker) use super::*;

pub mod closing;
pub(super) mod compose;
pub(super) mod create;
pub(super) mod exec;
pub(crate) mod files;
pub(super) mod fs;
pub(super) mod held_files;
pub(super) mod inventory;
pub(super) mod logs;
pub(super) mod lookup;
pub(super) mod owned;
pub(super) mod pause;
pub(super) mod ping;
pub(super) mod processes;
pub(super) mod removal_state;
pub mod sessions;
pub(super) mod stats;
pub(super) mod status;
pub mod tarstream;
pub(super) mod transfer;
pub(super) mod usage;
