//! Terminal sessions that live in the sandbox (issue 18): `PtyAttach` with `since` and
//! `takeover`, `PtyDetach`, `PtyOpen.detach_timeout_s`, `ListPtySessions`, and terminals whose
//! resizes and signals run no `docker exec`. Against the real daemon, through the gRPC API.
//! On the docker exec engine (`SANDBOXD_TEST_ENGINE=docker`) sessions live in the server: the
//! suite checks that attach, list and detach timeouts are UNIMPLEMENTED there.

use std::time::{Duration, Instant};

use sandboxd::config::{ExecEngineKind, ExecTransport};
use sandboxd_client::proto;
use sandboxd_client::proto::pty_request::Request as In;
use testkit::pty::{pipe_open, session, sessions, Stream};
use testkit::raw::{busybox, create_id, raw_client};
use testkit::service::TestService;
use testkit::TestLabel;
use tonic::Code;

const SANDBOXD: &str = env!("CARGO_BIN_EXE_sandboxd");

fn on_agent() -> bool {
    testkit::engine() == ExecEngineKind::Agent
}

/// Whether a process whose command line holds `needle` runs in the sandbox.
fn running_in(sandbox_id: &str, needle: &str) -> bool {
    let out = testkit::docker(&["exec", sandbox_id, "ps", "-o", "args"]);
    String::from_utf8_lossy(&out.stdout).lines().any(|l| l.contains(needle) && !l.contains("ps -o"))
}

#[tokio::test(flavor = "multi_thread")]
async fn since_replays_takeover_evicts_and_a_held_session_refuses_a_plain_attach() {
    let label = TestLabel::new();
    let server = TestService::start_json(&label, serde_json::json!({}));
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;
    let command =
        "printf 'hello\\n'; read line; echo \"got:$line\"; read again; echo \"then:$again\"; sleep 600";
    if !on_agent() {
        let refused = Stream::start(&mut raw, In::Open(pipe_open(&id, command, Some(30.0)))).await.err();
        assert_eq!(refused.map(|s| s.code()), Some(Code::Unimplemented), "detach timeouts need the agent");
        let refused = Stream::attach(&mut raw, &id, "abc", false, 0).await.err();
        assert_eq!(refused.map(|s| s.code()), Some(Code::Unimplemented));
        let listed = raw.list_pty_sessions(proto::ListPtySessionsRequest { sandbox_id: id.clone() }).await;
        assert_eq!(listed.err().map(|s| s.code()), Some(Code::Unimplemented));
        raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
        return;
    }
    let (mut first, opened) = Stream::open(&mut raw, pipe_open(&id, command, Some(60.0))).await;
    assert_eq!((opened.mode.as_str(), opened.offset), ("pipe", 0));
    let session_id = opened.session_id.clone();
    first.read_until("hello\n").await;

    let listed = session(&mut raw, &id, &session_id).await;
    assert_eq!(listed.command, command);
    assert_eq!((listed.mode.as_str(), listed.running, listed.attached), ("pipe", true, true));
    assert_eq!((listed.exit_code, listed.retained_bytes), (None, 6));

    // Held: an attach without takeover is refused and changes nothing.
    let held = Stream::attach(&mut raw, &id, &session_id, false, 0).await.err().expect("refused");
    assert_eq!(held.code(), Code::FailedPrecondition, "{held:?}");
    // Unknown ids and bad ones.
    let unknown = Stream::attach(&mut raw, &id, "0123456789abcdef", true, 0).await.err().expect("refused");
    assert_eq!(unknown.code(), Code::NotFound, "{unknown:?}");
    let bad = Stream::attach(&mut raw, &id, "../x", true, 0).await.err().expect("refused");
    assert_eq!(bad.code(), Code::InvalidArgument, "{bad:?}");
    assert!(bad.message().contains("session_id"), "{bad:?}");
    let past = Stream::attach(&mut raw, &id, &session_id, true, 1 << 40).await.err().expect("refused");
    assert_eq!(past.code(), Code::OutOfRange, "{past:?}");
    first.send(In::Input(b"one\n".to_vec())).await;
    first.read_until("got:one\n").await;

    // Takeover with since = 0: everything retained again, then live; the first holder is told.
    let (mut second, opened) = Stream::attach(&mut raw, &id, &session_id, true, 0).await.expect("takeover");
    assert_eq!(
        (opened.session_id.as_str(), opened.mode.as_str(), opened.offset),
        (session_id.as_str(), "pipe", 0)
    );
    let replay = second.read_until("got:one\n").await;
    assert_eq!(String::from_utf8_lossy(&replay.output), "hello\ngot:one\n");
    let evicted = first.drain().await;
    let status = evicted.status.expect("the first holder's stream ends with a status");
    assert_eq!(status.code(), Code::Aborted, "{status:?}");
    assert!(status.message().contains("taken over by another attach"), "{status:?}");

    // `since` in the middle: only what follows it.
    let (mut third, opened) = Stream::attach(&mut raw, &id, &session_id, true, 6).await.expect("since 6");
    assert_eq!(opened.offset, 6);
    let replay = third.read_until("got:one\n").await;
    assert_eq!(String::from_utf8_lossy(&replay.output), "got:one\n");
    third.send(In::Input(b"two\n".to_vec())).await;
    third.read_until("then:two\n").await;
    assert_eq!(second.drain().await.status.map(|s| s.code()), Some(Code::Aborted));

    // PtyClose ends the session, with its exit.
    third.send(In::Close(proto::PtyClose {})).await;
    let end = third.drain().await;
    assert!(end.status.is_none(), "{end:?}");
    assert_eq!(end.exit, Some(129), "HUP ends sleep: {end:?}");
    let listed = session(&mut raw, &id, &session_id).await;
    assert_eq!((listed.running, listed.attached, listed.exit_code), (false, false, Some(129)));
    raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}

