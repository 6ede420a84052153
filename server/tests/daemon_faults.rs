//! Faults of the Docker daemon itself: a PRIVATE `dockerd` ([`PrivateDocker`]: own socket, data
//! root, exec root, containerd and network namespace) that each test kills and starts again,
//! with a `sandboxd` pointed at it through `DOCKER_HOST`. The machine's daemon is never touched.
//! One daemon at a time (`ONE_DAEMON`): each costs a containerd and a dockerd.

use std::time::{Duration, Instant};

use sandboxd_client::{failure_kind_of, proto, FailureKind};
use testkit::images::BUSYBOX;
use testkit::private_docker::PrivateDocker;
use testkit::raw::{busybox, create_id, RawClient};
use testkit::server::TestServer;
use testkit::wait::{eventually, wait_until};
use testkit::TestLabel;
use tonic::Code;

/// The server binary Cargo built for these tests.
const SANDBOXD: &str = env!("CARGO_BIN_EXE_sandboxd");

/// One private daemon at a time: each costs a containerd and a dockerd on a 2-core machine.
static ONE_DAEMON: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A `sandboxd` whose docker is the private daemon (it has no bridge), sweeping every second;
/// its log is the daemon directory's `sandboxd.log`.
fn server_on(docker: &PrivateDocker, label: &TestLabel) -> TestServer {
    let config = serde_json::json!({
        "docker": {"create": {"network": "none"}},
        "server": {
            "state_dir": docker.path("state"),
            "sweep_interval_s": 1.0,
            "create_timeout_s": 10.0,
        },
    });
    TestServer::launch(SANDBOXD, label)
        .config(config)
        .env(&[("DOCKER_HOST", &docker.host())])
        .log_file(docker.path("sandboxd.log"))
        .start()
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
    let server = server_on(&docker, &label);
    let mut client = server.raw().await;
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
        // Either way its failure kind is DAEMON_UNAVAILABLE (not the task's fault).
        Err(status) => {
            assert_eq!(status.code(), Code::Unavailable, "{status:?}");
            assert_eq!(failure_kind_of(&status), Some(FailureKind::DaemonUnavailable), "{status:?}");
        }
        // Or the exec is reported as refused by the container or daemon (125, "sandbox"),
        // never as the command's own exit status.
        Ok(out) => {
            assert_eq!((out.return_code, out.error_type.as_str()), (125, "sandbox"), "{out:?}");
            assert_eq!(out.failure_kind, FailureKind::DaemonUnavailable as i32, "{out:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemon_gone_during_create_answers_unavailable_and_leaves_no_container() {
    let _one = ONE_DAEMON.lock().await;
    let mut docker = PrivateDocker::start(&[BUSYBOX]);
    let label = TestLabel::new();
    let server = server_on(&docker, &label);
    let mut client = server.raw().await;
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
    assert_eq!(failure_kind_of(&status), Some(FailureKind::DaemonUnavailable), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_while_the_daemon_is_down_is_unknown_or_unavailable_and_never_hangs() {
    let _one = ONE_DAEMON.lock().await;
    let mut docker = PrivateDocker::start(&[BUSYBOX]);
    let label = TestLabel::new();
    let server = server_on(&docker, &label);
    let mut client = server.raw().await;
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

#[tokio::test(flavor = "multi_thread")]
async fn a_docker_daemon_that_dies_mid_exec_or_mid_create_gets_clear_answers_and_recovery() {
    let _one = ONE_DAEMON.lock().await;
    let label = TestLabel::new();
    let mut daemon = PrivateDocker::start(&[BUSYBOX]);
    let config = serde_json::json!({
        "docker": {"create": {"network": "none"}, "probe": {
            "command": "sleep 3; printf docker-sandbox-ready", "timeout_s": 60}},
        "server": {"create_timeout_s": 5, "sweep_interval_s": 1},
    });
    let host = daemon.host();
    let server = TestServer::launch(SANDBOXD, &label).config(config).env(&[("DOCKER_HOST", &host)]).start();
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;

    // The daemon restarts while an exec runs: the exec answers (no hang) as the sandbox's
    // failure, and once the daemon is back the sandbox reads stopped and closes.
    let mut exec_raw = raw.clone();
    let sandbox_id = id.clone();
    let exec = tokio::spawn(async move {
        exec_raw
            .exec(proto::ExecRequest { sandbox_id, command: "sleep 60".into(), ..Default::default() })
            .await
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    daemon.stop_dockerd();
    let answer = tokio::time::timeout(Duration::from_secs(60), exec)
        .await
        .expect("the exec hung when the daemon went away");
    match answer.unwrap() {
        Ok(r) => {
            let r = r.into_inner();
            assert_eq!((r.return_code, r.error_type.as_str()), (125, "sandbox"), "{r:?}");
        }
        Err(e) => assert_eq!(e.code(), Code::Unavailable, "{e:?}"),
    }
    // With the daemon gone: a create is UNAVAILABLE, promptly.
    let gone = tokio::time::timeout(
        Duration::from_secs(60),
        raw.create(proto::CreateRequest { spec: Some(busybox()) }),
    )
    .await
    .expect("a create hung while the daemon was gone");
    assert_eq!(gone.unwrap_err().code(), Code::Unavailable);
    daemon.start_dockerd();
    let status = raw.status(proto::StatusRequest { sandbox_id: id.clone() }).await.unwrap().into_inner();
    assert_eq!(status.status, proto::SandboxStatus::Stopped as i32, "the daemon's restart stopped it");
    raw.close(proto::CloseRequest { sandbox_id: id.clone() }).await.expect("close after the daemon is back");

    // The daemon goes away during a create (in its readiness probe): a clear failure, no hang;
    // once it is back, what the create left is swept and creates work again.
    let mut create_raw = raw.clone();
    let create =
        tokio::spawn(async move { create_raw.create(proto::CreateRequest { spec: Some(busybox()) }).await });
    let deadline = Instant::now() + Duration::from_secs(30);
    while !daemon.containers(None).iter().any(|n| n.starts_with("sandboxd-creating-")) {
        assert!(Instant::now() < deadline, "the create never started its container");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    daemon.stop_dockerd();
    let answer = tokio::time::timeout(Duration::from_secs(60), create)
        .await
        .expect("the create hung when the daemon went away");
    let err = answer.unwrap().expect_err("a create whose daemon died cannot succeed");
    assert!(matches!(err.code(), Code::Unavailable | Code::FailedPrecondition), "{err:?}");
    daemon.start_dockerd();
    eventually(
        Duration::from_secs(60),
        "the unfinished create was never swept after the daemon came back",
        || daemon.containers(None).is_empty(),
    )
    .await;
    let again = create_id(&mut raw, busybox()).await;
    let out = raw
        .exec(proto::ExecRequest {
            sandbox_id: again.clone(),
            command: "echo back".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(out.into_inner().stdout, b"back\n");
    raw.close(proto::CloseRequest { sandbox_id: again }).await.unwrap();
}
