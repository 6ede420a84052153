//! The agent as a real sandbox's keep-alive: `docker run --init … /.sandboxd/agent init -- <the
//! keep-alive>` on the test images, its run directory a host temp dir bind-mounted at
//! `/.sandboxd/run`, the host connecting to the socket directly. Every container is named
//! `sandboxd-agent-test-…` and removed by that name.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{pty, wait_for_socket, Conn};
use sandboxd_agent::protocol::{
    DetachReason, Event, FailureKind, ReadyState, Request, SessionStart, WindowSize,
};
use testkit::images;

const KEEPALIVE: [&str; 3] = ["/bin/sh", "-c", "while :; do sleep 2147483647; done"];
const PROBE: [&str; 4] = ["--probe", "printf docker-sandbox-ready", "--probe-expect", "docker-sandbox-ready"];

fn docker(args: &[&str]) -> Output {
    Command::new("docker").args(args).output().expect("running docker")
}

/// The agent built as the server embeds it: static, for images with no libc.
fn static_agent() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
        let target_dir = workspace.join("target").join("agent-static");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "--release", "--offline", "-p", "sandboxd-agent", "--bin", "sandboxd-agent"])
            .args(["--target", "x86_64-unknown-linux-gnu", "--manifest-path"])
            .arg(workspace.join("Cargo.toml"))
            .env("CARGO_TARGET_DIR", &target_dir)
            .env("RUSTFLAGS", "-C target-feature=+crt-static")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .status()
            .unwrap();
        assert!(status.success(), "building the static agent failed");
        target_dir.join("x86_64-unknown-linux-gnu/release/sandboxd-agent")
    })
}

struct Sandbox {
    name: String,
    run: tempfile::TempDir,
}

impl Sandbox {
    /// `docker run -d --init` of `image` with the agent as its keep-alive.
    fn start(image: &str, docker_args: &[&str], init_args: &[&str], argv: &[&str]) -> Self {
        Self::start_in(tempfile::tempdir().unwrap(), image, docker_args, init_args, argv)
    }

    fn start_in(
        run: tempfile::TempDir,
        image: &str,
        docker_args: &[&str],
        init_args: &[&str],
        argv: &[&str],
    ) -> Self {
        Self::start_with(static_agent(), run, image, docker_args, init_args, argv)
    }

    /// As `start_in`, with the agent binary `agent`.
    fn start_with(
        agent: &Path,
        run: tempfile::TempDir,
        image: &str,
        docker_args: &[&str],
        init_args: &[&str],
        argv: &[&str],
    ) -> Self {
        let (name, out) = Self::run_agent(agent, &run, image, docker_args, init_args, argv);
        let sandbox = Self { name, run };
        assert!(out.status.success(), "docker run: {}", String::from_utf8_lossy(&out.stderr));
        wait_for_socket(&sandbox.socket());
        sandbox
    }

    /// The container's `docker run` alone (no wait for its socket): its name and the output.
    fn run(
        run: &tempfile::TempDir,
        image: &str,
        docker_args: &[&str],
        init_args: &[&str],
        argv: &[&str],
    ) -> (String, Output) {
        Self::run_agent(static_agent(), run, image, docker_args, init_args, argv)
    }

    fn run_agent(
        agent: &Path,
        run: &tempfile::TempDir,
        image: &str,
        docker_args: &[&str],
        init_args: &[&str],
        argv: &[&str],
    ) -> (String, Output) {
        testkit::require_docker();
        if image.starts_with("sandboxd-test/") {
            images::ensure(image).unwrap();
        }
        let name = format!("sandboxd-agent-test-{}", uuid_like());
        let volume = format!("{}:/.sandboxd/run", run.path().display());
        let mount = format!("type=bind,source={},target=/.sandboxd/agent,readonly", agent.display());
        let mut args = vec![
            "run",
            "-d",
            "--init",
            "--name",
            &name,
            "--label",
            "sandboxd-agent-test=1",
            "-v",
            &volume,
            "--mount",
            &mount,
        ];
        args.extend(docker_args);
        args.extend(["--entrypoint", "/.sandboxd/agent", image, "init"]);
        args.extend(init_args);
        args.push("--");
        args.extend(argv);
        let out = docker(&args);
        (name, out)
    }

