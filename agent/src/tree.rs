//! Stopping a command and everything it started. Each command runs under its own shim, a child
//! subreaper: descendants that leave the process group (`setsid`, double fork) are reparented to
//! the shim, never past it, so the subtree under the shim is exactly what the command started.
//! The tree is frozen with SIGSTOP first (a stopped process cannot fork), then killed.
//!
//! Parent links come from `/proc/<pid>/stat`, readable for every process. (A marker in the
//! environment would need `/proc/<pid>/environ`, which root in a container may not read for
//! other users' processes: Docker drops `CAP_SYS_PTRACE`.)

use std::collections::{HashMap, HashSet};

/// `pid -> parent pid` of every process visible in `/proc`.
fn parent_links() -> HashMap<i32, i32> {
    let mut links = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return links };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            if let Some(ppid) = parse_ppid(&stat) {
                links.insert(pid, ppid);
            }
        }
    }
    links
}

/// The parent pid in a `/proc/<pid>/stat` line (the field after the state, past the `)` that
/// ends the command name, which may itself hold spaces and parentheses).
pub fn parse_ppid(stat: &str) -> Option<i32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Every descendant of `root` (not `root` itself).
pub fn descendants(root: i32) -> Vec<i32> {
    let links = parent_links();
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for (&pid, &ppid) in &links {
        children.entry(ppid).or_default().push(pid);
    }
    let mut out = Vec::new();
    let mut queue = vec![root];
    while let Some(p) = queue.pop() {
        if let Some(kids) = children.get(&p) {
            for &k in kids {
                if k != root && !out.contains(&k) {
                    out.push(k);
                    queue.push(k);
                }
            }
        }
    }
    out
}

/// Freeze, then kill, every descendant of `root`. Returns how many processes were killed.
pub fn kill_descendants(root: i32) -> usize {
    let mut stopped = HashSet::new();
    for _ in 0..64 {
        let fresh: Vec<i32> = descendants(root).into_iter().filter(|p| !stopped.contains(p)).collect();
        if fresh.is_empty() {
            break;
        }
        for pid in fresh {
            // SAFETY: plain syscall on a pid we just saw under our own shim.
            unsafe { libc::kill(pid, libc::SIGSTOP) };
            stopped.insert(pid);
        }
    }
    let mut killed = 0;
    for _ in 0..8 {
        let tree = descendants(root);
        if tree.is_empty() {
            break;
        }
        for pid in tree {
            // SAFETY: as above; a stopped process receives SIGKILL.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            killed += 1;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
        // Zombies stay listed until their parent reaps them; only live ones count.
        if descendants(root).iter().all(|p| is_zombie(*p)) {
            break;
        }
    }
    killed
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 1..].trim_start().starts_with('Z')))
        .unwrap_or(true)
}

/// The session id in a `/proc/<pid>/stat` line (state, ppid, pgrp, session after the `)`).
pub fn parse_session(stat: &str) -> Option<i32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(3)?.parse().ok()
}

/// Send `signal` to every process of session `sid` (a terminal's whole session: jobs in other
/// process groups too). Returns how many were signalled.
pub fn signal_session(sid: i32, signal: i32) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else { return 0 };
    let mut n = 0;
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        if parse_session(&stat) == Some(sid) {
            // SAFETY: plain syscall on a process of the session we started.
            if unsafe { libc::kill(pid, signal) } == 0 {
                n += 1;
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ppid_survives_odd_command_names() {
        assert_eq!(parse_ppid("12 (sh) S 7 12 12 0"), Some(7));
        assert_eq!(parse_ppid("12 (a) b (c) S 99 12"), Some(99));
        assert_eq!(parse_ppid("garbage"), None);
    }

    #[test]
    fn descendants_of_this_process_include_a_child() {
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let me = std::process::id() as i32;
        assert!(descendants(me).contains(&(child.id() as i32)));
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn session_is_the_fourth_field_after_the_name() {
        assert_eq!(parse_session("42 (a) b) S 1 40 41 0 -1"), Some(41));
        assert_eq!(parse_session("garbage"), None);
    }
}
