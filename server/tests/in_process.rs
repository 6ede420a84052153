//! The service, its access rules, the audit log, the sweep and pools over the in-memory
//! `testkit::fake::FakeBackend`: the real `Services` (gate, audit, relay layer, handlers) on a
//! loopback port, no Docker daemon. Fast (well under a second each); the Docker suites stay for
//! what only Docker shows.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandboxd::config::FileConfig;
use sandboxd::core::lease::LeaseStore;
use sandboxd::service::rpc_table;
use sandboxd_client::proto;
use testkit::fake::FakeBackend;
use testkit::raw::{raw_client, RawClient};
use testkit::service::TestService;
use tonic::Code;

/// A config whose state lives in `dir`, with the audit log at `dir/audit.jsonl`.
fn config(dir: &std::path::Path) -> FileConfig {
    let mut config = FileConfig::default();
    config.server.state_dir = Some(dir.to_path_buf());
    config.server.audit = Some(dir.join("audit.jsonl").to_string_lossy().into_owned());
    config
}

fn spec() -> proto::SandboxSpec {
    proto::SandboxSpec { image: "fake:1".into(), ..Default::default() }
}

async fn create(raw: &mut RawClient) -> proto::SandboxRef {
    let response =
        raw.create(proto::CreateRequest { spec: Some(spec()) }).await.expect("create").into_inner();
    response.sandbox.expect("a sandbox ref")
}

fn with_bearer<T>(message: T, token: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
    request
}

