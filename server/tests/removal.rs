//! Sandboxes that end under calls, in-process: concurrent closes of one sandbox, an upload into
//! a sandbox killed from outside, and the per-sandbox caches that shrink however a sandbox ends.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sandboxd::backends::docker::provider::CacheSizes;
use sandboxd::backends::docker::DockerProvider;
use sandboxd::core::lifecycle::{LeaseOptions, Lifecycle};

use sandboxd_client::proto;
use testkit::images::BUSYBOX;
use testkit::raw::{busybox, chunk, create_id, upload_header};
use testkit::service::TestService;
use testkit::TestLabel;
use tonic::Code;

/// Several callers removing one sandbox at once (a client's `Close` beside the sweep's, or two
/// `Close`s): docker answers the later `rm`s "removal of container … is already in progress".
/// Those wait for the removal and succeed (they were INTERNAL).
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_closes_of_one_sandbox_all_succeed() {
    let label = TestLabel::new();
    let server = TestService::start_json(&label, serde_json::json!({}));
    let mut raw = server.raw().await;
    for _ in 0..3 {
        let id = create_id(&mut raw, busybox()).await;
        let closes: Vec<_> = (0..8)
            .map(|_| {
                let (mut client, id) = (raw.clone(), id.clone());
                tokio::spawn(async move { client.close(proto::CloseRequest { sandbox_id: id }).await })
            })
            .collect();
        for close in closes {
            let answer = close.await.unwrap();
            assert!(answer.is_ok(), "a Close beside another failed: {answer:?}");
        }
        assert!(label.names().is_empty(), "left behind: {:?}", label.names());
    }
}

