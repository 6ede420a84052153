//! End to end: the `sandboxd-client` handle API against the service and Docker.
//!
//! Each test starts its own service in-process (see [`TestService::start`]) on an ephemeral port, with
//! a config that labels every container with the test's own label, and proves it left no
//! container behind.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::StreamExt;
use sandboxd_client::{
    spec, Client, ClientError, ExecErrorType, ExecOptions, PtyExecOptions, PtyOptions, PtySession, Sandbox,
    SandboxStatus, TerminalMode,
};
use sha2::{Digest, Sha256};
use testkit::images::{BASH, BUSYBOX};
use testkit::service::TestService;
use testkit::TestLabel;

fn sha256(data: &[u8]) -> Vec<u8> {
    Sha256::digest(data).to_vec()
}

/// Reads a session until its output contains `needle` (10 s at most).
async fn read_until(session: &PtySession, needle: &str) -> String {
    testkit::wait::read_until(needle, Duration::from_secs(10), |left| session.read(Some(left))).await
}

#[tokio::test(flavor = "multi_thread")]
async fn lifecycle_exec_endpoint_serialize_connect_and_idempotent_stop() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let client = server.client().await;

    let mut s = spec(BUSYBOX);
    s.workdir = Some("/work".into());
    s.env = HashMap::from([("GREETING".to_string(), "hello".to_string())]);
    s.files = HashMap::from([("/work/seed.txt".to_string(), b"seeded\n".to_vec())]);
    s.ports = vec![8080];
    let sandbox = Sandbox::start(&client, s).await.expect("start");
    assert!(!sandbox.id().is_empty());
    assert_eq!(sandbox.ports(), &[8080]);

    let out = sandbox.exec("echo $GREETING; pwd; cat seed.txt").await.expect("exec");
    assert_eq!(out.stdout_str(), "hello\n/work\nseeded\n");
    assert!(out.success());

    let out = sandbox
        .exec_with(
            "cat; echo $X >&2; exit 3",
            ExecOptions {
                cwd: Some("/tmp".into()),
                env: HashMap::from([("X".to_string(), "x".to_string())]),
                stdin: Some(b"in".to_vec()),
                ..Default::default()
            },
        )
        .await
        .expect("exec_with");
    assert_eq!((out.stdout_str().as_str(), out.stderr_str().as_str(), out.return_code), ("in", "x\n", 3));
    assert!(out.error_type.is_none());

    let out = sandbox
        .exec_with("sleep 30", ExecOptions { timeout_s: Some(1.0), ..Default::default() })
        .await
        .expect("timeout is a result");
    assert_eq!((out.return_code, out.error_type), (125, Some(ExecErrorType::Timeout)));

    assert_eq!(sandbox.status().await.expect("status"), SandboxStatus::Running);

    let endpoint = sandbox.endpoint(8080).await.expect("endpoint");
    assert!(endpoint.url.starts_with("http://"), "{endpoint:?}");
    match sandbox.endpoint(9090).await {
        Err(ClientError::InvalidArgument(message)) => assert!(message.contains("8080"), "{message}"),
        other => panic!("undeclared port: {other:?}"),
    }

    // Another client (as another process would) re-attaches from the descriptor.
    let descriptor = sandbox.serialize();
    assert_eq!(descriptor["sandbox_id"], sandbox.id());
    assert_eq!(descriptor["workdir"], "/work");
    let other = Sandbox::connect(&server.client().await, &descriptor).await.expect("connect");
    assert_eq!(other.id(), sandbox.id());
    assert_eq!(other.ports(), &[8080]);
    assert_eq!(other.exec("pwd").await.expect("exec").stdout_str(), "/work\n");
    assert!(other.endpoint(8080).await.is_ok());

    sandbox.stop().await.expect("stop");
    sandbox.stop().await.expect("second stop");
    assert_eq!(sandbox.status().await.expect("status"), SandboxStatus::Stopped);
    assert!(matches!(sandbox.exec("true").await, Err(ClientError::InvalidArgument(_))));
    // The other handle still asks the server: the sandbox is gone, and stopping it again is fine.
    assert_eq!(other.status().await.expect("status"), SandboxStatus::Stopped);
    other.stop().await.expect("stop of a removed sandbox");
    match Sandbox::connect(&client, &descriptor).await {
        Err(e) => assert_eq!(e.code(), tonic::Code::NotFound, "{e}"),
        Ok(_) => panic!("connect to a removed sandbox succeeded"),
    }
    assert!(label.containers().is_empty(), "containers left: {:?}", label.containers());
}