/// A `since` older than the ring holds is OUT_OF_RANGE naming the oldest offset.
#[tokio::test(flavor = "multi_thread")]
async fn since_older_than_the_retained_output_is_out_of_range() {
    if !on_agent() {
        return;
    }
    let label = TestLabel::new();
    let server =
        TestService::start_json(&label, serde_json::json!({"server": {"pty": {"retain_bytes": 1024}}}));
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;
    let command = "head -c 4096 /dev/zero | tr '\\0' a; echo; echo done; sleep 600";
    let (mut stream, opened) = Stream::open(&mut raw, pipe_open(&id, command, Some(60.0))).await;
    stream.read_until("done\n").await;
    let listed = session(&mut raw, &id, &opened.session_id).await;
    assert_eq!(listed.retained_bytes, 1024, "the ring keeps server.pty.retain_bytes");
    let oldest = 4096 + 1 + 5 - 1024;
    let old = Stream::attach(&mut raw, &id, &opened.session_id, true, 1).await.err().expect("refused");
    assert_eq!(old.code(), Code::OutOfRange, "{old:?}");
    assert!(old.message().contains(&format!("oldest offset {oldest}")), "{old:?}");
    // 0 still means "all retained", and the stream says where that starts.
    let (mut all, opened) =
        Stream::attach(&mut raw, &id, &opened.session_id, true, 0).await.expect("since 0");
    assert_eq!(opened.offset, oldest);
    let replay = all.read_until("done\n").await;
    assert_eq!(replay.output.len(), 1024);
    all.send(In::Close(proto::PtyClose {})).await;
    all.drain().await;
    raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn detach_leaves_the_session_running_and_a_dropped_stream_times_out() {
    if !on_agent() {
        return;
    }
    let label = TestLabel::new();
    let server = TestService::start_json(&label, serde_json::json!({}));
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;
    // PtyDetach: the stream ends cleanly (no exit, no error) and the session runs on, unheld.
    let (mut stream, opened) =
        Stream::open(&mut raw, pipe_open(&id, "echo up; exec sleep 4321", Some(3.0))).await;
    stream.read_until("up\n").await;
    stream.send(In::Detach(proto::PtyDetach {})).await;
    let end = stream.drain().await;
    assert!(end.status.is_none() && end.exit.is_none(), "a detach ends the stream cleanly: {end:?}");
    let listed = session(&mut raw, &id, &opened.session_id).await;
    assert_eq!((listed.running, listed.attached), (true, false));
    // Longer than the detach timeout: a detach is not a drop, so nothing times out.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(running_in(&id, "sleep 4321"), "a detached session runs on past its detach timeout");
    // Re-attach, then drop the stream (cancel): the session waits 3 s for an attach, then ends.
    let (mut again, _) = Stream::attach(&mut raw, &id, &opened.session_id, false, 0).await.expect("attach");
    again.read_until("up\n").await;
    drop(again);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let listed = session(&mut raw, &id, &opened.session_id).await;
    assert_eq!((listed.running, listed.attached), (true, false), "still waiting for an attach");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let listed = session(&mut raw, &id, &opened.session_id).await;
        if !listed.running {
            assert_eq!(listed.exit_code, Some(129), "ended by HUP");
            break;
        }
        assert!(Instant::now() < deadline, "the dropped session never timed out");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!running_in(&id, "sleep 4321"));
    // Without a detach timeout a dropped stream ends the session at once (today's default).
    let (stream, opened) = Stream::open(&mut raw, pipe_open(&id, "exec sleep 4322", None)).await;
    drop(stream);
    testkit::wait::eventually(Duration::from_secs(15), "the default session outlived its stream", || {
        !running_in(&id, "sleep 4322")
    })
    .await;
    let gone = session(&mut raw, &id, &opened.session_id).await;
    assert!(!gone.running);
    raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}

