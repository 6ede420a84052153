//! Live checkpoints (gVisor): checkpoint, live fork, hibernate and wake, over runsc driven
//! directly (`runsc_direct`), and which OCI runtime a sandbox runs on (`oci_runtime`).

// The Docker backend's own modules, as `super::x` reaches them from the files here.
pub(in crate::backends::docker) use super::*;

pub(super) mod live;
pub(super) mod oci_runtime;
pub(super) mod runsc_direct;