#[tokio::test(flavor = "multi_thread")]
async fn upload_and_download_stream_files_exactly() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let client = server.client().await;
    let sandbox = Sandbox::start(&client, spec(BUSYBOX)).await.expect("start");
    let dir = tempfile::tempdir().expect("tempdir");

    // Several chunks, not a multiple of the chunk size, every byte value.
    let data: Vec<u8> =
        (0..(3 * 256 * 1024 + 12345)).map(|i: u32| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    let local = dir.path().join("in.bin");
    std::fs::write(&local, &data).expect("write");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&local, std::fs::Permissions::from_mode(0o750)).expect("chmod");
    }
    let written = sandbox.upload(&local, "/data/sub/in.bin").await.expect("upload");
    assert_eq!(written, data.len() as u64);
    let out = sandbox.exec("wc -c < /data/sub/in.bin; stat -c %a /data/sub/in.bin").await.expect("exec");
    assert_eq!(
        out.stdout_str().split_whitespace().collect::<Vec<_>>(),
        vec![data.len().to_string(), "750".into()]
    );

    let back = dir.path().join("nested/out.bin");
    let read = sandbox.download("/data/sub/in.bin", &back).await.expect("download");
    assert_eq!(read, data.len() as u64);
    assert_eq!(sha256(&std::fs::read(&back).expect("read back")), sha256(&data));

    // Empty files work both ways.
    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").expect("write");
    assert_eq!(sandbox.upload(&empty, "/data/empty").await.expect("upload empty"), 0);
    let empty_back = dir.path().join("empty_back");
    assert_eq!(sandbox.download("/data/empty", &empty_back).await.expect("download empty"), 0);
    assert_eq!(std::fs::read(&empty_back).expect("read").len(), 0);

    // A missing remote file is NOT_FOUND and leaves no local file.
    let missing = dir.path().join("missing");
    let err = sandbox.download("/nope/missing", &missing).await.expect_err("missing file");
    assert_eq!(err.code(), tonic::Code::NotFound, "{err}");
    assert!(!missing.exists());
    // A missing local file is an I/O error before any call.
    let err = sandbox.upload(dir.path().join("absent"), "/data/x").await.expect_err("absent local");
    assert!(matches!(err, ClientError::Io(_)), "{err}");

    sandbox.stop().await.expect("stop");
    assert!(label.containers().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn pty_sessions_read_write_resize_signal_and_exit() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let client = server.client().await;
    let sandbox = Sandbox::start(&client, spec(BASH)).await.expect("start");

    // An interactive shell.
    let shell =
        sandbox.pty().create(PtyOptions { rows: 30, cols: 100, ..Default::default() }).await.expect("create");
    assert_eq!(shell.mode(), TerminalMode::Pty);
    assert!(shell.is_live());
    shell.write(b"stty size\n").await.expect("write");
    read_until(&shell, "30 100").await;
    shell.resize(40, 120).await.expect("resize");
    shell.write(b"stty size\n").await.expect("write");
    read_until(&shell, "40 120").await;
    shell.write(b"sleep 100\n").await.expect("write");
    tokio::time::sleep(Duration::from_millis(500)).await;
    shell.send_signal("SIGINT").await.expect("signal");
    shell.write(b"echo after-int\n").await.expect("write");
    read_until(&shell, "after-int\r\n").await;
    assert!(matches!(shell.send_signal("SIGUSR1").await, Err(ClientError::InvalidArgument(_))));
    shell.write(b"exit 7\n").await.expect("write");
    assert_eq!(shell.wait_exit(Some(Duration::from_secs(10))).await.expect("exit"), 7);
    // All output drains, then reads report the end.
    while !shell.read(Some(Duration::from_secs(5))).await.expect("drain").is_empty() {}
    assert!(!shell.is_live());
    shell.close().await.expect("close");
    shell.close().await.expect("close again");

    // Pipe mode keeps stderr apart; the output stream ends at the exit.
    let pipe = sandbox
        .pty()
        .create(PtyOptions {
            mode: TerminalMode::Pipe,
            ..PtyOptions::command("read line; echo got:$line; echo oops >&2; exit 3")
        })
        .await
        .expect("pipe");
    assert_eq!(pipe.mode(), TerminalMode::Pipe);
    pipe.write(b"abc\n").await.expect("write");
    let chunks: Vec<_> = pipe.output().collect().await;
    let out: Vec<u8> = chunks.into_iter().flat_map(|c| c.expect("chunk")).collect();
    assert_eq!(String::from_utf8_lossy(&out), "got:abc\n");
    assert_eq!(pipe.read_stderr(Some(Duration::from_secs(5))).await.expect("stderr"), b"oops\n");
    assert_eq!(pipe.wait_exit(Some(Duration::from_secs(10))).await.expect("exit"), 3);

    // SIGTERM ends a command session.
    let sleeper = sandbox.pty().create(PtyOptions::command("sleep 100")).await.expect("create");
    tokio::time::sleep(Duration::from_millis(300)).await;
    sleeper.send_signal("TERM").await.expect("signal");
    assert_eq!(sleeper.wait_exit(Some(Duration::from_secs(10))).await.expect("exit"), 143);

    // A closed session refuses writes.
    let closing = sandbox.pty().create(PtyOptions::default()).await.expect("create");
    closing.close().await.expect("close");
    assert!(matches!(closing.write(b"x").await, Err(ClientError::Closed)));

    sandbox.stop().await.expect("stop");
    assert!(label.containers().is_empty());
}