/// The holder is another process, killed: its session waits for an attach, from this one.
#[tokio::test(flavor = "multi_thread")]
async fn reattach_after_the_client_process_is_killed() {
    if !on_agent() {
        return;
    }
    let label = TestLabel::new();
    let server = TestService::start_json(&label, serde_json::json!({}));
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("session");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["holder_process", "--exact", "--nocapture", "--test-threads=1"])
        .env("PTY_HOLDER_URL", &server.url)
        .env("PTY_HOLDER_SANDBOX", &id)
        .env("PTY_HOLDER_OUT", &out)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn the holder");
    let deadline = Instant::now() + Duration::from_secs(60);
    let session_id = loop {
        if let Ok(text) = std::fs::read_to_string(&out) {
            if let Some(id) = text.strip_suffix('\n') {
                break id.to_string();
            }
        }
        assert!(Instant::now() < deadline, "the holder never opened its session");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let held = session(&mut raw, &id, &session_id).await;
    assert!(held.attached, "the holder process holds it");
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while session(&mut raw, &id, &session_id).await.attached {
        assert!(Instant::now() < deadline, "the killed holder still holds the session");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (mut stream, opened) = Stream::attach(&mut raw, &id, &session_id, false, 0).await.expect("attach");
    assert_eq!(opened.offset, 0);
    let replay = stream.read_until("ready\n").await;
    assert_eq!(String::from_utf8_lossy(&replay.output), "ready\n");
    stream.send(In::Input(b"from-the-next-process\n".to_vec())).await;
    let seen = stream.read_until("exit\n").await;
    assert!(String::from_utf8_lossy(&seen.output).contains("got:from-the-next-process"), "{seen:?}");
    let end = stream.drain().await;
    assert_eq!(end.exit.or(seen.exit), Some(7));
    raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}

/// The child of `reattach_after_the_client_process_is_killed`: opens a session and holds it
/// until it is killed. Does nothing when run on its own.
#[test]
fn holder_process() {
    let (Ok(url), Ok(id)) = (std::env::var("PTY_HOLDER_URL"), std::env::var("PTY_HOLDER_SANDBOX")) else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut raw = raw_client(&url).await;
        let command = "echo ready; read line; echo \"got:$line\"; echo exit; exit 7";
        let (mut stream, opened) = Stream::open(&mut raw, pipe_open(&id, command, Some(60.0))).await;
        stream.read_until("ready\n").await;
        let out = std::env::var("PTY_HOLDER_OUT").unwrap();
        std::fs::write(format!("{out}.tmp"), format!("{}\n", opened.session_id)).unwrap();
        std::fs::rename(format!("{out}.tmp"), out).unwrap();
        tokio::time::sleep(Duration::from_secs(600)).await;
    });
}

