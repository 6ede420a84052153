//! `PortForward` (issue 19) through the gRPC API, the service in-process, against the real
//! daemon: a busybox httpd inside a `network: none` sandbox (no published port) answers through
//! the forward, many connections at once, 8 MiB echoed both ways through the flow control,
//! half-close in each direction, a connect failure UNAVAILABLE naming the address, bad input,
//! and FAILED_PRECONDITION on the docker exec engine.

use std::time::Duration;

use sandboxd::config::ExecEngineKind;
use sandboxd_client::proto;
use testkit::raw::{busybox, create_id, RawClient};
use testkit::service::TestService;
use testkit::TestLabel;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

type Out = proto::port_forward_response::Message;

fn open(id: &str, port: u32) -> proto::PortForwardRequest {
    proto::PortForwardRequest {
        message: Some(proto::port_forward_request::Message::Open(proto::PortForwardOpen {
            sandbox_id: id.into(),
            host: String::new(),
            port,
        })),
    }
}

fn data(bytes: Vec<u8>) -> proto::PortForwardRequest {
    proto::PortForwardRequest { message: Some(proto::port_forward_request::Message::Data(bytes)) }
}

/// One connection: `request` sent, then our half closed; everything the sandbox side sent until
/// the call ended, and whether `opened` came first and `eof` before the end.
async fn round_trip(
    raw: &mut RawClient,
    id: &str,
    port: u32,
    request: &[u8],
) -> Result<(Vec<u8>, bool), tonic::Status> {
    let (tx, rx) = mpsc::channel(4);
    tx.send(open(id, port)).await.unwrap();
    tx.send(data(request.to_vec())).await.unwrap();
    drop(tx);
    let mut stream = raw.port_forward(ReceiverStream::new(rx)).await?.into_inner();
    let first = stream.message().await?.and_then(|m| m.message);
    assert!(
        matches!(first, Some(Out::Opened(ref o)) if o.address == format!("127.0.0.1:{port}")),
        "{first:?}"
    );
    let (mut body, mut eof) = (Vec::new(), false);
    while let Some(m) = stream.message().await? {
        match m.message {
            Some(Out::Data(d)) => {
                assert!(!eof, "no data after eof");
                body.extend(d);
            }
            Some(Out::Eof(_)) => eof = true,
            other => panic!("unexpected {other:?}"),
        }
    }
    Ok((body, eof))
}

async fn exec(raw: &mut RawClient, id: &str, command: &str) {
    let out = testkit::raw::exec(raw, id, command).await;
    assert_eq!(out.return_code, 0, "{command}: {}", String::from_utf8_lossy(&out.stderr));
}

async fn start(raw: &mut RawClient, id: &str, command: &str) {
    raw.start_process(proto::StartProcessRequest {
        sandbox_id: id.into(),
        command: command.into(),
        ..Default::default()
    })
    .await
    .expect("start");
}

const GET: &[u8] = b"GET /index.html HTTP/1.0\r\nHost: sandbox\r\n\r\n";

