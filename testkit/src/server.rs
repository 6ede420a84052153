//! The real `sandboxd` binary as a test fixture, for what only a process shows: flags and
//! config errors, signals and shutdown, listeners and TLS, restarts, the daemon dying, the
//! processes it spawns. The caller names the binary (`env!("CARGO_BIN_EXE_sandboxd")` in the
//! `sandboxd` crate's suites), so no test runs `cargo build`. Everything else runs the service
//! in-process ([`crate::service`]).
//!
//! [`Launch`] is the one place that knows the server's command line: every suite that starts the
//! binary goes through it (the `TestServer::start*` shorthands included).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sandboxd_client::Client;

use crate::raw::{raw_client, RawClient};
use crate::TestLabel;

/// How long a server may take to print its listening line.
const LISTENING_WITHIN: Duration = Duration::from_secs(60);

/// A running `sandboxd` process, killed on drop. Its stderr (the log, `RUST_LOG=info`) goes to a
/// file: [`TestServer::logs`] reads it, and a failing test prints its tail.
pub struct TestServer {
    pub child: Child,
    /// `127.0.0.1:PORT` (or what `--listen` was given, resolved), from the listening line.
    pub addr: String,
    /// `http://ADDR`, what a client connects to.
    pub url: String,
    /// `HOST:PORT` of `/metrics`, when started with `--metrics-listen` (from the line
    /// `sandboxd metrics on http://HOST:PORT/metrics`, printed before the listening line).
    pub metrics_addr: Option<String>,
    /// `HOST:PORT` of the E2B endpoint, when `server.e2b.listen` is set (its line
    /// `sandboxd e2b on http://HOST:PORT`).
    pub e2b_addr: Option<String>,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

/// How to start the server: the test defaults ([`crate::config::test_config`]: `label` on
/// every container, a 60 s exec timeout, the engine under test) plus what the test adds.
pub struct Launch {
    binary: PathBuf,
    run_args: Vec<String>,
    label_value: String,
    config: serde_json::Value,
    listen: String,
    token: Option<String>,
    flags: Vec<String>,
    env: Vec<(String, String)>,
    prelude: Option<String>,
    log: Option<PathBuf>,
}

impl Launch {
    /// The config sections to merge into the test defaults (`docker`, `server`).
    pub fn config(mut self, config: serde_json::Value) -> Self {
        self.config = config;
        self
    }

    /// `--listen ADDR` (default `127.0.0.1:0`).
    pub fn listen(mut self, addr: &str) -> Self {
        self.listen = addr.into();
        self
    }

    /// Bearer auth: the token is written to a file for `--auth-token-file`.
    pub fn token(mut self, token: Option<&str>) -> Self {
        self.token = token.map(str::to_string);
        self
    }

    /// More flags, after `--listen`, `--config` and `--auth-token-file`.
    pub fn flags(mut self, flags: &[&str]) -> Self {
        self.flags.extend(flags.iter().map(|f| f.to_string()));
        self
    }

    /// Environment variables of the server process (`DOCKER_HOST` of a private daemon, `PATH`).
    pub fn env(mut self, env: &[(&str, &str)]) -> Self {
        self.env.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        self
    }

    /// Exec the server through `sh -c "<prelude>; exec sandboxd …"` (`trap '' INT QUIT`: started
    /// as by a shell's `&`).
    pub fn prelude(mut self, prelude: &str) -> Self {
        self.prelude = Some(prelude.into());
        self
    }

    /// Where the server's stderr goes (default: a file in the fixture's own temp dir).
    pub fn log_file(mut self, path: PathBuf) -> Self {
        self.log = Some(path);
        self
    }

    /// The server command with the test's config written into `dir` (and the token file, if
    /// any): stdin closed, `RUST_LOG=info`, signal dispositions reset; stdout and stderr are the
    /// caller's to set.
    pub fn command(&self, dir: &Path) -> Command {
        let config = dir.join("config.json");
        let body = crate::config::with_run_args(self.run_args.clone(), self.config.clone());
        std::fs::write(&config, body.to_string()).expect("write config");
        let mut cmd = match &self.prelude {
            Some(prelude) => {
                let mut cmd = Command::new("sh");
                cmd.arg("-c").arg(format!("{prelude}; exec \"$0\" \"$@\"")).arg(&self.binary);
                cmd
            }
            None => Command::new(&self.binary),
        };
        cmd.arg("--listen").arg(&self.listen).arg("--config").arg(&config);
        if let Some(token) = &self.token {
            let path = dir.join("token");
            std::fs::write(&path, token).expect("write token");
            cmd.arg("--auth-token-file").arg(path);
        }
        cmd.args(&self.flags)
            .env("RUST_LOG", "info")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null());
        // A test run started with `&` inherits SIGINT ignored; the server must not (issue 9).
        sandboxd::backends::docker::cli::reset_signal_dispositions(&mut cmd);
        cmd
    }