/// `exec_create` events of `container` since `since` (unix seconds).
fn docker_execs_since(container: &str, since: u64) -> usize {
    let until = (unix_now() + 1).to_string();
    let filter = format!("container={container}");
    let out = testkit::docker(&[
        "events",
        "--since",
        &since.to_string(),
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

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

/// The terminal's pty is the agent's: opening it, resizing it and signalling its foreground job
/// start no `docker exec` (counted by the daemon's events and the server's children).
#[tokio::test(flavor = "multi_thread")]
async fn resize_and_signals_run_no_docker_exec() {
    if !on_agent() {
        return;
    }
    let label = TestLabel::new();
    let server = testkit::server::TestServer::launch(SANDBOXD, &label).start();
    let server_pid = server.child.id() as i32;
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;
    let warm = raw
        .exec(proto::ExecRequest { sandbox_id: id.clone(), command: "true".into(), ..Default::default() })
        .await
        .unwrap();
    assert_eq!(warm.into_inner().return_code, 0);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let since = unix_now();
    let open = proto::PtyOpen { sandbox_id: id.clone(), rows: 30, cols: 100, ..Default::default() };
    let (mut shell, opened) = Stream::open(&mut raw, open).await;
    assert_eq!(opened.mode, "pty");
    shell.send(In::Input(b"stty size\n".to_vec())).await;
    shell.read_until("30 100").await;
    shell.send(In::Resize(proto::PtyResize { rows: 41, cols: 132 })).await;
    shell.send(In::Input(b"stty size\n".to_vec())).await;
    shell.read_until("41 132").await;
    // SIGINT reaches the foreground job (sleep), not the shell: the shell's prompt comes back
    // (an interrupted list is abandoned, so `echo` after it never runs) and the shell answers.
    shell.send(In::Input(b"sleep 300; echo not-interrupted\n".to_vec())).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let clients = testkit::procs::children_named(server_pid, "docker");
    let tty_clients = clients
        .iter()
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            cmdline.split(|b| *b == 0).any(|a| a == b"-t" || a == b"-it")
        })
        .count();
    assert_eq!(tty_clients, 0, "no docker exec -t client for the terminal");
    shell.send(In::Signal(proto::PtySignal { name: "SIGINT".into() })).await;
    shell.send(In::Input(b"echo alive-$((40+2))\n".to_vec())).await;
    let seen = shell.read_until("alive-42").await;
    assert!(!String::from_utf8_lossy(&seen.output).contains("\nnot-interrupted"), "{seen:?}");
    shell.send(In::Input(b"exit 3\n".to_vec())).await;
    let end = shell.drain().await;
    assert_eq!(end.exit, Some(3), "{end:?}");
    assert_eq!(docker_execs_since(&id, since), 0, "the terminal ran no docker exec");
    raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}

/// A read-only root without `/tmp` and no network: the terminal still opens (the docker path
/// needed a pid record under `/tmp` or `/dev/shm`).
#[tokio::test(flavor = "multi_thread")]
async fn read_only_root_and_no_network() {
    let label = TestLabel::new();
    let config = serde_json::json!({"docker": {"create": {"read_only": true, "network": "none"}}});
    let server = TestService::start_json(&label, config);
    let mut raw = server.raw().await;
    let spec = proto::SandboxSpec { image: testkit::images::READONLY.into(), ..Default::default() };
    let id = create_id(&mut raw, spec).await;
    let open = proto::PtyOpen {
        sandbox_id: id.clone(),
        command: Some("stty size; test -e /tmp || echo no-tmp; exit 5".into()),
        rows: 33,
        cols: 77,
        ..Default::default()
    };
    match Stream::start(&mut raw, In::Open(open)).await {
        Ok((mut stream, _)) => {
            let end = stream.drain().await;
            let text = String::from_utf8_lossy(&end.output);
            // gVisor mounts a tmpfs of its own at /tmp, read-only root or not.
            let no_tmp = text.contains("no-tmp") != testkit::on_runsc();
            assert!(text.contains("33 77") && no_tmp, "{text:?}");
            assert_eq!(end.exit, Some(5));
        }
        // The docker path refuses to run without a place for its pid record.
        Err(status) => assert!(!on_agent(), "the agent's terminal needs no /tmp: {status:?}"),
    }
    raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}

/// A session with a detach timeout outlives the server: a restarted one attaches to it (on the
/// socket transport).
#[tokio::test(flavor = "multi_thread")]
async fn reattach_after_a_server_restart() {
    if !on_agent() {
        return;
    }
    let label = TestLabel::new();
    let state = tempfile::tempdir().unwrap();
    let config = serde_json::json!({"server": {"state_dir": state.path()}});
    let mut server = testkit::server::TestServer::launch(SANDBOXD, &label).config(config.clone()).start();
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;
    let command = "echo before; read line; echo \"after:$line\"; exit 4";
    let (mut stream, opened) = Stream::open(&mut raw, pipe_open(&id, command, Some(120.0))).await;
    stream.read_until("before\n").await;
    server.terminate(Duration::from_secs(30));
    drop(stream);
    let server = testkit::server::TestServer::launch(SANDBOXD, &label).config(config).start();
    let mut raw = server.raw().await;
    let attached = Stream::attach(&mut raw, &id, &opened.session_id, true, 0).await;
    if testkit::transport() == ExecTransport::Channel {
        // On the exec channel the session lived in the channel's agent, which ended with the
        // server (the socket's agent is the sandbox's keep-alive and outlives it).
        assert_eq!(attached.err().map(|s| s.code()), Some(Code::NotFound));
        raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
        return;
    }
    let (mut stream, _) = attached.expect("attach");
    stream.read_until("before\n").await;
    stream.send(In::Input(b"restart\n".to_vec())).await;
    let seen = stream.read_until("after:restart\n").await;
    let end = stream.drain().await;
    assert_eq!(end.exit.or(seen.exit), Some(4));
    raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}

/// Bad input is INVALID_ARGUMENT naming the field, and opens nothing.
#[tokio::test(flavor = "multi_thread")]
async fn bad_detach_timeouts_are_refused() {
    let label = TestLabel::new();
    let server = TestService::start_json(&label, serde_json::json!({}));
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;
    for bad in [0.0, -1.0, f64::NAN, 1e12] {
        let refused = Stream::start(&mut raw, In::Open(pipe_open(&id, "true", Some(bad)))).await.err();
        let status = refused.expect("refused");
        assert_eq!(status.code(), Code::InvalidArgument, "{bad}: {status:?}");
        assert!(status.message().contains("detach_timeout_s"), "{status:?}");
    }
    if on_agent() {
        assert!(sessions(&mut raw, &id).await.is_empty(), "nothing was opened");
    }
    raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}

/// A held session loses nothing when its program writes far more than the ring keeps: output
/// waits for the stream that reads it.
#[tokio::test(flavor = "multi_thread")]
async fn large_output_to_a_reading_holder_is_complete() {
    let label = TestLabel::new();
    let server = TestService::start_json(&label, serde_json::json!({}));
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;
    let size = 24 << 20;
    let (mut stream, _) =
        Stream::open(&mut raw, pipe_open(&id, &format!("head -c {size} /dev/zero; exit 3"), None)).await;
    let end = stream.drain().await;
    assert_eq!((end.output.len(), end.exit), (size, Some(3)), "{:?}", end.status);
    raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}

/// Input the program never reads is queued in the agent only up to a bound: past it the
/// holder's stream ends RESOURCE_EXHAUSTED, and the session runs on, to be attached again.
#[tokio::test(flavor = "multi_thread")]
async fn input_a_program_never_reads_is_bounded_and_the_session_survives_it() {
    if !on_agent() {
        return;
    }
    let label = TestLabel::new();
    let server = TestService::start_json(&label, serde_json::json!({}));
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;
    let (mut stream, opened) = Stream::open(&mut raw, pipe_open(&id, "echo up; exec sleep 4323", None)).await;
    stream.read_until("up\n").await;
    // 80 MiB, 1 MiB a message, from a task of its own: the stream may stop taking them.
    let sender = stream.sender();
    let writer = tokio::spawn(async move {
        for _ in 0..80 {
            if sender.send(testkit::pty::req(In::Input(vec![b'x'; 1 << 20]))).await.is_err() {
                break;
            }
        }
    });
    // 64 MiB through gRPC and the agent's socket: generous on a loaded machine.
    let end = stream.drain_within(Duration::from_secs(180)).await;
    let status = end.status.expect("the stream ends with a status");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("input"), "{status:?}");
    writer.abort();
    // The session runs on, unheld, and a plain attach holds it again.
    let deadline = Instant::now() + Duration::from_secs(30);
    while session(&mut raw, &id, &opened.session_id).await.attached {
        assert!(Instant::now() < deadline, "the session is still held after its stream ended");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(session(&mut raw, &id, &opened.session_id).await.running);
    assert!(running_in(&id, "sleep 4323"));
    let (mut again, _) = Stream::attach(&mut raw, &id, &opened.session_id, false, 0).await.expect("attach");
    again.read_until("up\n").await;
    again.send(In::Close(proto::PtyClose {})).await;
    assert_eq!(again.drain().await.exit, Some(129), "HUP ends sleep");
    raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}
