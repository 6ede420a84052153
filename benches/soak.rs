//! Soak: the release server as a separate process under N client processes for M minutes,
//! with faults, then checks that nothing leaked and nothing froze. Prints ONE summary line
//! (`SOAK PASS …` / `SOAK FAIL …`) and exits non-zero on any violation.
//!
//! `scripts/soak.sh [--ci] [--clients N] [--sandboxes S] [--minutes M | --seconds S]`
//! (or `cargo bench --bench soak -- …`). Under `cargo test --all-targets` it does not run
//! (a soak is minutes long); `scripts/test.sh` runs `scripts/soak.sh --ci` instead.
//!
//! A run: warm-up traffic without faults, a hold (every worker stops and keeps one sandbox)
//! where the server's RSS and fd count are taken as the baseline, then the chaos phase:
//! creates, execs (some stopped by their timeout, some by their deadline), uploads and
//! downloads checked byte for byte, PTY and pipe sessions, calls dropped at random points,
//! client processes SIGKILLed or SIGSTOPped (then SIGCONTed or killed), sandboxes
//! `docker kill`ed from outside, and the server SIGKILLed and restarted on the same port. Then
//! a second hold, where the run asserts: no container of this run but the held ones (orphans
//! of killed clients are removed by their lease, killed creates by the sweep), no stray
//! process inside held sandboxes, no `docker` child of the server but its events stream (and
//! agent channels, one per held sandbox at most), RSS and fds within 10% of the baseline, and
//! every call answered within its deadline plus grace. Finally the clients close their
//! sandboxes and exit, and no container of this run may remain.

#[path = "soak/checks.rs"]
mod checks;
#[path = "soak/client.rs"]
mod client;
#[path = "soak/faults.rs"]
mod faults;
#[path = "soak/server.rs"]
mod server;
#[path = "soak/stats.rs"]
mod stats;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use server::{Footprint, ServerProcess};
use stats::{Event, Totals};

#[derive(Debug, Parser)]
#[command(name = "soak")]
struct Cli {
    #[command(subcommand)]
    mode: Option<Mode>,
    /// Client processes (each runs sandboxes/clients workers).
    #[arg(long, env = "SOAK_CLIENTS", default_value_t = 4)]
    clients: usize,
    /// Sandboxes held at once (one per worker; rounded up to a multiple of --clients).
    #[arg(long, env = "SOAK_SANDBOXES", default_value_t = 8)]
    sandboxes: usize,
    /// Length of the fault phase in minutes.
    #[arg(long, env = "SOAK_MINUTES", conflicts_with = "seconds")]
    minutes: Option<f64>,
    /// Length of the fault phase in seconds.
    #[arg(long, env = "SOAK_SECONDS")]
    seconds: Option<f64>,
    /// CI's short run: 75 s of faults unless --seconds/--minutes say otherwise.
    #[arg(long)]
    ci: bool,
    /// Seconds of fault-free traffic before the baseline.
    #[arg(long, env = "SOAK_WARMUP_S", default_value_t = 15.0)]
    warmup_s: f64,
    /// Lease of every sandbox (renewed while in use); bounds how long orphans live.
    #[arg(long, env = "SOAK_TTL_S", default_value_t = 20.0)]
    ttl_s: f64,
    /// The server binary; default: `cargo build --release -p sandboxd` output.
    #[arg(long, env = "SOAK_SERVER_BIN")]
    server_bin: Option<PathBuf>,
    /// `exec.engine` of the server under test (`agent` or `docker`); unset: the server's default.
    #[arg(long, env = "SOAK_ENGINE")]
    engine: Option<String>,
    /// Seed of the fault schedule and the clients' choices (default: from the clock).
    #[arg(long, env = "SOAK_SEED")]
    seed: Option<u64>,
    /// Run against a private Docker daemon (own containerd, data root and network namespace,
    /// removed at the end) instead of the machine's: long runs churn thousands of containers,
    /// and a daemon wedged by that (docker 20.10's libnetwork was, once) is then not the host's.
    #[arg(long, env = "SOAK_PRIVATE_DAEMON")]
    private_daemon: bool,
    /// Passed by `cargo bench`.
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(Debug, Subcommand)]
enum Mode {
    /// One client process (spawned by the driver).
    Client(client::ClientArgs),
}

