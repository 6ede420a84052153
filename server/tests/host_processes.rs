//! What the binary's processes show on the host: env values never on a docker client's command
//! line (the docker engine), and the processes it spawns do not inherit ignored signals.

use std::time::Duration;

use sandboxd_client::proto;
use testkit::procs::children_named;
use testkit::raw::{busybox, create_id, open_pty};
use testkit::server::TestServer;
use testkit::TestLabel;

/// The server binary Cargo built for these tests.
const SANDBOXD: &str = env!("CARGO_BIN_EXE_sandboxd");

/// Every process command line on the host holding `needle` (any host user can read them).
fn command_lines_holding(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if let Ok(raw) = std::fs::read(entry.path().join("cmdline")) {
            let line = String::from_utf8_lossy(&raw).replace('\0', " ");
            if line.contains(needle) {
                found.push(line);
            }
        }
    }
    found
}

/// Issue 9: on the `docker` engine, env values never appear on a docker client's command line
/// (`/proc/<pid>/cmdline`), while they still reach the container and the command; a key that
/// would configure the docker client itself (`DOCKER_HOST`, `PATH`) reaches the container but
/// never redirects the client (a client pointed at `tcp://127.0.0.1:1` could not run at all).
#[tokio::test(flavor = "multi_thread")]
async fn env_values_stay_off_docker_command_lines_and_still_reach_the_command() {
    let label = TestLabel::new();
    let config = serde_json::json!({"docker": {"exec": {"engine": "docker"}}});
    let server = TestServer::launch(SANDBOXD, &label).config(config).start();
    let mut raw = server.raw().await;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let secret = format!("sekrit{}x{nanos}", std::process::id());
    // A watcher reads every command line on the host while the calls run.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (stop, secret) = (stop.clone(), secret.clone());
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                seen.extend(command_lines_holding(&secret));
                std::thread::sleep(Duration::from_millis(5));
            }
            seen
        })
    };
    let spec = proto::SandboxSpec {
        env: [
            ("TOKEN".to_string(), format!("{secret}-create")),
            ("DOCKER_HOST".to_string(), "tcp://127.0.0.1:1".to_string()),
        ]
        .into(),
        ..busybox()
    };
    let id = create_id(&mut raw, spec).await;
    let result = raw
        .exec(proto::ExecRequest {
            sandbox_id: id.clone(),
            // Slow enough for the watcher to see the docker client's command line.
            command: r#"sleep 2; echo "$TOKEN|$EXEC_TOKEN|$DOCKER_HOST|$PATH|${SANDBOXD_ENV_PATH-unset}""#
                .into(),
            env: [
                ("EXEC_TOKEN".to_string(), format!("{secret}-exec")),
                ("PATH".to_string(), "/bin:/sbin:/usr/bin:/opt/sekrit-path".to_string()),
            ]
            .into(),
            ..Default::default()
        })
        .await
        .expect("exec")
        .into_inner();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let seen = watcher.join().unwrap();
    assert_eq!(result.return_code, 0, "{result:?}");
    assert_eq!(
        String::from_utf8_lossy(&result.stdout).trim(),
        format!("{secret}-create|{secret}-exec|tcp://127.0.0.1:1|/bin:/sbin:/usr/bin:/opt/sekrit-path|unset"),
    );
    assert!(seen.is_empty(), "env values on host command lines: {seen:?}");
    assert!(!server.logs().contains(&secret), "an env value in the server's log");
    raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}

/// The signals a process ignores (`SigIgn` of `/proc/PID/status`), as a mask (bit n-1: signal n).
fn ignored_signals(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0)
}

/// Issue 9: a server started in the background by a shell (`sandboxd &`) inherits SIGINT and
/// SIGQUIT ignored; the processes it spawns (docker clients, the PTY session's client) start
/// with default dispositions, so a signal meant for them still works.
#[tokio::test(flavor = "multi_thread")]
async fn processes_the_server_spawns_do_not_inherit_ignored_signals() {
    const INT_AND_QUIT: u64 = (1 << 1) | (1 << 2);
    let label = TestLabel::new();
    let server = TestServer::launch(SANDBOXD, &label).prelude("trap '' INT QUIT").start();
    let server_pid = server.child.id() as i32;
    assert_ne!(
        ignored_signals(server_pid) & (1 << 2),
        0,
        "the server itself was started with SIGQUIT ignored"
    );
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;
    let open =
        proto::PtyOpen { sandbox_id: id.clone(), command: Some("sleep 1234".into()), ..Default::default() };
    let (tx, mut stream) = open_pty(&mut raw, open).await;
    // The agent's channel (and, on the docker engine, the PTY session's client) are docker
    // clients of the server; through the agent a terminal starts no client of its own.
    let clients = children_named(server_pid, "docker");
    assert!(!clients.is_empty(), "no docker client of the server to look at");
    let tty_client = clients.iter().any(|pid| {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        cmdline.split(|b| *b == 0).any(|a| a == b"-t")
    });
    let on_docker = testkit::engine() == sandboxd::config::ExecEngineKind::Docker;
    assert_eq!(tty_client, on_docker, "a PTY session's docker client exactly on the docker engine");
    for pid in clients {
        let ignored = ignored_signals(pid);
        assert_eq!(
            ignored & INT_AND_QUIT,
            0,
            "docker client {pid} ignores SIGINT/SIGQUIT (SigIgn {ignored:x})"
        );
    }
    tx.send(proto::PtyRequest { request: Some(proto::pty_request::Request::Close(proto::PtyClose {})) })
        .await
        .unwrap();
    while let Ok(Some(_)) = stream.message().await {}
    raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}
