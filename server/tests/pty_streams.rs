//! `Pty` streams whose input write is blocked (the program never reads), in-process: cancelling
//! the call or half-closing its requests ends the session and its program.

use std::time::Duration;

use sandboxd_client::proto;
use testkit::raw::{busybox, create_id, open_pty};
use testkit::service::TestService;
use testkit::wait::eventually;
use testkit::TestLabel;

#[tokio::test(flavor = "multi_thread")]
async fn cancelling_a_pty_whose_input_write_is_blocked_ends_its_program() {
    pty_with_a_blocked_write_ends(false).await;
}

/// The caller half-closes its request stream (and keeps reading) while the server's input
/// write is blocked: the session ends, its program too, and the response stream ends.
#[tokio::test(flavor = "multi_thread")]
async fn half_closing_a_pty_whose_input_write_is_blocked_ends_its_program() {
    pty_with_a_blocked_write_ends(true).await;
}

async fn pty_with_a_blocked_write_ends(half_close: bool) {
    let label = TestLabel::new();
    let server = TestService::start_json(&label, serde_json::json!({}));
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;
    let open = proto::PtyOpen {
        sandbox_id: id.clone(),
        command: Some("exec sleep 1234".into()),
        pipe: true,
        ..Default::default()
    };
    let (tx, mut stream) = open_pty(&mut raw, open).await;
    // The program never reads: 8 MiB of input fills every pipe on the way, and the server's
    // write blocks.
    for _ in 0..8 {
        tx.send(proto::PtyRequest { request: Some(proto::pty_request::Request::Input(vec![b'x'; 1 << 20])) })
            .await
            .unwrap();
    }
    let running = |id: &str| {
        let out = testkit::docker(&["exec", id, "ps", "-o", "args"]);
        String::from_utf8_lossy(&out.stdout).lines().any(|l| l.contains("sleep 1234"))
    };
    eventually(Duration::from_secs(20), "the session's program never started", || running(&id)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    if half_close {
        drop(tx);
        let drained = tokio::time::timeout(Duration::from_secs(60), async {
            while let Ok(Some(_)) = stream.message().await {}
        })
        .await;
        assert!(drained.is_ok(), "the response stream never ended after the half-close");
    } else {
        drop(stream); // the caller cancels
        drop(tx);
    }
    eventually(Duration::from_secs(30), "the ended session's program still runs", || !running(&id)).await;
    raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}
