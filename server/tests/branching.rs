//! Snapshot, fork, diff, pause and resume against the real daemon: through the service
//! (in-process) and the Rust client, plus the provider for what needs an operator's config.
//!
//! Snapshot images inherit their sandbox's labels, so every image a test makes carries its
//! `sandboxd.test.case` label: the test's [`TestLabel`] removes its containers, then its images.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use sandboxd::backends::docker::DockerProvider;
use sandboxd::core::spec::{SandboxHandle, SandboxSpec};
use sandboxd::error::ProviderError;
use sandboxd_client::{proto, spec, DiffEntry, DiffKind, PtyOptions, Sandbox, SandboxStatus};
use testkit::images::BUSYBOX;
use testkit::raw::RawClient;
use testkit::service::TestService;
use testkit::{container_exists, docker, labels, TestLabel};

/// Tests that count or expire snapshots daemon-wide hold it for writing, the others (which
/// make snapshots) for reading.
static DAEMON_WIDE: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// A served test: the daemon-wide lock held for reading, the test's label, a server on it.
/// Fields drop in order: the server stops before its containers and images are removed.
struct Served {
    _server: TestService,
    cleanup: TestLabel,
    _daemon: tokio::sync::RwLockReadGuard<'static, ()>,
}

/// What the tests through the server start from: a served test, its Rust client and raw stubs.
async fn served() -> (Served, sandboxd_client::Client, RawClient) {
    let daemon = DAEMON_WIDE.read().await;
    let cleanup = TestLabel::new();
    let server = TestService::start(&cleanup, None);
    let client = server.client().await;
    let raw = server.raw().await;
    (Served { _server: server, cleanup, _daemon: daemon }, client, raw)
}

fn image_exists(image: &str) -> bool {
    docker(&["image", "inspect", image]).status.success()
}

