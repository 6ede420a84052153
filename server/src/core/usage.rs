//! What a sandbox used over its life (`Usage`, `CloseResponse.usage`), neutral of any backend,
//! and the per-sandbox counts this process keeps beside the kernel's (processes it started,
//! OOM kills already attributed).

use std::time::Duration;

/// A sandbox's totals so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SandboxUsage {
    /// Since its container started.
    pub wall_time: Duration,
    /// User + system CPU time of all its processes.
    pub cpu_time: Duration,
    pub peak_memory_bytes: u64,
    pub disk_write_bytes: u64,
    pub network_rx_bytes: u64,
    pub network_tx_bytes: u64,
    /// Commands and processes this server started in it.
    pub processes_started: u64,
}

impl From<SandboxUsage> for sandboxd_proto::v1::SandboxUsage {
    fn from(u: SandboxUsage) -> Self {
        Self {
            wall_time_s: u.wall_time.as_secs_f64(),
            cpu_time_s: u.cpu_time.as_secs_f64(),
            peak_memory_bytes: u.peak_memory_bytes,
            disk_write_bytes: u.disk_write_bytes,
            network_rx_bytes: u.network_rx_bytes,
            network_tx_bytes: u.network_tx_bytes,
            processes_started: u.processes_started,
        }
    }
}

/// A sandbox's counts this process keeps beside the kernel's (kept in its record, forgotten
/// with it).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct UsageCounts {
    started: u64,
    oom_kills_seen: u64,
}

impl UsageCounts {
    /// One more command or process started in it.
    pub fn started(&mut self) {
        self.started += 1;
    }

    /// How many this process started in it.
    pub fn processes_started(&self) -> u64 {
        self.started
    }

    /// Given the sandbox's cgroup OOM-kill count now, whether it grew since the last call
    /// (a kill not yet attributed to a command), remembering the new count.
    pub fn new_oom_kill(&mut self, count: u64) -> bool {
        let grew = count > self.oom_kills_seen;
        self.oom_kills_seen = self.oom_kills_seen.max(count);
        grew
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oom_kills_are_attributed_once() {
        let mut counts = UsageCounts::default();
        assert!(!counts.new_oom_kill(0));
        assert!(counts.new_oom_kill(1));
        assert!(!counts.new_oom_kill(1), "the same kill is not counted twice");
        assert!(counts.new_oom_kill(3));
        counts.started();
        counts.started();
        assert_eq!(counts.processes_started(), 2);
    }
}
