//! `docker version`: the command line about the daemon itself (the health probe's ping).

use super::*;

/// `docker version --format {{.Server.APIVersion}}`: answers only when the daemon does.
pub fn version_args() -> Vec<String> {
    vec![s("version"), s("--format"), s("{{.Server.APIVersion}}")]
}
