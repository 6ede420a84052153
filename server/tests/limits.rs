//! The client limits of `server.limits`: PTY sessions per sandbox, the upload spool, first
//! messages (in-process); calls in flight per connection and silent streams that give their
//! places back (the binary: the limit is a layer of its listener).

use std::time::{Duration, Instant};

use sandboxd_client::proto;
use testkit::raw::{busybox, chunk, create_id, open_pty, upload_header};
use testkit::server::TestServer;
use testkit::service::TestService;
use testkit::TestLabel;
use tonic::Code;

/// The server binary Cargo built for these tests.
const SANDBOXD: &str = env!("CARGO_BIN_EXE_sandboxd");

#[tokio::test(flavor = "multi_thread")]
async fn client_limits_answer_resource_exhausted_or_deadline_exceeded() {
    let label = TestLabel::new();
    let config = serde_json::json!({"server": {"limits": {
        "max_pty_sessions_per_sandbox": 1,
        "max_upload_spool_bytes": 1000,
        "first_message_timeout_s": 1,
    }}});
    let server = TestService::start_json(&label, config);
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;

    let open = |id: &str| proto::PtyRequest {
        request: Some(proto::pty_request::Request::Open(proto::PtyOpen {
            sandbox_id: id.into(),
            command: Some("cat".into()),
            pipe: true,
            ..Default::default()
        })),
    };
    let (first_tx, first_rx) = tokio::sync::mpsc::channel(4);
    first_tx.send(open(&id)).await.unwrap();
    let mut first =
        raw.pty(tokio_stream::wrappers::ReceiverStream::new(first_rx)).await.unwrap().into_inner();
    assert!(matches!(
        first.message().await.unwrap().unwrap().response,
        Some(proto::pty_response::Response::Opened(_))
    ));
    let err = raw.pty(tokio_stream::iter(vec![open(&id)])).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("max_pty_sessions_per_sandbox"), "{}", err.message());
    // Ending the first session gives its slot back.
    first_tx
        .send(proto::PtyRequest { request: Some(proto::pty_request::Request::Close(proto::PtyClose {})) })
        .await
        .unwrap();
    while let Ok(Some(_)) = first.message().await {}
    let mut reopened = None;
    for _ in 0..50 {
        match raw.pty(tokio_stream::iter(vec![open(&id)])).await {
            Ok(stream) => {
                reopened = Some(stream);
                break;
            }
            Err(e) if e.code() == Code::ResourceExhausted => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    assert!(reopened.is_some(), "the slot of a closed session was never given back");
    drop(reopened);

    // A sizeless upload past the spool limit.
    let err = raw
        .upload(tokio_stream::iter(vec![upload_header(&id, "/tmp/big", None), chunk(vec![7; 2000])]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("max_upload_spool_bytes"), "{}", err.message());

    // Streams that never send their first message.
    let (_silent_upload, rx) = tokio::sync::mpsc::channel::<proto::UploadRequest>(1);
    let err = raw.upload(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    let (_silent_pty, rx) = tokio::sync::mpsc::channel::<proto::PtyRequest>(1);
    let err = raw.pty(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}

/// Issue 9, item 4: past `server.limits.max_streams_per_connection` calls in flight on one
/// connection, a call is RESOURCE_EXHAUSTED naming the limit (it neither waits nor hangs);
/// other connections are unaffected, and a call that ends gives its place back.
#[tokio::test(flavor = "multi_thread")]
async fn calls_past_the_per_connection_limit_are_resource_exhausted() {
    let label = TestLabel::new();
    let config = serde_json::json!({"server": {"limits": {"max_streams_per_connection": 2}}});
    let server = TestServer::launch(SANDBOXD, &label).config(config).start();
    let mut setup = server.raw().await;
    let id = create_id(&mut setup, busybox()).await;

    let mut raw = server.raw().await; // one connection
    let open = || proto::PtyOpen {
        sandbox_id: id.clone(),
        command: Some("cat".into()),
        pipe: true,
        ..Default::default()
    };
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(open_pty(&mut raw, open()).await);
    }
    let third = tokio::time::timeout(
        Duration::from_secs(30),
        raw.status(proto::StatusRequest { sandbox_id: id.clone() }),
    )
    .await
    .expect("a call past the limit must be answered, not queued");
    let err = third.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("server.limits.max_streams_per_connection"), "{}", err.message());
    // Another connection is not limited by this one's calls.
    setup.status(proto::StatusRequest { sandbox_id: id.clone() }).await.expect("another connection");

    // One session ends: its place is given back.
    let (tx, mut stream) = held.pop().unwrap();
    tx.send(proto::PtyRequest { request: Some(proto::pty_request::Request::Close(proto::PtyClose {})) })
        .await
        .unwrap();
    while let Ok(Some(_)) = stream.message().await {}
    drop((tx, stream));
    let mut answered = false;
    for _ in 0..50 {
        match raw.status(proto::StatusRequest { sandbox_id: id.clone() }).await {
            Ok(_) => {
                answered = true;
                break;
            }
            Err(e) if e.code() == Code::ResourceExhausted => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    assert!(answered, "the place of an ended call was never given back");
    drop(held);
    setup.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}

/// Issue 9, item 4: an `Upload` or `Pty` whose caller opens the stream and sends nothing is
/// answered DEADLINE_EXCEEDED, naming the limit, within `server.limits.first_message_timeout_s`
/// (a generous bound proves "no hang"), and gives back what it held: with one connection allowed
/// two calls in flight, both silent calls end and two new calls run on that connection.
#[tokio::test(flavor = "multi_thread")]
async fn silent_upload_and_pty_streams_end_at_the_first_message_timeout_and_free_their_places() {
    let label = TestLabel::new();
    let config = serde_json::json!({"server": {"limits": {
        "first_message_timeout_s": 2,
        "max_streams_per_connection": 2,
    }}});
    let server = TestServer::launch(SANDBOXD, &label).config(config).start();
    let mut setup = server.raw().await;
    let id = create_id(&mut setup, busybox()).await;
    let raw = server.raw().await;
    let (upload_tx, upload_rx) = tokio::sync::mpsc::channel::<proto::UploadRequest>(1);
    let (pty_tx, pty_rx) = tokio::sync::mpsc::channel::<proto::PtyRequest>(1);
    let (mut a, mut b) = (raw.clone(), raw.clone());
    let started = Instant::now();
    let upload =
        tokio::spawn(async move { a.upload(tokio_stream::wrappers::ReceiverStream::new(upload_rx)).await });
    let pty = tokio::spawn(async move { b.pty(tokio_stream::wrappers::ReceiverStream::new(pty_rx)).await });
    let upload = tokio::time::timeout(Duration::from_secs(60), upload).await.expect("a silent upload hung");
    let err = upload.unwrap().unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert!(err.message().contains("first_message_timeout_s"), "{}", err.message());
    let pty = tokio::time::timeout(Duration::from_secs(60), pty).await.expect("a silent pty hung");
    let err = pty.unwrap().expect_err("a silent pty must fail");
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert!(err.message().contains("first_message_timeout_s"), "{}", err.message());
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "answered before the timeout: {:?}",
        started.elapsed()
    );
    // The senders are still open: only the server's timeout ended the calls. Their places on
    // the connection are free again.
    let (mut c, mut d) = (raw.clone(), raw.clone());
    let req = || proto::StatusRequest { sandbox_id: id.clone() };
    let (first, second) = tokio::join!(c.status(req()), d.status(req()));
    first.expect("a place freed by the silent upload");
    second.expect("a place freed by the silent pty");
    drop((upload_tx, pty_tx));
    setup.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}
