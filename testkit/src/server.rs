//! The real `sandboxd` binary as a test fixture, for what only a process shows: flags and
//! config errors, signals and shutdown, listeners and TLS, restarts, the daemon dying. The caller
//! names the binary (`env!("CARGO_BIN_EXE_sandboxd")` in the `sandboxd` crate's suites), so no
//! test runs `cargo build`. Everything else runs the service in-process ([`crate::service`]).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use sandboxd_client::Client;

use super::TestLabel;

/// A running `sandboxd` process, killed on drop.
pub struct TestServer {
    pub child: Child,
    pub url: String,
    _dir: tempfile::TempDir,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl TestServer {
    /// Starts `BINARY --listen 127.0.0.1:0 --config FILE [--auth-token-file FILE]` and waits
    /// for its `sandboxd listening on ADDR` line. The one place that knows the server's CLI.
    pub fn start(binary: impl AsRef<Path>, label: &TestLabel, token: Option<&str>) -> TestServer {
        Self::start_with(binary, label, token, &[])
    }

    /// As `start`, with more flags.
    pub fn start_with(
        binary: impl AsRef<Path>,
        label: &TestLabel,
        token: Option<&str>,
        extra: &[&str],
    ) -> TestServer {
        Self::start_env(binary, label, token, extra, &[])
    }

    /// As `start_with`, with environment variables for the server process.
    pub fn start_env(
        binary: impl AsRef<Path>,
        label: &TestLabel,
        token: Option<&str>,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> TestServer {
        super::require_docker();
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cmd = Self::command(binary, label, dir.path(), token);
        cmd.args(extra).envs(env.iter().copied());
        let mut child = cmd.stdout(Stdio::piped()).spawn().expect("spawn sandboxd");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = line.strip_prefix("sandboxd listening on ") {
                    let _ = tx.send(addr.trim().to_string());
                }
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(addr) => addr,
            Err(_) => {
                let _ = child.kill();
                panic!("sandboxd did not print its listening line within 30 s");
            }
        };
        TestServer { child, url: format!("http://{addr}"), _dir: dir }
    }

    /// The server command with the test's config (its containers carry `label`).
    pub fn command(binary: impl AsRef<Path>, label: &TestLabel, dir: &Path, token: Option<&str>) -> Command {
        let config = dir.join("config.json");
        let body = serde_json::json!({
            "docker": {
                "create": {"extra_run_args": label.run_args()},
                "exec": {"default_timeout_s": 60.0, "engine": super::engine_name()},
            }
        });
        std::fs::write(&config, body.to_string()).expect("write config");
        let mut cmd = Command::new(binary.as_ref());
        cmd.arg("--listen").arg("127.0.0.1:0").arg("--config").arg(&config);
        if let Some(token) = token {
            let path = dir.join("token");
            std::fs::write(&path, token).expect("write token");
            cmd.arg("--auth-token-file").arg(path);
        }
        cmd.env("RUST_LOG", "warn").stdin(Stdio::null()).stderr(Stdio::inherit());
        // A test run started with `&` inherits SIGINT ignored; the server must not (issue 9).
        sandboxd::docker::cli::reset_signal_dispositions(&mut cmd);
        cmd
    }

    /// SIGTERM, then the exit status (within `within`).
    pub fn terminate(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = std::time::Instant::now() + within;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    pub async fn client(&self) -> Client {
        Client::connect(self.url.clone()).await.expect("connect")
    }
}
