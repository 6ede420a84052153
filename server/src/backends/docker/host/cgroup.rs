//! A container's usage read straight from the kernel, as the Docker daemon reads it for
//! `docker stats`, without spawning `docker stats`: its cgroup (v1 per-controller hierarchies
//! or the v2 unified one, detected from `/sys/fs/cgroup`) and `/proc/<init pid>/net/dev`.
//!
//! The cgroup is found from `/proc/<pid>/cgroup` (so the cgroupfs and systemd drivers both
//! work, and so does a server in a cgroup namespace) and must name the container's id: a pid
//! that is not the container's (reused, or from another pid namespace) is refused.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::core::stats::SandboxStats;

/// Where cgroup hierarchies are mounted.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The cgroup directories of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cgroup {
    /// One directory per controller.
    V1 { memory: PathBuf, cpuacct: PathBuf, cpu: PathBuf, pids: PathBuf, blkio: PathBuf },
    /// The unified hierarchy.
    V2(PathBuf),
}

/// Reads the usage of the container whose init process is `pid` and whose full id is
/// `container_id`, with hierarchies under `root` and processes under `proc`.
pub fn read(root: &Path, proc: &Path, pid: u32, container_id: &str) -> io::Result<SandboxStats> {
    let cgroup_file = proc.join(pid.to_string()).join("cgroup");
    let text = fs::read_to_string(&cgroup_file)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot read {}: {e}", cgroup_file.display())))?;
    if !text.contains(container_id) {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "process {pid} is not in the container's cgroup (the server must run on the Docker host, in its pid namespace)"
            ),
        ));
    }
    let cgroup = locate(root, &text)?;
    let mut stats = match &cgroup {
        Cgroup::V1 { .. } => read_v1(&cgroup)?,
        Cgroup::V2(dir) => read_v2(dir)?,
    };
    let host_memory = host_memory_bytes(proc);
    if stats.memory_limit_bytes == 0 || (host_memory > 0 && stats.memory_limit_bytes > host_memory) {
        stats.memory_limit_bytes = host_memory;
    }
    if stats.cpu_limit <= 0.0 {
        stats.cpu_limit = online_cpus() as f64;
    }
    let (rx, tx) =
        network_bytes(&fs::read_to_string(proc.join(pid.to_string()).join("net/dev")).unwrap_or_default());
    stats.network_rx_bytes = rx;
    stats.network_tx_bytes = tx;
    Ok(stats)
}

/// The container's cgroup directories from its `/proc/<pid>/cgroup` text.
pub fn locate(root: &Path, proc_cgroup: &str) -> io::Result<Cgroup> {
    let lines: Vec<(&str, &str)> = proc_cgroup
        .lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let _id = parts.next()?;
            Some((parts.next()?, parts.next()?))
        })
        .collect();
    let rel = |path: &str| path.trim_start_matches('/').to_string();
    if root.join("cgroup.controllers").exists() {
        let (_, path) = lines.iter().find(|(controllers, _)| controllers.is_empty()).ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, "no unified (0::) line in /proc/<pid>/cgroup")
        })?;
        return Ok(Cgroup::V2(root.join(rel(path))));
    }
    let dir = |controller: &str| -> io::Result<PathBuf> {
        let (field, path) = lines
            .iter()
            .find(|(controllers, _)| controllers.split(',').any(|c| c == controller))
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("no {controller} controller for the container"),
                )
            })?;
        // The mount is named by the co-mounted controllers (`cpu,cpuacct`), usually with a
        // link per controller too.
        let joined = root.join(field).join(rel(path));
        Ok(if joined.exists() { joined } else { root.join(controller).join(rel(path)) })
    };
    Ok(Cgroup::V1 {
        memory: dir("memory")?,
        cpuacct: dir("cpuacct")?,
        cpu: dir("cpu").or_else(|_| dir("cpuacct"))?,
        pids: dir("pids")?,
        blkio: dir("blkio")?,
    })
}

