//! A sandbox's filesystem as images and layers: snapshots (and the records of those being made),
//! forks from them, diffs, reset against the image's layers, templates, image lookup and pulls.

// The Docker backend's own modules, as `super::x` reaches them from the files here.
pub(in crate::backends::docker) use super::*;

pub(super) mod diff;
pub(super) mod fork;
pub(super) mod images;
pub(super) mod layers;
pub(super) mod reset;
pub(super) mod snapshot;
pub(super) mod snapshot_making;
pub(super) mod templates;
