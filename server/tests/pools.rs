//! The docker subprocess pools, in-process: stalled transfers never freeze control calls,
//! creates or other transfers (on both engines); waiting for an exec permit counts against the
//! exec timeout; creates have a pool of their own.

use std::time::Duration;

use sandboxd_client::proto;
use testkit::raw::{busybox, chunk, create_id, upload_header, RawClient};
use testkit::service::TestService;
use testkit::TestLabel;
use tonic::Code;

#[tokio::test(flavor = "multi_thread")]
async fn stalled_transfers_never_freeze_control_calls_creates_or_other_transfers() {
    // The docker subprocess pools: the `docker exec` engine uses them for every exec and
    // transfer.
    stalled_transfers_on("docker").await;
}

/// The default engine (the agent: uploads go through its channel, large downloads through
/// `docker cp`): a stalled upload must end as DEADLINE_EXCEEDED there too (it was INTERNAL).
#[tokio::test(flavor = "multi_thread")]
async fn stalled_transfers_never_freeze_anything_on_the_default_engine() {
    stalled_transfers_on("agent").await;
}

async fn stalled_transfers_on(engine: &str) {
    let label = TestLabel::new();
    let config = serde_json::json!({
        "docker": {"exec": {"engine": engine, "concurrency": 2, "transfer_concurrency": 2}},
        "server": {"limits": {"transfer_idle_timeout_s": 3}},
    });
    let server = TestService::start_json(&label, config);
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;
    let big = raw
        .exec(proto::ExecRequest {
            sandbox_id: id.clone(),
            command: "head -c 67108864 /dev/zero > /tmp/big".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(big.return_code, 0);

    // The abusive client has a connection of its own (unread streams on a shared connection
    // use up that connection's HTTP/2 window: a client-side matter).
    let abuser = server.raw().await;
    // Two uploads announce a size, then send nothing (their streams stay open).
    let mut stalled = Vec::new();
    for i in 0..2 {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        tx.send(upload_header(&id, &format!("/tmp/stalled{i}"), Some(10))).await.unwrap();
        let mut client = abuser.clone();
        let call =
            tokio::spawn(async move { client.upload(tokio_stream::wrappers::ReceiverStream::new(rx)).await });
        stalled.push((tx, call));
    }
    // Four downloads nobody reads.
    let mut unread = Vec::new();
    for _ in 0..4 {
        let mut client = abuser.clone();
        let request = proto::DownloadRequest { sandbox_id: id.clone(), path: "/tmp/big".into() };
        unread.push(tokio::spawn(async move {
            let stream = client.download(request).await;
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(stream);
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // Control calls, a create, an exec and a moving upload all still answer.
    let status = raw.status(proto::StatusRequest { sandbox_id: id.clone() }).await.expect("status answers");
    assert_eq!(status.into_inner().status, proto::SandboxStatus::Running as i32);
    let other = create_id(&mut raw, busybox()).await;
    let moving = raw
        .upload(tokio_stream::iter(vec![upload_header(&other, "/tmp/ok", Some(2)), chunk(b"ok".to_vec())]))
        .await
        .expect("an upload with data flowing gets a transfer permit");
    assert_eq!(moving.into_inner().bytes_written, 2);
    raw.close(proto::CloseRequest { sandbox_id: other }).await.expect("close answers");

    // The stalled uploads fail after the idle timeout instead of holding on forever.
    for (tx, call) in stalled {
        let answer =
            tokio::time::timeout(Duration::from_secs(30), call).await.expect("a stalled upload never ended");
        let err = answer.unwrap().unwrap_err();
        assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
        drop(tx);
    }
    for task in unread {
        task.abort();
    }
    raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}

/// The `docker exec` engine with one exec slot (the agent engine takes no permit for an exec).
static ONE_EXEC_SLOT: std::sync::LazyLock<serde_json::Value> = std::sync::LazyLock::new(
    || serde_json::json!({"docker": {"exec": {"engine": "docker", "concurrency": 1}}}),
);

type ExecCall = tokio::task::JoinHandle<Result<tonic::Response<proto::ExecResponse>, tonic::Status>>;

/// A `sleep` exec in `sandbox_id` that holds the only exec slot of an [`ONE_EXEC_SLOT`] server
/// for `seconds`, running once this returns.
async fn hold_the_exec_slot(raw: &RawClient, sandbox_id: &str, seconds: u32) -> ExecCall {
    let mut busy = raw.clone();
    let request = proto::ExecRequest {
        sandbox_id: sandbox_id.into(),
        command: format!("sleep {seconds}"),
        ..Default::default()
    };
    let hog = tokio::spawn(async move { busy.exec(request).await });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!hog.is_finished(), "the sleep holds the only exec slot");
    hog
}

#[tokio::test(flavor = "multi_thread")]
async fn waiting_for_a_permit_counts_against_the_exec_timeout() {
    let label = TestLabel::new();
    let server = TestService::start_json(&label, ONE_EXEC_SLOT.clone());
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;
    let hog = hold_the_exec_slot(&raw, &id, 8).await;
    let waited = raw
        .exec(proto::ExecRequest {
            sandbox_id: id.clone(),
            command: "echo ran".into(),
            timeout_s: Some(1.0),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        waited.error_type, "timeout",
        "a 1 s exec that waited for the only permit timed out: {waited:?}"
    );
    assert!(!hog.is_finished(), "the timeout came from the permit wait, not after the first exec");
    assert_eq!(hog.await.unwrap().unwrap().into_inner().return_code, 0);
    raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}

/// Creates have their own pool (`exec.create_concurrency`): with every exec slot held by a long
/// command, a create (its `docker run` and, on this engine, its probe) still goes through.
#[tokio::test(flavor = "multi_thread")]
async fn creates_do_not_wait_behind_execs() {
    let label = TestLabel::new();
    let server = TestService::start_json(&label, ONE_EXEC_SLOT.clone());
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;
    let hog = hold_the_exec_slot(&raw, &id, 60).await;
    let other = create_id(&mut raw, busybox()).await;
    assert!(!hog.is_finished(), "the create answered while the only exec slot was still held");
    hog.abort();
    for sandbox_id in [other, id] {
        raw.close(proto::CloseRequest { sandbox_id }).await.unwrap();
    }
}