fn read_v1(cgroup: &Cgroup) -> io::Result<SandboxStats> {
    let Cgroup::V1 { memory, cpuacct, cpu, pids, blkio } = cgroup else { unreachable!("v1 only") };
    let memory_stat = fs::read_to_string(memory.join("memory.stat")).unwrap_or_default();
    let usage = number(&memory.join("memory.usage_in_bytes"))?;
    let inactive = keyed(&memory_stat, "total_inactive_file").unwrap_or(0);
    let quota = signed(&cpu.join("cpu.cfs_quota_us")).unwrap_or(-1);
    let period = number(&cpu.join("cpu.cfs_period_us")).unwrap_or(0);
    // Docker reads the CFQ counters where the kernel keeps them, else the throttle ones.
    let blkio_file = if blkio.join("blkio.io_serviced_recursive").exists() {
        "blkio.io_service_bytes_recursive"
    } else {
        "blkio.throttle.io_service_bytes"
    };
    let (block_read_bytes, block_write_bytes) =
        blkio_bytes(&fs::read_to_string(blkio.join(blkio_file)).unwrap_or_default());
    Ok(SandboxStats {
        read_at_unix_ns: now_ns(),
        cpu_usage_ns: number(&cpuacct.join("cpuacct.usage"))?,
        cpu_limit: if quota > 0 && period > 0 { quota as f64 / period as f64 } else { 0.0 },
        memory_usage_bytes: usage.saturating_sub(inactive),
        memory_limit_bytes: number(&memory.join("memory.limit_in_bytes")).unwrap_or(0),
        memory_peak_bytes: number(&memory.join("memory.max_usage_in_bytes")).unwrap_or(0),
        pids: number(&pids.join("pids.current")).unwrap_or(0),
        block_read_bytes,
        block_write_bytes,
        cgroup_version: "v1",
        ..SandboxStats::default()
    })
}

fn read_v2(dir: &Path) -> io::Result<SandboxStats> {
    let cpu_stat = fs::read_to_string(dir.join("cpu.stat")).map_err(|e| {
        io::Error::new(e.kind(), format!("cannot read {}: {e}", dir.join("cpu.stat").display()))
    })?;
    let memory_stat = fs::read_to_string(dir.join("memory.stat")).unwrap_or_default();
    let usage = number(&dir.join("memory.current")).unwrap_or(0);
    let inactive = keyed(&memory_stat, "inactive_file").unwrap_or(0);
    let cpu_limit = fs::read_to_string(dir.join("cpu.max"))
        .ok()
        .and_then(|text| {
            let mut parts = text.split_whitespace();
            let quota: f64 = parts.next()?.parse().ok()?; // "max" does not parse: no limit
            let period: f64 = parts.next()?.parse().ok()?;
            (period > 0.0).then(|| quota / period)
        })
        .unwrap_or(0.0);
    let (block_read_bytes, block_write_bytes) =
        io_stat_bytes(&fs::read_to_string(dir.join("io.stat")).unwrap_or_default());
    Ok(SandboxStats {
        read_at_unix_ns: now_ns(),
        cpu_usage_ns: keyed(&cpu_stat, "usage_usec").unwrap_or(0).saturating_mul(1000),
        cpu_limit,
        memory_usage_bytes: usage.saturating_sub(inactive),
        // "max" does not parse: no limit (the host's memory is put in by the caller).
        memory_limit_bytes: number(&dir.join("memory.max")).unwrap_or(0),
        memory_peak_bytes: number(&dir.join("memory.peak")).unwrap_or(0),
        pids: number(&dir.join("pids.current")).unwrap_or(0),
        block_read_bytes,
        block_write_bytes,
        cgroup_version: "v2",
        ..SandboxStats::default()
    })
}

fn number(path: &Path) -> io::Result<u64> {
    let text = fs::read_to_string(path)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot read {}: {e}", path.display())))?;
    text.trim().parse().map_err(|_| {
        io::Error::new(io::ErrorKind::InvalidData, format!("{} is not a number", path.display()))
    })
}

