//! The Rust client's token helpers against the service in-process: the owner token `Create`
//! returned, `Sandbox::grant`, a client built from a token (`Client::with_token`) that can
//! operate but not end the sandbox, and `Client::revoke`. Over `testkit::fake` (tokens are the
//! service's, not the backend's; no Docker).

use std::sync::Arc;

use sandboxd::config::FileConfig;
use sandboxd_client::{spec, Sandbox, TokenScope};
use testkit::fake::FakeBackend;
use testkit::service::TestService;
use tonic::Code;

#[tokio::test(flavor = "multi_thread")]
async fn a_granted_token_operates_a_sandbox_until_revoked() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = FileConfig::default();
    config.server.state_dir = Some(dir.path().join("state"));
    let fake = Arc::new(FakeBackend::new());
    let server = TestService::start_backend(fake.clone(), config, None);
    let owner = server.client().await;
    let sandbox = Sandbox::start(&owner, spec("fake:1")).await.unwrap();
    assert!(sandbox.token().is_some_and(|t| t.split('.').count() == 3), "Create returns an owner token");
    let descriptor = sandbox.serialize();
    assert_eq!(descriptor["token"].as_str(), sandbox.token(), "serialize() carries it");
    let again = Sandbox::connect(&owner, &descriptor).await.unwrap();
    assert_eq!(again.token(), sandbox.token(), "and Connect hands it back");

    let grant = sandbox.grant(TokenScope::Operate, Some(600.0)).await.unwrap();
    assert!(!grant.token_id.is_empty() && grant.expires_at_s > 0.0);
    let grader = owner.with_token(&grant.token).unwrap();
    let graded = Sandbox::connect(&grader, sandbox.id()).await.unwrap();
    assert_eq!(graded.exec("echo graded").await.unwrap().stdout_str(), "graded\n");
    let err = graded.stop().await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err}");
    let err = grader.grant(sandbox.id(), TokenScope::Owner, None).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "a grant never widens: {err}");

    owner.revoke(&grant.token_id).await.unwrap();
    let err = graded.exec("echo after").await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err}");
    sandbox.stop().await.unwrap();
    assert!(fake.sandboxes().is_empty(), "left: {:?}", fake.sandboxes().keys());
}
