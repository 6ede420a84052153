//! Ending a sandbox at once from the host, without asking the daemon: SIGKILL to the
//! container's init process, which makes the kernel kill every process of its pid namespace
//! (the exec'd ones too), and a wait for that init's exit, which the kernel signals only once
//! the namespace is empty. `Close` answers after this (a few ms) instead of after
//! `docker kill` (≈ 100 ms here); Docker's removal follows in the background (`closing.rs`).
//!
//! The init is found in the container's cgroup (the process that is pid 1 in its own
//! namespace) and held by a pidfd that is checked to be that container's before the signal,
//! so a pid reused meanwhile is never signalled. Anything unusual (a cgroup layout not
//! known here, `--pid=host`, a paused sandbox whose processes cannot die until thawed) says
//! `false` and the caller uses `docker kill`.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::cgroup::CGROUP_ROOT;

/// The `cgroup.procs` files container `id` may have: cgroupfs and systemd drivers, v1 (the
/// pids controller) and v2.
fn procs_files(root: &Path, id: &str) -> [PathBuf; 4] {
    let scope = format!("docker-{id}.scope");
    [
        root.join("pids/docker").join(id).join("cgroup.procs"),
        root.join("pids/system.slice").join(&scope).join("cgroup.procs"),
        root.join("docker").join(id).join("cgroup.procs"),
        root.join("system.slice").join(&scope).join("cgroup.procs"),
    ]
}

/// A process's pid in its innermost pid namespace (`NSpid:`'s last field).
fn innermost_pid(proc: &Path, pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(proc.join(pid.to_string()).join("status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    let fields: Vec<&str> = line.split_whitespace().collect();
    // One field: the host's namespace (`--pid=host`), never a container's own init.
    if fields.len() < 2 {
        return None;
    }
    fields.last()?.parse().ok()
}

/// Whether `pid` is container `id`'s init now.
fn is_init_of(proc: &Path, pid: u32, id: &str) -> bool {
    let cgroup = std::fs::read_to_string(proc.join(pid.to_string()).join("cgroup")).unwrap_or_default();
    cgroup.contains(id) && innermost_pid(proc, pid) == Some(1)
}

/// The host pid of container `id`'s init, when its cgroup is where Docker puts it.
pub fn init_pid(root: &Path, proc: &Path, id: &str) -> Option<u32> {
    procs_files(root, id).iter().find_map(|file| {
        let text = std::fs::read_to_string(file).ok()?;
        text.lines().filter_map(|l| l.trim().parse::<u32>().ok()).find(|pid| is_init_of(proc, *pid, id))
    })
}

fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    // SAFETY: a non-negative return is an fd this process now owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn pidfd_kill(fd: &OwnedFd) -> bool {
    // SAFETY: the fd is a pidfd; a null siginfo sends as kill(2) would.
    let rc = unsafe {
        libc::syscall(libc::SYS_pidfd_send_signal, fd.as_raw_fd(), libc::SIGKILL, std::ptr::null::<u8>(), 0)
    };
    rc == 0
}

/// SIGKILL container `id`'s init and wait up to `wait` for it (and so its whole pid
/// namespace) to be gone. `false`: not done this way (the caller kills through Docker).
pub async fn kill_container(id: &str, wait: Duration) -> bool {
    let (root, proc) = (Path::new(CGROUP_ROOT), Path::new("/proc"));
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return false;
    }
    let Some(pid) = init_pid(root, proc, id) else { return false };
    let Some(fd) = pidfd_open(pid) else { return false };
    // Opened after the lookup: the pid might name another process by now.
    if !is_init_of(proc, pid, id) || !pidfd_kill(&fd) {
        return false;
    }
    // SAFETY: the AsyncFd owns the pidfd (an `OwnedFd` moved in) and nothing else closes it.
    let registered =
        unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) };
    let Ok(exited) = registered else { return false };
    // A pidfd reads ready once its process has exited; an init exits after its namespace.
    tokio::time::timeout(wait, exited.readable()).await.is_ok_and(|r| r.is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_init_is_the_process_that_is_pid_1_in_its_namespace() {
        let dir = tempfile::tempdir().unwrap();
        let (root, proc) = (dir.path().join("cg"), dir.path().join("proc"));
        let id = "ab".repeat(32);
        let procs = root.join("pids/docker").join(&id);
        std::fs::create_dir_all(&procs).unwrap();
        std::fs::write(procs.join("cgroup.procs"), "20\n10\n").unwrap();
        for (pid, ns) in [(10, "10\t1"), (20, "20\t7")] {
            let p = proc.join(pid.to_string());
            std::fs::create_dir_all(&p).unwrap();
            std::fs::write(p.join("status"), format!("Name:\tx\nNSpid:\t{ns}\n")).unwrap();
            std::fs::write(p.join("cgroup"), format!("8:pids:/docker/{id}\n")).unwrap();
        }
        assert_eq!(init_pid(&root, &proc, &id), Some(10));
        // Another container's id, or a process of the host's own namespace, is never it.
        assert_eq!(init_pid(&root, &proc, &"cd".repeat(32)), None);
        std::fs::write(proc.join("10/status"), "NSpid:\t10\n").unwrap();
        assert_eq!(init_pid(&root, &proc, &id), None);
    }
}