/// A `network: none` sandbox serving `/index.html` with httpd on 127.0.0.1:8080, and the page.
async fn http_sandbox(raw: &mut RawClient) -> (String, String) {
    let id = create_id(raw, busybox()).await;
    let page = format!("hello from {id}\n");
    exec(raw, &id, &format!("mkdir -p /tmp/www && printf '%s\\n' 'hello from {id}' > /tmp/www/index.html"))
        .await;
    start(raw, &id, "exec httpd -f -p 127.0.0.1:8080 -h /tmp/www").await;
    // httpd binds in its own time: retry until it answers.
    for _ in 0..100 {
        if let Ok((body, _)) = round_trip(raw, &id, 8080, GET).await {
            if String::from_utf8_lossy(&body).contains(&page) {
                return (id, page);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("httpd never answered through the forward");
}

fn no_network(label: &TestLabel) -> TestService {
    TestService::start_with(label, None, |c| c.docker.create.network = Some("none".into()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_inside_a_sandbox_without_network_answers_through_the_forward() {
    if testkit::engine() == ExecEngineKind::Docker {
        return; // the docker engine's answer is its own test below
    }
    let label = TestLabel::new();
    let server = no_network(&label);
    let mut raw = server.raw().await;
    let (id, page) = http_sandbox(&mut raw).await;
    // The sandbox has no network but loopback, and nothing is published.
    let inspect = testkit::docker(&[
        "inspect",
        "-f",
        "{{.HostConfig.NetworkMode}} {{json .NetworkSettings.Ports}}",
        &id,
    ]);
    assert_eq!(String::from_utf8_lossy(&inspect.stdout).trim(), "none {}");

    let (body, eof) = round_trip(&mut raw, &id, 8080, GET).await.expect("forward");
    let text = String::from_utf8_lossy(&body);
    assert!(text.starts_with("HTTP/1.") && text.contains(" 200 OK\r\n") && text.ends_with(&page), "{text:?}");
    assert!(eof, "httpd's close arrives as eof before the call ends");

    // Many connections at once, each on its own stream.
    let mut tasks = Vec::new();
    for _ in 0..24 {
        let mut raw = server.raw().await;
        let (id, page) = (id.clone(), page.clone());
        tasks.push(tokio::spawn(async move {
            let (body, _) = round_trip(&mut raw, &id, 8080, GET).await.expect("forward");
            assert!(String::from_utf8_lossy(&body).ends_with(&page));
        }));
    }
    for t in tasks {
        t.await.expect("a connection");
    }

    // Nothing listens on 9: UNAVAILABLE naming the address.
    let err = round_trip(&mut raw, &id, 9, b"x").await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(err.message().contains("127.0.0.1:9"), "{err:?}");
    // A host the sandbox cannot resolve, a bad port, a first message that is not `open`.
    let (tx, rx) = mpsc::channel(2);
    tx.send(proto::PortForwardRequest {
        message: Some(proto::port_forward_request::Message::Open(proto::PortForwardOpen {
            sandbox_id: id.clone(),
            host: "no-such-host.example".into(),
            port: 80,
        })),
    })
    .await
    .unwrap();
    let err = raw.port_forward(ReceiverStream::new(rx)).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("no-such-host.example"), "{err:?}");
    let err = round_trip(&mut raw, &id, 0, b"").await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("open.port"), "{err:?}");
    let (tx, rx) = mpsc::channel(2);
    tx.send(data(b"x".to_vec())).await.unwrap();
    let err = raw.port_forward(ReceiverStream::new(rx)).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("open"), "{err:?}");

    raw.close(proto::CloseRequest { sandbox_id: id }).await.expect("close");
    assert!(label.containers().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn megabytes_echo_both_ways_and_each_half_closes_on_its_own() {
    if testkit::engine() == ExecEngineKind::Docker {
        return;
    }
    let label = TestLabel::new();
    let server = no_network(&label);
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;
    // An echo server: each connection's bytes back until its EOF, then it closes.
    start(&mut raw, &id, "exec nc -ll -p 7000 -e cat").await;
    let payload: Vec<u8> = (0..8u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 24) as u8).collect();
    let mut echoed = None;
    for _ in 0..100 {
        let (tx, rx) = mpsc::channel(4);
        tx.send(open(&id, 7000)).await.unwrap();
        let Ok(response) = raw.port_forward(ReceiverStream::new(rx)).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let mut stream = response.into_inner();
        // The writer sends everything while the reader drains: the windows bound both sides.
        let sent = payload.clone();
        let writer = tokio::spawn(async move {
            for chunk in sent.chunks(100_000) {
                tx.send(data(chunk.to_vec())).await.unwrap();
            }
            // Dropping `tx` half-closes our side: cat sees EOF, echoes the rest and exits.
        });
        let (mut back, mut eof) = (Vec::new(), false);
        let read = tokio::time::timeout(Duration::from_secs(120), async {
            while let Some(m) = stream.message().await.expect("echo stream") {
                match m.message {
                    Some(Out::Data(d)) => back.extend(d),
                    Some(Out::Eof(_)) => eof = true,
                    _ => {}
                }
            }
        })
        .await;
        read.expect("the echo finished in time");
        writer.await.unwrap();
        echoed = Some((back, eof));
        break;
    }
    let (back, eof) = echoed.expect("nc listened");
    assert_eq!(back.len(), payload.len());
    assert!(back == payload, "the bytes came back unchanged and in order");
    assert!(eof);

    // Our half open, theirs closed: `eof` arrives and the call stays open until we close.
    exec(&mut raw, &id, "printf '#!/bin/sh\\necho closing\\n' > /tmp/closing && chmod +x /tmp/closing").await;
    start(&mut raw, &id, "exec nc -ll -p 7001 -e /tmp/closing").await;
    let mut done = false;
    for _ in 0..100 {
        let (tx, rx) = mpsc::channel(4);
        tx.send(open(&id, 7001)).await.unwrap();
        let Ok(response) = raw.port_forward(ReceiverStream::new(rx)).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let mut stream = response.into_inner();
        let mut got = Vec::new();
        loop {
            match stream.message().await.expect("stream").and_then(|m| m.message) {
                Some(Out::Opened(_)) => {}
                Some(Out::Data(d)) => got.extend(d),
                Some(Out::Eof(_)) => break,
                None => panic!("the call ended before eof"),
            }
        }
        assert_eq!(got, b"closing\n");
        let still_open = tokio::time::timeout(Duration::from_millis(500), stream.message()).await;
        assert!(still_open.is_err(), "the call waits for our half: {still_open:?}");
        drop(tx);
        let end = tokio::time::timeout(Duration::from_secs(10), stream.message()).await.expect("ends");
        assert!(matches!(end, Ok(None)), "both halves closed: the call ends OK ({end:?})");
        done = true;
        break;
    }
    assert!(done, "nc listened on 7001");

    // A caller that never reads a connection pouring bytes: the agent's credit stops the
    // sender, and the sandbox's other calls (on the same agent channel) go on promptly.
    exec(&mut raw, &id, "printf '#!/bin/sh\\nexec cat /dev/zero\\n' > /tmp/zeros && chmod +x /tmp/zeros")
        .await;
    start(&mut raw, &id, "exec nc -ll -p 7002 -e /tmp/zeros").await;
    let mut stalled = None;
    for _ in 0..100 {
        let (tx, rx) = mpsc::channel(4);
        tx.send(open(&id, 7002)).await.unwrap();
        if let Ok(response) = raw.port_forward(ReceiverStream::new(rx)).await {
            stalled = Some((tx, response.into_inner()));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _stalled = stalled.expect("nc listened on 7002");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let t = std::time::Instant::now();
    exec(&mut raw, &id, "true").await;
    let (body, _) = round_trip(&mut raw, &id, 7000, b"ping").await.expect("another forward");
    assert_eq!(body, b"ping");
    assert!(t.elapsed() < Duration::from_secs(10), "the stalled reader held others up: {:?}", t.elapsed());

    raw.close(proto::CloseRequest { sandbox_id: id }).await.expect("close");
    assert!(label.containers().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_docker_exec_engine_cannot_forward() {
    let label = TestLabel::new();
    let server = TestService::start_with(&label, None, |c| c.docker.exec.engine = ExecEngineKind::Docker);
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;
    let err = round_trip(&mut raw, &id, 80, b"").await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("exec.engine: docker"), "{err:?}");
    raw.close(proto::CloseRequest { sandbox_id: id }).await.expect("close");
    assert!(label.containers().is_empty());
}
