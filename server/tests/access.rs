//! Who may do what, against the real daemon through the real binary: capability tokens
//! (owner from Create, Grant narrower, Revoke durable across a restart, expiry), tenants that
//! cannot see or touch each other's sandboxes, and quotas refused with nothing half-made.

use std::path::Path;
use std::time::Duration;

use sandboxd_client::proto;
use sandboxd_client::proto::sandbox_service_client::SandboxServiceClient;
use testkit::images::BUSYBOX;
use testkit::server::TestServer;
use testkit::TestLabel;
use tonic::{Code, Request};

const SANDBOXD: &str = env!("CARGO_BIN_EXE_sandboxd");

type Raw = SandboxServiceClient<tonic::transport::Channel>;

fn sha256_hex(key: &str) -> String {
    sandboxd::auth::tenants::key_sha256(key)
}

/// The config sections of a server with tenants red (at most 1 sandbox, no snapshot) and blue
/// (2 creates a minute), its state and audit log in `dir` (kept across a restart). Tenant names
/// are unique per test: a tenant's label is the daemon's, and tests run side by side on one
/// daemon.
fn tenants_config(dir: &Path, label: &TestLabel) -> serde_json::Value {
    let tag = &label.value[..12];
    let tenants = serde_json::json!({"tenants": [
        {"name": format!("red-{tag}"), "key_sha256": sha256_hex("red-key"), "quotas": {"sandboxes": 1, "snapshots": 0}},
        {"name": format!("blue-{tag}"), "key_sha256": sha256_hex("blue-key"), "quotas": {"creates_per_minute": 2}},
    ]});
    let tenants_file = dir.join("tenants.json");
    std::fs::write(&tenants_file, tenants.to_string()).unwrap();
    serde_json::json!({
        "server": {
            "state_dir": dir.join("state"),
            "auth": {"tenants_file": tenants_file},
            "audit": dir.join("audit.log"),
        },
    })
}

fn start(label: &TestLabel, config: &serde_json::Value) -> TestServer {
    TestServer::launch(SANDBOXD, label).config(config.clone()).start()
}

async fn client(server: &TestServer) -> Raw {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    SandboxServiceClient::new(channel)
}

fn as_<T>(bearer: &str, msg: T) -> Request<T> {
    let mut r = Request::new(msg);
    r.metadata_mut().insert("authorization", format!("Bearer {bearer}").parse().unwrap());
    r
}

async fn create(c: &mut Raw, key: &str) -> Result<proto::SandboxRef, tonic::Status> {
    let spec = proto::SandboxSpec { image: BUSYBOX.into(), ..Default::default() };
    Ok(c.create(as_(key, proto::CreateRequest { spec: Some(spec) })).await?.into_inner().sandbox.unwrap())
}

async fn exec(c: &mut Raw, key: &str, id: &str) -> Result<proto::ExecResponse, tonic::Status> {
    let req = proto::ExecRequest { sandbox_id: id.into(), command: "echo hi".into(), ..Default::default() };
    Ok(c.exec(as_(key, req)).await?.into_inner())
}

async fn close(c: &mut Raw, key: &str, id: &str) -> Result<(), tonic::Status> {
    c.close(as_(key, proto::CloseRequest { sandbox_id: id.into() })).await.map(|_| ())
}

async fn grant(
    c: &mut Raw,
    key: &str,
    id: &str,
    scope: proto::TokenScope,
    ttl: Option<f64>,
) -> Result<proto::GrantResponse, tonic::Status> {
    let req = proto::GrantRequest { sandbox_id: id.into(), scope: scope as i32, ttl_s: ttl };
    Ok(c.grant(as_(key, req)).await?.into_inner())
}

async fn list(c: &mut Raw, key: &str) -> Vec<String> {
    let resp = c.list(as_(key, proto::ListRequest::default())).await.expect("list").into_inner();
    resp.sandboxes.into_iter().map(|s| s.sandbox.unwrap().sandbox_id).collect()
}

