//! The release server as a separate process: started on a fixed port, SIGKILLed and started
//! again on the same port, measured through `/proc` (RSS, fds, its `docker` children).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// One `sandboxd` incarnation after another on the same address.
pub struct ServerProcess {
    binary: PathBuf,
    config: PathBuf,
    log: PathBuf,
    pub port: u16,
    child: Option<Child>,
}

impl ServerProcess {
    pub fn new(binary: PathBuf, config: PathBuf, log: PathBuf, port: u16) -> Self {
        Self { binary, config, log, port, child: None }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).expect("server running")
    }

    /// Starts it and waits for its `sandboxd listening on` line.
    pub fn start(&mut self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("{}: {e}", self.log.display()))?;
        let mut last = String::new();
        // The port may still be held for a moment by the process just killed.
        for _ in 0..50 {
            let mut child = Command::new(&self.binary)
                .arg("--listen")
                .arg(format!("127.0.0.1:{}", self.port))
                .arg("--config")
                .arg(&self.config)
                .env("RUST_LOG", std::env::var("SOAK_SERVER_LOG").unwrap_or_else(|_| "warn".into()))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(log.try_clone().map_err(|e| e.to_string())?)
                .spawn()
                .map_err(|e| format!("spawn {}: {e}", self.binary.display()))?;
            let stdout = child.stdout.take().expect("stdout");
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if line.starts_with("sandboxd listening on ") {
                        let _ = tx.send(());
                    }
                }
            });
            match rx.recv_timeout(Duration::from_secs(30)) {
                Ok(()) => {
                    self.child = Some(child);
                    return Ok(());
                }
                Err(_) => {
                    let _ = child.kill();
                    let status = child.wait().ok();
                    last = format!("exited {status:?} without listening (log {})", self.log.display());
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
        Err(last)
    }

    /// SIGKILL, reaped.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then SIGKILL if it does not exit within `within`.
    pub fn stop(&mut self, within: Duration) {
        if let Some(mut child) = self.child.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let end = std::time::Instant::now() + within;
            while std::time::Instant::now() < end {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The footprint at a quiet moment: up to 10 s for the server to have no `docker` child
    /// but its long-lived ones (the events stream, agent channels), so a sweep's `docker ps` or
    /// a removal in flight is not counted; then RSS is the lowest of 8 s of readings.
    pub fn footprint(&self) -> Footprint {
        for _ in 0..40 {
            if self.docker_children().iter().all(|(_, args)| long_lived(args)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        // The server hands freed memory back after a sweep, at most every 5 s (so a trim comes
        // 5-7 s after the last): the lowest RSS over 8 s is that of the idle server just
        // trimmed, not of what a renewal or a sweep left since the last trim.
        let mut rss_kib = u64::MAX;
        for _ in 0..32 {
            rss_kib = rss_kib.min(self.rss_and_fds().0);
            std::thread::sleep(Duration::from_millis(250));
        }
        let fds = self.rss_and_fds().1;
        Footprint { rss_kib, fds, child_fds: self.child_fds() }
    }

    /// The server's fds held for its live `docker` children: the pipes it shares with them and
    /// their pidfds. Their number follows what runs now (agent channels of the held sandboxes,
    /// opened on first use; a sweep's `docker ps`), not the server's history; a child that
    /// stays is `check_docker_children`'s to judge.
    fn child_fds(&self) -> usize {
        let server = self.pid();
        let children: Vec<u32> = self.docker_children().into_iter().map(|(pid, _)| pid).collect();
        let pipes: std::collections::BTreeSet<String> = children
            .iter()
            .flat_map(|pid| {
                (0..3).filter_map(move |fd| std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok())
            })
            .map(|t| t.to_string_lossy().into_owned())
            .filter(|t| t.starts_with("pipe:"))
            .collect();
        let Ok(dir) = std::fs::read_dir(format!("/proc/{server}/fd")) else { return 0 };
        dir.flatten()
            .filter(|entry| {
                let target = std::fs::read_link(entry.path()).unwrap_or_default();
                let target = target.to_string_lossy();
                if pipes.contains(target.as_ref()) {
                    return true;
                }
                target == "anon_inode:[pidfd]"
                    && std::fs::read_to_string(format!(
                        "/proc/{server}/fdinfo/{}",
                        entry.file_name().to_string_lossy()
                    ))
                    .ok()
                    .and_then(|info| {
                        info.lines().find_map(|l| l.strip_prefix("Pid:")).and_then(|p| p.trim().parse().ok())
                    })
                    .is_some_and(|pid: u32| children.contains(&pid))
            })
            .count()
    }

    /// `VmRSS` in KiB and the number of open fds.
    fn rss_and_fds(&self) -> (u64, usize) {
        let pid = self.pid();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let rss = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0);
        (rss, fds)
    }

    /// What the open fds are (`pipe=…,pidfd=…,socket=…`) and what the `docker` children run
    /// (`events`, `agent`, or their first argument): printed beside each footprint reading.
    pub fn footprint_detail(&self) -> String {
        let mut fds: BTreeMap<String, usize> = BTreeMap::new();
        if let Ok(dir) = std::fs::read_dir(format!("/proc/{}/fd", self.pid())) {
            for entry in dir.flatten() {
                let target = std::fs::read_link(entry.path()).unwrap_or_default();
                let target = target.to_string_lossy();
                // `pipe:[123]` → pipe, `anon_inode:[pidfd]` → pidfd, a path stays a path.
                let kind = match target.strip_prefix("anon_inode:") {
                    Some(what) => what.trim_matches(['[', ']']),
                    None => target.split(":[").next().unwrap_or("?"),
                };
                *fds.entry(kind.to_string()).or_default() += 1;
            }
        }
        let mut children: BTreeMap<String, usize> = BTreeMap::new();
        for (_, args) in self.docker_children() {
            let kind = if args.contains(" events") {
                "events"
            } else if args.contains("agent") {
                "agent"
            } else {
                args.split(' ').nth(1).unwrap_or("?")
            };
            *children.entry(kind.to_string()).or_default() += 1;
        }
        let list = |m: &BTreeMap<String, usize>| {
            m.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
        };
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        let kib = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next())
                .unwrap_or("?")
                .to_string()
        };
        format!(
            "rss[anon={},file={},shmem={}] fds[{}] docker[{}]",
            kib("RssAnon:"),
            kib("RssFile:"),
            kib("RssShmem:"),
            list(&fds),
            list(&children)
        )
    }

    /// Every `docker` process below the server: its pid and command line.
    pub fn docker_children(&self) -> Vec<(u32, String)> {
        testkit::procs::descendants(self.pid())
            .into_iter()
            .filter_map(|pid| Some((pid, cmdline(pid)?)))
            .filter(|(_, args)| {
                args.first().is_some_and(|a| Path::new(a).file_name().is_some_and(|n| n == "docker"))
            })
            .map(|(pid, args)| (pid, args.join(" ")))
            .collect()
    }
}

/// What `footprint` reads.
#[derive(Debug, Clone, Copy)]
pub struct Footprint {
    pub rss_kib: u64,
    pub fds: usize,
    /// Of `fds`, those held for live `docker` children (pipes, pidfds).
    pub child_fds: usize,
}

/// A `docker` child that lives as long as the server or a sandbox: the events stream or an
/// agent channel.
pub fn long_lived(args: &str) -> bool {
    args.contains(" events ") || args.contains("/.sandboxd/agent")
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

fn cmdline(pid: u32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        raw.split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect(),
    )
}
