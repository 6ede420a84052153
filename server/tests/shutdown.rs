//! The binary's shutdown: health turns NOT_SERVING first and a second signal exits at once;
//! `--remove-on-shutdown` runs beside the drain, catches creates that complete meanwhile, and
//! gets the drain timeout on an idle server.

use std::process::Command;
use std::time::Duration;

use sandboxd_client::proto;
use testkit::config::slow_probe;
use testkit::raw::{busybox, create_id};
use testkit::server::TestServer;
use testkit::wait::eventually;
use testkit::TestLabel;

/// The server binary Cargo built for these tests.
const SANDBOXD: &str = env!("CARGO_BIN_EXE_sandboxd");

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_turns_health_not_serving_first_and_a_second_signal_exits_at_once() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    let label = TestLabel::new();
    let mut server = TestServer::launch(SANDBOXD, &label).flags(&["--drain-timeout-s", "120"]).start();
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;
    let channel =
        tonic::transport::Endpoint::from_shared(server.url.clone()).unwrap().connect().await.unwrap();
    let mut watch = HealthClient::new(channel)
        .watch(tonic_health::pb::HealthCheckRequest { service: String::new() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(watch.message().await.unwrap().unwrap().status, ServingStatus::Serving as i32);

    // A call that would hold the drain for its whole 120 s.
    let mut exec_raw = raw.clone();
    let sandbox_id = id.clone();
    let in_flight = tokio::spawn(async move {
        exec_raw
            .exec(proto::ExecRequest { sandbox_id, command: "sleep 100".into(), ..Default::default() })
            .await
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    server.signal(nix::sys::signal::Signal::SIGTERM);
    let next =
        tokio::time::timeout(Duration::from_secs(10), watch.message()).await.expect("health never changed");
    assert_eq!(next.unwrap().unwrap().status, ServingStatus::NotServing as i32);
    assert!(server.child.try_wait().unwrap().is_none(), "the first signal drains");
    server.signal(nix::sys::signal::Signal::SIGTERM);
    let status = server.wait_exit(Duration::from_secs(10));
    assert!(!status.success(), "{status:?}");
    let _ = in_flight.await;
    // No docker client of this server is left on the host.
    let clients = Command::new("pgrep").args(["-f", &format!("docker exec.*{id}")]).output().unwrap();
    assert!(clients.stdout.is_empty(), "docker clients left: {}", String::from_utf8_lossy(&clients.stdout));
    let _ = testkit::docker(&["rm", "-f", &id]);
}

#[tokio::test(flavor = "multi_thread")]
async fn remove_on_shutdown_runs_beside_the_drain_and_catches_creates_that_complete_meanwhile() {
    let label = TestLabel::new();
    let mut server = TestServer::launch(SANDBOXD, &label)
        .config(slow_probe(3))
        .flags(&["--remove-on-shutdown", "--drain-timeout-s", "20"])
        .start();
    let mut raw = server.raw().await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(create_id(&mut raw, busybox()).await);
    }
    // One more create is under way when the signal comes; it completes during the drain.
    let mut late = raw.clone();
    let pending =
        tokio::spawn(async move { late.create(proto::CreateRequest { spec: Some(busybox()) }).await });
    eventually(Duration::from_secs(30), "the late create never started", || label.names().len() == 4).await;
    server.signal(nix::sys::signal::Signal::SIGTERM);
    let status = server.wait_exit(Duration::from_secs(40));
    assert!(status.success(), "{status:?}");
    let answer = pending.await.unwrap();
    assert!(answer.is_err(), "a create completing during a removing shutdown is not handed out: {answer:?}");
    assert!(label.names().is_empty(), "left behind: {:?}", label.names());
}

/// An idle server (no call in flight) ends its drain at once; its removal must still have the
/// drain timeout, not only the 2 s floor (it had only the floor: the drain timer that learnt
/// when the signal came was never polled). `docker rm` is made slower than the floor by a
/// `docker` on PATH that sleeps before it.
#[tokio::test(flavor = "multi_thread")]
async fn remove_on_shutdown_of_an_idle_server_gets_the_drain_timeout() {
    let label = TestLabel::new();
    let real = Command::new("sh").args(["-c", "command -v docker"]).output().unwrap();
    let real = String::from_utf8(real.stdout).unwrap().trim().to_string();
    assert!(!real.is_empty(), "no docker on PATH");
    let bin = tempfile::tempdir().unwrap();
    let wrapper = bin.path().join("docker");
    std::fs::write(&wrapper, format!("#!/bin/sh\ncase \"$1\" in rm) sleep 4;; esac\nexec {real} \"$@\"\n"))
        .unwrap();
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.path().display(), std::env::var("PATH").unwrap_or_default());
    let mut server = TestServer::launch(SANDBOXD, &label)
        .flags(&["--remove-on-shutdown", "--drain-timeout-s", "20"])
        .env(&[("PATH", &path)])
        .start();
    // The creates come from a runtime of their own, dropped before the signal: with its
    // connection gone the server has nothing to drain, as after clients that went home.
    std::thread::scope(|scope| {
        scope.spawn(|| {
            tokio::runtime::Runtime::new().unwrap().block_on(async {
                let mut raw = server.raw().await;
                for _ in 0..2 {
                    create_id(&mut raw, busybox()).await;
                }
            })
        });
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.signal(nix::sys::signal::Signal::SIGTERM);
    let status = server.wait_exit(Duration::from_secs(40));
    assert!(status.success(), "{status:?}");
    let left = label.names();
    if !left.is_empty() {
        let _ = testkit::docker(
            &[&["rm", "-f"][..], &left.iter().map(String::as_str).collect::<Vec<_>>()].concat(),
        );
    }
    assert!(left.is_empty(), "left behind: {left:?}\n{}", server.logs());
}