    /// Starts the server and waits for its `sandboxd listening on ADDR` line.
    pub fn start(self) -> TestServer {
        crate::require_docker();
        let dir = tempfile::tempdir().expect("tempdir");
        let log = self.log.clone().unwrap_or_else(|| dir.path().join("server.log"));
        let stderr = std::fs::OpenOptions::new().create(true).append(true).open(&log).expect("server log");
        let mut cmd = self.command(dir.path());
        let mut child = cmd.stdout(Stdio::piped()).stderr(stderr).spawn().expect("spawn sandboxd");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("sandboxd metrics on http://") {
                    let _ = tx.send(Printed::Metrics(url.trim().trim_end_matches("/metrics").to_string()));
                }
                if let Some(addr) = line.strip_prefix("sandboxd e2b on http://") {
                    let _ = tx.send(Printed::E2b(addr.trim().to_string()));
                }
                if let Some(addr) = line.strip_prefix("sandboxd listening on ") {
                    let _ = tx.send(Printed::Listening(addr.trim().to_string()));
                }
            }
        });
        let deadline = Instant::now() + LISTENING_WITHIN;
        let mut metrics_addr = None;
        let mut e2b_addr = None;
        let addr = loop {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Printed::Listening(addr)) => break addr,
                Ok(Printed::Metrics(addr)) => metrics_addr = Some(addr),
                Ok(Printed::E2b(addr)) => e2b_addr = Some(addr),
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let text = std::fs::read_to_string(&log).unwrap_or_default();
                    panic!(
                        "sandboxd (test {}) did not print its listening line within {LISTENING_WITHIN:?}:\n{text}",
                        self.label_value
                    );
                }
            }
        };
        TestServer { child, url: format!("http://{addr}"), addr, metrics_addr, e2b_addr, log, _dir: dir }
    }
}

/// The lines of the server's stdout that the fixture reads.
enum Printed {
    Metrics(String),
    E2b(String),
    Listening(String),
}

impl TestServer {
    /// A launch of `binary` with the test defaults for `label`; `.start()` runs it.
    pub fn launch(binary: impl AsRef<Path>, label: &TestLabel) -> Launch {
        Launch {
            binary: binary.as_ref().to_path_buf(),
            run_args: label.run_args(),
            label_value: label.value.clone(),
            config: serde_json::json!({}),
            listen: "127.0.0.1:0".into(),
            token: None,
            flags: Vec::new(),
            env: Vec::new(),
            prelude: None,
            log: None,
        }
    }

    /// `BINARY --listen 127.0.0.1:0 --config FILE [--auth-token-file FILE]` with the test defaults.
    pub fn start(binary: impl AsRef<Path>, label: &TestLabel, token: Option<&str>) -> TestServer {
        Self::launch(binary, label).token(token).start()
    }

    /// As `start`, with more flags.
    pub fn start_with(
        binary: impl AsRef<Path>,
        label: &TestLabel,
        token: Option<&str>,
        extra: &[&str],
    ) -> TestServer {
        Self::launch(binary, label).token(token).flags(extra).start()
    }

    /// As `start_with`, with environment variables for the server process.
    pub fn start_env(
        binary: impl AsRef<Path>,
        label: &TestLabel,
        token: Option<&str>,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> TestServer {
        Self::launch(binary, label).token(token).flags(extra).env(env).start()
    }

    /// The server command with the test's config in `dir`, for a test that runs the process
    /// itself (its own stdout, stderr, log format).
    pub fn command(binary: impl AsRef<Path>, label: &TestLabel, dir: &Path, token: Option<&str>) -> Command {
        Self::launch(binary, label).token(token).command(dir)
    }

    /// What the server wrote to stderr so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), signal);
    }

    /// Wait for the exit, failing the test past `within` (a hang is the bug being tested).
    pub fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the server did not exit within {within:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM, then the exit status (within `within`; `None` past it).
    pub fn terminate(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// The Rust client on this server.
    pub async fn client(&self) -> Client {
        Client::connect(self.url.clone()).await.expect("connect")
    }

    /// The generated stub on this server.
    pub async fn raw(&self) -> RawClient {
        raw_client(&self.url).await
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let logs = self.logs();
            let tail: Vec<&str> = logs.lines().rev().take(80).collect();
            eprintln!("--- the last lines of sandboxd's log ({}):", self.log.display());
            for line in tail.into_iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

/// `GET /metrics` from a `--metrics-listen` address over plain HTTP/1.0: it answers 200 with the
/// OpenMetrics content type; the body.
pub fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to metrics");
    stream.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.to_lowercase().contains("content-type: application/openmetrics-text"), "{head}");
    body.to_string()
}
