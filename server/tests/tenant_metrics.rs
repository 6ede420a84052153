//! Usage per tenant in the metrics, scraped from the binary: sandboxes, CPUs and memory
//! reserved (counted from the daemon), execs in flight and creates, each labelled by tenant, and
//! one tenant's use never in another's series.

use std::time::Duration;

use sandboxd_client::{proto, Client, Sandbox};
use testkit::images::BUSYBOX;
use testkit::server::{scrape, TestServer};
use testkit::TestLabel;

const SANDBOXD: &str = env!("CARGO_BIN_EXE_sandboxd");

/// The value of `metric{tenant="…"}` in a scrape, if present.
fn value(scrape: &str, metric: &str, tenant: &str) -> Option<f64> {
    let prefix = format!("{metric}{{tenant=\"{tenant}\"}} ");
    scrape.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|v| v.trim().parse().ok())
}

/// Scrape until `check` holds (the daemon-counted series refresh every sweep interval).
async fn until(metrics: &str, check: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let body = scrape(metrics);
        if check(&body) || std::time::Instant::now() > deadline {
            return body;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn usage_is_labelled_by_tenant() {
    let label = TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    let tag = &label.value[..12];
    let (red, blue) = (format!("red-{tag}"), format!("blue-{tag}"));
    let tenants = serde_json::json!({"tenants": [
        {"name": red, "key_sha256": sandboxd::auth::tenants::key_sha256("red-key")},
        {"name": blue, "key_sha256": sandboxd::auth::tenants::key_sha256("blue-key")},
    ]});
    let tenants_file = dir.path().join("tenants.json");
    std::fs::write(&tenants_file, tenants.to_string()).unwrap();
    let server = TestServer::launch(SANDBOXD, &label)
        .config(serde_json::json!({"server": {
            "state_dir": dir.path().join("state"),
            "sweep_interval_s": 1,
            "auth": {"tenants_file": tenants_file},
        }}))
        .flags(&["--metrics-listen", "127.0.0.1:0"])
        .start();
    let metrics = server.metrics_addr.clone().unwrap();
    let red_client = Client::connect_with_token(server.url.clone(), "red-key").await.unwrap();
    let mut spec = sandboxd_client::spec(BUSYBOX);
    spec.resources =
        Some(proto::SandboxResources { cpu: Some(0.5), memory_mib: Some(64), ..Default::default() });
    let first = Sandbox::start(&red_client, spec.clone()).await.unwrap();
    let second = Sandbox::start(&red_client, spec).await.unwrap();

    // An exec in flight while scraping.
    let busy = first.clone();
    let running = tokio::spawn(async move { busy.exec("sleep 3").await });
    let body = until(&metrics, |b| {
        value(b, "sandboxd_tenant_sandboxes", &red) == Some(2.0)
            && value(b, "sandboxd_tenant_execs_in_flight", &red) == Some(1.0)
    })
    .await;
    assert_eq!(value(&body, "sandboxd_tenant_sandboxes", &red), Some(2.0), "{body}");
    assert_eq!(value(&body, "sandboxd_tenant_cpus_reserved", &red), Some(1.0), "{body}");
    assert_eq!(value(&body, "sandboxd_tenant_memory_reserved_mib", &red), Some(128.0), "{body}");
    assert_eq!(value(&body, "sandboxd_tenant_execs_in_flight", &red), Some(1.0), "{body}");
    assert_eq!(value(&body, "sandboxd_tenant_creates_total", &red), Some(2.0), "{body}");
    assert_eq!(value(&body, "sandboxd_tenant_sandboxes", &blue), Some(0.0), "blue has none: {body}");
    assert_eq!(value(&body, "sandboxd_tenant_creates_total", &blue), None, "{body}");
    running.await.unwrap().unwrap();

    second.stop().await.unwrap();
    let body = until(&metrics, |b| {
        value(b, "sandboxd_tenant_sandboxes", &red) == Some(1.0)
            && value(b, "sandboxd_tenant_execs_in_flight", &red) == Some(0.0)
    })
    .await;
    assert_eq!(value(&body, "sandboxd_tenant_sandboxes", &red), Some(1.0), "{body}");
    assert_eq!(value(&body, "sandboxd_tenant_cpus_reserved", &red), Some(0.5), "{body}");
    assert_eq!(value(&body, "sandboxd_tenant_execs_in_flight", &red), Some(0.0), "{body}");
    first.stop().await.unwrap();
    assert!(label.containers().is_empty(), "left: {:?}", label.containers());
}
