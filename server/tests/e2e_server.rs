//! The `sandboxd` binary as an operator runs it: restarts, shutdown, listener safety, bad
//! configuration, an unreachable daemon, JSON logs; and, in-process, deadlines and policy.

use std::process::Stdio;
use std::time::{Duration, Instant};

use sandboxd_client::{proto, spec, PtyOptions, Sandbox};
use testkit::images::BUSYBOX;
use testkit::raw::{busybox, create_id, raw_client};
use testkit::server::TestServer;
use testkit::service::TestService;
use testkit::{container_exists, TestLabel};

/// The server binary Cargo built for these tests.
const SANDBOXD: &str = env!("CARGO_BIN_EXE_sandboxd");

#[tokio::test(flavor = "multi_thread")]
async fn any_server_serves_a_sandbox_after_a_restart() {
    let label = TestLabel::new();
    let mut first = TestServer::start(SANDBOXD, &label, None);
    let sandbox = Sandbox::start(&first.client().await, spec(BUSYBOX)).await.expect("start");
    let id = sandbox.id().to_string();
    assert!(first.terminate(Duration::from_secs(20)).is_some_and(|s| s.success()));
    assert!(container_exists(&id), "without --remove-on-shutdown the sandbox outlives the server");

    // A new server knows nothing in memory, yet serves the sandbox by id alone.
    let second = TestServer::start(SANDBOXD, &label, None);
    let mut raw = raw_client(&second.url).await;
    let req =
        proto::ExecRequest { sandbox_id: id.clone(), command: "echo again".into(), ..Default::default() };
    let out = raw.exec(req).await.expect("exec after restart").into_inner();
    assert_eq!(out.stdout, b"again\n");
    if testkit::engine() == sandboxd::config::ExecEngineKind::Agent {
        // The agent already mounted in the sandbox answers the new server (it measures usage).
        assert!(out.usage.is_some(), "the restarted server runs commands through the sandbox's agent");
        // On the agent's socket no `serve` agent runs at all; on the exec channel, one.
        let labels = std::process::Command::new("docker")
            .args(["inspect", "-f", "{{json .Config.Labels}}", &id])
            .output()
            .unwrap();
        let on_socket = String::from_utf8_lossy(&labels.stdout).contains("sandboxd.agent.user");
        let want = if on_socket { "0" } else { "1" };
        let count_agents = || {
            let script = "for p in /proc/[0-9]*; do [ \"$(tr '\\0' ' ' < $p/cmdline 2>/dev/null)\" = \
                          '/.sandboxd/agent serve ' ] && echo $p; done | wc -l";
            let out = std::process::Command::new("docker").args(["exec", &id, "sh", "-c", script]).output();
            String::from_utf8_lossy(&out.unwrap().stdout).trim().to_string()
        };
        let mut agents = count_agents();
        for _ in 0..50 {
            if agents == want {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
            agents = count_agents();
        }
        assert_eq!(agents, want, "one agent at most: the old server's exited with its channel");
    }
    let status = raw.status(proto::StatusRequest { sandbox_id: id.clone() }).await.unwrap().into_inner();
    assert_eq!(status.status, proto::SandboxStatus::Running as i32);
    raw.close(proto::CloseRequest { sandbox_id: id.clone() }).await.expect("close");
    let status = raw.status(proto::StatusRequest { sandbox_id: id.clone() }).await.unwrap().into_inner();
    assert_eq!(
        status.status,
        proto::SandboxStatus::Stopped as i32,
        "a sandbox this server closed reads stopped"
    );
    // Docker's removal finishes after Close answers (closing.rs): waited for, bounded.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while container_exists(&id) && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(!container_exists(&id));
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_closes_pty_sessions_and_removes_created_sandboxes_when_asked() {
    let label = TestLabel::new();
    let mut server =
        TestServer::start_with(SANDBOXD, &label, None, &["--remove-on-shutdown", "--drain-timeout-s", "10"]);
    let client = server.client().await;
    let sandbox = Sandbox::start(&client, spec(BUSYBOX)).await.expect("start");
    let session = sandbox.pty().create(PtyOptions::default()).await.expect("pty");
    session.write(b"echo in-session\n").await.expect("write");
    let t = Instant::now();
    let status = server.terminate(Duration::from_secs(30)).expect("server exits after SIGTERM");
    assert!(status.success(), "{status:?}");
    assert!(
        t.elapsed() < Duration::from_secs(25),
        "an open PTY stream must not hold shutdown to the drain timeout"
    );
    // The session's stream ended (with its exit or a status), and the sandbox is gone.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match session.read(Some(Duration::from_secs(5))).await {
            Ok(chunk) if chunk.is_empty() => break,
            Ok(_) => assert!(Instant::now() < deadline, "session output never ended"),
            Err(_) => break,
        }
    }
    assert!(!container_exists(sandbox.id()), "--remove-on-shutdown removes what this server created");
    assert!(label.containers().is_empty());
}