#[tokio::test]
async fn the_service_drives_a_fake_backend_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeBackend::new());
    let service = TestService::start_backend(fake.clone(), config(dir.path()), None);
    let mut raw = raw_client(&service.url).await;

    let sandbox = create(&mut raw).await;
    let id = sandbox.sandbox_id.clone();
    assert!(fake.sandboxes().contains_key(&id), "the create reached the backend");

    let exec = raw
        .exec(proto::ExecRequest {
            sandbox_id: id.clone(),
            command: "echo hello there".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((exec.stdout.as_slice(), exec.return_code), (&b"hello there\n"[..], 0));
    let failed = raw
        .exec(proto::ExecRequest { sandbox_id: id.clone(), command: "exit 7".into(), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(failed.return_code, 7);

    let upload = vec![
        proto::UploadRequest {
            request: Some(proto::upload_request::Request::Header(proto::UploadHeader {
                sandbox_id: id.clone(),
                path: "/tmp/note".into(),
                size: Some(5),
                ..Default::default()
            })),
        },
        proto::UploadRequest { request: Some(proto::upload_request::Request::Chunk(b"hello".to_vec())) },
    ];
    raw.upload(tokio_stream::iter(upload)).await.expect("upload");
    let cat = raw
        .exec(proto::ExecRequest {
            sandbox_id: id.clone(),
            command: "cat /tmp/note".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(cat.stdout, b"hello");

    raw.pause(proto::PauseRequest { sandbox_id: id.clone() }).await.unwrap();
    let paused = raw.status(proto::StatusRequest { sandbox_id: id.clone() }).await.unwrap().into_inner();
    assert_eq!(paused.status, proto::SandboxStatus::Paused as i32);
    let refused = raw
        .exec(proto::ExecRequest { sandbox_id: id.clone(), command: "echo x".into(), ..Default::default() })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    raw.resume(proto::ResumeRequest { sandbox_id: id.clone() }).await.unwrap();

    let listed = raw.list(proto::ListRequest::default()).await.unwrap().into_inner();
    assert_eq!(
        listed.sandboxes.iter().map(|s| s.sandbox.as_ref().unwrap().sandbox_id.as_str()).collect::<Vec<_>>(),
        [id.as_str()]
    );

    // What the fake does not offer is refused by its declared capabilities, named, before it
    // reaches the backend.
    let calls_before = fake.calls().len();
    let stats = raw.stats(proto::StatsRequest { sandbox_id: id.clone() }).await.unwrap_err();
    assert_eq!(stats.code(), Code::Unimplemented, "{stats:?}");
    assert!(stats.message().contains("does not offer stats"), "{stats:?}");
    assert_eq!(fake.calls().len(), calls_before, "a refused capability reached the backend");

    raw.close(proto::CloseRequest { sandbox_id: id.clone() }).await.unwrap();
    // Gone reads stopped, as on Docker (testkit::conformance).
    let gone = raw.status(proto::StatusRequest { sandbox_id: id.clone() }).await.unwrap().into_inner();
    assert_eq!(gone.status, proto::SandboxStatus::Stopped as i32);
    assert!(fake.sandboxes().is_empty());

    // Bad input changes nothing and names the field.
    let bad = raw
        .exec(proto::ExecRequest { sandbox_id: String::new(), command: "echo".into(), ..Default::default() })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    assert!(bad.message().contains("sandbox_id"), "{bad:?}");
    let creates = fake.calls().iter().filter(|c| *c == "create_planned").count();
    assert_eq!(creates, 1);
}

/// Calls RPC `name` once about sandbox `id` (most are refused, or unimplemented by the fake:
/// a refusal is audited too).
async fn call(raw: &mut RawClient, name: &str, id: &str) -> Result<(), tonic::Status> {
    use proto::*;
    let s = || id.to_string();
    match name {
        "Create" => raw.create(CreateRequest { spec: Some(spec()) }).await.map(drop),
        "Connect" => raw
            .connect(ConnectRequest { sandbox: Some(SandboxRef { sandbox_id: s(), ..Default::default() }) })
            .await
            .map(drop),
        "Exec" => raw.exec(ExecRequest { sandbox_id: s(), command: "echo".into(), ..Default::default() }).await.map(drop),
        "ExecStream" => raw
            .exec_stream(ExecRequest { sandbox_id: s(), command: "echo".into(), ..Default::default() })
            .await
            .map(drop),
        "Upload" => {
            let header = UploadHeader { sandbox_id: s(), path: "/tmp/x".into(), size: Some(0), ..Default::default() };
            let first = UploadRequest { request: Some(upload_request::Request::Header(header)) };
            raw.upload(tokio_stream::iter(vec![first])).await.map(drop)
        }
        "Pty" => {
            let open = PtyRequest {
                request: Some(pty_request::Request::Open(PtyOpen { sandbox_id: s(), ..Default::default() })),
            };
            raw.pty(tokio_stream::iter(vec![open])).await.map(drop)
        }
        "PortForward" => {
            let open = PortForwardRequest {
                message: Some(port_forward_request::Message::Open(PortForwardOpen {
                    sandbox_id: s(),
                    port: 80,
                    ..Default::default()
                })),
            };
            raw.port_forward(tokio_stream::iter(vec![open])).await.map(drop)
        }
        "Close" => raw.close(CloseRequest { sandbox_id: s() }).await.map(drop),
        "SetTimeout" => raw.set_timeout(SetTimeoutRequest { sandbox_id: s(), ttl_s: 60.0 }).await.map(drop),
        "Snapshot" => raw.snapshot(SnapshotRequest { sandbox_id: s(), ..Default::default() }).await.map(drop),
        "DeleteSnapshot" => {
            raw.delete_snapshot(DeleteSnapshotRequest { snapshot_id: "nope".into() }).await.map(drop)
        }
        "Fork" => raw.fork(ForkRequest { sandbox_id: s(), count: 1, ..Default::default() }).await.map(drop),
        "Pause" => raw.pause(PauseRequest { sandbox_id: s() }).await.map(drop),
        "Resume" => raw.resume(ResumeRequest { sandbox_id: s() }).await.map(drop),
        "Checkpoint" => raw
            .checkpoint(sandboxd_proto::v1::CheckpointRequest { sandbox_id: s(), ..Default::default() })
            .await
            .map(drop),
        "Hibernate" => raw.hibernate(sandboxd_proto::v1::HibernateRequest { sandbox_id: s() }).await.map(drop),
        "Grant" => raw
            .grant(GrantRequest { sandbox_id: s(), scope: TokenScope::Read as i32, ..Default::default() })
            .await
            .map(drop),
        "Revoke" => raw.revoke(RevokeRequest { token_id: "abc123".into() }).await.map(drop),
        "DeleteVolume" => raw.delete_volume(DeleteVolumeRequest { name: "nope".into() }).await.map(drop),
        "SetNetworkPolicy" => {
            raw.set_network_policy(SetNetworkPolicyRequest { sandbox_id: s(), ..Default::default() }).await.map(drop)
        }
        "CreatePool" => raw
            .create_pool(CreatePoolRequest {
                pool: Some(PoolSpec { name: "audited".into(), image: "fake:1".into(), max: 1, ..Default::default() }),
            })
            .await
            .map(drop),
        "DeletePool" => raw.delete_pool(DeletePoolRequest { name: "audited".into() }).await.map(drop),
        "PrefetchImages" => raw
            .prefetch_images(PrefetchImagesRequest { images: vec!["fake:1".into()], nodes: vec![] })
            .await
            .map(drop),
        "SetPoolTargets" => raw
            .set_pool_targets(SetPoolTargetsRequest {
                targets: vec![PoolTarget { image: "fake:1".into(), count: 1, ..Default::default() }],
            })
            .await
            .map(drop),
        "StartProcess" => raw
            .start_process(StartProcessRequest { sandbox_id: s(), command: "echo".into(), ..Default::default() })
            .await
            .map(drop),
        "SignalProcess" => raw
            .signal_process(SignalProcessRequest {
                sandbox_id: s(),
                process_id: "p1".into(),
                signal: "TERM".into(),
            })
            .await
            .map(drop),
        "MakeDir" => {
            raw.make_dir(MakeDirRequest { sandbox_id: s(), path: b"/tmp/d".to_vec(), ..Default::default() }).await.map(drop)
        }
        "Remove" => {
            raw.remove(RemoveRequest { sandbox_id: s(), path: b"/tmp/d".to_vec(), ..Default::default() }).await.map(drop)
        }
        "Rename" => raw
            .rename(RenameRequest {
                sandbox_id: s(),
                source: b"/tmp/a".to_vec(),
                destination: b"/tmp/b".to_vec(),
                ..Default::default()
            })
            .await
            .map(drop),
        "CreateBatch" => raw
            .create_batch(CreateBatchRequest { spec: Some(spec()), count: 1 })
            .await
            .map(drop),
        "Reset" => raw.reset(ResetRequest { sandbox_id: s() }).await.map(drop),
        other => panic!(
            "{other} is mutating in service/rpc_table.rs: add a call for it to `call` in server/tests/in_process.rs"
        ),
    }
}

/// Every RPC the table calls mutating, called once over the real service, leaves an audit
/// line naming it (refusals included); the eight the old hand-kept list missed among them.
#[tokio::test]
async fn every_mutating_rpc_leaves_an_audit_line() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeBackend::new());
    let service = TestService::start_backend(fake, config(dir.path()), None);
    let mut raw = raw_client(&service.url).await;
    let id = create(&mut raw).await.sandbox_id;
    let mutating: Vec<&str> =
        rpc_table::RPCS.iter().filter(|r| r.mutating).map(|r| r.name).filter(|n| *n != "Close").collect();
    // A few calls that change nothing, which must leave no line.
    raw.status(proto::StatusRequest { sandbox_id: id.clone() }).await.unwrap();
    raw.list(proto::ListRequest::default()).await.unwrap();
    for name in mutating.iter().copied().chain(["Close"]) {
        let _ = call(&mut raw, name, &id).await;
    }

    let path = dir.path().join("audit.jsonl");
    let deadline = Instant::now() + Duration::from_secs(10);
    let logged = loop {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let logged: BTreeSet<String> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["method"].as_str().unwrap().to_string()
            })
            .collect();
        if logged.len() > mutating.len() || Instant::now() > deadline {
            break logged;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for name in mutating.iter().copied().chain(["Close"]) {
        assert!(logged.contains(name), "{name} left no audit line; the log has {logged:?}");
    }
    assert!(!logged.contains("Status") && !logged.contains("List"), "{logged:?}");
    for missed in [
        "StartProcess",
        "SignalProcess",
        "MakeDir",
        "Remove",
        "Rename",
        "PortForward",
        "CreatePool",
        "DeletePool",
    ] {
        assert!(logged.contains(missed), "{missed}");
    }
}

/// The access rules over the real gate: an owner token does everything on its sandbox, a read
/// grant reads but neither runs commands nor ends it, and no token reaches another sandbox.
#[tokio::test]
async fn tokens_reach_their_own_sandbox_up_to_their_scope() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeBackend::new());
    let service = TestService::start_backend(fake.clone(), config(dir.path()), Some("operator-key"));
    let mut raw = raw_client(&service.url).await;
    let op = |m| with_bearer(m, "operator-key");
    let mine = raw
        .create(op(proto::CreateRequest { spec: Some(spec()) }))
        .await
        .unwrap()
        .into_inner()
        .sandbox
        .unwrap();
    let other = raw
        .create(op(proto::CreateRequest { spec: Some(spec()) }))
        .await
        .unwrap()
        .into_inner()
        .sandbox
        .unwrap();
    let owner = mine.token.clone();
    assert!(!owner.is_empty(), "Create returns an owner token");

    let echo = |id: &str| proto::ExecRequest {
        sandbox_id: id.into(),
        command: "echo ok".into(),
        ..Default::default()
    };
    let ran = raw.exec(with_bearer(echo(&mine.sandbox_id), &owner)).await.unwrap().into_inner();
    assert_eq!(ran.stdout, b"ok\n");
    let elsewhere = raw.exec(with_bearer(echo(&other.sandbox_id), &owner)).await.unwrap_err();
    assert_eq!(elsewhere.code(), Code::PermissionDenied, "{elsewhere:?}");

    let grant = proto::GrantRequest {
        sandbox_id: mine.sandbox_id.clone(),
        scope: proto::TokenScope::Read as i32,
        ..Default::default()
    };
    let read = raw.grant(with_bearer(grant, &owner)).await.unwrap().into_inner().token;
    let status = proto::StatusRequest { sandbox_id: mine.sandbox_id.clone() };
    raw.status(with_bearer(status, &read)).await.expect("read may ask the status");
    let exec = raw.exec(with_bearer(echo(&mine.sandbox_id), &read)).await.unwrap_err();
    assert_eq!(exec.code(), Code::PermissionDenied);
    assert!(exec.message().contains("operate"), "{exec:?}");
    let close =
        raw.close(with_bearer(proto::CloseRequest { sandbox_id: mine.sandbox_id.clone() }, &read)).await;
    assert_eq!(close.unwrap_err().code(), Code::PermissionDenied);
    let list = raw.list(with_bearer(proto::ListRequest::default(), &owner)).await.unwrap_err();
    assert_eq!(list.code(), Code::PermissionDenied, "a token reaches only its own sandbox");
    let no_key = raw.list(proto::ListRequest::default()).await.unwrap_err();
    assert_eq!(no_key.code(), Code::Unauthenticated);

    raw.close(with_bearer(proto::CloseRequest { sandbox_id: mine.sandbox_id.clone() }, &owner))
        .await
        .unwrap();
    assert_eq!(fake.sandboxes().keys().collect::<Vec<_>>(), [&other.sandbox_id]);
}

/// One call context: a tenant's call looks its sandbox up once (the check's lookup is the
/// handler's), for Exec, Grant, Status and Stat alike.
#[tokio::test]
async fn a_tenants_call_looks_its_sandbox_up_once() {
    let dir = tempfile::tempdir().unwrap();
    let tenants = dir.path().join("tenants.json");
    let key_sha256 = sandboxd::auth::tenants::key_sha256("t1-key");
    std::fs::write(&tenants, format!(r#"{{"tenants": [{{"name": "t1", "key_sha256": "{key_sha256}"}}]}}"#))
        .unwrap();
    let mut config = config(dir.path());
    config.server.auth.tenants_file = Some(tenants);
    let fake = Arc::new(FakeBackend::new());
    let service = TestService::start_backend(fake.clone(), config, None);
    let mut raw = raw_client(&service.url).await;
    fn key<T>(message: T) -> tonic::Request<T> {
        with_bearer(message, "t1-key")
    }
    let id = raw
        .create(key(proto::CreateRequest { spec: Some(spec()) }))
        .await
        .unwrap()
        .into_inner()
        .sandbox
        .unwrap()
        .sandbox_id;
    let lookups = || fake.calls().iter().filter(|c| *c == "lookup").count();

    let before = lookups();
    let exec = proto::ExecRequest { sandbox_id: id.clone(), command: "echo ok".into(), ..Default::default() };
    assert_eq!(raw.exec(key(exec)).await.unwrap().into_inner().stdout, b"ok\n");
    assert_eq!(lookups() - before, 1, "Exec");

    let before = lookups();
    let grant = proto::GrantRequest {
        sandbox_id: id.clone(),
        scope: proto::TokenScope::Read as i32,
        ..Default::default()
    };
    assert!(!raw.grant(key(grant)).await.unwrap().into_inner().token.is_empty());
    assert_eq!(lookups() - before, 1, "Grant");

    let before = lookups();
    raw.status(key(proto::StatusRequest { sandbox_id: id.clone() })).await.unwrap();
    assert_eq!(lookups() - before, 1, "Status");

    // The fake does not offer file calls: its capability table refuses them before a lookup.
    let before = lookups();
    let stat = proto::StatRequest { sandbox_id: id.clone(), path: b"/tmp".to_vec(), ..Default::default() };
    assert_eq!(raw.stat(key(stat)).await.unwrap_err().code(), Code::Unimplemented);
    assert_eq!(lookups() - before, 0, "Stat");
}

/// The lifecycle's leases and the sweep over the fake: a sandbox whose lease ended goes, the
/// others stay.
#[tokio::test]
async fn the_sweep_removes_what_outlived_its_lease_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeBackend::new());
    // No default lease (the shipped config has one): `kept` is a sandbox without any.
    let mut config = config(dir.path());
    config.server.default_ttl = None;
    let service = TestService::start_backend(fake.clone(), config, None);
    let mut raw = raw_client(&service.url).await;
    let short = raw
        .create(proto::CreateRequest { spec: Some(proto::SandboxSpec { ttl_s: Some(3600.0), ..spec() }) })
        .await
        .unwrap()
        .into_inner()
        .sandbox
        .unwrap()
        .sandbox_id;
    let kept = create(&mut raw).await.sandbox_id;
    let before = fake.sandboxes();
    assert!(before[&short].expires_ms.is_some() && before[&kept].expires_ms.is_none());

    // The lease is moved into the past (as SetTimeout would, but through the store), then swept.
    let leases = LeaseStore::open(dir.path()).unwrap();
    leases.set(&short, sandboxd::core::lease::now_ms() - 1).unwrap();
    let report = sandboxd::core::sweep::sweep(fake.as_ref(), &leases).await.unwrap();
    assert_eq!(report.removed.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(), [short.as_str()]);
    assert_eq!(fake.sandboxes().keys().collect::<Vec<_>>(), [&kept]);
}

/// A pool made over the service fills to its target on the fake, and a create from it claims a
/// started member instead of making a new one.
#[tokio::test]
async fn a_pool_fills_to_its_target_and_a_claim_takes_a_member() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeBackend::new());
    let service = TestService::start_backend(fake.clone(), config(dir.path()), None);
    let mut raw = raw_client(&service.url).await;
    let pool = proto::PoolSpec {
        name: "warm".into(),
        image: "fake:1".into(),
        target: 2,
        max: 3,
        ..Default::default()
    };
    raw.create_pool(proto::CreatePoolRequest { pool: Some(pool) }).await.expect("create pool");
    let deadline = Instant::now() + Duration::from_secs(10);
    while fake.sandboxes().values().filter(|s| s.pool.as_deref() == Some("warm")).count() < 2 {
        assert!(Instant::now() < deadline, "the pool did not fill: {:?}", fake.sandboxes().keys());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let members: BTreeSet<String> = fake.sandboxes().keys().cloned().collect();
    let claimed = raw
        .create(proto::CreateRequest {
            spec: Some(proto::SandboxSpec { pool: Some("warm".into()), ..spec() }),
        })
        .await
        .expect("a create from the pool")
        .into_inner()
        .sandbox
        .unwrap()
        .sandbox_id;
    assert!(members.contains(&claimed), "the create took a started member ({claimed} not in {members:?})");
    let pools = raw.list_pools(proto::ListPoolsRequest {}).await.unwrap().into_inner().pools;
    assert_eq!(pools.len(), 1);
    assert_eq!(pools[0].name, "warm");
}