/// Seconds between two sweeps of the server under test.
const SWEEP_S: f64 = 2.0;
/// Bound on a create in the server under test (a create killed with the server is swept after it).
const CREATE_TIMEOUT_S: f64 = 30.0;
/// RSS and fds may end this much above the baseline.
const FOOTPRINT_SLACK: f64 = 0.10;
/// Idle time at a hold before the footprint is read (which then takes the lowest RSS over 8 s:
/// the server gives freed memory back after a sweep, at most every 5 s, `sandboxd::memory`).
const SETTLE: Duration = Duration::from_secs(3);
/// A `docker` process under the server that lives this long at a hold is left behind.
const LINGER: Duration = Duration::from_secs(10);

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Mode::Client(args)) = cli.mode {
        return client::run(args);
    }
    if !cli.bench && !cli.ci && cli.seconds.is_none() && cli.minutes.is_none() {
        println!("soak: not run under `cargo test` (minutes long); run scripts/soak.sh [--ci]");
        return ExitCode::SUCCESS;
    }
    // Kept until the run ends; every docker client of the run (the server's, the checks')
    // finds it through DOCKER_HOST, set before any thread starts.
    let _private = match cli.private_daemon.then(start_private_daemon).transpose() {
        Ok(private) => private,
        Err(e) => {
            eprintln!("soak: {e}");
            return ExitCode::from(2);
        }
    };
    match Driver::new(cli).and_then(Driver::run) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("soak: {e}");
            ExitCode::from(2)
        }
    }
}

/// A private daemon with a bridge of its own and the test images, made the run's `DOCKER_HOST`.
fn start_private_daemon() -> Result<testkit::private_docker::PrivateDocker, String> {
    testkit::images::host_has_docker()?;
    testkit::images::ensure_images()?;
    let docker = testkit::private_docker::PrivateDocker::start_with(
        &testkit::images::ALL,
        testkit::private_docker::PrivateNetwork::Bridge,
    );
    eprintln!("soak: private docker daemon at {}", docker.host());
    std::env::set_var("DOCKER_HOST", docker.host());
    Ok(docker)
}

/// One client process and what it reported.
struct ClientProc {
    child: Child,
    frozen_at: Option<Instant>,
}

struct Driver {
    cli: Cli,
    seconds: f64,
    workers_per_client: usize,
    run_label: String,
    dir: tempfile::TempDir,
    server: ServerProcess,
    clients: BTreeMap<u64, ClientProc>,
    next_client: u64,
    events: mpsc::Receiver<(u64, Event)>,
    events_tx: mpsc::Sender<(u64, Event)>,
    held: BTreeMap<u64, Vec<Option<String>>>,
    /// The number of the current (or last) hold; workers report each number once.
    hold_number: u64,
    totals: Totals,
    rng: fastrand::Rng,
    seed: u64,
}

