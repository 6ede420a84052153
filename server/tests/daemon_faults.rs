//! Faults of the Docker daemon itself: a PRIVATE `dockerd` ([`PrivateDocker`]: own socket, data
//! root, exec root, containerd and network namespace) that each test kills and starts again,
//! with a `sandboxd` pointed at it through `DOCKER_HOST`. The machine's daemon is never touched.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use sandboxd_client::proto;
use sandboxd_client::proto::sandbox_service_client::SandboxServiceClient;
use testkit::images::BUSYBOX;
use testkit::private_docker::{wait_until, PrivateDocker};
use testkit::TestLabel;
use tonic::Code;

/// The server binary Cargo built for these tests.
const SANDBOXD: &str = env!("CARGO_BIN_EXE_sandboxd");

type RawClient = SandboxServiceClient<tonic::transport::Channel>;

/// One private daemon at a time: each costs a containerd and a dockerd on a 2-core machine.
static ONE_DAEMON: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A `sandboxd` whose docker is the private daemon; killed on drop.
struct Server {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(docker: &PrivateDocker, label: &TestLabel) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("config.json");
        let body = serde_json::json!({
            "docker": {
                // The private daemon has no bridge.
                "create": {"extra_run_args": label.run_args(), "network": "none"},
                "exec": {"default_timeout_s": 60.0, "engine": testkit::engine_name()},
            },
            "server": {
                "state_dir": dir.path().join("state"),
                "sweep_interval_s": 1.0,
                "create_timeout_s": 10.0,
            },
        });
        std::fs::write(&config, body.to_string()).expect("config");
        let mut child = Command::new(SANDBOXD)
            .args(["--listen", "127.0.0.1:0", "--config"])
            .arg(&config)
            .env("DOCKER_HOST", docker.host())
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(docker.log("sandboxd.log"))
            .spawn()
            .expect("spawn sandboxd");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("sandboxd listening on ") {
                    let _ = tx.send(addr.trim().to_string());
                }
            }
        });
        let addr = rx.recv_timeout(Duration::from_secs(30)).expect("sandboxd did not start listening");
        Server { child, addr, _dir: dir }
    }

    async fn client(&self) -> RawClient {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", self.addr))
            .expect("url")
            .connect()
            .await
            .expect("connect");
        SandboxServiceClient::new(channel)
    }
}

async fn create(client: &mut RawClient) -> Result<String, tonic::Status> {
    let spec = proto::SandboxSpec { image: BUSYBOX.into(), ..Default::default() };
    let resp = client.create(proto::CreateRequest { spec: Some(spec) }).await?;
    Ok(resp.into_inner().sandbox.expect("sandbox").sandbox_id)
}

async fn exec(client: &mut RawClient, id: &str, command: &str) -> Result<proto::ExecResponse, tonic::Status> {
    let req = proto::ExecRequest {
        sandbox_id: id.into(),
        command: command.into(),
        timeout_s: Some(120.0),
        ..Default::default()
    };
    Ok(client.exec(req).await?.into_inner())
}

/// No call may wait on a dead daemon: this long is a hang, not slowness.
const HANG: Duration = Duration::from_secs(45);

