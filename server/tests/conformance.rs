//! The backend conformance suite (`testkit::conformance`, issue 36) on the in-memory fake and
//! on the real Docker daemon: the same checks through the gRPC API, so the fake that runs the
//! in-process suites answers as Docker does. (On Swarm it runs in `cluster.rs`.)

use std::sync::Arc;

use sandboxd::config::FileConfig;
use testkit::fake::FakeBackend;
use testkit::images::BUSYBOX;
use testkit::service::TestService;
use testkit::TestLabel;

#[tokio::test(flavor = "multi_thread")]
async fn the_fake_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = FileConfig::default();
    config.server.state_dir = Some(dir.path().to_path_buf());
    let service = TestService::start_backend(Arc::new(FakeBackend::new()), config, None);
    testkit::conformance::run_all(&service.client().await, BUSYBOX).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn docker_conforms() {
    let label = TestLabel::new();
    let service = TestService::start_json(&label, serde_json::json!({}));
    testkit::conformance::run_all(&service.client().await, BUSYBOX).await;
    assert!(label.names().is_empty(), "left behind: {:?}", label.names());
}
