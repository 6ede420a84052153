//! The Docker backend: sandboxes as detached containers driven through the docker CLI.
//!
//! At the top, what every part uses: `provider` (`DockerProvider`, its configuration and the
//! one record per sandbox of `records`), `backend` (the `SandboxBackend` implementation), `cli`
//! (docker subprocesses in pools), `argv` (their command lines), `failure` and `classify` (what
//! docker's errors mean), `state`, `labels`, `events` and `watch_events` (container states and
//! lifecycle events), `engine_api` (the Engine API where the CLI is slow), `transport` (the seam
//! into a sandbox: `docker exec`, or the agent through `crate::agent_client` and `agent_host`)
//! and `pty` (terminals). The rest sits in four folders:
//!
//! - `ops/`: the operations on a sandbox, one file each (create, exec, files, status and close,
//!   lookup, sessions, processes, logs, stats and usage, pause, `List`, the sweep's listing);
//! - `host/`: the host's facilities the walls use (loop disks, cgroups, egress rules, networks
//!   and volumes, ending a sandbox from the host);
//! - `storage/`: the filesystem as images and layers (snapshots, forks, diffs, reset, templates);
//! - `checkpoints/`: gVisor's live checkpoints (live fork, hibernate) over runsc called directly.
//!
//! A file in a folder reaches its siblings elsewhere as `super::x`: each folder's `mod.rs` takes
//! this module's names, and this module takes the folders' modules that other parts use.

mod agent_host;
pub mod argv;
mod backend;
pub mod classify;
pub mod cli;
pub mod engine_api;
pub mod events;
pub mod failure;
pub mod labels;
pub mod provider;
pub mod pty;
mod records;
pub mod state;
pub mod transport;
mod watch_events;

mod checkpoints;
mod host;
mod ops;
mod storage;

// The folders' modules other parts reach (as `super::x` inside this backend, or by path).
pub(in crate::backends::docker) use checkpoints::live;
pub use host::cgroup;
pub(in crate::backends::docker) use host::disk;
pub(in crate::backends::docker) use host::disk_stock;
pub use host::host_tools;
pub(in crate::backends::docker) use host::init_kill;
pub(in crate::backends::docker) use host::loop_mount;
pub use host::mask;
pub use host::runtime;
pub use ops::closing;
pub(crate) use ops::files;
pub(in crate::backends::docker) use ops::held_files;
pub(in crate::backends::docker) use ops::removal_state;
pub use ops::sessions;
pub use ops::tarstream;
pub(in crate::backends::docker) use storage::fork;
pub(in crate::backends::docker) use storage::layers;
pub(in crate::backends::docker) use storage::snapshot;

pub use disk_stock::STOCK_PER_SIZE;
pub use provider::DockerProvider;
