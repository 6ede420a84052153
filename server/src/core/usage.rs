//! What a sandbox used over its life (`Usage`, `CloseResponse.usage`), neutral of any backend,
//! and the per-sandbox counts this process keeps beside the kernel's (processes it started,
//! OOM kills already attributed).

use std::collections::HashMap;
use std::sync::Mutex;
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

/// Per-sandbox counts by sandbox id; forgotten when the sandbox is closed.
#[derive(Default)]
pub struct UsageBook {
    entries: Mutex<HashMap<String, Entry>>,
}

#[derive(Default, Clone, Copy)]
struct Entry {
    started: u64,
    oom_kills_seen: u64,
}

impl UsageBook {
    /// One more command or process started in `id`.
    pub fn started(&self, id: &str) {
        if let Ok(mut m) = self.entries.lock() {
            m.entry(id.to_string()).or_default().started += 1;
        }
    }

    /// How many this process started in `id`.
    pub fn processes_started(&self, id: &str) -> u64 {
        self.entries.lock().ok().and_then(|m| m.get(id).map(|e| e.started)).unwrap_or(0)
    }

    /// Given the sandbox's cgroup OOM-kill count now, whether it grew since the last call
    /// (a kill not yet attributed to a command), remembering the new count.
    pub fn new_oom_kill(&self, id: &str, count: u64) -> bool {
        let Ok(mut m) = self.entries.lock() else { return false };
        let entry = m.entry(id.to_string()).or_default();
        let grew = count > entry.oom_kills_seen;
        entry.oom_kills_seen = entry.oom_kills_seen.max(count);
        grew
    }

    /// Drop what is kept of `id`.
    pub fn forget(&self, id: &str) {
        if let Ok(mut m) = self.entries.lock() {
            m.remove(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oom_kills_are_attributed_once() {
        let book = UsageBook::default();
        assert!(!book.new_oom_kill("a", 0));
        assert!(book.new_oom_kill("a", 1));
        assert!(!book.new_oom_kill("a", 1), "the same kill is not counted twice");
        assert!(book.new_oom_kill("a", 3));
        book.started("a");
        book.started("a");
        assert_eq!(book.processes_started("a"), 2);
        book.forget("a");
        assert_eq!(book.processes_started("a"), 0);
    }
}
