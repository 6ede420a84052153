//! The OCI runtime of a sandbox (issue 27): chosen per sandbox (`SandboxSpec.runtime`), by the
//! server's default (`docker.create.runtime`), by a tenant's binding (`tenants[].runtime`), and
//! kept by snapshots and forks; refused with nothing created when it is unknown, not offered or
//! not registered with the daemon. Runs on whichever runtime the suites run on
//! (`SANDBOXD_TEST_RUNTIME`): on runsc, against the daemon of `scripts/runsc-daemon.sh`, the
//! kernel checks are those only gVisor passes.

use sandboxd_client::proto;
use serde_json::json;
use testkit::raw::{busybox, create_id, exec, RawClient};
use testkit::service::TestService;
use testkit::TestLabel;
use tonic::{Code, Request};

fn with_key<T>(key: &str, msg: T) -> Request<T> {
    let mut r = Request::new(msg);
    r.metadata_mut().insert("authorization", format!("Bearer {key}").parse().unwrap());
    r
}

async fn create(raw: &mut RawClient, spec: proto::SandboxSpec) -> Result<String, tonic::Status> {
    let response = raw.create(proto::CreateRequest { spec: Some(spec) }).await?;
    Ok(response.into_inner().sandbox.unwrap().sandbox_id)
}

fn on(runtime: &str) -> proto::SandboxSpec {
    proto::SandboxSpec { runtime: runtime.into(), ..busybox() }
}

async fn status_runtime(raw: &mut RawClient, id: &str) -> String {
    raw.status(proto::StatusRequest { sandbox_id: id.into() }).await.unwrap().into_inner().runtime
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_or_not_offered_runtimes_are_invalid_argument_and_create_nothing() {
    let label = TestLabel::new();
    let service = TestService::start_json(&label, json!({"server": {"allow_client_run_args": true}}));
    let mut raw = service.raw().await;
    let offered = if testkit::on_runsc() { "offered: runc, runsc" } else { "offered: runc" };
    let e = create(&mut raw, on("kata")).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("spec.runtime") && e.message().contains(offered), "{}", e.message());
    for bad in ["--privileged", "run c", "RUNSC"] {
        let e = create(&mut raw, on(bad)).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{bad}: {e:?}");
        assert!(e.message().contains("spec.runtime"), "{}", e.message());
    }
    // No flag smuggles a runtime past the spec (or a tenant's binding).
    for flag in ["--runtime=runc", "--runtime"] {
        let spec = proto::SandboxSpec {
            provider_options: Some(proto::ProviderOptions {
                run_args: vec![flag.into(), "runc".into()],
                volumes: vec![],
            }),
            ..busybox()
        };
        let e = create(&mut raw, spec).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains("spec.provider_options.run_args"), "{}", e.message());
    }
    assert!(label.containers().is_empty(), "a refused create made a container");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_runtime_the_daemon_lacks_is_failed_precondition_naming_what_docker_info_lists() {
    let label = TestLabel::new();
    let mut runtimes = testkit::runtime_offers();
    runtimes
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "ghost", "daemon_name": "sandboxd-no-such-runtime"}));
    let service = TestService::start_json(&label, json!({"docker": {"runtimes": runtimes}}));
    let mut raw = service.raw().await;
    let e = create(&mut raw, on("ghost")).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    let m = e.message();
    assert!(m.contains("spec.runtime") && m.contains("sandboxd-no-such-runtime"), "{m}");
    assert!(m.contains("`docker info` lists:") && m.contains("runc"), "names what the daemon has: {m}");
    assert!(label.containers().is_empty(), "a refused create made a container");
}

