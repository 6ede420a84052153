//! `docker version`, `docker info`: the command lines about the daemon itself (the health
//! probe's ping, its id).

use super::*;

/// `docker version --format {{.Server.APIVersion}}`: answers only when the daemon does.
pub fn version_args() -> Vec<String> {
    vec![s("version"), s("--format"), s("{{.Server.APIVersion}}")]
}

/// `docker info --format {{.ID}}`: the daemon's own id (which daemon a run directory is for).
pub fn daemon_id_args() -> Vec<String> {
    vec![s("info"), s("--format"), s("{{.ID}}")]
}