fn inspect(id: &str, format: &str) -> String {
    let out = docker(&["inspect", "-f", format, id]);
    assert!(out.status.success(), "docker inspect {id}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `sandboxd.expires_ms - sandboxd.created_ms` of a container.
fn lease_length_ms(id: &str) -> i64 {
    let label = |name: &str| -> i64 {
        inspect(id, &format!("{{{{index .Config.Labels \"{name}\"}}}}")).parse().expect("lease label")
    };
    label("sandboxd.expires_ms") - label("sandboxd.created_ms")
}

async fn stdout(sandbox: &Sandbox, command: &str) -> String {
    let out = sandbox.exec(command).await.expect("exec");
    assert!(out.success(), "{command}: {} {:?}", out.return_code, out.stderr_str());
    out.stdout_str()
}

async fn status(raw: &mut RawClient, id: &str) -> i32 {
    raw.status(proto::StatusRequest { sandbox_id: id.into() }).await.expect("status").into_inner().status
}

fn has(entries: &[DiffEntry], kind: DiffKind, path: &str) -> bool {
    entries.iter().any(|e| e.kind == kind && e.path == path)
}

/// 1 MiB of bytes that differ per position, written by the sandbox itself, and its checksum.
const MAKE_DATA: &str = "mkdir -p /work/data && i=0; while [ $i -lt 4 ]; do \
    dd if=/dev/urandom of=/work/data/f$i bs=64k count=4 2>/dev/null; i=$((i+1)); done; \
    cat /work/data/* | md5sum";

#[tokio::test(flavor = "multi_thread")]
async fn fork_children_copy_files_env_workdir_ports_limits_and_lease_all_from_one_snapshot() {
    let (_test, client, mut raw) = served().await;
    let mut s = spec(BUSYBOX);
    s.workdir = Some("/work".into());
    s.env = labels(&[("GREETING", "hi there")]);
    s.ports = vec![8080];
    s.ttl_s = Some(600.0);
    s.resources =
        Some(proto::SandboxResources { cpu: Some(0.5), memory_mib: Some(64), ..Default::default() });
    let source = Sandbox::start(&client, s).await.expect("start");
    let sum = stdout(&source, MAKE_DATA).await;

    let fork = source.fork(3, labels(&[("branch", "fork-test")])).await.expect("fork");
    assert_eq!(fork.sandboxes.len(), 3);
    let source_endpoint = source.endpoint(8080).await.expect("source endpoint").url;
    for child in &fork.sandboxes {
        assert_ne!(child.id(), source.id());
        assert_eq!(stdout(child, "cat /work/data/* | md5sum").await, sum, "files byte for byte");
        assert_eq!(stdout(child, "printf %s \"$GREETING\"; pwd").await, "hi there/work\n");
        assert_eq!(child.workdir(), Some("/work"));
        assert_eq!(child.ports(), &[8080]);
        let endpoint = child.endpoint(8080).await.expect("child endpoint").url;
        assert_ne!(endpoint, source_endpoint, "a child publishes on a host port of its own");
        for format in ["{{.HostConfig.NanoCpus}}", "{{.HostConfig.Memory}}"] {
            assert_eq!(inspect(child.id(), format), inspect(source.id(), format), "{format}");
        }
        assert_eq!(lease_length_ms(child.id()), lease_length_ms(source.id()), "the same lease length");
        assert_eq!(inspect(child.id(), "{{.Config.Image}}"), fork.snapshot_id);
        assert_eq!(status(&mut raw, child.id()).await, proto::SandboxStatus::Running as i32);
    }
    // Children are independent of each other and of the source, which keeps running.
    stdout(&fork.sandboxes[0], "echo child > /work/only-in-child").await;
    let check = "test -e /work/only-in-child && echo yes || echo no";
    assert_eq!(stdout(&fork.sandboxes[1], check).await, "no\n");
    assert_eq!(stdout(&source, check).await, "no\n");
    assert_eq!(status(&mut raw, source.id()).await, proto::SandboxStatus::Running as i32);

    // The fork's snapshot is listed with its labels and source.
    let listed = client.list_snapshots(labels(&[("branch", "fork-test")])).await.expect("list");
    let snapshot = listed.iter().find(|s| s.snapshot_id == fork.snapshot_id).expect("fork snapshot listed");
    assert_eq!(snapshot.source_sandbox_id, source.id());
    assert!(snapshot.size_bytes > 1 << 20, "{}", snapshot.size_bytes);
    assert!(client
        .list_snapshots(labels(&[("branch", "other")]))
        .await
        .unwrap()
        .iter()
        .all(|s| s.snapshot_id != fork.snapshot_id));

    // In use: kept, and the error names a child. Once the children are gone it can go.
    let err = client.delete_snapshot(&fork.snapshot_id).await.expect_err("in use");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err}");
    assert!(err.message().contains("sandboxd-"), "{err}");
    assert!(image_exists(&fork.snapshot_id));
    for child in &fork.sandboxes {
        child.stop().await.expect("stop child");
    }
    client.delete_snapshot(&fork.snapshot_id).await.expect("delete unused snapshot");
    assert!(!image_exists(&fork.snapshot_id));
    let err = client.delete_snapshot(&fork.snapshot_id).await.expect_err("gone");
    assert_eq!(err.code(), tonic::Code::NotFound);
    source.stop().await.expect("stop");
}

#[tokio::test(flavor = "multi_thread")]
async fn create_from_snapshot_and_unknown_or_foreign_ids() {
    let (test, client, mut raw) = served().await;
    let source = Sandbox::start(&client, spec(BUSYBOX)).await.expect("start");
    stdout(&source, "echo kept > /root-file").await;
    let snapshot = source.snapshot(labels(&[("step", "1")])).await.expect("snapshot");
    assert_eq!(snapshot.labels, labels(&[("step", "1")]));
    assert_eq!(snapshot.source_sandbox_id, source.id());
    // The snapshot image never passes for a sandbox.
    let owner = docker(&[
        "image",
        "inspect",
        "-f",
        "{{index .Config.Labels \"sandboxd.sandbox\"}}|{{index .Config.Labels \"sandboxd.snapshot\"}}",
        &snapshot.snapshot_id,
    ]);
    assert_eq!(String::from_utf8_lossy(&owner.stdout).trim(), "|1");

    let child = Sandbox::start_from_snapshot(&client, &snapshot.snapshot_id, proto::SandboxSpec::default())
        .await
        .expect("start from snapshot");
    assert_eq!(stdout(&child, "cat /root-file").await, "kept\n");
    let connected = Sandbox::connect(&client, &child.serialize()).await.expect("connect");
    assert_eq!(connected.image(), Some(snapshot.snapshot_id.as_str()), "Connect reports the snapshot image");
    // The child runs the keep-alive, not what the snapshot recorded: itself, or wrapped by the
    // agent's `init` on the agent's socket.
    let run = inspect(child.id(), "{{json .Config.Entrypoint}} {{json .Config.Cmd}}");
    assert!(
        run.starts_with("[\"/bin/sh\"]")
            || (run.starts_with("[\"/.sandboxd/agent\"] [\"init\"")
                && run.contains("\"--\",\"/bin/sh\",\"-c\"")),
        "{run}"
    );

    // image and snapshot_id are exclusive, and one is needed.
    let both = proto::SandboxSpec {
        image: BUSYBOX.into(),
        snapshot_id: Some(snapshot.snapshot_id.clone()),
        ..Default::default()
    };
    let neither = proto::SandboxSpec::default();
    for bad in [both, neither] {
        let err = raw.create(proto::CreateRequest { spec: Some(bad) }).await.expect_err("refused");
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(
            err.message().contains("spec.image") && err.message().contains("spec.snapshot_id"),
            "{}",
            err.message()
        );
    }

    // Unknown, malformed and foreign snapshot ids are NOT_FOUND, and foreign images stay.
    let foreign = format!("sandboxd-snapshot:{}", uuid::Uuid::new_v4().simple());
    let tagged = docker(&["tag", BUSYBOX, &foreign]);
    assert!(tagged.status.success());
    let unknown = format!("sandboxd-snapshot:{}", uuid::Uuid::new_v4().simple());
    for id in [foreign.as_str(), unknown.as_str(), BUSYBOX, "--force"] {
        let s = proto::SandboxSpec { snapshot_id: Some(id.to_string()), ..Default::default() };
        let err = raw.create(proto::CreateRequest { spec: Some(s) }).await.expect_err("unknown snapshot");
        assert_eq!(err.code(), tonic::Code::NotFound, "{id}: {}", err.message());
        let err = client.delete_snapshot(id).await.expect_err("not ours");
        assert_eq!(err.code(), tonic::Code::NotFound, "{id}");
    }
    assert!(image_exists(&foreign), "a foreign image is never touched");
    assert!(client.list_snapshots(HashMap::new()).await.unwrap().iter().all(|s| s.snapshot_id != foreign));
    let _ = docker(&["rmi", &foreign]);

    // Unknown and foreign sandboxes cannot be snapshotted, forked, diffed or paused.
    let stranger = format!("sandboxd-{}", uuid::Uuid::new_v4().simple());
    let mut args = vec!["run", "-d", "--name", &stranger];
    let test_labels = test.cleanup.run_args();
    args.extend(test_labels.iter().map(String::as_str));
    args.extend([BUSYBOX, "sleep", "600"]);
    assert!(docker(&args).status.success());
    let unknown_sandbox = format!("sandboxd-{}", uuid::Uuid::new_v4().simple());
    for id in [stranger.as_str(), unknown_sandbox.as_str(), "not-an-id"] {
        let e = raw
            .snapshot(proto::SnapshotRequest { sandbox_id: id.into(), labels: HashMap::new() })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::NotFound, "snapshot {id}");
        let e = raw
            .fork(proto::ForkRequest {
                sandbox_id: id.into(),
                count: 1,
                labels: HashMap::new(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::NotFound, "fork {id}");
        let e = raw.diff(proto::DiffRequest { sandbox_id: id.into(), path_prefix: None }).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::NotFound, "diff {id}");
        let e = raw.pause(proto::PauseRequest { sandbox_id: id.into() }).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::NotFound, "pause {id}");
        let e = raw.resume(proto::ResumeRequest { sandbox_id: id.into() }).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::NotFound, "resume {id}");
    }
    assert_eq!(inspect(&stranger, "{{.State.Status}}"), "running", "the stranger was left alone");

    child.stop().await.unwrap();
    source.stop().await.unwrap();
    client.delete_snapshot(&snapshot.snapshot_id).await.expect("delete");
}

