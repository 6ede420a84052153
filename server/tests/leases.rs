//! Leases: `SetTimeout` moves a lease and a restarted server keeps it (the binary); the
//! operator's policy caps and defaults leases, and a lease runs from the end of its create
//! (in-process).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sandboxd_client::proto;
use testkit::config::{merge, slow_probe};
use testkit::raw::{busybox, create_id};
use testkit::server::TestServer;
use testkit::service::TestService;
use testkit::wait::eventually;
use testkit::{container_exists, TestLabel};
use tonic::Code;

/// The server binary Cargo built for these tests.
const SANDBOXD: &str = env!("CARGO_BIN_EXE_sandboxd");

#[tokio::test(flavor = "multi_thread")]
async fn set_timeout_moves_the_lease_and_a_restarted_server_keeps_it() {
    let label = TestLabel::new();
    let fast = serde_json::json!({"server": {"sweep_interval_s": 1}});
    let mut first = TestServer::launch(SANDBOXD, &label).config(fast.clone()).start();
    let mut raw = first.raw().await;

    // Extended: created with a 3 s lease, moved to an hour, outlives both the label and a restart.
    let extended = create_id(&mut raw, proto::SandboxSpec { ttl_s: Some(3.0), ..busybox() }).await;
    let before = sandboxd::core::lease::now_ms();
    let moved = raw
        .set_timeout(proto::SetTimeoutRequest { sandbox_id: extended.clone(), ttl_s: 3600.0 })
        .await
        .unwrap()
        .into_inner();
    assert!(
        (before + 3_590_000..=sandboxd::core::lease::now_ms() + 3_600_000)
            .contains(&moved.expires_at_unix_ms),
        "{moved:?}"
    );
    // Shortened: no lease at create, then two seconds.
    let shortened = create_id(&mut raw, busybox()).await;
    raw.set_timeout(proto::SetTimeoutRequest { sandbox_id: shortened.clone(), ttl_s: 2.0 }).await.unwrap();
    let unknown = raw
        .set_timeout(proto::SetTimeoutRequest {
            sandbox_id: "sandboxd-0123456789abcdef0123456789abcdef".into(),
            ttl_s: 5.0,
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);

    first.signal(nix::sys::signal::Signal::SIGKILL);
    first.wait_exit(Duration::from_secs(10));
    let second = TestServer::launch(SANDBOXD, &label).config(fast).start();
    eventually(Duration::from_secs(30), "the restarted server did not end the shortened lease", || {
        !container_exists(&shortened)
    })
    .await;
    assert!(
        second.logs().lines().any(|l| l.contains(&shortened) && l.contains("lease expired")),
        "{}",
        second.logs()
    );
    // Well past the 3 s of its label, the extended one is still served.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut raw = second.raw().await;
    let out = raw
        .exec(proto::ExecRequest {
            sandbox_id: extended.clone(),
            command: "echo alive".into(),
            ..Default::default()
        })
        .await
        .expect("the extended sandbox is still there")
        .into_inner();
    assert_eq!(out.stdout, b"alive\n");
    raw.close(proto::CloseRequest { sandbox_id: extended }).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn operator_lease_policy_caps_and_defaults() {
    let label = TestLabel::new();
    let policy = serde_json::json!({"server": {"max_ttl_s": 30, "default_ttl_s": 2, "sweep_interval_s": 1}});
    let server = TestService::start_json(&label, policy);
    let mut raw = server.raw().await;
    let defaulted = create_id(&mut raw, busybox()).await;
    let capped = create_id(&mut raw, busybox()).await;
    let t = sandboxd::core::lease::now_ms();
    let moved = raw
        .set_timeout(proto::SetTimeoutRequest { sandbox_id: capped.clone(), ttl_s: 86_400.0 })
        .await
        .unwrap()
        .into_inner();
    assert!(
        moved.expires_at_unix_ms <= sandboxd::core::lease::now_ms() + 30_000
            && moved.expires_at_unix_ms >= t + 29_000,
        "capped at max_ttl_s: {moved:?}"
    );
    eventually(Duration::from_secs(30), "default_ttl_s did not end a sandbox created without ttl_s", || {
        !container_exists(&defaulted)
    })
    .await;
    assert!(container_exists(&capped));
    raw.close(proto::CloseRequest { sandbox_id: capped }).await.unwrap();
}

/// A lease runs from the moment the create completes: a create slower than its own `ttl_s`
/// (a 4 s readiness probe for a 3 s lease) hands out a sandbox with its whole lease ahead. The
/// lease used to count from before `docker run`, so under load sandboxes were swept seconds
/// after their create answered.
#[tokio::test(flavor = "multi_thread")]
async fn a_lease_runs_from_the_end_of_its_create() {
    let label = TestLabel::new();
    let mut config = slow_probe(4);
    merge(&mut config, serde_json::json!({"server": {"sweep_interval_s": 1}}));
    let server = TestService::start_json(&label, config);
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, proto::SandboxSpec { ttl_s: Some(3.0), ..busybox() }).await;
    let handed_out = Instant::now();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let status = raw
        .status(proto::StatusRequest { sandbox_id: id.clone() })
        .await
        .expect("the sandbox is still there 1.5 s after its create answered")
        .into_inner();
    assert_eq!(status.status, proto::SandboxStatus::Running as i32, "{status:?}");
    eventually(Duration::from_secs(30), "the lease never ended the sandbox", || !container_exists(&id)).await;
    assert!(
        handed_out.elapsed() >= Duration::from_millis(2500),
        "the 3 s lease ended {:?} after the create answered",
        handed_out.elapsed()
    );
}

/// A fork makes sandboxes too: its children get their leases under the same policy as a
/// create, capped by `server.max_ttl_s` even when the source's lease is longer (in-process).
#[tokio::test(flavor = "multi_thread")]
async fn a_forks_children_get_the_capped_lease() {
    use sandboxd::core::lease::{self, LeasePolicy, LeaseStore};
    use sandboxd::core::lifecycle::{LeaseOptions, Lifecycle};
    use std::sync::Arc;
    let label = TestLabel::new();
    let provider = Arc::new(testkit::provider(&label));
    let state = tempfile::tempdir().unwrap();
    let lifecycle = |policy| {
        Lifecycle::new(
            provider.clone(),
            LeaseOptions {
                policy,
                store: LeaseStore::open(state.path()).unwrap(),
                create_timeout: Duration::from_secs(300),
            },
        )
    };
    let uncapped = Arc::new(lifecycle(LeasePolicy::default()));
    let max = Duration::from_secs(30);
    let capped = Arc::new(lifecycle(LeasePolicy { max_ttl: Some(max), default_ttl: None }));
    let spec = sandboxd::core::spec::SandboxSpec {
        ttl_s: Some(3600.0),
        ..sandboxd::core::spec::SandboxSpec::new(testkit::images::BUSYBOX)
    };
    let source = uncapped.create(spec, None, &Default::default()).await.expect("create");
    let forked = capped.fork(&source.id(), 2, &std::collections::BTreeMap::new(), 100).await.expect("fork");
    let now = lease::now_ms();
    assert_eq!(forked.sandboxes.len(), 2);
    for child in &forked.sandboxes {
        let end = capped.lease_end(child.id().as_str(), None).expect("the child has a lease");
        assert!(
            end <= now + max.as_millis() as i64,
            "child lease past max_ttl_s: ends {} ms from now",
            end - now
        );
        assert!(end > now + 20_000, "child lease far shorter than the cap: ends {} ms from now", end - now);
        capped.close(&child.id()).await.expect("close child");
    }
    uncapped.close(&source.id()).await.expect("close source");
}

/// Every path that makes a sandbox is capped by `server.max_ttl_s`: a create, a create from a
/// snapshot, a fork's child (its source leased for an hour) and a warm-pool claim, each asking
/// for an hour under a 10-minute cap. Both what the server reports (`List`) and the lease label a server that dies leaves
/// behind (where one is set at create) end within the cap (in-process, real daemon).
#[tokio::test(flavor = "multi_thread")]
async fn every_path_that_makes_a_sandbox_is_capped_by_max_ttl() {
    let label = TestLabel::new();
    let state = tempfile::tempdir().unwrap();
    let cap_ms: i64 = 600_000;
    let mine = HashMap::from([("case".to_string(), label.value.clone())]);
    let server = TestService::start_json(
        &label,
        serde_json::json!({
            "server": {"max_ttl_s": cap_ms / 1000, "state_dir": state.path(), "max_snapshots": 100_000},
            "pools": [{"name": "capped", "image": testkit::images::BUSYBOX, "target": 1, "max": 1,
                       "template": {"workdir": "/tmp", "metadata": {"case": label.value}}}],
        }),
    );
    let mut raw = server.raw().await;
    let hour =
        |spec: proto::SandboxSpec| proto::SandboxSpec { ttl_s: Some(3600.0), metadata: mine.clone(), ..spec };

    // The source of the snapshot and the fork holds an hour's lease: made by a server without a cap.
    let uncapped_state = tempfile::tempdir().unwrap();
    let uncapped =
        TestService::start_json(&label, serde_json::json!({"server": {"state_dir": uncapped_state.path()}}));
    let mut uncapped_raw = uncapped.raw().await;
    let source = create_id(&mut uncapped_raw, hour(busybox())).await;

    let created = create_id(&mut raw, hour(busybox())).await;
    let snapshot = raw
        .snapshot(proto::SnapshotRequest { sandbox_id: source.clone(), labels: mine.clone() })
        .await
        .expect("snapshot")
        .into_inner()
        .snapshot
        .expect("the snapshot")
        .snapshot_id;
    let from_snapshot = create_id(
        &mut raw,
        hour(proto::SandboxSpec { snapshot_id: Some(snapshot.clone()), ..Default::default() }),
    )
    .await;
    let forked = raw
        .fork(proto::ForkRequest {
            sandbox_id: source.clone(),
            count: 1,
            labels: mine.clone(),
            ..Default::default()
        })
        .await
        .expect("fork")
        .into_inner();
    let child = forked.sandboxes[0].sandbox_id.clone();
    let pool = |raw: &mut testkit::raw::RawClient| {
        let mut raw = raw.clone();
        async move {
            let pools =
                raw.list_pools(proto::ListPoolsRequest {}).await.expect("ListPools").into_inner().pools;
            pools.into_iter().find(|p| p.name == "capped").expect("the pool")
        }
    };
    let start = std::time::Instant::now();
    while pool(&mut raw).await.ready < 1 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the pool never had a ready sandbox: {:?}",
            pool(&mut raw).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let claimed =
        create_id(&mut raw, hour(proto::SandboxSpec { pool: Some("capped".into()), ..Default::default() }))
            .await;
    assert_eq!(pool(&mut raw).await.claimed, 1, "the claim came from the pool's ready sandbox");

    let listed = raw
        .list(proto::ListRequest { labels: mine.clone(), ..Default::default() })
        .await
        .expect("List")
        .into_inner()
        .sandboxes;
    let bound = sandboxd::core::lease::now_ms() + cap_ms;
    for (path, id) in
        [("create", &created), ("snapshot", &from_snapshot), ("fork", &child), ("pool claim", &claimed)]
    {
        let info = listed
            .iter()
            .find(|s| s.sandbox.as_ref().is_some_and(|r| &r.sandbox_id == id))
            .unwrap_or_else(|| panic!("{path}: {id} is not listed: {listed:?}"));
        let ends = info.expires_at_unix_ms.unwrap_or_else(|| panic!("{path}: no lease"));
        assert!(ends <= bound, "{path}: the lease ends {} ms past the cap", ends - bound);
        let out = testkit::docker(&["inspect", "-f", "{{index .Config.Labels \"sandboxd.expires_ms\"}}", id]);
        let kept = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if let Ok(kept) = kept.parse::<i64>() {
            assert!(kept <= bound, "{path}: the lease label ends {} ms past the cap", kept - bound);
        }
    }
    for id in [&created, &from_snapshot, &child, &claimed] {
        raw.close(proto::CloseRequest { sandbox_id: id.clone() }).await.expect("close");
    }
    uncapped_raw.close(proto::CloseRequest { sandbox_id: source }).await.expect("close the source");
    for snapshot_id in [snapshot, forked.snapshot_id] {
        raw.delete_snapshot(proto::DeleteSnapshotRequest { snapshot_id }).await.expect("delete snapshot");
    }
}
