//! Sandboxes' run directories (`<state_dir>/sandboxes/<id>/`) against the real daemon: a create
//! records its daemon beside the socket; directories left behind (a sandbox removed while no
//! server ran, a create whose server was killed) are pruned once old enough, and nothing else
//! is: not a live sandbox's, not a young one, not another daemon's, not one without a record.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sandboxd::agent_client::run_dirs::PRUNE_AGE;
use sandboxd::config::{ExecEngineKind, ExecTransport};
use sandboxd::core::spec::SandboxSpec;
use testkit::{docker, images, provider_in, TestLabel};

fn daemon_id() -> String {
    let out = docker(&["info", "--format", "{{.ID}}"]);
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A directory as a server leaves it: `run/` and the daemon's record, `age` old.
fn left(root: &Path, id: &str, daemon: Option<&str>, age: Duration) -> PathBuf {
    let dir = root.join(id);
    std::fs::create_dir_all(dir.join("run")).unwrap();
    if let Some(daemon) = daemon {
        std::fs::write(dir.join("daemon"), daemon).unwrap();
        let file = std::fs::File::options().write(true).open(dir.join("daemon")).unwrap();
        file.set_modified(SystemTime::now() - age).unwrap();
    }
    dir
}

fn fresh_id() -> String {
    sandboxd::core::spec::SandboxId::generate().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn directories_left_behind_are_pruned_and_nothing_else() {
    let label = TestLabel::new();
    let state = tempfile::tempdir().unwrap();
    let p = provider_in(&label, state.path(), |c| {
        c.exec.engine = ExecEngineKind::Agent;
        c.exec.transport = ExecTransport::Socket;
    });
    assert!(p.agent_socket(), "this machine can use the agent's socket (root, local daemon)");
    let root = state.path().join("sandboxes");
    let daemon = daemon_id();
    let live = p.create(&SandboxSpec::new(images::BUSYBOX)).await.unwrap();
    let removed = p.create(&SandboxSpec::new(images::BUSYBOX)).await.unwrap();
    for h in [&live, &removed] {
        let record = std::fs::read_to_string(root.join(&h.sandbox_id).join("daemon")).unwrap();
        assert_eq!(record, daemon, "a create records its daemon beside the run directory");
    }
    // Removed behind the server's back (as while no server ran): its directory stays.
    assert!(docker(&["rm", "-f", &removed.sandbox_id]).status.success());
    let old = PRUNE_AGE + Duration::from_secs(60);
    for h in [&live, &removed] {
        let file =
            std::fs::File::options().write(true).open(root.join(&h.sandbox_id).join("daemon")).unwrap();
        file.set_modified(SystemTime::now() - old).unwrap();
    }
    // What a killed create leaves: no container under the id or the creating name.
    let abandoned = left(&root, &fresh_id(), Some(&daemon), old);
    let young = left(&root, &fresh_id(), Some(&daemon), Duration::ZERO);
    let other_daemon = left(&root, &fresh_id(), Some("another-daemon"), old);
    let unrecorded = left(&root, &fresh_id(), None, old);
    let not_a_sandbox = left(&root, "pool-owner-notes", Some(&daemon), old);

    let mut pruned = p.prune_run_dirs(PRUNE_AGE).await;
    pruned.sort();
    let mut expected =
        vec![removed.sandbox_id.clone(), abandoned.file_name().unwrap().to_string_lossy().into()];
    expected.sort();
    assert_eq!(pruned, expected);
    assert!(!root.join(&removed.sandbox_id).exists() && !abandoned.exists());
    for kept in [&root.join(&live.sandbox_id), &young, &other_daemon, &unrecorded, &not_a_sandbox] {
        assert!(kept.exists(), "{} was pruned", kept.display());
    }
    // The live sandbox still answers on its socket.
    let r = p.exec(&live, "printf ok", &Default::default()).await.unwrap();
    assert_eq!((r.stdout_str().as_str(), r.return_code), ("ok", 0));
    // Its container gone and its socket with it: the next pass takes it too.
    assert!(docker(&["rm", "-f", &live.sandbox_id]).status.success());
    assert_eq!(p.prune_run_dirs(PRUNE_AGE).await, vec![live.sandbox_id.clone()]);
}