/// The server's exit for a config file holding `json` (a bad config ends it before it listens).
fn run_with_config(dir: &tempfile::TempDir, json: &str) -> std::process::Output {
    let path = dir.path().join("config.json");
    std::fs::write(&path, json).unwrap();
    std::process::Command::new(SANDBOXD)
        .args(["--listen", "127.0.0.1:0", "--config"])
        .arg(&path)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn refuses_a_public_listener_without_a_token_and_bad_config() {
    let label = TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(SANDBOXD)
        .args(["--listen", "0.0.0.0:0"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--insecure") && stderr.contains("--auth-token-file"), "{stderr}");

    let out = run_with_config(&dir, r#"{"docker": {"exec": {"concurrency": 0}}}"#);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("exec.concurrency") && stderr.contains(">= 1"), "{stderr}");
    let out = run_with_config(&dir, r#"{"docker": {"create": {"publsh_host": "::1"}}}"#);
    assert!(String::from_utf8_lossy(&out.stderr).contains("publsh_host"));

    // With --insecure the operator takes the choice: it starts.
    let mut server = TestServer::start_with(SANDBOXD, &label, None, &["--insecure"]);
    assert!(server.terminate(Duration::from_secs(20)).is_some_and(|s| s.success()));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_call_deadline_caps_an_exec_and_policy_refuses_host_mounts() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let mut raw = raw_client(&server.url).await;
    let id = create_id(&mut raw, busybox()).await;

    let mut req = tonic::Request::new(proto::ExecRequest {
        sandbox_id: id.clone(),
        command: "sleep 30".into(),
        timeout_s: Some(120.0),
        ..Default::default()
    });
    req.set_timeout(Duration::from_secs(2));
    let t = Instant::now();
    let err = raw.exec(req).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::DeadlineExceeded, "{err:?}");
    assert!(t.elapsed() < Duration::from_secs(10));

    let spec = proto::SandboxSpec {
        image: BUSYBOX.into(),
        provider_options: Some(proto::ProviderOptions { volumes: vec!["/:/host".into()], run_args: vec![] }),
        ..Default::default()
    };
    let err = raw.create(proto::CreateRequest { spec: Some(spec) }).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied);
    assert!(err.message().contains("volumes"));
    let spec = proto::SandboxSpec {
        image: BUSYBOX.into(),
        provider_options: Some(proto::ProviderOptions {
            volumes: vec![],
            run_args: vec!["--privileged".into()],
        }),
        ..Default::default()
    };
    let err = raw.create(proto::CreateRequest { spec: Some(spec) }).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied);

    // Bad input names the field; unknown ids are NOT_FOUND; nothing was created by either.
    let spec = proto::SandboxSpec { image: BUSYBOX.into(), ports: vec![80, 80], ..Default::default() };
    let err = raw.create(proto::CreateRequest { spec: Some(spec) }).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("spec.ports"), "{}", err.message());
    let err = raw
        .exec(proto::ExecRequest {
            sandbox_id: "--privileged".into(),
            command: "true".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    let err = raw
        .create(proto::CreateRequest {
            spec: Some(proto::SandboxSpec { image: "sandboxd-test/missing:1".into(), ..Default::default() }),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);

    raw.close(proto::CloseRequest { sandbox_id: id.clone() }).await.unwrap();
    assert!(label.containers().is_empty(), "{:?}", label.containers());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_daemon_is_unavailable() {
    let label = TestLabel::new();
    let server = TestServer::start_env(
        SANDBOXD,
        &label,
        None,
        &[],
        &[("DOCKER_HOST", "unix:///nonexistent/sandboxd-test.sock")],
    );
    let mut raw = raw_client(&server.url).await;
    let spec = proto::SandboxSpec { image: BUSYBOX.into(), ..Default::default() };
    let err = raw.create(proto::CreateRequest { spec: Some(spec) }).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    let id = format!("sandboxd-{}", "0".repeat(32));
    let err =
        raw.exec(proto::ExecRequest { sandbox_id: id, command: "true".into(), ..Default::default() }).await;
    assert_eq!(err.unwrap_err().code(), tonic::Code::Unavailable);
    assert!(label.containers().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upload_of_another_length_than_declared_is_refused() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let mut raw = raw_client(&server.url).await;
    let id = create_id(&mut raw, busybox()).await;
    for (declared, sent) in [(10u64, 5usize), (5, 10)] {
        let path = format!("/tmp/short-{declared}");
        let header = proto::UploadRequest {
            request: Some(proto::upload_request::Request::Header(proto::UploadHeader {
                sandbox_id: id.clone(),
                path: path.clone(),
                mode: None,
                size: Some(declared),
                xattrs: Default::default(),
            })),
        };
        let chunk =
            proto::UploadRequest { request: Some(proto::upload_request::Request::Chunk(vec![b'x'; sent])) };
        let err = raw.upload(tokio_stream::iter(vec![header, chunk])).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains("size"), "{}", err.message());
        let req = proto::ExecRequest {
            sandbox_id: id.clone(),
            command: format!("test -e {path}"),
            ..Default::default()
        };
        let r = raw.exec(req).await.unwrap().into_inner();
        assert_ne!(r.return_code, 0, "a refused upload leaves no file at {path}");
    }
    raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn json_logs_carry_one_span_per_rpc_with_the_sandbox_id() {
    let label = TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let mut cmd = TestServer::command(SANDBOXD, &label, dir.path(), None);
    // Debug for sandboxd: every docker command line is logged, so the masking is exercised.
    cmd.args(["--log-format", "json"])
        .env("RUST_LOG", "info,sandboxd=debug")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap());
    let mut child = cmd.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let addr = std::io::BufRead::lines(std::io::BufReader::new(stdout))
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("sandboxd listening on ").map(String::from))
        .expect("listening line");
    let mut raw = raw_client(&format!("http://{addr}")).await;
    let spec = proto::SandboxSpec {
        image: BUSYBOX.into(),
        env: [("SECRET".into(), "hunter2".into())].into(),
        ..Default::default()
    };
    let id = create_id(&mut raw, spec).await;
    raw.close(proto::CloseRequest { sandbox_id: id.clone() }).await.unwrap();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    assert!(child.wait().unwrap().success());

    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("hunter2"), "an env value reached the logs");
    // Env values never reach a docker argv: the logged run line carries the name only.
    assert!(text.contains("--env SECRET "), "the docker run line is logged, with the name only:\n{text}");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let in_close_span = lines.iter().any(|l| {
        l["spans"]
            .as_array()
            .is_some_and(|spans| spans.iter().any(|s| s["rpc"] == "Close" && s["sandbox_id"] == id.as_str()))
    });
    assert!(in_close_span, "no log line inside the Close span of {id}:\n{text}");
}
