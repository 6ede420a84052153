//! A tenant held to limits over time, with a real clock and short periods, in-process over
//! `testkit::fake` (whose usage is wall time since the create, a tenth of it CPU): the
//! creates-per-second token bucket, a sandbox-seconds budget per period, `TenantUsage` as the
//! exact sum of the receipts `Close` returned (and the metrics agreeing), and limits changed
//! without a restart (SIGHUP on the binary, in `sighup_reload`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use sandboxd::config::FileConfig;
use sandboxd::core::failure::{kind_of_status, FailureKind};
use sandboxd_client::proto;
use testkit::fake::FakeBackend;
use testkit::raw::{raw_client, RawClient};
use testkit::service::TestService;
use tonic::Code;
use tonic_types::StatusExt;

/// A service whose one tenant `red` (key `red-key`) has `quotas` (a YAML flow mapping).
fn service(dir: &std::path::Path, quotas: &str) -> (TestService, Arc<FakeBackend>) {
    service_of(dir, "red", quotas)
}

/// As `service`, the tenant named `tenant` (key `<tenant>-key`).
fn service_of(dir: &std::path::Path, tenant: &str, quotas: &str) -> (TestService, Arc<FakeBackend>) {
    let tenants = dir.join("tenants.yaml");
    std::fs::write(
        &tenants,
        format!(
            "tenants:\n- name: {tenant}\n  key_sha256: {}\n  quotas: {quotas}\n",
            sandboxd::auth::tenants::key_sha256(&format!("{tenant}-key"))
        ),
    )
    .unwrap();
    let mut config = FileConfig::default();
    config.server.state_dir = Some(dir.to_path_buf());
    config.server.auth.tenants_file = Some(tenants);
    let fake = Arc::new(FakeBackend::new());
    (TestService::start_backend(fake.clone(), config, None), fake)
}

fn red<T>(message: T) -> tonic::Request<T> {
    keyed("red", message)
}

fn keyed<T>(tenant: &str, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert("authorization", format!("Bearer {tenant}-key").parse().unwrap());
    request
}

async fn create(raw: &mut RawClient) -> Result<String, tonic::Status> {
    create_as(raw, "red").await
}

async fn create_as(raw: &mut RawClient, tenant: &str) -> Result<String, tonic::Status> {
    let spec = proto::SandboxSpec { image: "fake:1".into(), ..Default::default() };
    raw.create(keyed(tenant, proto::CreateRequest { spec: Some(spec) }))
        .await
        .map(|r| r.into_inner().sandbox.unwrap().sandbox_id)
}

fn retry_delay(status: &tonic::Status) -> Duration {
    status.get_details_retry_info().and_then(|r| r.retry_delay).expect("a retry delay")
}

#[tokio::test]
async fn creates_per_second_is_a_token_bucket_that_says_when_the_next_token_comes() {
    let dir = tempfile::tempdir().unwrap();
    let (service, _fake) = service(dir.path(), "{creates_per_second: 1, creates_burst: 3}");
    let mut raw = raw_client(&service.url).await;
    for _ in 0..3 {
        create(&mut raw).await.expect("within the burst");
    }
    let refused = create(&mut raw).await.expect_err("past the burst");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert_eq!(kind_of_status(&refused), Some(FailureKind::Quota));
    assert!(
        refused.message().contains("creates_per_second") && refused.message().contains("frees in"),
        "{refused:?}"
    );
    let delay = retry_delay(&refused);
    assert!(delay > Duration::ZERO && delay <= Duration::from_secs(1), "one token at 1/s: {delay:?}");
    tokio::time::sleep(delay + Duration::from_millis(20)).await;
    create(&mut raw).await.expect("the next token came");
}