fn signed(path: &Path) -> Option<i64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The value of `key` in a `key value` a line file (memory.stat, cpu.stat).
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// Read and write bytes of a v1 `blkio.*io_service_bytes*` file (`MAJ:MIN Op N` lines).
fn blkio_bytes(text: &str) -> (u64, u64) {
    let (mut read, mut write) = (0u64, 0u64);
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        if let [_, op, n] = parts[..] {
            let n: u64 = n.parse().unwrap_or(0);
            match op.to_ascii_lowercase().as_str() {
                "read" => read = read.saturating_add(n),
                "write" => write = write.saturating_add(n),
                _ => {}
            }
        }
    }
    (read, write)
}

/// Read and write bytes of a v2 `io.stat` (`MAJ:MIN rbytes=N wbytes=N ...` lines).
fn io_stat_bytes(text: &str) -> (u64, u64) {
    let (mut read, mut write) = (0u64, 0u64);
    for field in text.split_whitespace() {
        if let Some(n) = field.strip_prefix("rbytes=") {
            read = read.saturating_add(n.parse().unwrap_or(0));
        } else if let Some(n) = field.strip_prefix("wbytes=") {
            write = write.saturating_add(n.parse().unwrap_or(0));
        }
    }
    (read, write)
}

/// Received and sent bytes over every interface but loopback, from `/proc/<pid>/net/dev`.
/// Interface names are the sandbox's to choose: only the kernel's layout is trusted.
pub fn network_bytes(text: &str) -> (u64, u64) {
    let (mut rx, mut tx) = (0u64, 0u64);
    for line in text.lines().skip(2) {
        let Some((name, counters)) = line.split_once(':') else { continue };
        if name.trim() == "lo" {
            continue;
        }
        let fields: Vec<u64> = counters.split_whitespace().map(|f| f.parse().unwrap_or(0)).collect();
        if fields.len() >= 9 {
            rx = rx.saturating_add(fields[0]);
            tx = tx.saturating_add(fields[8]);
        }
    }
    (rx, tx)
}

fn host_memory_bytes(proc: &Path) -> u64 {
    let text = fs::read_to_string(proc.join("meminfo")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// The host's online CPUs (`/sys/devices/system/cpu/online`, as `0-3,6`).
fn online_cpus() -> usize {
    let text = fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let count: usize = text
        .trim()
        .split(',')
        .filter_map(|range| match range.split_once('-') {
            Some((a, b)) => Some(b.parse::<usize>().ok()?.checked_sub(a.parse::<usize>().ok()?)? + 1),
            None => range.parse::<usize>().ok().map(|_| 1),
        })
        .sum();
    if count > 0 {
        count
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locates_v1_and_v2_cgroups() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = "4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n8:pids:/docker/abc\n7:blkio:/docker/abc\n0::/docker/abc\n";
        let Cgroup::V1 { memory, cpuacct, .. } = locate(dir.path(), v1).unwrap() else { panic!("v1") };
        assert_eq!(memory, dir.path().join("memory/docker/abc"));
        assert_eq!(cpuacct, dir.path().join("cpuacct/docker/abc"));
        fs::write(dir.path().join("cgroup.controllers"), "cpu memory").unwrap();
        let v2 = "0::/system.slice/docker-abc.scope\n";
        assert_eq!(
            locate(dir.path(), v2).unwrap(),
            Cgroup::V2(dir.path().join("system.slice/docker-abc.scope"))
        );
    }

    #[test]
    fn parses_counters() {
        let dev = "Inter-|   Receive\n face |bytes\n    lo:  8047  88 0 0 0 0 0 0  8047 88 0 0 0 0 0 0\n  eth0: 200 2 0 0 0 0 0 0 50 1 0 0 0 0 0 0\n";
        assert_eq!(network_bytes(dev), (200, 50));
        assert_eq!(blkio_bytes("8:0 Read 10\n8:0 Write 5\n8:16 Read 1\nTotal 16\n"), (11, 5));
        assert_eq!(io_stat_bytes("8:0 rbytes=10 wbytes=5 rios=1\n8:16 rbytes=1 wbytes=0\n"), (11, 5));
        assert_eq!(keyed("cache 5\ntotal_inactive_file 7\n", "total_inactive_file"), Some(7));
    }
}
