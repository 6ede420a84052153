//! The Docker provider: sandboxes as detached containers driven through the docker CLI.
//!
//! `cli` starts docker subprocesses, `argv` builds their command lines, `classify` reads the
//! client's stderr, `tarstream` frames file transfers. `provider` holds `DockerProvider` (lookup,
//! exec, status, endpoint, close); its other operations live beside it: `create` (run,
//! reconciliation, probe), `files` (upload, download), `sessions` (`create_pty`), and branching:
//! `snapshot` (commit, list, delete, expiry), `fork`, `diff`, `pause` (pause, resume).

pub mod argv;
pub mod classify;
pub mod cli;
mod create;
mod diff;
mod files;
mod fork;
pub mod mask;
mod pause;
pub mod provider;
pub mod sessions;
mod snapshot;
pub mod tarstream;

pub use diff::{DiffEntry, DiffKind};
pub use files::Download;
pub use fork::{Forked, MAX_FORK_COUNT};
pub use provider::{DockerProvider, ExecParams, SandboxDescriptor, SandboxHandle};
pub use sessions::PtySpec;
pub use snapshot::{expire_snapshots_periodically, SnapshotInfo};