    /// A container whose agent may end at once: it is removed when the result drops.
    fn start_unchecked(image: &str, init_args: &[&str], argv: &[&str]) -> Self {
        let run = tempfile::tempdir().unwrap();
        let (name, out) = Self::run(&run, image, &[], init_args, argv);
        let sandbox = Self { name, run };
        assert!(out.status.success(), "docker run: {}", String::from_utf8_lossy(&out.stderr));
        sandbox
    }

    fn socket(&self) -> PathBuf {
        self.run.path().join("agent.sock")
    }

    fn connect(&self) -> Conn {
        Conn::connect(&self.socket()).unwrap()
    }

    /// `docker exec [-u user] <name> args…`.
    fn exec(&self, user: Option<&str>, args: &[&str]) -> Output {
        let mut full = vec!["exec"];
        if let Some(u) = user {
            full.extend(["-u", u]);
        }
        full.push(&self.name);
        full.extend(args);
        docker(&full)
    }

    /// `exec_create` events the daemon logged for this container since `since` (unix seconds).
    fn docker_execs_since(&self, since: u64) -> usize {
        let since = since.to_string();
        let until = (unix_now() + 1).to_string();
        let filter = format!("container={}", self.name);
        let out = docker(&[
            "events",
            "--since",
            &since,
            "--until",
            &until,
            "--filter",
            &filter,
            "--filter",
            "event=exec_create",
            "--format",
            "{{.Action}}",
        ]);
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.starts_with("exec_create")).count()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        docker(&["rm", "-f", &self.name]);
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

fn uuid_like() -> String {
    let mut b = [0u8; 6];
    unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn session_id(event: Event) -> (String, u64) {
    match event {
        Event::SessionOpened { session_id, offset, .. } => (session_id, offset),
        other => panic!("expected SessionOpened, got {other:?}"),
    }
}

fn until_exit(c: &mut Conn, id: u64) -> i32 {
    loop {
        match c.next(id) {
            Event::Output { .. } => {}
            Event::SessionExit { code } => return code,
            other => panic!("expected the exit, got {other:?}"),
        }
    }
}

#[test]
fn the_hello_carries_readiness_and_the_shell_and_docker_logs_keep_the_wrapped_output() {
    let argv =
        ["/bin/sh", "-c", "echo wrapped-says-hi; echo wrapped-err >&2; while :; do sleep 2147483647; done"];
    let busybox = Sandbox::start(images::BUSYBOX, &[], &PROBE, &argv);
    let bash = Sandbox::start(images::BASH, &[], &PROBE, &KEEPALIVE);
    let mut c = busybox.connect();
    assert_eq!(c.settled_readiness(), (ReadyState::Ready, "sh".to_string(), String::new()));
    assert_eq!(bash.connect().settled_readiness(), (ReadyState::Ready, "bash".to_string(), String::new()));
    // The agent is not pid 1 (docker's init is); the wrapped command is its child.
    assert_ne!(c.pid, 1);
    let (ps, _) = c.exec(1, "cat /proc/1/comm; cat /proc/$PPID/comm 2>/dev/null; ps -o pid,ppid,args");
    assert!(ps.contains("docker-init") || ps.contains("tini"), "{ps}");
    let logs = docker(&["logs", &busybox.name]);
    assert!(String::from_utf8_lossy(&logs.stdout).contains("wrapped-says-hi"));
    assert!(String::from_utf8_lossy(&logs.stderr).contains("wrapped-err"));
    // A failing probe is reported, with its detail, as the create used to report it.
    let failing = Sandbox::start(images::BUSYBOX, &[], &["--probe", "echo nope >&2; exit 3"], &KEEPALIVE);
    let (state, _, detail) = failing.connect().settled_readiness();
    assert_eq!(state, ReadyState::Failed);
    assert!(detail.contains("return_code=3") && detail.contains("nope"), "{detail}");
}

#[test]
fn an_image_without_a_shell_is_kept_alive_by_the_agent_itself() {
    // The server passes its keep-alive with `--keep-alive`: the image lacks its program, so the
    // agent keeps the sandbox alive itself; without `sh` the probe is skipped.
    let mut init = vec!["--keep-alive"];
    init.extend(PROBE);
    let sandbox = Sandbox::start(images::NOSHELL, &[], &init, &KEEPALIVE);
    let mut c = sandbox.connect();
    assert_eq!(c.settled_readiness(), (ReadyState::Ready, String::new(), String::new()));
    let logs = docker(&["logs", &sandbox.name]);
    assert!(String::from_utf8_lossy(&logs.stderr).contains("keeps the sandbox alive itself"), "{logs:?}");
    // Sessions need no shell: the agent runs a program by path.
    c.send(
        1,
        Request::SessionOpen(SessionStart {
            argv: vec!["/.sandboxd/agent".into(), "--version".into()],
            attach: true,
            ..Default::default()
        }),
    );
    session_id(c.next(1));
    let version = format!("protocol {}", sandboxd_agent::protocol::PROTOCOL_VERSION);
    let (text, _) = c.output_until(1, "the version", |t| t.contains(&version));
    assert!(text.starts_with("sandboxd-agent"));
    // docker stop: SIGTERM reaches the agent (through docker's init) and ends it at once.
    let started = Instant::now();
    assert!(docker(&["stop", "-t", "20", &sandbox.name]).status.success());
    assert!(started.elapsed() < Duration::from_secs(10), "stop took {:?}", started.elapsed());
    let code = docker(&["inspect", "-f", "{{.State.ExitCode}}", &sandbox.name]);
    assert_eq!(String::from_utf8_lossy(&code.stdout).trim(), "143");
    // A spec's entrypoint is never replaced: without `--keep-alive` a missing program ends it.
    let missing = Sandbox::start_unchecked(images::NOSHELL, &[], &KEEPALIVE);
    let wait = docker(&["wait", &missing.name]);
    assert_eq!(String::from_utf8_lossy(&wait.stdout).trim(), "127");
}

#[test]
fn the_sandbox_ends_with_its_wrapped_command_and_stops_on_sigterm() {
    let ends = Sandbox::start(images::BUSYBOX, &[], &[], &["/bin/sh", "-c", "sleep 1; exit 3"]);
    let wait = docker(&["wait", &ends.name]);
    assert_eq!(String::from_utf8_lossy(&wait.stdout).trim(), "3");
    let stops = Sandbox::start(images::BUSYBOX, &[], &PROBE, &KEEPALIVE);
    stops.connect().settled_readiness();
    let started = Instant::now();
    assert!(docker(&["stop", "-t", "20", &stops.name]).status.success());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "SIGTERM was not forwarded: {:?}",
        started.elapsed()
    );
}

#[test]
fn a_non_root_process_in_the_sandbox_can_neither_connect_nor_replace_the_socket() {
    // A link planted on the host side where the socket goes is removed, never followed.
    let run = tempfile::tempdir().unwrap();
    let precious = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(precious.path(), b"host file").unwrap();
    std::os::unix::fs::symlink(precious.path(), run.path().join("agent.sock")).unwrap();
    let sandbox = Sandbox::start_in(run, images::BUSYBOX, &[], &PROBE, &KEEPALIVE);
    assert_eq!(std::fs::read(precious.path()).unwrap(), b"host file");
    let ping = sandbox.exec(Some("65534"), &["/.sandboxd/agent", "ping"]);
    assert!(!ping.status.success());
    assert!(
        String::from_utf8_lossy(&ping.stderr).contains("Permission denied"),
        "{}",
        String::from_utf8_lossy(&ping.stderr)
    );
    for attack in [
        "rm -f /.sandboxd/run/agent.sock",
        "ln -sf /etc/passwd /.sandboxd/run/agent.sock",
        "mv /.sandboxd/run /.sandboxd/elsewhere",
        "touch /.sandboxd/run/x",
        "ls /.sandboxd/run",
    ] {
        let out = sandbox.exec(Some("65534"), &["sh", "-c", attack]);
        assert!(!out.status.success(), "{attack} succeeded as uid 65534");
    }
    // Root in the sandbox is the server's peer and is answered (a health check).
    let ping = sandbox.exec(None, &["/.sandboxd/agent", "ping"]);
    assert!(String::from_utf8_lossy(&ping.stdout).contains("readiness Ready"), "{ping:?}");
    // The host still reaches the same agent through the same socket.
    let mut c = sandbox.connect();
    assert_eq!(c.exec(1, "echo ok"), ("ok\n".to_string(), 0));
}

#[test]
fn a_terminal_in_the_sandbox_is_sized_resized_signalled_and_reattached_without_docker_exec() {
    let sandbox = Sandbox::start(images::BUSYBOX, &[], &PROBE, &KEEPALIVE);
    let since_s = unix_now();
    let mut c = sandbox.connect();
    c.settled_readiness();
    let mut start = pty(&["sh", "-c", "stty size; exec sh -i"], 41, 133);
    start.detach_timeout_ms = Some(30_000);
    c.send(1, Request::SessionOpen(start));
    let (id, _) = session_id(c.next(1));
    c.output_until(1, "the size at spawn", |t| t.contains("41 133"));
    c.send(1, Request::Resize(WindowSize { rows: 30, cols: 90 }));
    c.send(1, Request::Stdin(b"stty size\n".to_vec()));
    c.output_until(1, "the new size", |t| t.contains("30 90"));
    c.send(1, Request::Stdin(b"sleep 1000\n".to_vec()));
    std::thread::sleep(Duration::from_millis(300));
    c.send(1, Request::Signal(libc::SIGINT));
    c.send(1, Request::Stdin(b"echo \"job=$?\"\n".to_vec()));
    c.output_until(1, "the job ended by SIGINT", |t| t.contains("job=130"));

    // The first client goes away without a word (killed): the session waits for a re-attach.
    drop(c);
    let mut second = sandbox.connect();
    second.send(1, Request::SessionAttach { session_id: id.clone(), since: Some(0), takeover: false });
    assert_eq!(session_id(second.next(1)), (id.clone(), 0));
    second.output_until(1, "the whole replay", |t| t.contains("41 133") && t.contains("job=130"));
    let mut third = sandbox.connect();
    third.send(1, Request::SessionAttach { session_id: id.clone(), since: None, takeover: false });
    assert!(matches!(third.next(1), Event::Failed { kind: FailureKind::Held, .. }));
    third.send(2, Request::SessionAttach { session_id: id.clone(), since: None, takeover: true });
    session_id(third.next(2));
    loop {
        match second.next(1) {
            Event::Output { .. } => {}
            Event::Detached { reason, .. } => {
                assert_eq!(reason, DetachReason::TakenOver);
                break;
            }
            other => panic!("expected Detached, got {other:?}"),
        }
    }
    third.send(2, Request::Stdin(b"echo from-third\n".to_vec()));
    third.output_until(2, "the taker's input", |t| t.contains("from-third"));
    third.send(2, Request::Kill);
    assert_eq!(until_exit(&mut third, 2), 128 + libc::SIGHUP);
    assert_eq!(sandbox.docker_execs_since(since_s), 0, "resize, signal and re-attach ran no docker exec");
    // The count is real: one docker exec shows up in it.
    assert!(sandbox.exec(None, &["true"]).status.success());
    let deadline = Instant::now() + Duration::from_secs(5);
    while sandbox.docker_execs_since(since_s) != 1 {
        assert!(Instant::now() < deadline, "the daemon's events never showed the control exec");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_detach_timeout_ends_a_session_in_the_sandbox() {
    let sandbox = Sandbox::start(images::BASH, &[], &PROBE, &KEEPALIVE);
    let mut c = sandbox.connect();
    let mut start = pty(&["bash", "-c", "echo up; sleep 1000"], 24, 80);
    start.detach_timeout_ms = Some(1000);
    c.send(1, Request::SessionOpen(start));
    let (id, _) = session_id(c.next(1));
    c.output_until(1, "up", |t| t.contains("up"));
    drop(c);
    let dropped = Instant::now();
    let mut watcher = sandbox.connect();
    loop {
        watcher.send(1, Request::ListSessions);
        let Event::Sessions(list) = watcher.next(1) else { panic!() };
        let row = list.into_iter().find(|s| s.session_id == id).unwrap();
        if let Some(code) = row.exit_code {
            assert_eq!(code, 128 + libc::SIGHUP);
            assert!(dropped.elapsed() >= Duration::from_millis(900), "ended before its timeout");
            break;
        }
        assert!(dropped.elapsed() < Duration::from_secs(10), "the detach timeout never ended it");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (ps, _) = watcher.exec(2, "ps -o args | grep -c '[s]leep 1000'");
    assert_eq!(ps.trim(), "0", "the session's processes are gone");
}

#[test]
fn read_only_root_and_no_network() {
    let sandbox = Sandbox::start(images::READONLY, &["--read-only", "--network", "none"], &PROBE, &KEEPALIVE);
    let mut c = sandbox.connect();
    assert_eq!(c.settled_readiness().0, ReadyState::Ready);
    assert_eq!(c.exec(1, "touch /x 2>/dev/null || echo read-only"), ("read-only\n".to_string(), 0));
    c.send(2, Request::SessionOpen(pty(&["sh", "-c", "stty size; ip -o link | wc -l"], 12, 34)));
    session_id(c.next(2));
    c.output_until(2, "the terminal's size", |t| t.contains("12 34"));
    assert_eq!(until_exit(&mut c, 2), 0);
}

#[test]
fn an_image_user_runs_the_wrapped_command_while_the_agent_stays_root() {
    // The server runs the agent as root (`-u 0`) and names the image's user for the keep-alive.
    let argv = ["/bin/sh", "-c", "echo \"home=$HOME\"; while :; do sleep 2147483647; done"];
    let sandbox = Sandbox::start(images::NONROOT, &["-u", "0"], &["--user", "sandbox"], &argv);
    let mut c = sandbox.connect();
    let (ps, code) = c.exec(1, "ps -o user,args");
    assert_eq!(code, 0, "{ps}");
    let users: Vec<(&str, &str)> =
        ps.lines().filter_map(|l| l.trim().split_once(char::is_whitespace)).collect();
    let keepalive = users
        .iter()
        .find(|(_, args)| args.trim().starts_with("/bin/sh -c echo"))
        .expect("the keep-alive runs");
    assert_eq!(keepalive.0, "sandbox", "{ps}");
    let agent = users
        .iter()
        .find(|(_, args)| args.trim().starts_with("/.sandboxd/agent init"))
        .expect("the agent runs");
    assert_eq!(agent.0, "root", "{ps}");
    assert!(docker(&["logs", &sandbox.name]).stdout.starts_with(b"home=/home/sandbox\n"));
}

/// Figures, not a check: `cargo test -p sandboxd-agent --test container figures -- --ignored
/// --nocapture` prints exec round trips over the socket beside `docker exec`, and a terminal's
/// output throughput.
#[test]
#[ignore]
fn figures() {
    let sandbox = Sandbox::start(images::BUSYBOX, &[], &PROBE, &KEEPALIVE);
    let mut c = sandbox.connect();
    c.settled_readiness();
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let socket: Vec<Duration> = (0..200)
        .map(|i| {
            let t = Instant::now();
            assert_eq!(c.exec(1000 + i, "printf x"), ("x".to_string(), 0));
            t.elapsed()
        })
        .collect();
    let docker_exec: Vec<Duration> = (0..20)
        .map(|_| {
            let t = Instant::now();
            assert!(sandbox.exec(None, &["printf", "x"]).status.success());
            t.elapsed()
        })
        .collect();
    let (s, d) = (median(socket), median(docker_exec));
    println!(
        "exec printf x, median: socket {s:?}, docker exec {d:?} ({:.3}x)",
        s.as_secs_f64() / d.as_secs_f64()
    );
    // 64 MiB through a pty, the holder granting credit as it reads.
    let mut start = pty(&["sh", "-c", "head -c 67108864 /dev/zero | tr '\\0' x"], 24, 80);
    start.retain_bytes = 4 << 20;
    let t = Instant::now();
    c.send(1, Request::SessionOpen(start));
    session_id(c.next(1));
    let mut got = 0u64;
    loop {
        match c.next(1) {
            Event::Output { data, .. } => {
                got += data.len() as u64;
                c.send(1, Request::Credit(data.len() as u64));
            }
            Event::SessionExit { .. } => break,
            other => panic!("{other:?}"),
        }
    }
    let secs = t.elapsed().as_secs_f64();
    println!("pty output: {} MiB in {secs:.2}s = {:.1} MiB/s", got >> 20, got as f64 / secs / 1048576.0);
}

/// An A/B of starting a command, not a check: exec `printf x` through this agent and through
/// another static agent binary (`SANDBOXD_AGENT_BASELINE`, e.g. one built from main), in
/// alternating batches so both see the same load, on the suites' runtime:
/// `SANDBOXD_AGENT_BASELINE=… SANDBOXD_TEST_RUNTIME=runsc DOCKER_HOST=… cargo test -p
/// sandboxd-agent --test container spawn_ab -- --ignored --nocapture`.
#[test]
#[ignore]
fn spawn_ab() {
    let baseline = PathBuf::from(std::env::var("SANDBOXD_AGENT_BASELINE").expect("SANDBOXD_AGENT_BASELINE"));
    let runtime = format!("--runtime={}", testkit::runtime_name());
    let agents = [("this agent", static_agent().to_path_buf()), ("baseline", baseline)];
    let sandboxes: Vec<Sandbox> = agents
        .iter()
        .map(|(_, agent)| {
            let run = tempfile::tempdir().unwrap();
            Sandbox::start_with(agent, run, images::BUSYBOX, &[&runtime], &PROBE, &KEEPALIVE)
        })
        .collect();
    let mut conns: Vec<_> = sandboxes
        .iter()
        .map(|s| {
            let mut c = s.connect();
            c.settled_readiness();
            c
        })
        .collect();
    let mut times = vec![Vec::new(), Vec::new()];
    let mut id = 1000;
    for _ in 0..8 {
        for (i, c) in conns.iter_mut().enumerate() {
            for _ in 0..10 {
                id += 1;
                let t = Instant::now();
                assert_eq!(c.exec(id, "printf x"), ("x".to_string(), 0));
                times[i].push(t.elapsed());
            }
        }
    }
    for ((name, _), mut t) in agents.iter().zip(times) {
        t.sort();
        println!(
            "runtime={} {name}: exec printf x median {:?} (p10 {:?}, p90 {:?}, {} runs)",
            testkit::runtime_name(),
            t[t.len() / 2],
            t[t.len() / 10],
            t[t.len() * 9 / 10],
            t.len()
        );
    }
}
