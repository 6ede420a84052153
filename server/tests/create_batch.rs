//! `CreateBatch` end to end (in-process service, real daemon): N sandboxes in one call, each
//! streamed as it is ready and usable; a bad count refused naming it; a batch past the tenant's
//! quota refused at once as QUOTA with nothing made; ready pool members claimed first; a spec
//! that cannot start gives one explicit error item per sandbox.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use sandboxd_client::{failure_kind_of, proto, spec, FailureKind, Sandbox};
use testkit::images::BUSYBOX;
use testkit::service::TestService;
use testkit::TestLabel;
use tonic::{Code, Request};

fn batch(spec: proto::SandboxSpec, count: u32) -> proto::CreateBatchRequest {
    proto::CreateBatchRequest { spec: Some(spec), count }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_streams_every_sandbox_and_refuses_bad_counts() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let client = server.client().await;

    let items = Sandbox::start_batch(&client, spec(BUSYBOX), 4).await.expect("batch");
    assert_eq!(items.len(), 4);
    let sandboxes: Vec<Sandbox> = items.into_iter().map(|i| i.expect("a sandbox")).collect();
    let ids: HashSet<&str> = sandboxes.iter().map(|s| s.id()).collect();
    assert_eq!(ids.len(), 4, "distinct sandboxes");
    for s in &sandboxes {
        assert_eq!(s.exec("echo up").await.expect("exec").stdout_str(), "up\n");
    }
    // Indexes are 0..count, each once.
    let mut raw = client.raw();
    let mut stream = raw.create_batch(batch(spec(BUSYBOX), 2)).await.expect("batch").into_inner();
    let mut seen = Vec::new();
    while let Some(item) = stream.message().await.expect("item") {
        seen.push(item.index);
        if let Some(proto::create_batch_response::Result::Sandbox(r)) = item.result {
            sandboxes[0].exec("true").await.expect("still fine");
            client.raw().close(proto::CloseRequest { sandbox_id: r.sandbox_id }).await.expect("close");
        }
    }
    seen.sort();
    assert_eq!(seen, [0, 1]);
    for s in &sandboxes {
        s.stop().await.expect("close");
    }

    for count in [0, 257] {
        let status = raw.create_batch(batch(spec(BUSYBOX), count)).await.expect_err("refused");
        assert_eq!(status.code(), Code::InvalidArgument);
        assert!(status.message().contains("count"), "{}", status.message());
    }
    let status = raw.create_batch(batch(spec(""), 2)).await.expect_err("refused");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(label.containers().is_empty(), "a refused batch made nothing: {:?}", label.containers());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_that_cannot_start_gives_an_error_item_per_sandbox() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let client = server.client().await;
    let items = Sandbox::start_batch(
        &client,
        spec("127.0.0.1:9/sandboxd-test/no-such-image:none"), /* loopback: no pull leaves the host */
        2,
    )
    .await
    .expect("batch");
    assert_eq!(items.len(), 2);
    for item in items {
        let err = item.expect_err("no such image");
        assert_eq!(err.failure_kind(), Some(FailureKind::CreateFailed), "{err}");
    }
    assert!(label.containers().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_quota_a_batch_is_refused_at_once_and_a_pool_serves_first() {
    let dir = tempfile::tempdir().unwrap();
    let label = TestLabel::new();
    let tag = &label.value[..12];
    let tenants = serde_json::json!({"tenants": [
        {"name": format!("batch-{tag}"), "key_sha256": sandboxd::auth::tenants::key_sha256("batch-key"),
         "quotas": {"sandboxes": 3}},
    ]});
    let tenants_file = dir.path().join("tenants.json");
    std::fs::write(&tenants_file, tenants.to_string()).unwrap();
    let config = serde_json::json!({"server": {"auth": {"tenants_file": tenants_file}}});
    let server = TestService::start_json(&label, config);
    let mut raw = server.raw().await;
    let as_tenant = |msg: proto::CreateBatchRequest| {
        let mut r = Request::new(msg);
        r.metadata_mut().insert("authorization", "Bearer batch-key".parse().unwrap());
        r
    };

    // Four is past a quota of three: refused at once, naming it, nothing made.
    let started = Instant::now();
    let status = raw.create_batch(as_tenant(batch(spec(BUSYBOX), 4))).await.expect_err("past the quota");
    assert!(started.elapsed() < Duration::from_secs(5), "refused at once, not timed out");
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(failure_kind_of(&status), Some(FailureKind::Quota), "{status:?}");
    assert!(status.message().contains("sandboxes"), "{}", status.message());
    assert!(label.containers().is_empty(), "nothing made: {:?}", label.containers());

    // A pool of two ready members: a batch of three claims both first, then creates one.
    let mut pool_req = Request::new(proto::CreatePoolRequest {
        pool: Some(proto::PoolSpec {
            name: "batch".into(),
            image: BUSYBOX.into(),
            target: 2,
            max: 3,
            ..Default::default()
        }),
    });
    pool_req.metadata_mut().insert("authorization", "Bearer batch-key".parse().unwrap());
    raw.create_pool(pool_req).await.expect("pool");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut r = Request::new(proto::ListPoolsRequest {});
        r.metadata_mut().insert("authorization", "Bearer batch-key".parse().unwrap());
        let pools = raw.list_pools(r).await.expect("list pools").into_inner().pools;
        if pools.first().is_some_and(|p| p.ready >= 2) {
            break;
        }
        assert!(Instant::now() < deadline, "the pool never filled: {pools:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut pooled = spec("");
    pooled.pool = Some("batch".into());
    let started = Instant::now();
    let mut stream = raw.create_batch(as_tenant(batch(pooled, 3))).await.expect("batch").into_inner();
    let mut arrivals = Vec::new();
    while let Some(item) = stream.message().await.expect("item") {
        let ok = matches!(item.result, Some(proto::create_batch_response::Result::Sandbox(_)));
        arrivals.push((item.index, ok, started.elapsed()));
    }
    assert_eq!(arrivals.len(), 3, "{arrivals:?}");
    assert!(arrivals.iter().all(|(_, ok, _)| *ok), "{arrivals:?}");
    // The two claims arrive before the on-demand create, within a fraction of a create.
    assert!(arrivals[1].2 < Duration::from_millis(500), "claims are quick: {arrivals:?}");
}
