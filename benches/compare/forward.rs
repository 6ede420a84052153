//! Port-forward rows of the comparison: an HTTP GET to busybox httpd inside the sandbox on a new
//! connection per request (`PortForward`: open, request, half-close, response, end), and a 64-byte
//! echo on a connection kept open, each beside `docker exec -i … nc` doing the same from inside.
//! `SANDBOXD_BENCH_ONLY=port-forward` runs only these.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{close, create, exec, median, Client, Row};
use sandboxd_proto::v1 as pb;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

type Out = pb::port_forward_response::Message;

const GET: &[u8] = b"GET /index.html HTTP/1.0\r\n\r\n";

fn open(id: &str, port: u32) -> pb::PortForwardRequest {
    let open = pb::PortForwardOpen { sandbox_id: id.into(), host: String::new(), port };
    pb::PortForwardRequest { message: Some(pb::port_forward_request::Message::Open(open)) }
}

fn data(bytes: &[u8]) -> pb::PortForwardRequest {
    pb::PortForwardRequest { message: Some(pb::port_forward_request::Message::Data(bytes.to_vec())) }
}

/// One GET on a new forwarded connection; the response's length.
async fn forwarded_get(client: &mut Client, id: &str) -> Option<usize> {
    let (tx, rx) = mpsc::channel(4);
    tx.send(open(id, 8080)).await.ok()?;
    tx.send(data(GET)).await.ok()?;
    drop(tx);
    let mut stream = client.port_forward(ReceiverStream::new(rx)).await.ok()?.into_inner();
    let mut n = 0;
    while let Some(m) = stream.message().await.ok()? {
        if let Some(Out::Data(d)) = m.message {
            n += d.len();
        }
    }
    Some(n)
}

/// `docker exec -i ID nc 127.0.0.1 PORT` fed `input`; its output's length.
fn raw_nc(id: &str, port: u16, input: &[u8]) -> usize {
    let mut child = Command::new("docker")
        .args(["exec", "-i", id, "nc", "127.0.0.1", &port.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("docker exec nc");
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap().stdout.len()
}

async fn start(client: &mut Client, id: &str, command: &str) {
    let req =
        pb::StartProcessRequest { sandbox_id: id.into(), command: command.into(), ..Default::default() };
    client.start_process(req).await.expect("start");
}

pub async fn rows(client: &mut Client, runs: usize) -> Vec<Row> {
    let id = create(client).await;
    exec(client, &id, "mkdir -p /tmp/www && head -c 1024 /dev/zero | tr '\\0' x > /tmp/www/index.html").await;
    start(client, &id, "exec httpd -f -p 127.0.0.1:8080 -h /tmp/www").await;
    start(client, &id, "exec nc -ll -p 7000 -e cat").await;
    let mut ready = false;
    for _ in 0..100 {
        if forwarded_get(client, &id).await.is_some_and(|n| n > 1024) {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready, "httpd answered through the forward");
    let mut rows = Vec::new();

    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    for _ in 0..runs * 3 {
        let t = Instant::now();
        assert!(forwarded_get(client, &id).await.unwrap() > 1024);
        ours.push(t.elapsed());
        let t = Instant::now();
        assert!(raw_nc(&id, 8080, GET) > 1024);
        raw.push(t.elapsed());
    }
    rows.push(Row {
        op: "port-forward HTTP GET, new connection (vs docker exec -i … nc)".into(),
        ours: median(ours),
        raw: median(raw),
    });

    // 64 bytes echoed on one open connection (the raw side has no connection to keep: one
    // `docker exec … nc` per round trip is what a shell-only caller pays).
    let (tx, rx) = mpsc::channel(4);
    tx.send(open(&id, 7000)).await.unwrap();
    let mut stream = client.port_forward(ReceiverStream::new(rx)).await.expect("forward").into_inner();
    assert!(matches!(stream.message().await.unwrap().and_then(|m| m.message), Some(Out::Opened(_))));
    let payload = [7u8; 64];
    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    for _ in 0..runs * 10 {
        let t = Instant::now();
        tx.send(data(&payload)).await.unwrap();
        let mut got = 0;
        while got < payload.len() {
            match stream.message().await.unwrap().and_then(|m| m.message) {
                Some(Out::Data(d)) => got += d.len(),
                other => panic!("echo: {other:?}"),
            }
        }
        ours.push(t.elapsed());
    }
    drop(tx);
    for _ in 0..runs * 3 {
        let t = Instant::now();
        assert_eq!(raw_nc(&id, 7000, &payload), payload.len());
        raw.push(t.elapsed());
    }
    rows.push(Row {
        op: "port-forward 64 B round trip, open connection (vs docker exec -i … nc)".into(),
        ours: median(ours),
        raw: median(raw),
    });
    close(client, &id).await;
    rows
}
