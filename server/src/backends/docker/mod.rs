//! The Docker backend: sandboxes as detached containers driven through the docker CLI.
//!
//! `transport` is the seam into a sandbox (`transport/cli.rs`: one `docker exec` per command;
//! the resident agent through `crate::agent_client`, which reaches sandboxes through
//! `agent_host`).
//! `cli` starts docker subprocesses, `argv` builds their command lines, `classify` reads the
//! client's stderr, `state` types container states, `tarstream` frames file transfers.
//! `provider` holds `DockerProvider` and its caches; each operation lives in a file of its own:
//! `lookup` (inspect, handle, connect), `create` (run, reconciliation, probe), `exec`, `files`
//! (upload, download), `status` (status, endpoint, close), `sessions` (`create_pty`), `compose`
//! (NeMo Gym's Compose helpers), and `backend` (the `SandboxBackend` implementation); and branching:
//! `snapshot` (commit, list, delete, expiry), `fork`, `diff`, `pause` (pause, resume), `live`
//! (gVisor checkpoints, live forks, hibernation) over `runsc_direct` (runsc called directly); and usage: `stats` over `cgroup` (the kernel's
//! counters), lifecycle events for `Watch` from `events` (`watch_events`).

mod agent_host;
pub mod argv;
mod backend;
pub mod cgroup;
pub mod classify;
pub mod cli;
pub mod closing;
mod compose;
mod create;
mod diff;
mod disk;
mod disk_stock;
mod egress;
pub mod engine_api;
pub mod events;
mod exec;
pub mod failure;
pub(crate) mod files;
mod fork;
mod fs;
mod held_files;
pub mod host_tools;
mod images;
mod init_kill;
mod inventory;
pub mod labels;
mod layers;
mod live;
mod logs;
mod lookup;
mod loop_mount;
pub mod mask;
mod oci_runtime;
mod owned;
mod pause;
mod ping;
mod processes;
pub mod provider;
pub mod pty;
mod records;
mod removal_state;
mod reset;
mod runsc_direct;
pub mod runtime;
pub mod sessions;
mod snapshot;
mod snapshot_making;
pub mod state;
mod stats;
mod status;
mod subnets;
pub mod tarstream;
mod templates;
mod transfer;
pub mod transport;
mod usage;
mod watch_events;

pub use disk_stock::STOCK_PER_SIZE;
pub use provider::DockerProvider;