#[tokio::test(flavor = "multi_thread")]
async fn diff_reports_changes_since_start_and_since_the_snapshot_without_bookkeeping() {
    let (_test, client, mut raw) = served().await;
    let sandbox = Sandbox::start(&client, spec(BUSYBOX)).await.expect("start");
    // A live terminal session: on the docker exec engine it keeps a pid record under /tmp;
    // the agent holds its sessions itself and records nothing in the sandbox.
    let session = sandbox.pty().create(PtyOptions::default()).await.expect("pty");
    session.write(b"echo rea''dy\n").await.unwrap();
    let mut seen = String::new();
    while !seen.contains("ready") {
        let chunk = session.read(Some(Duration::from_secs(10))).await.expect("session output");
        assert!(!chunk.is_empty(), "session ended early: {seen:?}");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let records = stdout(&sandbox, "ls -a /tmp /dev/shm 2>/dev/null | grep -c '^.sandboxd-' || true").await;
    if testkit::engine_name() == "docker" {
        assert_ne!(records.trim(), "0", "the session recorded its pid");
    } else {
        assert_eq!(records.trim(), "0", "the agent's sessions leave no record in the sandbox");
    }
    stdout(&sandbox, "mkdir -p /work/sub && echo a > /work/sub/new && echo x >> /etc/passwd && rm /bin/ls")
        .await;

    let all = sandbox.diff(None).await.expect("diff");
    assert!(has(&all, DiffKind::Added, "/work/sub/new"), "{all:?}");
    assert!(has(&all, DiffKind::Changed, "/etc/passwd"), "{all:?}");
    assert!(has(&all, DiffKind::Deleted, "/bin/ls"), "{all:?}");
    assert!(all.iter().all(|e| !e.path.contains(".sandboxd") && e.path != "/sbin/docker-init"), "{all:?}");
    assert!(!all.iter().any(|e| e.path == "/tmp"), "/tmp changed only by bookkeeping: {all:?}");

    let work = sandbox.diff(Some("/work")).await.expect("diff /work");
    assert!(
        !work.is_empty() && work.iter().all(|e| e.path == "/work" || e.path.starts_with("/work/")),
        "{work:?}"
    );
    for bad in ["work", ""] {
        let e = raw
            .diff(proto::DiffRequest { sandbox_id: sandbox.id().into(), path_prefix: Some(bad.into()) })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad:?}");
        assert!(e.message().contains("path_prefix"), "{}", e.message());
    }
    session.close().await.expect("close session");

    // A sandbox from a snapshot diffs against the snapshot.
    let snapshot = sandbox.snapshot(HashMap::new()).await.expect("snapshot");
    let child = Sandbox::start_from_snapshot(&client, &snapshot.snapshot_id, proto::SandboxSpec::default())
        .await
        .unwrap();
    assert_eq!(child.diff(Some("/work")).await.unwrap(), vec![], "nothing changed since the snapshot");
    stdout(&child, "echo b > /work/sub/second").await;
    let since = child.diff(Some("/work")).await.unwrap();
    assert!(has(&since, DiffKind::Added, "/work/sub/second"), "{since:?}");
    assert!(!since.iter().any(|e| e.path == "/work/sub/new"), "{since:?}");
    child.stop().await.unwrap();
    sandbox.stop().await.unwrap();
    client.delete_snapshot(&snapshot.snapshot_id).await.unwrap();
}

