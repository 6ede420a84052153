//! The Docker provider: sandboxes as detached containers driven through the docker CLI.
//!
//! `cli` starts docker subprocesses, `argv` builds their command lines, `classify` reads the
//! client's stderr, `tarstream` frames file transfers. `provider` holds `DockerProvider` (lookup,
//! exec, status, endpoint, close); its other operations live beside it: `create` (run,
//! reconciliation, probe), `files` (upload, download), `sessions` (`create_pty`).

pub mod argv;
pub mod classify;
pub mod cli;
mod create;
mod files;
mod inventory;
pub mod labels;
pub mod mask;
pub mod provider;
pub mod sessions;
pub mod tarstream;

pub use files::Download;
pub use inventory::{ListPage, ListQuery, PageKey, SandboxSummary};
pub use provider::{DockerProvider, ExecParams, SandboxDescriptor, SandboxHandle};
pub use sessions::PtySpec;