/// After the daemon is back, the same server creates and runs commands again.
async fn assert_serves_again(client: &mut RawClient) {
    let id = tokio::time::timeout(HANG, create(client))
        .await
        .expect("create after the daemon came back hung")
        .expect("create after the daemon came back");
    let out = exec(client, &id, "echo back").await.expect("exec after the daemon came back");
    assert_eq!((out.return_code, out.stdout.as_slice()), (0, b"back\n".as_slice()), "{out:?}");
    client.close(proto::CloseRequest { sandbox_id: id }).await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemon_killed_mid_exec_answers_unavailable_and_recovers() {
    let _one = ONE_DAEMON.lock().await;
    let mut docker = PrivateDocker::start(&[BUSYBOX]);
    let label = TestLabel::new();
    let server = Server::start(&docker, &label);
    let mut client = server.client().await;
    let id = create(&mut client).await.expect("create on the private daemon");

    // A command that would run for two minutes; the daemon dies under it.
    let mut exec_client = client.clone();
    let exec_id = id.clone();
    let running =
        tokio::spawn(async move { exec(&mut exec_client, &exec_id, "echo started; sleep 120").await });
    let started = wait_until(Duration::from_secs(30), || {
        let out = docker.docker(&["top", &id, "-eo", "pid,args"]);
        String::from_utf8_lossy(&out.stdout).contains("sleep 120")
    });
    assert!(
        started.is_some(),
        "the exec never started in the private daemon: top {:?}; sandboxd: {}",
        docker.docker(&["top", &id, "-eo", "pid,args"]),
        docker.tail("sandboxd.log")
    );
    docker.kill_dockerd();

    let answer = tokio::time::timeout(HANG, running)
        .await
        .expect("exec hung after the daemon was killed")
        .expect("exec task");
    // Recovery is checked before the code, so one run shows both.
    docker.start_dockerd();
    assert_serves_again(&mut client).await;
    match answer {
        // The docker client lost its daemon: the README's "the Docker daemon cannot be reached".
        Err(status) => assert_eq!(status.code(), Code::Unavailable, "{status:?}"),
        // Or the exec is reported as refused by the container or daemon (125, "sandbox"),
        // never as the command's own exit status.
        Ok(out) => assert_eq!((out.return_code, out.error_type.as_str()), (125, "sandbox"), "{out:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemon_gone_during_create_answers_unavailable_and_leaves_no_container() {
    let _one = ONE_DAEMON.lock().await;
    let mut docker = PrivateDocker::start(&[BUSYBOX]);
    let label = TestLabel::new();
    let server = Server::start(&docker, &label);
    let mut client = server.client().await;
    let label_filter = format!("sandboxd.test.case={}", label.value);

    // The daemon dies as soon as the create's container exists (during its readiness probe).
    let mut create_client = client.clone();
    let creating = tokio::spawn(async move { create(&mut create_client).await });
    let appeared = wait_until(Duration::from_secs(30), || !docker.containers(Some(&label_filter)).is_empty());
    assert!(appeared.is_some(), "the create never made a container");
    docker.kill_dockerd();

    let answer = tokio::time::timeout(HANG, creating)
        .await
        .expect("create hung after the daemon was killed")
        .expect("create task");

    // Back: the half-made container is removed (by the create's own clean-up or the sweep).
    docker.start_dockerd();
    let gone = wait_until(Duration::from_secs(60), || docker.containers(Some(&label_filter)).is_empty());
    assert!(gone.is_some(), "half-created container left: {:?}", docker.containers(Some(&label_filter)));
    assert_serves_again(&mut client).await;
    let status = answer.expect_err("a create whose daemon died cannot succeed");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_while_the_daemon_is_down_is_unknown_or_unavailable_and_never_hangs() {
    let _one = ONE_DAEMON.lock().await;
    let mut docker = PrivateDocker::start(&[BUSYBOX]);
    let label = TestLabel::new();
    let server = Server::start(&docker, &label);
    let mut client = server.client().await;
    let id = create(&mut client).await.expect("create on the private daemon");
    docker.kill_dockerd();

    let answer = tokio::time::timeout(HANG, client.status(proto::StatusRequest { sandbox_id: id.clone() }))
        .await
        .expect("Status hung while the daemon was down");
    match answer {
        Ok(resp) => assert_eq!(
            resp.into_inner().status(),
            proto::SandboxStatus::Unknown,
            "with the daemon down, Status cannot know the sandbox runs"
        ),
        Err(status) => assert_eq!(status.code(), Code::Unavailable, "{status:?}"),
    }

    // Back: the daemon stopped the container it found running (no live restore), and Status says so.
    docker.restart_dockerd();
    let settled = tokio::time::timeout(HANG, async {
        loop {
            if let Ok(resp) = client.status(proto::StatusRequest { sandbox_id: id.clone() }).await {
                if resp.into_inner().status() != proto::SandboxStatus::Unknown {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    assert!(settled.is_ok(), "Status stayed UNKNOWN after the daemon came back");
    assert_serves_again(&mut client).await;
}
