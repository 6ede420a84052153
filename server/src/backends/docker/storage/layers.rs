//! The layers of a container's root filesystem on the host, as `Reset` reads them: a type of
//! its own so the provider can keep them per sandbox without naming the reset module (which
//! names the provider).

use std::path::PathBuf;

/// The layers of a container's root filesystem on the host.
#[derive(Debug, Clone)]
pub(in crate::backends::docker) struct Layers {
    pub(in crate::backends::docker) upper: PathBuf,
    /// Topmost first.
    pub(in crate::backends::docker) lowers: Vec<PathBuf>,
}