#[tokio::test]
async fn a_sandbox_seconds_budget_refuses_once_spent_and_frees_at_the_period_end() {
    let dir = tempfile::tempdir().unwrap();
    let (service, _fake) = service(dir.path(), "{sandbox_seconds_per_period: 0.3, period_s: 2}");
    let mut raw = raw_client(&service.url).await;
    // Start just after a period began, so the spend and the refusal fall in one period.
    let now_ms = sandboxd::core::lease::now_ms();
    tokio::time::sleep(Duration::from_millis((2000 - now_ms.rem_euclid(2000) + 20) as u64)).await;
    let id = create(&mut raw).await.expect("nothing spent yet");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let closed = raw.close(red(proto::CloseRequest { sandbox_id: id.clone() })).await.unwrap().into_inner();
    let receipt = closed.usage.expect("Close returns the receipt");
    assert!(receipt.wall_time_s >= 0.4, "{receipt:?}");

    let refused = create(&mut raw).await.expect_err("the budget is spent");
    assert_eq!(kind_of_status(&refused), Some(FailureKind::Quota));
    assert!(refused.message().contains("sandbox_seconds_per_period"), "{refused:?}");
    let delay = retry_delay(&refused);
    assert!(delay <= Duration::from_secs(2), "frees at the period's end: {delay:?}");

    // TenantUsage: the period's receipts, summed exactly.
    let usage = raw.tenant_usage(red(proto::TenantUsageRequest::default())).await.unwrap().into_inner();
    assert_eq!(usage.tenant, "red");
    assert_eq!(usage.receipts.len(), 1);
    assert_eq!(usage.receipts[0].sandbox_id, id);
    assert_eq!(usage.receipts[0].usage.as_ref(), Some(&receipt));
    assert_eq!(usage.sandbox_seconds, receipt.wall_time_s);
    assert_eq!(usage.cpu_seconds, receipt.cpu_time_s);
    assert_eq!(
        (usage.sandbox_seconds_limit, usage.period_end_unix_ms - usage.period_start_unix_ms),
        (0.3, 2000)
    );

    let began = Instant::now();
    tokio::time::sleep(delay + Duration::from_millis(50)).await;
    create(&mut raw).await.expect("a new period, a new budget");
    assert!(began.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn tenant_usage_sums_exactly_the_receipts_close_returned_and_the_metrics_agree() {
    let dir = tempfile::tempdir().unwrap();
    let (service, _fake) = service_of(dir.path(), "green", "{period_s: 3600}");
    let mut raw = raw_client(&service.url).await;
    let metric = |name: &str| -> f64 {
        let text = sandboxd::metrics::global().render();
        text.lines()
            .find(|l| l.starts_with(name) && l.contains("tenant=\"green\""))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0.0)
    };
    let (wall_before, cpu_before) =
        (metric("sandboxd_tenant_sandbox_seconds_total"), metric("sandboxd_tenant_cpu_seconds_total"));
    let before =
        raw.tenant_usage(keyed("green", proto::TenantUsageRequest::default())).await.unwrap().into_inner();
    let mut receipts = Vec::new();
    for pause in [50, 120, 10] {
        let id = create_as(&mut raw, "green").await.unwrap();
        tokio::time::sleep(Duration::from_millis(pause)).await;
        receipts.push(
            raw.close(keyed("green", proto::CloseRequest { sandbox_id: id }))
                .await
                .unwrap()
                .into_inner()
                .usage
                .unwrap(),
        );
    }
    let after =
        raw.tenant_usage(keyed("green", proto::TenantUsageRequest::default())).await.unwrap().into_inner();
    let wall: f64 = receipts.iter().map(|r| r.wall_time_s).sum();
    let cpu: f64 = receipts.iter().map(|r| r.cpu_time_s).sum();
    assert_eq!(after.receipts.len(), before.receipts.len() + 3);
    assert!((after.sandbox_seconds - before.sandbox_seconds - wall).abs() < 1e-9, "{after:?}");
    assert!((after.cpu_seconds - before.cpu_seconds - cpu).abs() < 1e-9, "{after:?}");
    assert!((metric("sandboxd_tenant_sandbox_seconds_total") - wall_before - wall).abs() < 1e-6);
    assert!((metric("sandboxd_tenant_cpu_seconds_total") - cpu_before - cpu).abs() < 1e-6);
    // A tenant reads only its own.
    let other = raw
        .tenant_usage(keyed(
            "green",
            proto::TenantUsageRequest { tenant: "blue".into(), ..Default::default() },
        ))
        .await
        .unwrap_err();
    assert_eq!(other.code(), Code::PermissionDenied, "{other:?}");
}

/// The binary reads its tenants file again on SIGHUP: a new limit applies to the next call; a
/// file with a bad limit is refused naming the field, and the limits in force stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_tenants_file_and_a_bad_one_changes_nothing() {
    let label = testkit::TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    let tenants = dir.path().join("tenants.yaml");
    let write = |budget: &str| {
        std::fs::write(
            &tenants,
            format!(
                "tenants:\n- name: red\n  key_sha256: {}\n  quotas: {{sandbox_seconds_per_period: {budget}}}\n",
                sandboxd::auth::tenants::key_sha256("red-key")
            ),
        )
        .unwrap()
    };
    write("100");
    let config = serde_json::json!({"server": {"auth": {"tenants_file": tenants}}});
    let server =
        testkit::server::TestServer::launch(env!("CARGO_BIN_EXE_sandboxd"), &label).config(config).start();
    let mut raw = raw_client(&server.url).await;
    let limit = |raw: &mut RawClient| {
        let mut raw = raw.clone();
        async move {
            raw.tenant_usage(red(proto::TenantUsageRequest::default()))
                .await
                .unwrap()
                .into_inner()
                .sandbox_seconds_limit
        }
    };
    assert_eq!(limit(&mut raw).await, 100.0);

    write("250");
    server.signal(nix::sys::signal::Signal::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(10);
    while limit(&mut raw).await != 250.0 {
        assert!(Instant::now() < deadline, "the new limit did not apply: {}", server.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    write("0");
    server.signal(nix::sys::signal::Signal::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !server.logs().contains("tenants[0].quotas.sandbox_seconds_per_period") {
        assert!(Instant::now() < deadline, "the refusal was not logged: {}", server.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(limit(&mut raw).await, 250.0, "a bad file changes nothing");
}
