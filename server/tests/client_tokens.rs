//! The Rust client's token helpers against the service in-process: the owner token `Create`
//! returned, `Sandbox::grant`, a client built from a token (`Client::with_token`) that can
//! operate but not end the sandbox, and `Client::revoke`.

use sandboxd_client::{spec, Sandbox, TokenScope};
use testkit::images::BUSYBOX;
use testkit::service::TestService;
use testkit::TestLabel;
use tonic::Code;

#[tokio::test(flavor = "multi_thread")]
async fn a_granted_token_operates_a_sandbox_until_revoked() {
    let label = TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let server = TestService::start_with(&label, None, |c| c.server.state_dir = Some(state.clone()));
    let owner = server.client().await;
    let sandbox = Sandbox::start(&owner, spec(BUSYBOX)).await.unwrap();
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
    let err = graded.exec("true").await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err}");
    sandbox.stop().await.unwrap();
    assert!(label.containers().is_empty(), "left: {:?}", label.containers());
}
