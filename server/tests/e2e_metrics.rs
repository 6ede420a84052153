//! End to end: `--metrics-listen` after a known sequence of calls, scraped as Prometheus would,
//! with exact counts; and one log line per failed call, with its code and message.

use std::process::{Command, Stdio};
use std::time::Duration;

use futures_util::StreamExt;
use sandboxd_client::{proto, spec, Client, ExecOptions, PtyOptions, Sandbox};
use testkit::images::BUSYBOX;
use testkit::metrics::{rpc, sample};
use testkit::server::{scrape, TestServer};
use testkit::TestLabel;

/// The server binary Cargo built for these tests.
const SANDBOXD: &str = env!("CARGO_BIN_EXE_sandboxd");

/// The server with `--listen localhost:0 --metrics-listen localhost:0`; its log is
/// `server.logs()`.
fn start(label: &TestLabel) -> TestServer {
    let server = TestServer::launch(SANDBOXD, label)
        .listen("localhost:0")
        .flags(&["--metrics-listen", "localhost:0"])
        .start();
    assert!(server.addr.starts_with("127.0.0.1:"), "localhost resolves to loopback IPv4: {}", server.addr);
    assert!(server.metrics_addr.is_some(), "the metrics line comes before the listening line");
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrape_counts_a_known_sequence_of_calls() {
    let label = TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    let mut server = start(&label);
    let (addr, metrics) = (server.addr.clone(), server.metrics_addr.clone().unwrap());
    let client = Client::connect(addr.clone()).await.expect("connect by host:port");
    let mut raw = client.raw();

    let before = scrape(&metrics);
    assert_eq!(sample(&before, "sandboxd_sandboxes_live"), 0.0);

    // 1 good create, 1 refused create.
    let sandbox = Sandbox::start(&client, spec(BUSYBOX)).await.expect("create");
    let err = raw.create(proto::CreateRequest { spec: Some(spec("-bad")) }).await.expect_err("refused");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    // 2 execs that finish, 1 stopped at its timeout.
    sandbox.exec("true").await.unwrap();
    sandbox.exec("echo hi").await.unwrap();
    let timed_out = sandbox
        .exec_with("sleep 30", ExecOptions { timeout_s: Some(1.0), ..Default::default() })
        .await
        .unwrap();
    assert_eq!(timed_out.error_type, Some(sandboxd_client::ExecErrorType::Timeout));
    // 1 status of an id the service never issues (a gone sandbox of its own shape is `stopped`).
    let missing = proto::StatusRequest { sandbox_id: "sandboxd-not-an-id".into() };
    assert_eq!(raw.status(missing).await.unwrap_err().code(), tonic::Code::NotFound);
    // 1000 bytes each way.
    let file = dir.path().join("f");
    std::fs::write(&file, vec![7u8; 1000]).unwrap();
    assert_eq!(sandbox.upload(&file, "/tmp/f").await.unwrap(), 1000);
    assert_eq!(sandbox.download("/tmp/f", dir.path().join("g")).await.unwrap(), 1000);
    // One terminal session, open while we scrape, then ended.
    let session = sandbox.pty().create(PtyOptions::command("cat")).await.expect("pty");
    let during = scrape(&metrics);
    assert_eq!(sample(&during, "sandboxd_pty_sessions"), 1.0);
    assert_eq!(sample(&during, "sandboxd_sandboxes_live"), 1.0);
    assert_eq!(sample(&during, "sandboxd_creates_in_progress"), 0.0);
    session.close().await.unwrap();
    let mut output = std::pin::pin!(session.output());
    while output.next().await.is_some() {}
    sandbox.stop().await.expect("close");

    // The Pty call is counted when its stream ends on the server, and the close's removal runs
    // after Close answered (closing.rs; through the Engine API, not a `docker rm` process, where
    // the daemon is local); wait for both, not a time.
    let mut after = scrape(&metrics);
    for _ in 0..300 {
        if sample(&after, "sandboxd_pty_sessions") == 0.0 && label.containers().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        after = scrape(&metrics);
    }
    assert!(label.containers().is_empty(), "the closed sandbox's container was never removed");
    assert_eq!(sample(&after, &rpc("Create", "OK")), 1.0, "{after}");
    assert_eq!(sample(&after, &rpc("Create", "INVALID_ARGUMENT")), 1.0);
    assert_eq!(sample(&after, &rpc("Exec", "OK")), 3.0);
    assert_eq!(sample(&after, &rpc("Status", "NOT_FOUND")), 1.0);
    assert_eq!(sample(&after, &rpc("Upload", "OK")), 1.0);
    assert_eq!(sample(&after, &rpc("Download", "OK")), 1.0);
    assert_eq!(sample(&after, &rpc("Close", "OK")), 1.0);
    assert_eq!(
        sample(
            &after,
            "sandboxd_rpc_duration_seconds_count{service=\"sandbox.v1.SandboxService\",method=\"Exec\"}"
        ),
        3.0
    );
    assert_eq!(sample(&after, "sandboxd_exec_results_total{error_type=\"none\"}"), 2.0);
    assert_eq!(sample(&after, "sandboxd_exec_results_total{error_type=\"timeout\"}"), 1.0);
    assert_eq!(sample(&after, "sandboxd_transfer_bytes_total{direction=\"upload\"}"), 1000.0);
    assert_eq!(sample(&after, "sandboxd_transfer_bytes_total{direction=\"download\"}"), 1000.0);
    assert_eq!(sample(&after, "sandboxd_sandboxes_live"), 0.0);
    assert_eq!(sample(&after, "sandboxd_pty_sessions"), 0.0);
    // One container made: `docker run`, or with the default disk bound (`disk_bound: loop`)
    // `docker create`, the disk attached, then `docker start`.
    let made = sample(&after, "sandboxd_docker_command_duration_seconds_count{command=\"run\"}")
        + sample(&after, "sandboxd_docker_command_duration_seconds_count{command=\"create\"}");
    assert_eq!(made, 1.0, "{after}");
    // The removal is at most one `docker rm` process (none where the Engine API did it).
    assert!(sample(&after, "sandboxd_docker_command_duration_seconds_count{command=\"rm\"}") <= 1.0);
    // Execs may run through the in-sandbox agent instead of `docker exec`; the create does not.
    assert!(sample(&after, "sandboxd_docker_permit_wait_seconds_count") >= 1.0);

    // The log: one line per failed call, with its code and message.
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = server.child.wait();
    let log = server.logs();
    let failed: Vec<&str> = log.lines().filter(|l| l.contains("rpc failed")).collect();
    assert_eq!(failed.len(), 2, "{log}");
    assert!(failed.iter().any(|l| l.contains("INVALID_ARGUMENT") && l.contains("spec.image")), "{log}");
    assert!(failed.iter().any(|l| l.contains("NOT_FOUND") && l.contains("Status")), "{log}");
    assert!(label.containers().is_empty());
}

#[test]
fn a_public_metrics_address_needs_insecure() {
    let out = Command::new(SANDBOXD)
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", "0.0.0.0:0"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("metrics") && stderr.contains("--insecure"), "{stderr}");
}