/// The default runtime is labelled and shown by `Status` and `List`; a snapshot carries it, and
/// a sandbox from the snapshot and a fork's child run on it; asking another for a snapshot's
/// sandbox is refused.
#[tokio::test(flavor = "multi_thread")]
async fn the_runtime_is_shown_and_kept_by_snapshots_and_forks() {
    let label = TestLabel::new();
    let service = TestService::start_json(&label, json!({}));
    let mut raw = service.raw().await;
    let runtime = testkit::runtime_name();
    let id = create_id(&mut raw, busybox()).await;
    assert_eq!(status_runtime(&mut raw, &id).await, runtime);
    let list = raw.list(proto::ListRequest::default()).await.unwrap().into_inner();
    let info = list.sandboxes.iter().find(|s| s.sandbox.as_ref().unwrap().sandbox_id == id).unwrap();
    assert_eq!(info.runtime, runtime);
    let snapshot = raw
        .snapshot(proto::SnapshotRequest { sandbox_id: id.clone(), labels: Default::default() })
        .await
        .unwrap()
        .into_inner()
        .snapshot
        .unwrap();
    assert_eq!(snapshot.runtime, runtime);
    let other = if runtime == "runc" { "runsc" } else { "runc" };
    let spec = proto::SandboxSpec {
        snapshot_id: Some(snapshot.snapshot_id.clone()),
        runtime: other.into(),
        ..Default::default()
    };
    let e = create(&mut raw, spec).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("spec.runtime") && e.message().contains(runtime), "{}", e.message());
    let spec = proto::SandboxSpec { snapshot_id: Some(snapshot.snapshot_id.clone()), ..Default::default() };
    let restored = create_id(&mut raw, spec).await;
    assert_eq!(status_runtime(&mut raw, &restored).await, runtime);
    let forked = raw
        .fork(proto::ForkRequest { sandbox_id: id.clone(), count: 1, ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    let child = forked.sandboxes[0].sandbox_id.clone();
    assert_eq!(status_runtime(&mut raw, &child).await, runtime);
    for sandbox_id in [id, restored, child] {
        raw.close(proto::CloseRequest { sandbox_id }).await.unwrap();
    }
}

/// Inside, a sandbox sees its runtime's kernel: gVisor's own on runsc (`dmesg` starts
/// "Starting gVisor", `/proc/version` is not the host's), the host's on runc.
#[tokio::test(flavor = "multi_thread")]
async fn the_sandbox_sees_its_runtimes_kernel() {
    let label = TestLabel::new();
    let service = TestService::start_json(&label, json!({}));
    let mut raw = service.raw().await;
    let id = create_id(&mut raw, busybox()).await;
    let version = exec(&mut raw, &id, "cat /proc/version").await;
    let version = String::from_utf8_lossy(&version.stdout).to_string();
    let host = std::fs::read_to_string("/proc/version").unwrap();
    if testkit::on_runsc() {
        let dmesg = exec(&mut raw, &id, "dmesg | head -n 1").await;
        let dmesg = String::from_utf8_lossy(&dmesg.stdout).to_string();
        assert!(dmesg.contains("Starting gVisor"), "dmesg: {dmesg:?}");
        assert_ne!(version, host, "a gVisor sandbox saw the host's kernel");
    } else {
        assert_eq!(version, host, "a runc sandbox shares the host's kernel");
    }
    raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}

/// A tenant bound to runsc (`tenants: [{..., runtime: runsc}]`): asking for runc is
/// PERMISSION_DENIED naming the field and the runtime allowed, for a sandbox and for a pool,
/// with nothing created; a create that names none runs on runsc (on a daemon without runsc it
/// is refused, never made on runc). A server whose tenants file binds a tenant to a runtime it
/// does not offer does not start.
#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_bound_to_runsc_cannot_ask_for_runc() {
    let label = TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    let tag = &label.value[..12];
    let tenants = json!({"tenants": [
        {"name": format!("gv-{tag}"), "key_sha256": sandboxd::auth::tenants::key_sha256("gv-key"), "runtime": "runsc"},
    ]});
    let tenants_file = dir.path().join("tenants.json");
    std::fs::write(&tenants_file, tenants.to_string()).unwrap();
    let mut config = json!({
        "server": {"state_dir": dir.path().join("state"), "auth": {"tenants_file": tenants_file}},
        "docker": {"runtimes": [{"name": "runc"}], "create": {"runtime": "runc"}},
    });
    let body = testkit::config::test_config(&label, config.clone());
    let file = sandboxd::config::FileConfig::from_json_value(&body).unwrap();
    let refused =
        sandboxd::service::Services::build_docker(&file, None).await.err().expect("a refused start");
    assert!(refused.to_string().contains("bound to runtime \"runsc\""), "{refused}");
    config["docker"]["runtimes"] = json!([{"name": "runc"}, {"name": "runsc"}]);
    config["docker"]["create"]["runtime"] = json!(testkit::runtime_name());
    let service = TestService::start_json(&label, config);
    let mut raw = service.raw().await;
    let e =
        raw.create(with_key("gv-key", proto::CreateRequest { spec: Some(on("runc")) })).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("spec.runtime") && e.message().contains("\"runsc\""), "{}", e.message());
    let pool = proto::PoolSpec {
        name: "p".into(),
        image: testkit::images::BUSYBOX.into(),
        template: Some(on("runc")),
        target: 0,
        max: 1,
        ..Default::default()
    };
    let e =
        raw.create_pool(with_key("gv-key", proto::CreatePoolRequest { pool: Some(pool) })).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("pool.template.runtime"), "{}", e.message());
    assert!(label.containers().is_empty(), "a refused create made a container");
    let made = raw.create(with_key("gv-key", proto::CreateRequest { spec: Some(busybox()) })).await;
    if testkit::on_runsc() {
        let id = made.unwrap().into_inner().sandbox.unwrap().sandbox_id;
        let status = raw.status(with_key("gv-key", proto::StatusRequest { sandbox_id: id.clone() })).await;
        assert_eq!(status.unwrap().into_inner().runtime, "runsc");
        let dmesg = raw
            .exec(with_key(
                "gv-key",
                proto::ExecRequest {
                    sandbox_id: id.clone(),
                    command: "dmesg | head -n 1".into(),
                    ..Default::default()
                },
            ))
            .await
            .unwrap()
            .into_inner();
        assert!(String::from_utf8_lossy(&dmesg.stdout).contains("Starting gVisor"), "{dmesg:?}");
        raw.close(with_key("gv-key", proto::CloseRequest { sandbox_id: id })).await.unwrap();
    } else {
        let e = made.unwrap_err();
        assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
        assert!(e.message().contains("`docker info` lists"), "{}", e.message());
        assert!(label.containers().is_empty(), "the binding made a runc sandbox");
    }
}

