//! Resource usage of one sandbox at one moment (what `Stats` answers), neutral of any backend.
//! Counters are cumulative since the sandbox started; rates are the caller's differences.

/// One reading. Every field is what `docker stats` shows for the same container.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SandboxStats {
    /// When it was read, in nanoseconds since the Unix epoch.
    pub read_at_unix_ns: i64,
    pub cpu_usage_ns: u64,
    /// CPUs the sandbox may use (its quota, else the host's online CPUs).
    pub cpu_limit: f64,
    /// In use, reclaimable page cache left out (as `docker stats`).
    pub memory_usage_bytes: u64,
    pub memory_limit_bytes: u64,
    pub memory_peak_bytes: u64,
    pub pids: u64,
    pub network_rx_bytes: u64,
    pub network_tx_bytes: u64,
    pub block_read_bytes: u64,
    pub block_write_bytes: u64,
    /// `v1` or `v2`.
    pub cgroup_version: &'static str,
}
