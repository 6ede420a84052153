//! `grpc.health.v1` follows the Docker daemon: NOT_SERVING while a PRIVATE `dockerd`
//! ([`PrivateDocker`]) is killed, SERVING again once it is back. The machine's daemon is never
//! touched.

use std::time::Duration;

use testkit::images::BUSYBOX;
use testkit::private_docker::PrivateDocker;
use testkit::server::TestServer;
use testkit::TestLabel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

const SANDBOXD: &str = env!("CARGO_BIN_EXE_sandboxd");

/// A `sandboxd` on the private daemon, probing health every 0.3 s; its log is the daemon
/// directory's `sandboxd.log`.
fn start(docker: &PrivateDocker, label: &TestLabel) -> TestServer {
    let config = serde_json::json!({
        "docker": {"create": {"network": "none"}},
        "server": {"state_dir": docker.path("state"), "health_probe_interval_s": 0.3},
    });
    TestServer::launch(SANDBOXD, label)
        .config(config)
        .env(&[("DOCKER_HOST", &docker.host())])
        .log_file(docker.path("sandboxd.log"))
        .start()
}

/// Polls `Check` for `service` until it reads `want`; panics after `within`.
async fn wait_for(client: &mut HealthClient<tonic::transport::Channel>, service: &str, want: ServingStatus) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut last = None;
    while tokio::time::Instant::now() < deadline {
        let answer = client.check(HealthCheckRequest { service: service.into() }).await;
        let status = answer.map(|r| r.into_inner().status());
        if matches!(status, Ok(s) if s == want) {
            return;
        }
        last = Some(status);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("health of {service:?} never read {want:?}; last {last:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_not_serving_while_the_daemon_is_down_and_serving_once_it_is_back() {
    let mut docker = PrivateDocker::start(&[BUSYBOX]);
    let label = TestLabel::new();
    let server = start(&docker, &label);
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.addr))
        .expect("url")
        .connect()
        .await
        .expect("connect");
    let mut health = HealthClient::new(channel);
    const SERVICE: &str = "sandbox.v1.SandboxService";
    wait_for(&mut health, SERVICE, ServingStatus::Serving).await;

    docker.kill_dockerd();
    let down_at = tokio::time::Instant::now();
    wait_for(&mut health, SERVICE, ServingStatus::NotServing).await;
    wait_for(&mut health, "", ServingStatus::NotServing).await;
    eprintln!("NOT_SERVING {:?} after the daemon was killed", down_at.elapsed());

    docker.start_dockerd();
    let up_at = tokio::time::Instant::now();
    wait_for(&mut health, SERVICE, ServingStatus::Serving).await;
    wait_for(&mut health, "", ServingStatus::Serving).await;
    eprintln!("SERVING {:?} after the daemon was started", up_at.elapsed());
}