/// Figures (not run by default): exec `printf x` through the agent's socket, through its
/// `docker exec -i` channel, and a raw `docker exec`, medians of 30, on the runtime under test:
/// `SANDBOXD_TEST_RUNTIME=runsc DOCKER_HOST=… cargo test -p sandboxd --test runtimes figures
/// -- --ignored --nocapture` (docs/runtimes.md, "Sandboxes on gVisor").
#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn figures() {
    use sandboxd::config::ExecTransport;
    use std::time::{Duration, Instant};
    let label = TestLabel::new();
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let mut rows = Vec::new();
    for transport in [ExecTransport::Socket, ExecTransport::Channel] {
        let p = testkit::agent_provider(&label, |c| c.exec.transport = transport);
        let started = Instant::now();
        let h = p.create(&sandboxd::core::spec::SandboxSpec::new(testkit::images::BUSYBOX)).await.unwrap();
        let create = started.elapsed();
        let mut times = Vec::new();
        for _ in 0..30 {
            let t = Instant::now();
            let r = p.exec(&h, "printf x", &testkit::exec_params()).await.unwrap();
            times.push(t.elapsed());
            assert_eq!(r.stdout_str(), "x");
        }
        rows.push((format!("{transport:?}"), create, median(times)));
        if transport == ExecTransport::Channel {
            let mut raw = Vec::new();
            for _ in 0..30 {
                let t = Instant::now();
                let out = std::process::Command::new("docker")
                    .args(["exec", &h.sandbox_id, "printf", "x"])
                    .output()
                    .unwrap();
                raw.push(t.elapsed());
                assert_eq!(out.stdout, b"x");
            }
            rows.push(("docker exec".into(), Duration::ZERO, median(raw)));
        }
        p.close(&h.id()).await.unwrap();
    }
    for (name, create, exec) in rows {
        println!(
            "runtime={} {name}: create {create:?}, exec printf x median {exec:?}",
            testkit::runtime_name()
        );
    }
}
