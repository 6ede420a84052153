//! The docker command lines of every operation, as pure functions, one file per docker noun:
//! `container` (run, inspect, ps, rm, events, diff, pause, …), `exec`, `copy` (`docker cp`),
//! `image` (snapshots: commit, image inspect, rmi), `runtime` (networks, volumes and the run
//! flags of a spec's runtime requirements), `labels` (label flags and `ps` label filters),
//! `daemon` (version, the health ping) and `env` (the env-aliasing rule). The exact argv is what the unit tests pin down, and nothing a
//! client sends can land where docker reads a flag. No docker command line is built anywhere else.

mod container;
mod copy;
mod daemon;
mod env;
mod exec;
mod image;
mod labels;
mod oci_runtime;
mod runtime;
mod walls;

pub use self::container::*;
pub use self::copy::*;
pub use self::daemon::*;
pub use self::env::*;
pub use self::exec::*;
pub use self::image::*;
pub use self::labels::*;
pub use self::oci_runtime::*;
pub use self::runtime::*;
pub use self::walls::*;
pub use super::labels::{
    PORTS_LABEL, SANDBOX_LABEL, SNAPSHOT_CREATED_LABEL, SNAPSHOT_LABEL, SNAPSHOT_LABELS_LABEL,
    SNAPSHOT_LIVE_LABEL, SNAPSHOT_SOURCE_LABEL,
};

fn s(v: &str) -> String {
    v.to_string()
}

#[cfg(test)]
mod branching_tests;
#[cfg(test)]
mod tests;
