//! Creates under a burst (`server.admission`), in-process over `testkit::fake` with a slow
//! create: at most `max_starting` start at once, the queue is fair across tenants, and every
//! call is answered before its deadline with a sandbox or RESOURCE_EXHAUSTED (CAPACITY) and a
//! retry delay, never DEADLINE_EXCEEDED; a call that cannot be served in time is told so early.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sandboxd::config::FileConfig;
use sandboxd_client::proto;
use testkit::fake::FakeBackend;
use testkit::raw::raw_client;
use testkit::service::TestService;
use tonic::Code;
use tonic_types::StatusExt;

const TENANTS: [&str; 3] = ["ta", "tb", "tc"];

/// A config with tenants `TENANTS` (key `<name>-key`) and `max_starting` start slots.
fn config(dir: &std::path::Path, max_starting: u32) -> FileConfig {
    let tenants = dir.join("tenants.json");
    let entries: Vec<String> = TENANTS
        .iter()
        .map(|t| {
            format!(
                r#"{{"name": "{t}", "key_sha256": "{}"}}"#,
                sandboxd::auth::tenants::key_sha256(&format!("{t}-key"))
            )
        })
        .collect();
    std::fs::write(&tenants, format!(r#"{{"tenants": [{}]}}"#, entries.join(","))).unwrap();
    let mut config = FileConfig::default();
    config.server.state_dir = Some(dir.to_path_buf());
    config.server.auth.tenants_file = Some(tenants);
    config.server.admission.max_starting = Some(max_starting);
    config.server.admission.first_start_estimate = Duration::from_millis(100);
    config
}

fn create_request(tenant: &str, client: &str, deadline: Duration) -> tonic::Request<proto::CreateRequest> {
    let spec = proto::SandboxSpec { image: "fake:1".into(), ..Default::default() };
    let mut request = tonic::Request::new(proto::CreateRequest { spec: Some(spec) });
    request.metadata_mut().insert("authorization", format!("Bearer {tenant}-key").parse().unwrap());
    request.metadata_mut().insert("x-sandboxd-client", client.parse().unwrap());
    request.set_timeout(deadline);
    request
}

/// One call's answer: when it came (after the burst began) and what it was.
struct Answer {
    tenant: &'static str,
    after: Duration,
    result: Result<String, tonic::Status>,
}

impl Answer {
    /// A refusal as the issue wants it: RESOURCE_EXHAUSTED with failure kind CAPACITY, never a
    /// timeout, answered before `deadline`, with when to come back (returned).
    fn told_to_come_back(&self, deadline: Duration) -> Duration {
        let status = self.result.as_ref().expect_err("a refusal");
        assert_eq!(status.code(), Code::ResourceExhausted, "never a timeout: {status:?}");
        assert_eq!(
            sandboxd::core::failure::kind_of_status(status),
            Some(sandboxd::core::failure::FailureKind::Capacity)
        );
        assert!(self.after < deadline, "answered before the deadline: {:?}", self.after);
        status.get_details_retry_info().and_then(|r| r.retry_delay).expect("a retry delay")
    }
}

/// `counts[i]` creates of `TENANTS[i]` at once (each tenant's spread over two clients), each
/// with `deadline`; the answers in the order they came.
async fn burst(url: &str, counts: [usize; 3], deadline: Duration) -> Vec<Answer> {
    let raw = raw_client(url).await;
    let began = Instant::now();
    let mut calls = Vec::new();
    for (tenant, count) in TENANTS.iter().zip(counts) {
        for i in 0..count {
            let mut raw = raw.clone();
            let client = format!("client-{}", i % 2);
            calls.push(tokio::spawn(async move {
                let result = raw
                    .create(create_request(tenant, &client, deadline))
                    .await
                    .map(|r| r.into_inner().sandbox.unwrap().sandbox_id);
                Answer { tenant, after: began.elapsed(), result }
            }));
        }
    }
    let mut answers = Vec::new();
    for call in calls {
        answers.push(call.await.unwrap());
    }
    answers.sort_by_key(|a| a.after);
    answers
}

#[tokio::test]
async fn a_burst_is_shared_fairly_across_tenants_within_the_start_cap() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeBackend::new());
    fake.slow_creates(Duration::from_millis(100));
    let service = TestService::start_backend(fake.clone(), config(dir.path(), 2), None);

    // One tenant floods the queue; the two others ask for a few each at the same moment.
    let answers = burst(&service.url, [24, 6, 6], Duration::from_secs(20)).await;
    for a in &answers {
        assert!(a.result.is_ok(), "{}: {:?}", a.tenant, a.result.as_ref().err());
    }
    assert!(fake.most_creates_at_once() <= 2, "at most 2 started at once: {}", fake.most_creates_at_once());
    assert_eq!(fake.sandboxes().len(), 36);
    // Round robin across tenants: tb's and tc's creates are all done within the first
    // 2 (the free slots) + 3 x 6 (six rounds of three tenants) answers, while ta's flood waits.
    let last_of = |tenant: &str| answers.iter().rposition(|a| a.tenant == tenant).unwrap();
    for small in ["tb", "tc"] {
        assert!(last_of(small) < 2 + 3 * 6, "{small} finished at answer {} of 36", last_of(small) + 1);
    }
    assert_eq!(last_of("ta"), 35, "the flooding tenant's last create is served last");
}

