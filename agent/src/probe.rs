//! What a create used to learn with one `docker exec` (see the server's `create.rs`), done by
//! the agent itself: the readiness probe (`sh -c <probe>` until it passes `stable_count` times in
//! a row; its stdout must hold the expected text) and the shell (the configured one, else bash
//! when the sandbox's `PATH` has it, else sh; `""` when there is no shell at all). Without a
//! `sh` the probe cannot run and is skipped: an image without a shell is ready once its agent
//! is (its programs run by path, its files move through the agent).

use std::io::Read;
use std::time::{Duration, Instant};

use crate::protocol::ReadyState;
use crate::reaper::reaper;
use crate::spawn::{self, Prepared};
use crate::tree;
use crate::users;

/// The server's `docker.probe` settings, passed on `init`'s command line.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    /// `None`: no probe, ready at once.
    pub command: Option<String>,
    pub expected_stdout: Option<String>,
    pub timeout: Duration,
    /// `None`: one round of `stable_count` attempts.
    pub deadline: Option<Duration>,
    pub stable_count: u32,
    pub stable_delay: Duration,
}

impl Default for Probe {
    fn default() -> Self {
        Self {
            command: None,
            expected_stdout: None,
            timeout: Duration::from_secs(30),
            deadline: None,
            stable_count: 1,
            stable_delay: Duration::ZERO,
        }
    }
}

/// The shell the server will run commands with.
pub fn detect_shell(configured: Option<&str>, path: Option<&str>) -> String {
    if let Some(shell) = configured.filter(|s| !s.is_empty()) {
        return shell.to_string();
    }
    ["bash", "sh"].into_iter().find(|s| spawn::find_program(s, path).is_some()).unwrap_or("").to_string()
}

/// One attempt: exit code and output, or why it did not run.
fn attempt(
    command: &str,
    env: &[(String, String)],
    timeout: Duration,
) -> Result<(i32, String, String), String> {
    let user = users::Files::read().resolve(None)?;
    let prepared = Prepared::new("sh", command.as_bytes(), env, None, user, false).map_err(|(_, m)| m)?;
    let (spawned, exited) =
        reaper().spawn_registered(|register| spawn::spawn(&prepared, register)).map_err(|(_, m)| m)?;
    let read = |mut f: std::fs::File| {
        std::thread::spawn(move || {
            let mut out = Vec::new();
            let _ = (&mut f).take(1 << 20).read_to_end(&mut out);
            String::from_utf8_lossy(&out).into_owned()
        })
    };
    let (out, err) = (read(spawned.stdout), read(spawned.stderr));
    match exited.recv_timeout(timeout) {
        Ok((status, _)) => {
            Ok((spawn::exit_code(status), out.join().unwrap_or_default(), err.join().unwrap_or_default()))
        }
        Err(_) => {
            tree::kill_descendants(spawned.shim);
            // SAFETY: our own shim.
            unsafe { libc::kill(spawned.shim, libc::SIGKILL) };
            Err(format!("the probe did not finish within {}s", timeout.as_secs_f64()))
        }
    }
}

/// Run the probe to its verdict (as the server's `verify_and_detect_shell` did), with its detail.
pub fn run(probe: &Probe, env: &[(String, String)]) -> (ReadyState, String) {
    let Some(command) = &probe.command else { return (ReadyState::Ready, String::new()) };
    let path = env.iter().rev().find(|(k, _)| k == "PATH").map(|(_, v)| v.as_str());
    if spawn::find_program("sh", path).is_none() {
        eprintln!("sandboxd-agent: no sh in the sandbox's PATH: the readiness probe is skipped");
        return (ReadyState::Ready, String::new());
    }
    let deadline = probe.deadline.map(|d| Instant::now() + d);
    let mut consecutive = 0;
    loop {
        let (passed, detail) = match attempt(command, env, probe.timeout) {
            Ok((code, stdout, stderr)) => {
                let ok =
                    code == 0 && probe.expected_stdout.as_deref().is_none_or(|want| stdout.contains(want));
                (ok, format!("return_code={code}, stderr={:?}", stderr.trim()))
            }
            Err(e) => (false, e),
        };
        if passed {
            consecutive += 1;
            if consecutive >= probe.stable_count.max(1) {
                return (ReadyState::Ready, String::new());
            }
        } else {
            consecutive = 0;
            if deadline.is_none() {
                return (ReadyState::Failed, format!("the readiness probe failed: {detail}"));
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return (
                ReadyState::Failed,
                format!(
                    "the readiness probe did not pass within {}s: {detail}",
                    probe.deadline.unwrap_or_default().as_secs_f64()
                ),
            );
        }
        std::thread::sleep(if !probe.stable_delay.is_zero() {
            probe.stable_delay
        } else if !passed {
            Duration::from_millis(100)
        } else {
            Duration::ZERO
        });
    }
}
