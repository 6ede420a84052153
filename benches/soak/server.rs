//! The release server as a separate process: started on a fixed port, SIGKILLed and started
//! again on the same port, measured through `/proc` (RSS, fds, its `docker` children).

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

    /// `VmRSS` in KiB and the number of open fds.
    pub fn footprint(&self) -> (u64, usize) {
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

    /// Every `docker` process below the server: its pid and command line.
    pub fn docker_children(&self) -> Vec<(u32, String)> {
        descendants(self.pid())
            .into_iter()
            .filter_map(|pid| Some((pid, cmdline(pid)?)))
            .filter(|(_, args)| {
                args.first().is_some_and(|a| Path::new(a).file_name().is_some_and(|n| n == "docker"))
            })
            .map(|(pid, args)| (pid, args.join(" ")))
            .collect()
    }
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

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Every process whose chain of parents reaches `root`.
pub fn descendants(root: u32) -> Vec<u32> {
    let all: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter_map(|pid| Some((pid, parent_of(pid)?)))
                .collect()
        })
        .unwrap_or_default();
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(all.iter().filter(|(_, pp)| *pp == p).map(|(pid, _)| *pid));
        i += 1;
    }
    found.remove(0);
    found
}