/// A sandbox `docker kill`ed from outside while an upload streams into it (through its agent,
/// whose channel then ends) is the sandbox's state: NOT_FOUND or FAILED_PRECONDITION, never
/// INTERNAL (the soak saw "the exec agent … went away during the transfer" as INTERNAL).
#[tokio::test(flavor = "multi_thread")]
async fn an_upload_into_a_sandbox_killed_from_outside_names_its_state() {
    let label = TestLabel::new();
    let server = TestService::start_json(&label, serde_json::json!({}));
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;
    // Open the agent channel first, so the upload goes through it.
    let warm = raw
        .exec(proto::ExecRequest { sandbox_id: id.clone(), command: "true".into(), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(warm.return_code, 0, "{warm:?}");
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(upload_header(&id, "/tmp/big", Some(64 << 20))).await.unwrap();
    tx.send(chunk(vec![7; 1 << 20])).await.unwrap();
    let mut client = raw.clone();
    let call =
        tokio::spawn(async move { client.upload(tokio_stream::wrappers::ReceiverStream::new(rx)).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    testkit::docker(&["kill", &id]);
    // Keep sending until the server gives up on the stream.
    for _ in 0..63 {
        if tx.send(chunk(vec![7; 1 << 20])).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(tx);
    let answer = tokio::time::timeout(Duration::from_secs(60), call).await.expect("the upload hung").unwrap();
    let status = answer.expect_err("an upload into a killed sandbox cannot succeed");
    assert!(
        matches!(status.code(), Code::NotFound | Code::FailedPrecondition),
        "a killed sandbox is NOT_FOUND or FAILED_PRECONDITION: {status:?}"
    );
    let _ = testkit::docker(&["rm", "-f", &id]);
}

/// Issue 9: the provider's per-sandbox caches (handles, agent channels, terminal sessions) and
/// the set of sandboxes this process created come back down when sandboxes end, whether they
/// were closed through this process or removed from outside (`docker rm -f`), and terminal
/// sessions that ended leave no entry behind.
#[tokio::test(flavor = "multi_thread")]
async fn per_sandbox_caches_shrink_when_sandboxes_end_however_they_end() {
    use sandboxd::core::backend::SandboxBackend;
    let label = TestLabel::new();
    let (provider, lifecycle, _state) = provider_and_lifecycle(&label);
    let mut handles = Vec::new();
    for _ in 0..6 {
        let spec = sandboxd::core::spec::SandboxSpec::new(BUSYBOX);
        let handle = lifecycle.create(spec, None, &Default::default()).await.expect("create");
        let ran = provider.exec(&handle, "echo hi", &Default::default()).await.unwrap();
        assert_eq!(ran.return_code, 0);
        handles.push(handle);
    }
    // A terminal session that ends by itself.
    let pty = sandboxd::core::spec::PtySpec {
        command: Some("true".into()),
        mode: sandboxd::backends::docker::pty::TerminalMode::Pipe,
        ..Default::default()
    };
    let session = provider.open_terminal(&handles[0], &pty).await.unwrap();
    session.wait_exit(Some(Duration::from_secs(30))).await.unwrap();
    session.close().await.unwrap();
    drop(session);
    let full = provider.cache_sizes();
    assert_eq!(full.handles, 6, "{full:?}");
    assert_eq!(lifecycle.created_count(), 6);

    // Half closed through this process, half removed from outside.
    for handle in &handles[..3] {
        lifecycle.close(&handle.id()).await.unwrap();
    }
    for handle in &handles[3..] {
        assert!(testkit::docker(&["rm", "-f", &handle.sandbox_id]).status.success());
    }
    let sizes = until_settled(&provider, &lifecycle, "caches never came back down", |sizes| {
        sizes.handles == 0
            && sizes.agent_channels == 0
            && sizes.without_agent == 0
            && sizes.pty_sandboxes == 0
            && sizes.pty_sessions == 0
    })
    .await;
    assert!(sizes.closed <= 3, "only what this process closed is remembered: {sizes:?}");
}

/// Issue 36: one record per sandbox. After full lifecycles — create, exec, usage, a terminal
/// left open, reset, pause and resume, a fork, a hibernate (refused on runc: nothing of it may
/// stay either), then a close through this process or a `docker rm -f` behind its back — every
/// per-sandbox structure of the provider and of its agent engine is empty.
#[tokio::test(flavor = "multi_thread")]
async fn every_per_sandbox_record_is_gone_after_full_lifecycles() {
    use sandboxd::core::backend::{CreatePolicy, SandboxBackend};
    let label = TestLabel::new();
    let (provider, lifecycle, _state) = provider_and_lifecycle(&label);
    let mut ended_here = Vec::new();
    let mut removed_outside = Vec::new();
    let mut snapshots = Vec::new();
    for round in 0..4 {
        let spec = sandboxd::core::spec::SandboxSpec::new(BUSYBOX);
        let handle = lifecycle.create(spec, None, &Default::default()).await.expect("create");
        let id = handle.id();
        let ran = provider.exec(&handle, "echo hi > /tmp/x", &Default::default()).await.unwrap();
        assert_eq!(ran.return_code, 0, "{ran:?}");
        let usage = provider.usage(&id).await.expect("usage");
        assert!(usage.processes_started >= 1, "{usage:?}");
        provider.reset(&id).await.expect("reset");
        provider.pause(&id).await.expect("pause");
        provider.resume(&id).await.expect("resume");
        let forked =
            provider.fork(&id, 1, &Default::default(), 100, &CreatePolicy::default()).await.expect("fork");
        snapshots.push(forked.snapshot.snapshot_id.clone());
        // A terminal session still running when the sandbox ends (a reset would end it).
        let pty = sandboxd::core::spec::PtySpec {
            command: Some("sleep 600".into()),
            mode: sandboxd::backends::docker::pty::TerminalMode::Pipe,
            ..Default::default()
        };
        let _session = provider.open_terminal(&handle, &pty).await.expect("terminal");
        let hibernated = provider.hibernate(&id).await;
        assert!(hibernated.is_err(), "runc cannot hibernate here: {hibernated:?}");
        let sizes = provider.cache_sizes();
        assert!(sizes.records >= 2 && sizes.pty_sessions >= 1, "round {round}: {sizes:?}");
        // Half of each generation ends through this process, half behind its back.
        let child = forked.sandboxes[0].clone();
        if round % 2 == 0 {
            ended_here.push(id.clone());
            lifecycle.close(&id).await.expect("close");
            removed_outside.push(child.sandbox_id.clone());
            assert!(testkit::docker(&["rm", "-f", &child.sandbox_id]).status.success());
        } else {
            removed_outside.push(handle.sandbox_id.clone());
            assert!(testkit::docker(&["rm", "-f", &handle.sandbox_id]).status.success());
            ended_here.push(child.id());
            provider.close(&child.id()).await.expect("close the fork");
        }
    }
    let what = format!(
        "per-sandbox records never emptied (closed here {ended_here:?}, removed outside {removed_outside:?})"
    );
    let sizes = until_settled(&provider, &lifecycle, &what, |sizes| {
        sizes.records == 0
            && sizes.handles == 0
            && sizes.pty_sandboxes == 0
            && sizes.pty_sessions == 0
            && sizes.agent_records == 0
            && sizes.agent_channels == 0
            && sizes.without_agent == 0
    })
    .await;
    assert!(sizes.closed <= ended_here.len(), "only what this process closed: {sizes:?}");
    for snapshot in &snapshots {
        provider.delete_snapshot(snapshot).await.expect("delete the fork's snapshot");
    }
}

/// A provider of the test's label and a lifecycle over it, with its lease store's directory.
fn provider_and_lifecycle(label: &TestLabel) -> (Arc<DockerProvider>, Arc<Lifecycle>, tempfile::TempDir) {
    let provider = Arc::new(testkit::provider(label));
    let state = tempfile::tempdir().unwrap();
    let lifecycle = Arc::new(Lifecycle::new(
        provider.clone(),
        LeaseOptions {
            policy: sandboxd::core::lease::LeasePolicy::default(),
            store: sandboxd::core::lease::LeaseStore::open(state.path()).unwrap(),
            create_timeout: Duration::from_secs(300),
        },
    ));
    (provider, lifecycle, state)
}

/// Sweep every half second until `settled` holds for the provider's sizes and the lifecycle
/// has seen every sandbox it created end (60 s at most, then fail saying `what`): the sizes.
async fn until_settled(
    provider: &DockerProvider,
    lifecycle: &Lifecycle,
    what: &str,
    settled: impl Fn(&CacheSizes) -> bool,
) -> CacheSizes {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        lifecycle.sweep().await.expect("sweep");
        let sizes = provider.cache_sizes();
        if settled(&sizes) && lifecycle.created_count() == 0 {
            return sizes;
        }
        assert!(Instant::now() < deadline, "{what}: {sizes:?}, created {}", lifecycle.created_count());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