#[tokio::test]
async fn a_burst_beyond_what_fits_before_the_deadlines_is_told_early_when_to_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeBackend::new());
    fake.slow_creates(Duration::from_millis(200));
    let service = TestService::start_backend(fake.clone(), config(dir.path(), 1), None);
    // Teach the estimate what a start takes here.
    burst(&service.url, [1, 0, 0], Duration::from_secs(10)).await;

    // 30 creates with a 3 s deadline on a host that starts one every 200 ms: at most ~14 fit.
    let deadline = Duration::from_secs(3);
    let answers = burst(&service.url, [10, 10, 10], deadline).await;
    let served = answers.iter().filter(|a| a.result.is_ok()).count();
    assert!((1..=15).contains(&served), "served {served}");
    let mut early = 0;
    for a in answers.iter().filter(|a| a.result.is_err()) {
        let delay = a.told_to_come_back(deadline);
        assert!(delay >= Duration::from_millis(100), "{delay:?}");
        // Told early: in the first half of its deadline, where a call left to wait would have
        // been answered only as its deadline came (500 ms proved too tight for 30 calls on a
        // loaded 2-core host; the property is early against the deadline, not a latency).
        if a.after < deadline / 2 {
            early += 1;
        }
    }
    // Most of the calls that could never fit are told at once. Not all: a call queued on the
    // estimate of its place can be pushed back by other tenants' calls arriving after it (the
    // queue is fair across tenants, not first come first served) and is then answered as its
    // last useful moment passes (still before its deadline, as asserted above); over runs 8 of
    // 17 were.
    let refused = 30 - served;
    assert!(early * 2 >= refused, "the calls that could never fit were told at once ({early} of {refused})");
    // Nothing was left behind: only the served calls' sandboxes exist.
    assert_eq!(fake.sandboxes().len(), served + 1);
}

#[tokio::test]
async fn a_slot_goes_only_to_a_call_with_room_for_a_start_as_slow_as_the_recent_slowest() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeBackend::new());
    // Most starts take 100 ms, every third 1.2 s: the average (~470 ms) says nothing of the tail.
    fake.slow_creates(Duration::from_millis(100));
    fake.slow_tail(3, Duration::from_millis(1200));
    let service = TestService::start_backend(fake.clone(), config(dir.path(), 2), None);
    // Teach the estimate (and the recent slowest) what a start takes here.
    burst(&service.url, [3, 0, 0], Duration::from_secs(10)).await;

    // 60 creates with a 4 s deadline: about 16 fit; the queue hands out slots until the last
    // moment. A slot granted on the average alone, with less than a slow start left before the
    // deadline, ended in STARTUP_TIMEOUT (DEADLINE_EXCEEDED) when the start was a slow one (the
    // burst bench: 7 in 1,000 at load 30).
    let deadline = Duration::from_secs(4);
    let answers = burst(&service.url, [20, 20, 20], deadline).await;
    let served = answers.iter().filter(|a| a.result.is_ok()).count();
    assert!(served >= 5, "served {served}");
    for a in answers.iter().filter(|a| a.result.is_err()) {
        a.told_to_come_back(deadline);
    }
    assert_eq!(fake.sandboxes().len(), served + 3, "only the served calls' sandboxes exist");
}

/// A small burst on the real daemon: 6 creates of 2 tenants at once under 2 start slots, every
/// one answered with a sandbox; closed, nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_burst_on_docker_is_served_under_the_start_cap() {
    let label = testkit::TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    let tenants = config(dir.path(), 2).server.auth.tenants_file.unwrap();
    let service = TestService::start_with(&label, None, |c| {
        c.server.auth.tenants_file = Some(tenants);
        c.server.admission.max_starting = Some(2);
    });
    let mut raw = raw_client(&service.url).await;
    let mut calls = Vec::new();
    for i in 0..6 {
        let mut raw = raw.clone();
        let tenant = TENANTS[i % 2];
        calls.push(tokio::spawn(async move {
            let spec = proto::SandboxSpec { image: testkit::images::BUSYBOX.into(), ..Default::default() };
            let mut request = create_request(tenant, &format!("c{i}"), Duration::from_secs(120));
            request.get_mut().spec = Some(spec);
            (tenant, raw.create(request).await.map(|r| r.into_inner().sandbox.unwrap().sandbox_id))
        }));
    }
    let mut made = Vec::new();
    for call in calls {
        let (tenant, result) = call.await.unwrap();
        made.push((tenant, result.expect("every create of the burst is served")));
    }
    assert_eq!(label.containers().len(), 6);
    for (tenant, id) in made {
        let mut close = tonic::Request::new(proto::CloseRequest { sandbox_id: id });
        close.metadata_mut().insert("authorization", format!("Bearer {tenant}-key").parse().unwrap());
        raw.close(close).await.expect("close");
    }
    testkit::wait::eventually(Duration::from_secs(60), "the burst's containers are removed", || {
        label.containers().is_empty()
    })
    .await;
}