impl Driver {
    fn new(cli: Cli) -> Result<Self, String> {
        testkit::images::host_has_docker()?;
        testkit::images::ensure_images()?;
        let seconds = match (cli.seconds, cli.minutes) {
            (Some(s), _) => s,
            (None, Some(m)) => m * 60.0,
            (None, None) if cli.ci => 75.0,
            (None, None) => 120.0,
        };
        if cli.clients == 0 || cli.sandboxes == 0 || seconds <= 0.0 {
            return Err("--clients, --sandboxes and the duration must be > 0".into());
        }
        let seed = cli.seed.unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
        });
        let run = uuid::Uuid::new_v4().simple().to_string();
        let run_label = format!("sandboxd.soak.run={run}");
        // CI's run is one of the test suites (scripts/test.sh sweeps `sandboxd.test=1` after a
        // crash); a long run carries its own family label so a test run beside it leaves it be.
        let family_label = if cli.ci { "sandboxd.test=1" } else { "sandboxd.soak=1" };
        let dir = tempfile::Builder::new().prefix("sandboxd-soak-").tempdir().map_err(|e| e.to_string())?;
        let config = dir.path().join("config.json");
        let body = serde_json::json!({
            "docker": {
                "create": {"extra_run_args": ["--label", family_label, "--label", run_label]},
                "exec": {"default_timeout_s": 60.0},
            },
            "server": {
                "state_dir": dir.path().join("state"),
                "sweep_interval_s": SWEEP_S,
                "create_timeout_s": CREATE_TIMEOUT_S,
            },
        });
        let mut body = body;
        if let Some(engine) = &cli.engine {
            body["docker"]["exec"]["engine"] = serde_json::json!(engine);
        }
        std::fs::write(&config, body.to_string()).map_err(|e| e.to_string())?;
        let binary = match &cli.server_bin {
            Some(b) => b.clone(),
            None => build_server()?,
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        let server = ServerProcess::new(binary, config, dir.path().join("server.log"), port);
        let (events_tx, events) = mpsc::channel();
        let workers_per_client = cli.sandboxes.div_ceil(cli.clients);
        Ok(Self {
            cli,
            seconds,
            workers_per_client,
            run_label,
            dir,
            server,
            clients: BTreeMap::new(),
            next_client: 0,
            events,
            events_tx,
            held: BTreeMap::new(),
            hold_number: 0,
            totals: Totals::default(),
            rng: fastrand::Rng::with_seed(seed),
            seed,
        })
    }

    fn hold_file(&self) -> PathBuf {
        self.dir.path().join("hold")
    }

    fn stop_file(&self) -> PathBuf {
        self.dir.path().join("stop")
    }

    fn spawn_client(&mut self) -> Result<(), String> {
        let id = self.next_client;
        self.next_client += 1;
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("clients.log"))
            .map_err(|e| e.to_string())?;
        let mut child = Command::new(exe)
            .arg("client")
            .args(["--url", &self.server.url()])
            .args(["--workers", &self.workers_per_client.to_string()])
            .args(["--ttl-s", &self.cli.ttl_s.to_string()])
            .arg("--hold-file")
            .arg(self.hold_file())
            .arg("--stop-file")
            .arg(self.stop_file())
            .args(["--image", testkit::images::BUSYBOX])
            .args(["--seed", &(self.seed.wrapping_add(id)).to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("spawn client: {e}"))?;
        let stdout = child.stdout.take().expect("stdout");
        let tx = self.events_tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(event) = Event::parse(&line) {
                    if tx.send((id, event)).is_err() {
                        break;
                    }
                }
            }
        });
        self.clients.insert(id, ClientProc { child, frozen_at: None });
        Ok(())
    }

    /// A client in place of one that was killed or died; a client that cannot start is a
    /// violation (the run goes on with fewer).
    fn respawn(&mut self) {
        if let Err(e) = self.spawn_client() {
            self.totals.violations.push(format!("could not start a client: {e}"));
        }
    }

    /// Folds in what the clients reported, and notices clients that exited.
    fn drain(&mut self) {
        while let Ok((id, event)) = self.events.try_recv() {
            if let Event::Held { hold, sandbox } = &event {
                if *hold == self.hold_number {
                    self.held.entry(id).or_default().push(sandbox.clone());
                }
            }
            self.totals.record(&event);
        }
    }

    fn signal(&self, id: u64, signal: Signal) {
        if let Some(c) = self.clients.get(&id) {
            let _ = kill(Pid::from_raw(c.child.id() as i32), signal);
        }
    }

    fn kill_client(&mut self, id: u64) {
        if let Some(mut c) = self.clients.remove(&id) {
            let _ = c.child.kill();
            let _ = c.child.wait();
        }
    }

    fn sleep(&mut self, d: Duration) {
        std::thread::sleep(d);
        self.drain();
    }

    fn run(mut self) -> Result<ExitCode, String> {
        let _ = std::fs::remove_file(self.hold_file());
        self.server.start()?;
        for _ in 0..self.cli.clients {
            self.spawn_client()?;
        }
        eprintln!(
            "soak: {} clients x {} workers, {:.0} s of faults after {:.0} s warm-up, seed {}, dir {}",
            self.cli.clients,
            self.workers_per_client,
            self.seconds,
            self.cli.warmup_s,
            self.seed,
            self.dir.path().display()
        );
        self.sleep(Duration::from_secs_f64(self.cli.warmup_s));

        // Baseline: everyone holds one idle sandbox.
        let held = self.hold()?;
        std::thread::sleep(SETTLE);
        let base = self.server.footprint();
        self.check_strays(&held);
        let _ = std::fs::remove_file(self.hold_file());
        eprintln!(
            "soak: baseline rss {} KiB, {} fds ({} for docker children), {} sandboxes held; {}",
            base.rss_kib,
            base.fds,
            base.child_fds,
            held.len(),
            self.server.footprint_detail()
        );

        let base = self.faults().unwrap_or(base);

        // End: hold again; orphans must go; then measure and check.
        self.thaw_all();
        let held = self.hold()?;
        let leaks = self.wait_orphans(&held);
        std::thread::sleep(SETTLE);
        let end = self.server.footprint();
        eprintln!(
            "soak: end rss {} KiB, {} fds ({} for docker children), {} sandboxes held; {}",
            end.rss_kib,
            end.fds,
            end.child_fds,
            held.len(),
            self.server.footprint_detail()
        );
        let strays = self.check_strays(&held);
        let docker_clients = self.check_docker_children(held.len());
        self.check_footprint(base, end);

        // Clients close their sandboxes and exit; nothing of this run may remain.
        std::fs::write(self.stop_file(), b"").map_err(|e| e.to_string())?;
        self.wait_clients_exit();
        let remaining = self.wait_containers(|c| c.is_empty(), Duration::from_secs(30));
        if !remaining.is_empty() {
            self.totals.violations.push(format!("containers left after every client closed: {remaining:?}"));
        }
        self.server.stop(Duration::from_secs(10));
        checks::remove_all(&self.run_label);
        self.drain();
        if !self.totals.overruns.is_empty() {
            let first: Vec<_> = self.totals.overruns.iter().take(5).cloned().collect();
            self.totals
                .violations
                .push(format!("{} calls overran their deadline: {first:?}", self.totals.overruns.len()));
        }
        let never_ok: Vec<&str> =
            ["create", "exec", "exec_timeout", "upload", "download", "pty", "pipe", "close"]
                .into_iter()
                .filter(|op| self.totals.ok_by_kind.get(*op).copied().unwrap_or(0) == 0)
                .collect();
        if !never_ok.is_empty() {
            self.totals.violations.push(format!("calls that never succeeded: {never_ok:?}"));
        }
        if !self.totals.corrupt.is_empty() {
            let first: Vec<_> = self.totals.corrupt.iter().take(5).cloned().collect();
            self.totals.violations.push(format!("{} wrong results: {first:?}", self.totals.corrupt.len()));
        }
        for v in &self.totals.violations {
            eprintln!("soak: VIOLATION: {v}");
        }
        let summary = self.totals.summary(&[
            ("clients", self.cli.clients.to_string()),
            ("sandboxes", (self.workers_per_client * self.cli.clients).to_string()),
            ("seconds", format!("{:.0}", self.seconds)),
            ("leaks", (leaks + remaining.len()).to_string()),
            ("strays", strays.to_string()),
            ("docker_clients", docker_clients.to_string()),
            ("rss_kib", format!("{}->{}", base.rss_kib, end.rss_kib)),
            ("fds", format!("{}->{}", base.fds, end.fds)),
            ("seed", self.seed.to_string()),
        ]);
        println!("{summary}");
        if !self.totals.violations.is_empty() || std::env::var_os("SOAK_KEEP_LOGS").is_some() {
            eprintln!("soak: logs kept in {}", self.dir.path().display());
            self.dir.disable_cleanup(true);
        }
        Ok(if self.totals.violations.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
    }

    /// Asks every client to hold; waits until every worker reported; the held sandboxes.
    fn hold(&mut self) -> Result<BTreeSet<String>, String> {
        self.drain();
        self.held.clear();
        // A new number each time, written whole (rename): a worker still in the previous hold
        // (it did not look between its end and this one) reports again.
        self.hold_number += 1;
        let next = self.dir.path().join("hold.next");
        std::fs::write(&next, self.hold_number.to_string()).map_err(|e| e.to_string())?;
        std::fs::rename(&next, self.hold_file()).map_err(|e| e.to_string())?;
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            self.sleep(Duration::from_millis(200));
            let missing: Vec<u64> = self
                .clients
                .keys()
                .copied()
                .filter(|id| self.held.get(id).map_or(0, Vec::len) < self.workers_per_client)
                .collect();
            if missing.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                self.totals
                    .violations
                    .push(format!("clients {missing:?} did not reach the hold within 120 s"));
                break;
            }
        }
        Ok(self.held.values().flatten().flatten().cloned().collect())
    }

    /// Waits for every container of this run that no client holds to go; the count left.
    fn wait_orphans(&mut self, held: &BTreeSet<String>) -> usize {
        let bound = self.cli.ttl_s.max(CREATE_TIMEOUT_S + 5.0) + 3.0 * SWEEP_S + 20.0;
        let left = self
            .wait_containers(|c| c.iter().all(|c| held.contains(&c.name)), Duration::from_secs_f64(bound));
        let orphans: Vec<_> = left.into_iter().filter(|n| !held.contains(n)).collect();
        if !orphans.is_empty() {
            self.totals
                .violations
                .push(format!("containers no client holds, {bound:.0} s after the faults: {orphans:?}"));
        }
        orphans.len()
    }

    /// Polls this run's containers until `done` holds or `within` passes; the names left.
    fn wait_containers(
        &mut self,
        done: impl Fn(&[checks::Container]) -> bool,
        within: Duration,
    ) -> Vec<String> {
        let deadline = Instant::now() + within;
        loop {
            let list = checks::containers(&self.run_label);
            if done(&list) || Instant::now() > deadline {
                return list.into_iter().map(|c| c.name).collect();
            }
            self.sleep(Duration::from_millis(500));
        }
    }

    fn check_strays(&mut self, held: &BTreeSet<String>) -> usize {
        let running: BTreeSet<String> =
            checks::containers(&self.run_label).into_iter().filter(|c| c.running).map(|c| c.name).collect();
        let mut strays = Vec::new();
        for name in held.iter().filter(|n| running.contains(*n)) {
            match checks::stray_processes(name) {
                Ok(found) => strays.extend(found),
                Err(e) => eprintln!("soak: docker top {name}: {e}"),
            }
        }
        if !strays.is_empty() {
            self.totals.violations.push(format!("stray processes in held sandboxes: {strays:?}"));
        }
        strays.len()
    }

    fn check_docker_children(&mut self, held: usize) -> usize {
        // `docker events` is the server's one status stream; agent channels serve held sandboxes.
        // The sweep's `docker ps` and other short commands come and go: only a process seen
        // again (same pid) `LINGER` later counts.
        let first = self.server.docker_children();
        std::thread::sleep(LINGER);
        let children: Vec<String> = self
            .server
            .docker_children()
            .into_iter()
            .filter(|child| first.contains(child))
            .map(|(_, a)| a.split_once(' ').map_or(a.clone(), |(_, rest)| format!("docker {rest}")))
            .collect();
        let agents = children.iter().filter(|a| a.contains("/.sandboxd/agent")).count();
        let unexpected: Vec<_> = children.iter().filter(|a| !server::long_lived(a)).cloned().collect();
        let mut count = unexpected.len();
        if !unexpected.is_empty() {
            self.totals.violations.push(format!("docker clients left under the server: {unexpected:?}"));
        }
        if agents > held {
            count += agents - held;
            self.totals.violations.push(format!("{agents} agent channels for {held} held sandboxes"));
        }
        count
    }

    /// RSS and fds at most 10% above the baseline. The fds held for docker children follow
    /// what runs at that moment (an agent channel opens on a sandbox's first use and a held
    /// sandbox may have none; a sweep's `docker ps` may be in flight), so the end's count is
    /// compared as if it had the baseline's; the children themselves are
    /// `check_docker_children`'s to judge (none that stays but the events stream and one agent
    /// channel per held sandbox).
    fn check_footprint(&mut self, base: Footprint, end: Footprint) {
        let limit = |b: f64| (b * (1.0 + FOOTPRINT_SLACK)).ceil();
        if end.rss_kib as f64 > limit(base.rss_kib as f64) {
            self.totals
                .violations
                .push(format!("server RSS {} KiB > baseline {} KiB + 10%", end.rss_kib, base.rss_kib));
        }
        let end_fds = (end.fds + base.child_fds).saturating_sub(end.child_fds);
        if end_fds as f64 > limit(base.fds as f64) {
            self.totals.violations.push(format!(
                "server fds {} ({} with the baseline's {} fds for docker children instead of {}) > baseline {} + 10%",
                end.fds, end_fds, base.child_fds, end.child_fds, base.fds
            ));
        }
    }

    fn wait_clients_exit(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(90);
        while Instant::now() < deadline {
            self.drain();
            let ids: Vec<u64> = self.clients.keys().copied().collect();
            for id in ids {
                if let Ok(Some(_)) = self.clients.get_mut(&id).unwrap().child.try_wait() {
                    self.clients.remove(&id);
                }
            }
            if self.clients.is_empty() {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let stuck: Vec<u64> = self.clients.keys().copied().collect();
        self.totals.violations.push(format!("clients {stuck:?} did not close and exit within 90 s"));
        for id in stuck {
            self.kill_client(id);
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        for id in self.clients.keys().copied().collect::<Vec<_>>() {
            self.kill_client(id);
        }
        self.server.kill();
        checks::remove_all(&self.run_label);
    }
}

/// `cargo build --release -p sandboxd --bin sandboxd`; its binary.
fn build_server() -> Result<PathBuf, String> {
    // The workspace root (this crate is `benches/`), where `target/` is.
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "-q", "--release", "-p", "sandboxd", "--bin", "sandboxd"])
        .current_dir(root)
        .status()
        .map_err(|e| format!("cargo build: {e}"))?;
    if !status.success() {
        return Err("cargo build --release -p sandboxd failed".into());
    }
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));
    Ok(target.join("release").join("sandboxd"))
}