async fn check_pty_exec(image: &str) {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let client = server.client().await;
    let sandbox = Sandbox::start(&client, spec(image)).await.expect("start");
    let pty = sandbox.pty();

    let out = pty.exec("echo one; echo two", PtyExecOptions::default()).await.expect("exec");
    assert_eq!((out.stdout_str().as_str(), out.return_code, out.error_type), ("one\ntwo\n", 0, None));
    // The default session is reused: shell state carries over.
    pty.exec("cd /tmp; export KEPT=yes", PtyExecOptions::default()).await.expect("exec");
    let out = pty.exec("pwd; echo $KEPT", PtyExecOptions::default()).await.expect("exec");
    assert_eq!(out.stdout_str(), "/tmp\nyes\n");
    let out = pty.exec("false", PtyExecOptions::default()).await.expect("exec");
    assert_eq!(out.return_code, 1);
    let out = pty.exec("printf no-newline", PtyExecOptions::default()).await.expect("exec");
    assert_eq!(out.stdout_str(), "no-newline");
    // Stdin is /dev/null, so a reading command does not swallow the marker.
    let out = pty.exec("cat; echo done", PtyExecOptions::default()).await.expect("exec");
    assert_eq!(out.stdout_str(), "done\n");

    // Session-shaping arguments run in a private session: no shared state.
    let out = pty
        .exec(
            "pwd; echo ${KEPT:-unset}; exit 4",
            PtyExecOptions { cwd: Some("/".into()), ..Default::default() },
        )
        .await
        .expect("private exec");
    assert_eq!((out.stdout_str().as_str(), out.return_code), ("/\nunset\n", 4));

    // A timeout retires the default session; the next call gets a fresh one.
    let out = pty
        .exec("sleep 30", PtyExecOptions { timeout_s: Some(1.0), ..Default::default() })
        .await
        .expect("timeout");
    assert_eq!((out.return_code, out.error_type), (125, Some(ExecErrorType::Timeout)));
    let out = pty.exec("pwd", PtyExecOptions::default()).await.expect("exec after timeout");
    assert_eq!(out.stdout_str(), "/\n", "a fresh session starts in the default directory");

    // Concurrent calls on one sandbox are serialised and each gets its own output.
    let (a, b) = tokio::join!(
        pty.exec("sleep 0.3; echo A", PtyExecOptions::default()),
        pty.exec("echo B", PtyExecOptions::default())
    );
    assert_eq!(a.expect("a").stdout_str(), "A\n");
    assert_eq!(b.expect("b").stdout_str(), "B\n");

    // An explicit session (echo on, prompts) still yields the command's output.
    let session = pty.create(PtyOptions::default()).await.expect("create");
    let out = pty
        .exec("echo explicit", PtyExecOptions { session: Some(&session), ..Default::default() })
        .await
        .expect("exec in session");
    assert_eq!((out.stdout_str().as_str(), out.return_code), ("explicit\n", 0));
    session.close().await.expect("close");

    sandbox.stop().await.expect("stop");
    assert!(label.containers().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn pty_exec_marker_protocol_with_bash() {
    check_pty_exec(BASH).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pty_exec_marker_protocol_with_busybox_sh() {
    check_pty_exec(BUSYBOX).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bearer_token_and_typed_server_errors() {
    let label = TestLabel::new();
    let server = TestService::start(&label, Some("t0ken"));
    let descriptor = serde_json::json!({"sandbox_id": "sandboxd-no-such-sandbox", "ports": []});

    let anonymous = server.client().await;
    let err = Sandbox::connect(&anonymous, &descriptor).await.expect_err("no token");
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err}");
    let wrong = Client::connect_with_token(server.url.clone(), "wrong").await.expect("connect");
    let err = Sandbox::start(&wrong, spec(BUSYBOX)).await.expect_err("wrong token");
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err}");

    let client = Client::connect_with_token(server.url.clone(), "t0ken").await.expect("connect");
    let err = Sandbox::connect(&client, &descriptor).await.expect_err("unknown sandbox");
    assert_eq!(err.code(), tonic::Code::NotFound, "{err}");
    let err = Sandbox::start(&client, spec("")).await.expect_err("empty image");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
    assert!(matches!(
        Sandbox::connect(&client, &serde_json::json!({"ports": [1]})).await,
        Err(ClientError::InvalidArgument(_))
    ));

    let sandbox = Sandbox::start(&client, spec(BUSYBOX)).await.expect("start with token");
    assert_eq!(sandbox.exec("echo ok").await.expect("exec").stdout_str(), "ok\n");
    let out = sandbox.pty().exec("echo pty-ok", PtyExecOptions::default()).await.expect("pty exec");
    assert_eq!(out.stdout_str(), "pty-ok\n");
    sandbox.stop().await.expect("stop");
    assert!(label.containers().is_empty());

    // A server that is not there is a transport error, not a panic.
    drop(server);
    assert!(Client::connect("http://127.0.0.1:1").await.is_err());
    assert!(matches!(Client::connect("not a url").await, Err(ClientError::Transport(_))));
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_does_not_wait_for_a_running_pty_exec() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let client = server.client().await;
    let sandbox = Sandbox::start(&client, spec(BUSYBOX)).await.expect("start");
    let running = sandbox.clone();
    let exec = tokio::spawn(async move { running.pty().exec("sleep 60", PtyExecOptions::default()).await });
    tokio::time::sleep(Duration::from_secs(1)).await;
    tokio::time::timeout(Duration::from_secs(20), sandbox.stop()).await.expect("stop in time").expect("stop");
    let result = tokio::time::timeout(Duration::from_secs(20), exec)
        .await
        .expect("exec ends with the sandbox")
        .expect("join")
        .expect("a result, not an error");
    assert_ne!(result.return_code, 0, "{result:?}");
    assert!(matches!(
        sandbox.pty().exec("true", PtyExecOptions::default()).await,
        Err(ClientError::InvalidArgument(_))
    ));
    assert!(label.containers().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn upload_and_download_200_mib_round_trip() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let client = server.client().await;
    let sandbox = Sandbox::start(&client, spec(BUSYBOX)).await.expect("start");
    let dir = tempfile::tempdir().expect("tempdir");
    let local = dir.path().join("big.bin");
    let size = 200usize << 20;
    let mut hasher = Sha256::new();
    {
        use std::io::Write;
        let mut f = std::io::BufWriter::new(std::fs::File::create(&local).expect("create"));
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut block = vec![0u8; 1 << 20];
        for _ in 0..(size >> 20) {
            for b in block.iter_mut() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *b = state as u8;
            }
            f.write_all(&block).expect("write");
            hasher.update(&block);
        }
        f.flush().expect("flush");
    }
    let digest = hasher.finalize().to_vec();
    assert_eq!(sandbox.upload(&local, "/tmp/big/big.bin").await.expect("upload"), size as u64);
    let back = dir.path().join("back.bin");
    assert_eq!(sandbox.download("/tmp/big/big.bin", &back).await.expect("download"), size as u64);
    let mut hasher = Sha256::new();
    let mut f = std::fs::File::open(&back).expect("open");
    std::io::copy(&mut f, &mut hasher).expect("hash");
    assert_eq!(hasher.finalize().to_vec(), digest);
    sandbox.stop().await.expect("stop");
    assert!(label.containers().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_stream_delivers_output_as_produced_and_cancel_stops_the_command() {
    use sandboxd_client::ExecEvent;
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let client = server.client().await;
    let sandbox = Sandbox::start(&client, spec(BUSYBOX)).await.expect("start");

    // The first chunk arrives while the command still waits for the marker file.
    let opts = ExecOptions { timeout_s: Some(60.0), ..Default::default() };
    let mut stream = sandbox
        .exec_stream(
            "printf first; while [ ! -e /tmp/go ]; do sleep 0.1; done; printf second >&2; exit 7",
            opts.clone(),
        )
        .await
        .expect("exec_stream");
    assert_eq!(stream.next().await.unwrap(), Some(ExecEvent::Stdout(b"first".to_vec())));
    let go = sandbox.exec("touch /tmp/go").await.unwrap();
    assert!(go.success(), "{go:?}");
    let mut stderr = Vec::new();
    let exit = loop {
        match stream.next().await.unwrap().expect("an exit ends the stream") {
            ExecEvent::Stderr(d) => stderr.extend(d),
            ExecEvent::Stdout(d) => panic!("unexpected stdout {d:?}"),
            ExecEvent::Exit(exit) => break exit,
        }
    };
    assert_eq!(stderr, b"second");
    assert_eq!((exit.return_code, exit.error_type), (7, None));
    assert_eq!(stream.next().await.unwrap(), None);

    // A timeout ends the stream with 125/timeout; an empty command is refused.
    let mut timed = sandbox
        .exec_stream("sleep 30", ExecOptions { timeout_s: Some(1.0), ..Default::default() })
        .await
        .unwrap();
    match timed.next().await.unwrap() {
        Some(ExecEvent::Exit(exit)) => {
            assert_eq!((exit.return_code, exit.error_type), (125, Some(ExecErrorType::Timeout)))
        }
        other => panic!("expected a timeout exit, got {other:?}"),
    }
    match sandbox.exec_stream("", opts.clone()).await {
        Err(e) => {
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
            assert!(e.to_string().contains("command"), "{e}");
        }
        Ok(_) => panic!("an empty command must be INVALID_ARGUMENT"),
    }

    // Dropping the stream cancels the call and stops the command.
    let mut cancelled = sandbox.exec_stream("printf up; exec sleep 305", opts).await.unwrap();
    assert_eq!(cancelled.next().await.unwrap(), Some(ExecEvent::Stdout(b"up".to_vec())));
    drop(cancelled);
    if testkit::engine() == sandboxd::config::ExecEngineKind::Agent {
        let mut stopped = false;
        for _ in 0..50 {
            let ps = sandbox.exec("ps -o args | grep 'sleep 30[5]' || true").await.unwrap();
            if ps.stdout_str().trim().is_empty() {
                stopped = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(stopped, "the cancelled command still runs");
        let r = sandbox.exec("printf x").await.unwrap();
        assert!(r.usage.is_some(), "Exec answers with accounting on the agent engine: {r:?}");
    }
    sandbox.stop().await.unwrap();
    assert!(label.containers().is_empty());
}
