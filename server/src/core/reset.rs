//! `Reset`: a sandbox back to the state it was created in, in place (no container created or
//! removed). What a backend reports of one; how it is done is the backend's
//! (`backends/docker/storage/reset.rs`: processes killed by a root exec, the root filesystem's upper
//! layer rolled back against the image's layers, the spec's files written again).

/// What one reset did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResetReport {
    /// Paths of the root filesystem rolled back (removed, or restored from the image).
    pub paths_restored: u32,
    /// Processes killed.
    pub processes_killed: u32,
}
