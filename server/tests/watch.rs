//! `Watch` end to end against the in-process service and the real daemon: a watcher sees a
//! sandbox's whole life (created, ready, paused, resumed, stopped, removed with who/why), a
//! sandbox killed or removed from outside, lease expiry, `include_existing`, label and status
//! filters; and a watcher that stops reading is ended, not buffered for.

use std::collections::HashMap;
use std::time::Duration;

use sandboxd_client::proto::sandbox_service_client::SandboxServiceClient;
use sandboxd_client::{
    spec, Client, EventKind, Sandbox, SandboxEvent, SandboxStatus, WatchOptions, WatchStream,
};
use testkit::images::BUSYBOX;
use testkit::service::TestService;
use testkit::{docker, labels, TestLabel};
use tonic::Code;

fn run_label() -> String {
    format!("w{}", uuid::Uuid::new_v4().simple())
}

async fn start(client: &Client, metadata: HashMap<String, String>, ttl_s: Option<f64>) -> Sandbox {
    let mut s = spec(BUSYBOX);
    s.metadata = metadata;
    s.ttl_s = ttl_s;
    Sandbox::start(client, s).await.expect("create")
}

/// Reads events until one of `kind` for `id` arrives (within 60 s); returns it and the kinds
/// seen for `id` on the way.
async fn until(stream: &mut WatchStream, id: &str, kind: EventKind) -> (SandboxEvent, Vec<EventKind>) {
    let mut seen = Vec::new();
    let wait = async {
        loop {
            let event = stream.next().await.expect("watch").expect("the watch ended");
            if event.sandbox_id != id {
                continue;
            }
            seen.push(event.kind);
            if event.kind == kind {
                return event;
            }
        }
    };
    match tokio::time::timeout(Duration::from_secs(60), wait).await {
        Ok(event) => (event, seen),
        Err(_) => panic!("no {kind} event for {id} within 60 s (saw {seen:?})"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_sees_a_sandbox_live_and_die_and_what_others_do_to_it() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let client = server.client().await;
    let run = run_label();
    let mine = labels(&[("run", &run)]);
    let mut watch =
        client.watch(WatchOptions { labels: mine.clone(), ..Default::default() }).await.expect("watch");

    // Another run's sandbox is never told to this watcher (label filter).
    let other = start(&client, labels(&[("run", &run_label())]), None).await;
    let a = start(&client, mine.clone(), None).await;
    let (created, _) = until(&mut watch, a.id(), EventKind::Created).await;
    let info = created.sandbox.expect("a CREATED event carries the sandbox");
    assert_eq!((info.image.as_str(), info.metadata.get("run")), (BUSYBOX, Some(&run)));
    assert_eq!(info.status, SandboxStatus::Starting);
    let (ready, _) = until(&mut watch, a.id(), EventKind::Ready).await;
    assert_eq!(ready.sandbox.unwrap().status, SandboxStatus::Running);
    assert!(ready.time_unix_ms >= created.time_unix_ms && created.time_unix_ms > 1_700_000_000_000);

    a.pause().await.expect("pause");
    until(&mut watch, a.id(), EventKind::Paused).await;
    a.resume().await.expect("resume");
    until(&mut watch, a.id(), EventKind::Resumed).await;

    // Killed from outside the service: STOPPED with its exit code (SIGKILL: 128 + 9).
    assert!(docker(&["kill", a.id()]).status.success(), "docker kill");
    let (stopped, _) = until(&mut watch, a.id(), EventKind::Stopped).await;
    assert_eq!((stopped.exit_code, stopped.oom_killed), (Some(137), false));
    a.stop().await.expect("close");
    let (removed, _) = until(&mut watch, a.id(), EventKind::Removed).await;
    assert_eq!(removed.reason, "closed by Close (operator)");

    // Removed from outside the service: STOPPED then REMOVED, saying so.
    let b = start(&client, mine.clone(), None).await;
    until(&mut watch, b.id(), EventKind::Ready).await;
    assert!(docker(&["rm", "-f", b.id()]).status.success(), "docker rm -f");
    let (removed, seen) = until(&mut watch, b.id(), EventKind::Removed).await;
    assert_eq!(removed.reason, "removed outside this service");
    assert_eq!(seen, [EventKind::Stopped, EventKind::Removed]);

    // include_existing: one EXISTING per matching sandbox first, as List has it; statuses
    // filters on the state after each event.
    let c = start(&client, mine.clone(), None).await;
    let mut paused_only = client
        .watch(WatchOptions {
            labels: mine.clone(),
            statuses: vec![SandboxStatus::Paused],
            include_existing: false,
        })
        .await
        .expect("watch paused");
    let mut existing = client
        .watch(WatchOptions { labels: mine.clone(), include_existing: true, ..Default::default() })
        .await
        .expect("watch with existing");
    let first = tokio::time::timeout(Duration::from_secs(30), existing.next())
        .await
        .expect("an existing event")
        .expect("watch")
        .expect("not ended");
    assert_eq!((first.kind, first.sandbox_id.as_str()), (EventKind::Existing, c.id()));
    let info = first.sandbox.unwrap();
    assert_eq!((info.status, info.created_at_unix_ms > 0), (SandboxStatus::Running, true));
    c.pause().await.expect("pause");
    until(&mut existing, c.id(), EventKind::Paused).await;
    c.resume().await.expect("resume");
    c.stop().await.expect("close");
    // The paused-only watcher saw the pause and nothing else of c's.
    let (_, seen) = until(&mut paused_only, c.id(), EventKind::Paused).await;
    assert_eq!(seen, [EventKind::Paused]);
    until(&mut existing, c.id(), EventKind::Removed).await;
    let next = tokio::time::timeout(Duration::from_secs(2), paused_only.next()).await;
    assert!(next.is_err(), "the paused-only watcher got more than the pause: {next:?}");

    // Bad filters are refused, naming the field.
    let bad = client
        .watch(WatchOptions { labels: labels(&[("Bad Key", "v")]), ..Default::default() })
        .await
        .err()
        .expect("a bad label key is refused");
    assert!(bad.to_string().contains("labels"), "{bad}");

    other.stop().await.expect("close the other run's sandbox");
    drop(watch);
    label.remove_all();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_sees_a_lease_expire() {
    let label = TestLabel::new();
    let server = TestService::start_json(&label, serde_json::json!({"server": {"sweep_interval_s": 1}}));
    let client = server.client().await;
    let run = run_label();
    let mine = labels(&[("run", &run)]);
    let mut watch =
        client.watch(WatchOptions { labels: mine.clone(), ..Default::default() }).await.expect("watch");
    let a = start(&client, mine, Some(2.0)).await;
    until(&mut watch, a.id(), EventKind::Ready).await;
    let (expired, _) = until(&mut watch, a.id(), EventKind::LeaseExpired).await;
    assert_eq!(expired.reason, "lease expired");
    let (removed, seen) = until(&mut watch, a.id(), EventKind::Removed).await;
    assert_eq!(removed.reason, "lease expired");
    assert_eq!(seen, [EventKind::Stopped, EventKind::Removed], "after LEASE_EXPIRED");
    label.remove_all();
}

/// A watcher that stops reading is ended with RESOURCE_EXHAUSTED once its queue
/// (`server.limits.watch_buffer_events`) is full, after what was queued; other watchers go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_watcher_is_ended() {
    let label = TestLabel::new();
    let server = TestService::start_json(
        &label,
        serde_json::json!({"server": {"limits": {"watch_buffer_events": 2}}}),
    );
    let client = server.client().await;
    let run = run_label();
    let mine = labels(&[("run", &run)]);
    let a = start(&client, mine.clone(), None).await;

    // A small HTTP/2 window, so what the transport holds for the stalled watcher is a few
    // events and the server's queue fills.
    let channel = tonic::transport::Endpoint::from_shared(server.url.clone())
        .unwrap()
        .initial_stream_window_size(Some(512))
        .initial_connection_window_size(Some(512))
        .connect()
        .await
        .expect("connect");
    let mut stalled = SandboxServiceClient::new(channel)
        .watch(sandboxd_client::proto::WatchRequest { labels: mine.clone(), ..Default::default() })
        .await
        .expect("watch")
        .into_inner();
    let mut reader = client.watch(WatchOptions { labels: mine.clone(), ..Default::default() }).await.unwrap();

    for _ in 0..15 {
        a.pause().await.expect("pause");
        a.resume().await.expect("resume");
    }
    // The reading watcher saw every one of them.
    for _ in 0..15 {
        until(&mut reader, a.id(), EventKind::Paused).await;
        until(&mut reader, a.id(), EventKind::Resumed).await;
    }
    // The stalled one gets what was queued, then the reason it was ended.
    let mut delivered = 0;
    let status = loop {
        match tokio::time::timeout(Duration::from_secs(30), stalled.message()).await.expect("no answer") {
            Ok(Some(_)) => delivered += 1,
            Ok(None) => panic!("the stalled watch ended without a status after {delivered} events"),
            Err(status) => break status,
        }
    };
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("fell behind"), "{}", status.message());
    assert!(delivered < 30, "the stalled watcher was buffered for: {delivered} events delivered");
    a.stop().await.expect("close");
    label.remove_all();
}

/// A tenant's watcher sees only its own sandboxes; a capability token cannot watch; Stats
/// follows the sandbox's access (another tenant's sandbox is NOT_FOUND, its owner token reads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_watches_and_reads_only_its_own() {
    use sandboxd_client::proto;

    let dir = tempfile::tempdir().unwrap();
    let label = TestLabel::new();
    let tag = &label.value[..12];
    let key_sha = sandboxd::auth::tenants::key_sha256;
    let tenants = serde_json::json!({"tenants": [
        {"name": format!("red-{tag}"), "key_sha256": key_sha("red-key")},
        {"name": format!("blue-{tag}"), "key_sha256": key_sha("blue-key")},
    ]});
    let tenants_file = dir.path().join("tenants.json");
    std::fs::write(&tenants_file, tenants.to_string()).unwrap();
    let config = serde_json::json!({"server": {"state_dir": dir.path().join("state"), "auth": {"tenants_file": tenants_file}}});
    let server =
        testkit::server::TestServer::launch(env!("CARGO_BIN_EXE_sandboxd"), &label).config(config).start();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut c = SandboxServiceClient::new(channel);
    let watch = |key: &str| as_(key, proto::WatchRequest::default());
    let mut red_events = c.watch(watch("red-key")).await.expect("red watches").into_inner();
    let mut blue_events = c.watch(watch("blue-key")).await.expect("blue watches").into_inner();
    let create = |key: &str| {
        let spec = proto::SandboxSpec { image: BUSYBOX.into(), ..Default::default() };
        as_(key, proto::CreateRequest { spec: Some(spec) })
    };
    let red = c.create(create("red-key")).await.expect("red creates").into_inner().sandbox.unwrap();
    let blue = c.create(create("blue-key")).await.expect("blue creates").into_inner().sandbox.unwrap();

    // Each watcher sees its own tenant's sandbox become ready, and nothing of the other's.
    until_ready(&mut red_events, &red.sandbox_id).await;
    until_ready(&mut blue_events, &blue.sandbox_id).await;

    // A capability token reaches one sandbox: it cannot watch.
    let refused = c.watch(watch(&red.token)).await.expect_err("a token cannot watch");
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    // Stats: the owner token reads its sandbox; the other tenant's key does not find it.
    let stats = |key: &str, id: &str| as_(key, proto::StatsRequest { sandbox_id: id.into() });
    c.stats(stats(&red.token, &red.sandbox_id)).await.expect("the owner token reads");
    let hidden = c.stats(stats("blue-key", &red.sandbox_id)).await.expect_err("blue cannot read red's");
    assert_eq!(hidden.code(), Code::NotFound, "{hidden:?}");
    let other =
        c.stats(stats(&red.token, &blue.sandbox_id)).await.expect_err("red's token cannot read blue's");
    assert_eq!(other.code(), Code::PermissionDenied, "{other:?}");

    // Blue closing its own: red's watcher is not told.
    c.close(as_("blue-key", proto::CloseRequest { sandbox_id: blue.sandbox_id.clone() })).await.unwrap();
    c.close(as_("red-key", proto::CloseRequest { sandbox_id: red.sandbox_id.clone() })).await.unwrap();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(60), red_events.message())
            .await
            .expect("red's REMOVED")
            .expect("watch")
            .expect("open")
            .event
            .unwrap();
        assert_eq!(event.sandbox_id, red.sandbox_id, "red's watcher saw another tenant's sandbox: {event:?}");
        if event.kind == proto::SandboxEventKind::Removed as i32 {
            assert_eq!(event.reason, format!("closed by Close (tenant \"red-{tag}\")"));
            break;
        }
    }
    label.remove_all();
}

fn as_<T>(bearer: &str, msg: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.metadata_mut().insert("authorization", format!("Bearer {bearer}").parse().unwrap());
    r
}

/// Reads until `id` is READY, asserting every event on the way is about `id`.
async fn until_ready(events: &mut tonic::Streaming<sandboxd_client::proto::WatchResponse>, id: &str) {
    loop {
        let event = tokio::time::timeout(Duration::from_secs(60), events.message())
            .await
            .expect("an event within 60 s")
            .expect("watch")
            .expect("open")
            .event
            .unwrap();
        assert_eq!(event.sandbox_id, id, "a watcher saw another tenant's sandbox: {event:?}");
        if event.kind == sandboxd_client::proto::SandboxEventKind::Ready as i32 {
            return;
        }
    }
}
