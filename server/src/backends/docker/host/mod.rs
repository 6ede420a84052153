//! The host's facilities the walls use: loop disks (and their stock), cgroups, egress rules,
//! the service's networks and volumes and their subnets, ending a sandbox from the host, the host
//! programs the walls run, and masking secrets in command lines.

// The Docker backend's own modules, as `super::x` reaches them from the files here.
pub(in crate::backends::docker) use super::*;

pub mod cgroup;
pub(super) mod disk;
pub(super) mod disk_stock;
pub(super) mod egress;
pub mod host_tools;
pub(super) mod init_kill;
pub(super) mod loop_mount;
pub mod mask;
pub mod runtime;
pub(super) mod subnets;