/// Many changed paths arrive in several messages and all of them arrive.
#[tokio::test(flavor = "multi_thread")]
async fn a_large_diff_streams_in_batches() {
    let (_test, client, mut raw) = served().await;
    let sandbox = Sandbox::start(&client, spec(BUSYBOX)).await.expect("start");
    stdout(&sandbox, "mkdir /many && cd /many && i=0; while [ $i -lt 2500 ]; do : > f$i; i=$((i+1)); done")
        .await;
    let mut stream = raw
        .diff(proto::DiffRequest { sandbox_id: sandbox.id().into(), path_prefix: Some("/many".into()) })
        .await
        .unwrap()
        .into_inner();
    let mut messages = 0;
    let mut paths = std::collections::BTreeSet::new();
    while let Some(batch) = stream.message().await.unwrap() {
        messages += 1;
        paths.extend(batch.entries.into_iter().map(|e| e.path));
    }
    assert_eq!(paths.len(), 2501, "/many and its 2500 files");
    assert!(messages >= 3, "{messages} messages");
    sandbox.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn pause_refuses_exec_and_pty_and_a_paused_source_snapshots_and_forks_and_stays_paused() {
    let (_test, client, mut raw) = served().await;
    let sandbox = Sandbox::start(&client, spec(BUSYBOX)).await.expect("start");
    stdout(&sandbox, "echo before > /state").await;

    sandbox.pause().await.expect("pause");
    sandbox.pause().await.expect("pausing a paused sandbox succeeds");
    assert_eq!(sandbox.status().await.unwrap(), SandboxStatus::Paused);
    let err = sandbox.exec("echo no").await.expect_err("exec while paused");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err}");
    assert!(err.message().contains("paused"), "{err}");
    let err = sandbox.pty().create(PtyOptions::default()).await.expect_err("pty while paused");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err}");
    assert!(err.message().contains("paused"), "{err}");
    let err = Sandbox::connect(&client, &sandbox.serialize()).await.expect_err("connect while paused");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err}");

    // Snapshot and fork of a paused source work and leave it paused.
    let snapshot = sandbox.snapshot(HashMap::new()).await.expect("snapshot paused");
    assert_eq!(status(&mut raw, sandbox.id()).await, proto::SandboxStatus::Paused as i32);
    let fork = sandbox.fork(2, HashMap::new()).await.expect("fork paused");
    assert_eq!(status(&mut raw, sandbox.id()).await, proto::SandboxStatus::Paused as i32);
    for child in &fork.sandboxes {
        assert_eq!(child.status().await.unwrap(), SandboxStatus::Running);
        assert_eq!(stdout(child, "cat /state").await, "before\n");
    }
    assert!(!sandbox.diff(None).await.expect("diff while paused").is_empty());

    sandbox.resume().await.expect("resume");
    sandbox.resume().await.expect("resuming a running sandbox succeeds");
    assert_eq!(sandbox.status().await.unwrap(), SandboxStatus::Running);
    assert_eq!(stdout(&sandbox, "cat /state").await, "before\n");

    for child in &fork.sandboxes {
        child.stop().await.unwrap();
    }
    sandbox.stop().await.unwrap();
    for id in [&snapshot.snapshot_id, &fork.snapshot_id] {
        client.delete_snapshot(id.as_str()).await.unwrap();
    }
    let err = raw.pause(proto::PauseRequest { sandbox_id: sandbox.id().into() }).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound, "a closed sandbox");
}

