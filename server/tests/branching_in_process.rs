//! Snapshots, forks, diffs, streamed execs and logs through the service in-process over
//! `testkit::fake` (no Docker): what the layers above the seam add to them (labels and their
//! filters, the snapshot cap, a snapshot kept while a sandbox runs from it, forks' children as
//! sandboxes of their own with their own tokens, the exec stream's events and exit) in
//! seconds. The same calls against the real daemon are `branching.rs` and `live_fork.rs`.

use std::collections::HashMap;
use std::sync::Arc;

use sandboxd::config::FileConfig;
use sandboxd_client::{proto, DiffKind, ExecEvent, ExecOptions, LogsOptions, Sandbox, SandboxStatus};
use testkit::fake::FakeBackend;
use testkit::service::TestService;
use tonic::Code;

fn service(dir: &std::path::Path, max_snapshots: u32) -> (Arc<FakeBackend>, TestService) {
    let mut config = FileConfig::default();
    config.server.state_dir = Some(dir.to_path_buf());
    config.server.max_snapshots = max_snapshots;
    let fake = Arc::new(FakeBackend::new());
    let service = TestService::start_backend(fake.clone(), config, None);
    (fake, service)
}

fn spec(files: &[(&str, &[u8])]) -> proto::SandboxSpec {
    proto::SandboxSpec {
        image: "fake:1".into(),
        files: files.iter().map(|(p, c)| (p.to_string(), c.to_vec())).collect(),
        ..Default::default()
    }
}

fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

async fn cat(sandbox: &Sandbox, path: &str) -> Vec<u8> {
    let out = sandbox.exec(format!("cat {path}")).await.expect("cat");
    assert_eq!(out.return_code, 0, "cat {path}: {out:?}");
    out.stdout
}

#[tokio::test(flavor = "multi_thread")]
async fn snapshots_forks_and_diffs_through_the_service() {
    let dir = tempfile::tempdir().unwrap();
    let (fake, service) = service(dir.path(), 3);
    let client = service.client().await;
    let source = Sandbox::start(&client, spec(&[("/work/a.txt", b"one")])).await.unwrap();

    // A diff names what changed since the create, under a prefix when given.
    let upload = dir.path().join("b.txt");
    std::fs::write(&upload, b"two").unwrap();
    source.upload(&upload, "/work/b.txt").await.unwrap();
    source.upload(&upload, "/work/a.txt").await.unwrap();
    source.upload(&upload, "/elsewhere/c.txt").await.unwrap();
    let diff: Vec<(String, DiffKind)> =
        source.diff(Some("/work")).await.unwrap().into_iter().map(|e| (e.path, e.kind)).collect();
    assert_eq!(
        diff,
        [("/work/a.txt".to_string(), DiffKind::Changed), ("/work/b.txt".to_string(), DiffKind::Added)]
    );

    // A snapshot is listed by its labels; a sandbox started from it has its files.
    let taken = source.snapshot(labels(&[("run", "r1")])).await.unwrap();
    assert_eq!(taken.source_sandbox_id, source.id());
    let listed = client.list_snapshots(labels(&[("run", "r1")])).await.unwrap();
    assert_eq!(
        listed.iter().map(|s| s.snapshot_id.as_str()).collect::<Vec<_>>(),
        [taken.snapshot_id.as_str()]
    );
    assert!(client.list_snapshots(labels(&[("run", "other")])).await.unwrap().is_empty());
    let from_snapshot = proto::SandboxSpec { image: String::new(), ..spec(&[]) };
    let restored = Sandbox::start_from_snapshot(&client, &taken.snapshot_id, from_snapshot).await.unwrap();
    assert_eq!(cat(&restored, "/work/b.txt").await, b"two");
    assert!(restored.diff(None).await.unwrap().is_empty(), "nothing changed since it started");

    // A fork's children are sandboxes of their own: the files, the labels, their own tokens.
    let fork = source.fork(2, labels(&[("branch", "yes")])).await.unwrap();
    assert_eq!(fork.sandboxes.len(), 2);
    for child in &fork.sandboxes {
        assert_ne!(child.id(), source.id());
        assert_eq!(cat(child, "/work/a.txt").await, b"two");
        assert_eq!(child.status().await.unwrap(), SandboxStatus::Running);
    }
    let first = &fork.sandboxes[0];
    std::fs::write(&upload, b"child").unwrap();
    first.upload(&upload, "/work/a.txt").await.unwrap();
    assert_eq!(cat(&fork.sandboxes[1], "/work/a.txt").await, b"two", "children share no files");
    assert_eq!(cat(&source, "/work/a.txt").await, b"two", "the source goes on untouched");

    // The cap (server.max_snapshots 3: the snapshot and the fork's) refuses a third at once.
    let extra = source.snapshot(HashMap::new()).await.unwrap();
    let refused = source.snapshot(HashMap::new()).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    client.delete_snapshot(&extra.snapshot_id).await.unwrap();

    // A snapshot a sandbox runs from is kept; once that sandbox is gone it can be deleted.
    let in_use = client.delete_snapshot(&taken.snapshot_id).await.unwrap_err();
    assert_eq!(in_use.code(), Code::FailedPrecondition, "{in_use:?}");
    restored.stop().await.unwrap();
    client.delete_snapshot(&taken.snapshot_id).await.unwrap();
    let gone = client.delete_snapshot(&taken.snapshot_id).await.unwrap_err();
    assert_eq!(gone.code(), Code::NotFound, "{gone:?}");

    for child in fork.sandboxes {
        child.stop().await.unwrap();
    }
    client.delete_snapshot(&fork.snapshot_id).await.unwrap();
    source.stop().await.unwrap();
    assert!(fake.sandboxes().is_empty(), "left: {:?}", fake.sandboxes().keys());
    assert!(client.list_snapshots(HashMap::new()).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_exec_ends_with_its_exit_and_logs_answer_for_known_sandboxes_only() {
    let dir = tempfile::tempdir().unwrap();
    let (_fake, service) = service(dir.path(), 4);
    let client = service.client().await;
    let sandbox = Sandbox::start(&client, spec(&[])).await.unwrap();

    let mut events = sandbox.exec_stream("echo streamed", ExecOptions::default()).await.unwrap();
    let mut stdout = Vec::new();
    let mut exit = None;
    while let Some(event) = events.next().await.unwrap() {
        match event {
            ExecEvent::Stdout(bytes) => stdout.extend(bytes),
            ExecEvent::Stderr(bytes) => panic!("stderr {bytes:?}"),
            ExecEvent::Exit(e) => exit = Some(e),
        }
    }
    assert_eq!(stdout, b"streamed\n");
    assert_eq!(exit.expect("an exit event").return_code, 0);

    let mut failing = sandbox.exec_stream("exit 4", ExecOptions::default()).await.unwrap();
    let mut code = None;
    while let Some(event) = failing.next().await.unwrap() {
        if let ExecEvent::Exit(e) = event {
            code = Some(e.return_code);
        }
    }
    assert_eq!(code, Some(4));

    let mut logs = sandbox.logs(LogsOptions::default()).await.unwrap();
    assert!(logs.next().await.unwrap().is_none(), "the fake's main process writes nothing");
    let unknown = client.logs("sandboxd-00000000000000000000000000000000", LogsOptions::default()).await;
    let code = match unknown {
        Ok(mut stream) => stream.next().await.err().map(|e| e.code()),
        Err(e) => Some(e.code()),
    };
    assert_eq!(code, Some(Code::NotFound));
    sandbox.stop().await.unwrap();
}
