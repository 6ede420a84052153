//! `sandboxctl sessions` and `sandboxctl attach` in a real terminal (tmux), against the
//! service (in-process) and Docker; the session itself is opened and detached through the Rust
//! client (`pty().create` with a detach timeout, `detach`, `pty().list`, `pty().attach`).

use std::time::Duration;

use sandboxd_client::{spec, PtySpec, Sandbox};
use testkit::ctl::{ctl, Tmux};
use testkit::images::BUSYBOX;
use testkit::service::TestService;
use testkit::TestLabel;

/// The sandboxctl binary Cargo built for these tests.
const SANDBOXCTL: &str = env!("CARGO_BIN_EXE_sandboxctl");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_lists_and_attach_holds_a_detached_session() {
    if testkit::engine_name() != "agent" {
        return; // sessions live in the sandbox's agent only
    }
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let client = server.client().await;
    let sandbox = Sandbox::start(&client, spec(BUSYBOX)).await.expect("create");
    let open = PtySpec {
        command: Some("echo ready; read line; echo got:$line; exit 7".into()),
        detach_timeout: Some(Duration::from_secs(60)),
        ..Default::default()
    };
    let session = sandbox.pty().create(open).await.expect("open");
    assert_eq!(session.offset(), 0);
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("ready") {
        seen.extend(session.read(Some(Duration::from_secs(30))).await.expect("output"));
    }
    session.detach().await.expect("detach");
    let listed = sandbox.pty().list().await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].session_id.as_str(), listed[0].attached, listed[0].running),
        (session.id(), false, true)
    );

    // The Rust client's attach: since 2 skips "re".
    let again = sandbox.pty().attach(session.id(), false, 2).await.expect("attach");
    assert_eq!(again.offset(), 2);
    let replay = again.read(Some(Duration::from_secs(30))).await.expect("replay");
    assert!(String::from_utf8_lossy(&replay).starts_with("ady"), "{replay:?}");
    again.detach().await.expect("detach again");

    let out = ctl(SANDBOXCTL, &server.addr(), &["sessions", sandbox.id()], None);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        text.lines().any(|l| l.starts_with(session.id()) && l.contains("running") && l.contains(" no ")),
        "{text}"
    );

    let tmux = Tmux::start(30, 120);
    tmux.line(&format!(
        "{SANDBOXCTL} --addr {} attach {} {}; echo rc=$?",
        server.addr(),
        sandbox.id(),
        session.id()
    ));
    tmux.wait_for("the replayed output", |s| s.lines().any(|l| l.trim() == "ready"));
    tmux.line("hi");
    tmux.wait_for("the session's answer and exit status", |s| {
        s.lines().any(|l| l.trim() == "got:hi") && s.lines().any(|l| l.trim() == "rc=7")
    });
    let out = ctl(SANDBOXCTL, &server.addr(), &["sessions", sandbox.id(), "-o", "json"], None);
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(rows[0]["exit_code"], 7, "{rows}");
    assert_eq!(rows[0]["running"], false, "{rows}");
    sandbox.stop().await.expect("stop");
    drop(tmux);
}