#[tokio::test(flavor = "multi_thread")]
async fn fork_refuses_bad_counts_and_a_failed_start_leaves_no_child_and_no_snapshot() {
    let _daemon = DAEMON_WIDE.read().await;
    let cleanup = TestLabel::new();
    // A probe that fails once /doomed exists: a fork of a marked source has no child that can
    // become ready (the keep-alive itself needs nothing of the image, not even a shell).
    let server = TestService::start_with(&cleanup, None, |c| {
        c.docker.probe.command = Some("test ! -e /doomed && printf docker-sandbox-ready".into());
    });
    let client = server.client().await;
    let mut raw = server.raw().await;
    let source = Sandbox::start(&client, spec(BUSYBOX)).await.expect("start");
    for count in [0, 65] {
        let e = raw
            .fork(proto::ForkRequest {
                sandbox_id: source.id().into(),
                count,
                labels: HashMap::new(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().contains("count") && e.message().contains("1..=64"), "{}", e.message());
    }
    stdout(&source, "touch /doomed").await;
    let fork_label = labels(&[("doomed", "1")]);
    let err = source.fork(3, fork_label.clone()).await.expect_err("children cannot start");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err}");
    let left = cleanup.containers();
    assert!(
        left.len() == 1 && inspect(source.id(), "{{.Id}}").starts_with(&left[0]),
        "only the source is left: {left:?}"
    );
    assert!(client.list_snapshots(fork_label).await.unwrap().is_empty(), "the fork's snapshot was removed");
    assert!(container_exists(source.id()));
    source.stop().await.unwrap();
}

/// A probe that fails for exactly one child (the first to claim a shared token): its siblings,
/// already started, are removed with the snapshot.
#[tokio::test(flavor = "multi_thread")]
async fn one_failing_child_removes_its_started_siblings_and_the_snapshot() {
    let _daemon = DAEMON_WIDE.read().await;
    let cleanup = TestLabel::new();
    let shared = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(shared.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let mount = format!("{}:/shared", shared.path().display());
    let provider = testkit::provider_with(&cleanup, |c| {
        c.create.extra_run_args.extend(["-v".to_string(), mount.clone()]);
        c.probe.command = Some(
            "if [ -e /fail-one ] && mkdir /shared/claimed 2>/dev/null; then exit 1; fi; printf docker-sandbox-ready"
                .into(),
        );
    });
    let source = provider.create(&SandboxSpec::new(BUSYBOX)).await.expect("source");
    provider.exec(&source, "touch /fail-one", &Default::default()).await.expect("mark");
    let fork_labels: BTreeMap<String, String> = [("one-fails".to_string(), "1".to_string())].into();
    let err = provider
        .fork(&source.id(), 4, &fork_labels, 100, &Default::default())
        .await
        .expect_err("one child fails");
    assert!(matches!(err, ProviderError::CreateVerification(_)), "{err}");
    assert!(shared.path().join("claimed").exists(), "exactly one child claimed the token and failed");
    let left = cleanup.containers();
    assert_eq!(left.len(), 1, "only the source is left: {left:?}");
    assert!(provider.list_snapshots(&fork_labels).await.unwrap().is_empty());
    provider.close(&source.id()).await.unwrap();
}

async fn provider_source(cleanup: &TestLabel) -> (DockerProvider, SandboxHandle) {
    let provider = testkit::provider(cleanup);
    let source = provider.create(&SandboxSpec::new(BUSYBOX)).await.expect("source");
    (provider, source)
}

#[tokio::test(flavor = "multi_thread")]
async fn max_snapshots_is_resource_exhausted_and_changes_nothing() {
    let _daemon = DAEMON_WIDE.write().await;
    let cleanup = TestLabel::new();
    let (provider, source) = provider_source(&cleanup).await;
    let before = provider.list_snapshots(&BTreeMap::new()).await.unwrap().len();
    let first = provider.snapshot(&source.id(), &BTreeMap::new(), before + 1).await.expect("within bound");
    let err = provider.snapshot(&source.id(), &BTreeMap::new(), before + 1).await.expect_err("bound");
    assert!(matches!(err, ProviderError::ResourceExhausted(_)), "{err}");
    assert!(err.to_string().contains("server.max_snapshots"), "{err}");
    let err = provider
        .fork(&source.id(), 1, &BTreeMap::new(), before + 1, &Default::default())
        .await
        .expect_err("fork bound");
    assert!(matches!(err, ProviderError::ResourceExhausted(_)), "{err}");
    assert_eq!(provider.list_snapshots(&BTreeMap::new()).await.unwrap().len(), before + 1);
    assert_eq!(cleanup.containers().len(), 1, "the refused fork started nothing");
    provider.delete_snapshot(&first.snapshot_id).await.unwrap();
    provider.close(&source.id()).await.unwrap();
}

/// Expiry removes old snapshots nobody uses and keeps old ones a sandbox runs from. The old
/// snapshots are crafted with a creation time in 1970, so no one else's snapshot is old enough.
#[tokio::test(flavor = "multi_thread")]
async fn expiry_removes_old_unused_snapshots_and_keeps_used_ones() {
    let _daemon = DAEMON_WIDE.write().await;
    let cleanup = TestLabel::new();
    let (provider, source) = provider_source(&cleanup).await;
    let craft = |id: &str| {
        let out = docker(&[
            "commit",
            "--change",
            "LABEL sandboxd.sandbox=",
            "--change",
            "LABEL sandboxd.snapshot=1",
            "--change",
            "LABEL sandboxd.snapshot.created_ms=1000",
            &source.sandbox_id,
            id,
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    let unused = format!("sandboxd-snapshot:{}", uuid::Uuid::new_v4().simple());
    let used = format!("sandboxd-snapshot:{}", uuid::Uuid::new_v4().simple());
    craft(&unused);
    craft(&used);
    let fresh = provider.snapshot(&source.id(), &BTreeMap::new(), 1000).await.expect("fresh");
    let user = provider
        .create(&SandboxSpec { snapshot_id: Some(used.clone()), ..Default::default() })
        .await
        .expect("sandbox from the old snapshot");
    provider.remove_expired_snapshots(Duration::from_secs(365 * 86_400)).await.expect("expire");
    assert!(!image_exists(&unused), "old and unused: removed");
    assert!(image_exists(&used), "old but in use: kept");
    assert!(image_exists(&fresh.snapshot_id), "young: kept");
    provider.close(&user.id()).await.unwrap();
    provider.close(&source.id()).await.unwrap();
    for id in [&used, &fresh.snapshot_id] {
        provider.delete_snapshot(id).await.unwrap();
    }
}

/// A snapshot whose server was SIGKILLed before the call answered is one nobody was told of:
/// the next server on the state directory removes it (its record, `snapshot_making.rs`).
#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_whose_server_died_before_answering_is_removed_by_the_next_server() {
    use testkit::server::TestServer;
    use testkit::wait::eventually;
    const SANDBOXD: &str = env!("CARGO_BIN_EXE_sandboxd");
    let _daemon = DAEMON_WIDE.read().await;
    let cleanup = TestLabel::new();
    let state = tempfile::tempdir().unwrap();
    let config = serde_json::json!({"server": {"state_dir": state.path(), "sweep_interval_s": 1}});
    let mut first = TestServer::launch(SANDBOXD, &cleanup).config(config.clone()).start();
    let client = sandboxd_client::Client::connect(first.url.clone()).await.unwrap();
    let source = Sandbox::start(&client, spec(BUSYBOX)).await.expect("source");
    // A layer big enough that the commit takes a while on this daemon.
    let r = source.exec("dd if=/dev/zero of=/big bs=1M count=200 2>&1").await.unwrap();
    assert_eq!(r.return_code, 0, "{r:?}");
    let mut raw = first.raw().await;
    let id = source.id().to_string();
    let call = tokio::spawn(async move {
        raw.snapshot(proto::SnapshotRequest { sandbox_id: id, ..Default::default() }).await
    });
    let records = state.path().join("snapshotting");
    let recorded = || {
        std::fs::read_dir(&records)
            .map(|d| d.flatten().any(|e| !e.file_name().to_string_lossy().starts_with('.')))
            .unwrap_or(false)
    };
    eventually(Duration::from_secs(30), "the snapshot was never recorded as under way", recorded).await;
    first.signal(nix::sys::signal::Signal::SIGKILL);
    first.wait_exit(Duration::from_secs(10));
    assert!(call.await.unwrap().is_err(), "the call answered before its server died");
    // The daemon finishes the commit its client started.
    let snapshots = || {
        let case = format!("label=sandboxd.test.case={}", cleanup.value);
        let out = docker(&["images", "-q", "--filter", "label=sandboxd.snapshot=1", "--filter", &case]);
        String::from_utf8_lossy(&out.stdout).split_whitespace().count()
    };
    eventually(Duration::from_secs(60), "the commit never made its image", || snapshots() == 1).await;

    let second = TestServer::launch(SANDBOXD, &cleanup).config(config).start();
    eventually(Duration::from_secs(60), "the snapshot nobody was told of was never removed", || {
        snapshots() == 0
    })
    .await;
    // The record goes right after the image (once a live snapshot's checkpoint is gone too).
    eventually(Duration::from_secs(10), "the record outlived its snapshot", || !recorded()).await;
    assert!(second.logs().contains("removed a snapshot whose call never answered"), "{}", second.logs());
}