fn code<T: std::fmt::Debug>(r: Result<T, tonic::Status>) -> Code {
    r.expect_err("refused").code()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_narrow_never_widen_and_revocation_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let label = TestLabel::new();
    let config = tenants_config(dir.path(), &label);
    let mut server = start(&label, &config);
    let mut c = client(&server).await;

    let sandbox = create(&mut c, "blue-key").await.expect("create");
    let id = sandbox.sandbox_id.clone();
    let owner = sandbox.token.clone();
    assert!(!owner.is_empty(), "Create returns an owner token");
    assert_eq!(exec(&mut c, &owner, &id).await.expect("exec with the owner token").stdout, b"hi\n");

    let operate = grant(&mut c, &owner, &id, proto::TokenScope::Operate, None).await.expect("grant operate");
    assert_eq!(exec(&mut c, &operate.token, &id).await.expect("operate runs commands").return_code, 0);
    assert_eq!(
        code(close(&mut c, &operate.token, &id).await),
        Code::PermissionDenied,
        "operate cannot close"
    );
    let pause = c.pause(as_(&operate.token, proto::PauseRequest { sandbox_id: id.clone() })).await;
    assert_eq!(code(pause), Code::PermissionDenied, "operate cannot pause");
    // Never wider: operate cannot mint owner.
    assert_eq!(
        code(grant(&mut c, &operate.token, &id, proto::TokenScope::Owner, None).await),
        Code::PermissionDenied
    );
    let read = grant(&mut c, &operate.token, &id, proto::TokenScope::Read, None).await.expect("grant read");
    let status = c.status(as_(&read.token, proto::StatusRequest { sandbox_id: id.clone() })).await;
    assert!(status.is_ok(), "read reads status: {status:?}");
    assert_eq!(code(exec(&mut c, &read.token, &id).await), Code::PermissionDenied, "read cannot exec");
    // A token reaches its own sandbox only, and lists nothing.
    assert_eq!(code(exec(&mut c, &owner, "sbx-0123456789abcdef").await), Code::PermissionDenied);
    assert_eq!(code(c.list(as_(&owner, proto::ListRequest::default())).await), Code::PermissionDenied);
    // Garbage and tampering are UNAUTHENTICATED.
    let mut tampered = operate.token.clone();
    tampered.pop();
    assert_eq!(code(exec(&mut c, &tampered, &id).await), Code::Unauthenticated);
    assert_eq!(code(exec(&mut c, "no-such-key", &id).await), Code::Unauthenticated);

    // Expiry.
    let short = grant(&mut c, &owner, &id, proto::TokenScope::Operate, Some(1.0)).await.expect("grant 1 s");
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let expired = exec(&mut c, &short.token, &id).await.expect_err("expired");
    assert_eq!(expired.code(), Code::Unauthenticated);
    assert!(expired.message().contains("expired"), "{expired:?}");

    // Revoking the operate token ends it and the read token granted from it, across a restart.
    c.revoke(as_(&owner, proto::RevokeRequest { token_id: operate.token_id.clone() })).await.expect("revoke");
    assert_eq!(code(exec(&mut c, &operate.token, &id).await), Code::Unauthenticated);
    drop(server);
    server = start(&label, &config);
    let mut c = client(&server).await;
    let revoked = exec(&mut c, &operate.token, &id).await.expect_err("still revoked after a restart");
    assert_eq!(revoked.code(), Code::Unauthenticated);
    assert!(revoked.message().contains("revoked"), "{revoked:?}");
    let child = c.status(as_(&read.token, proto::StatusRequest { sandbox_id: id.clone() })).await;
    assert_eq!(code(child), Code::Unauthenticated, "a token granted from a revoked one is revoked");
    // The owner token still works after the restart (same signing key from the state dir).
    close(&mut c, &owner, &id).await.expect("owner closes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tenants_cannot_see_or_touch_each_other_and_quotas_refuse_with_nothing_made() {
    let dir = tempfile::tempdir().unwrap();
    let label = TestLabel::new();
    let config = tenants_config(dir.path(), &label);
    let server = start(&label, &config);
    let mut c = client(&server).await;

    let red = create(&mut c, "red-key").await.expect("red creates");
    let blue = create(&mut c, "blue-key").await.expect("blue creates");
    assert_eq!(list(&mut c, "red-key").await, vec![red.sandbox_id.clone()]);
    assert_eq!(list(&mut c, "blue-key").await, vec![blue.sandbox_id.clone()]);

    // Blue reaching red's sandbox is NOT_FOUND, exactly as an unknown id.
    assert_eq!(code(exec(&mut c, "blue-key", &red.sandbox_id).await), Code::NotFound);
    assert_eq!(code(close(&mut c, "blue-key", &red.sandbox_id).await), Code::NotFound);
    assert_eq!(
        code(grant(&mut c, "blue-key", &red.sandbox_id, proto::TokenScope::Read, None).await),
        Code::NotFound
    );
    let st = c.status(as_("blue-key", proto::StatusRequest { sandbox_id: red.sandbox_id.clone() })).await;
    assert_eq!(code(st), Code::NotFound);
    // Red's own key still works on it, and red's owner token cannot reach blue's.
    assert_eq!(exec(&mut c, "red-key", &red.sandbox_id).await.expect("red execs").return_code, 0);
    assert_eq!(code(exec(&mut c, &red.token, &blue.sandbox_id).await), Code::PermissionDenied);

    // Quota: red may hold one sandbox; the second is refused naming it, and nothing is made.
    let before = containers(&label);
    let refused = create(&mut c, "red-key").await.expect_err("red is at its quota");
    assert_eq!(refused.code(), Code::ResourceExhausted);
    let msg = refused.message();
    assert!(msg.contains("sandboxes") && msg.contains("limit 1") && msg.contains("in use 1"), "{msg}");
    // ... as QUOTA (an ErrorInfo the caller can branch on) with a retry delay.
    assert_eq!(sandboxd_client::failure_kind_of(&refused), Some(sandboxd_client::FailureKind::Quota));
    assert!(tonic_types::StatusExt::get_details_retry_info(&refused).is_some_and(|r| r.retry_delay.is_some()));
    assert_eq!(containers(&label), before, "a refused create made a container");
    // Snapshots: red's quota is 0.
    let snap = c
        .snapshot(as_(
            "red-key",
            proto::SnapshotRequest { sandbox_id: red.sandbox_id.clone(), ..Default::default() },
        ))
        .await;
    let snap = snap.expect_err("red may keep no snapshot");
    assert_eq!(snap.code(), Code::ResourceExhausted);
    assert!(snap.message().contains("snapshots"), "{snap:?}");
    // Creates per minute: blue made 1 of 2; the third within the minute is refused.
    let second = create(&mut c, "blue-key").await.expect("blue's second create");
    let third = create(&mut c, "blue-key").await.expect_err("blue is at creates_per_minute");
    assert_eq!(third.code(), Code::ResourceExhausted);
    assert!(
        third.message().contains("creates_per_minute") && third.message().contains("limit 2"),
        "{third:?}"
    );

    for (key, id) in
        [("red-key", &red.sandbox_id), ("blue-key", &blue.sandbox_id), ("blue-key", &second.sandbox_id)]
    {
        close(&mut c, key, id).await.expect("close own");
    }
    assert!(containers(&label).is_empty(), "left: {:?}", containers(&label));

    // The audit log: a JSON line per mutating call, with tenant, sandbox, method and outcome.
    let audit = std::fs::read_to_string(dir.path().join("audit.log")).expect("audit log");
    let lines: Vec<serde_json::Value> =
        audit.lines().map(|l| serde_json::from_str(l).expect("JSON line")).collect();
    let red_name = format!("red-{}", &label.value[..12]);
    let has = |method: &str, outcome: &str, sandbox: Option<&str>| {
        lines.iter().any(|l| {
            l["method"] == method
                && l["outcome"] == outcome
                && l["tenant"] == red_name.as_str()
                && sandbox.is_none_or(|s| l["sandbox_id"] == s)
        })
    };
    assert!(has("Create", "OK", Some(&red.sandbox_id)), "{audit}");
    assert!(has("Create", "ResourceExhausted", None), "{audit}");
    assert!(has("Close", "OK", Some(&red.sandbox_id)), "{audit}");
    assert!(!lines.iter().any(|l| l["method"] == "List"), "List is not a mutating call: {audit}");
    let blue_exec = lines
        .iter()
        .find(|l| l["method"] == "Exec" && l["outcome"] == "NotFound")
        .expect("blue's refused exec");
    assert_eq!(blue_exec["sandbox_id"], red.sandbox_id.as_str());
}

/// This test's containers on the machine's daemon (by its own label), background removals
/// ended.
fn containers(label: &TestLabel) -> Vec<String> {
    let mut ids = label.containers();
    ids.sort();
    ids
}
