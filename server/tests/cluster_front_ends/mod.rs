//! The E2B endpoint and the console's terminal on a cluster node, driving a sandbox another
//! node owns: their calls enter the served stack (`service/calls.rs`), so the relay sends them
//! to the owner as it sends a gRPC client's.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use testkit::cluster::{ClusterNode, TestCluster};
use tokio_tungstenite::tungstenite::Message;

use crate::e2b_http::{output, E2b, Made};

/// The E2B and console ports inside each node's namespace.
pub const E2B_PORT: u16 = 49982;
pub const CONSOLE_PORT: u16 = 8088;

/// The nodes' `server` section: both front-ends on, the `base` template the test image.
pub fn config(image: &str) -> String {
    format!(
        "server:\n  e2b:\n    listen: 0.0.0.0:{E2B_PORT}\n    templates:\n      base: {image}\n  console:\n    listen: 0.0.0.0:{CONSOLE_PORT}\n"
    )
}

/// `127.0.0.1:PORT` on the host carried to `port` in `node`'s namespace (as `cluster-up.sh`
/// carries the gRPC port); the forwarder is killed on drop.
pub struct Forward {
    pub addr: String,
    child: Child,
}

impl Forward {
    pub fn open(node: &ClusterNode, port: u16) -> Forward {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let host_port = free.local_addr().unwrap().port();
        drop(free);
        let child = Command::new("socat")
            .arg(format!("TCP-LISTEN:{host_port},bind=127.0.0.1,reuseaddr,fork"))
            .arg(format!("EXEC:nsenter --net=/run/netns/{} socat STDIO TCP\\:127.0.0.1\\:{port}", node.name))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("socat");
        let addr = format!("127.0.0.1:{host_port}");
        let ready = testkit::wait::wait_until(Duration::from_secs(10), || {
            std::net::TcpStream::connect(&addr).is_ok()
        });
        assert!(ready.is_some(), "the forward to {}:{port} did not listen", node.name);
        Forward { addr, child }
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Commands, files and a terminal through node `entry`'s E2B endpoint (envd's filesystem calls
/// and process listing need the agent, which a Swarm task lacks), and a terminal through its
/// console, all on sandbox `far` (owned by another node); `token` is the cluster's key.
pub async fn drive(cluster: &TestCluster, entry: usize, far: &str, token: &str) {
    let e2b_port = Forward::open(&cluster.nodes[entry], E2B_PORT);
    let e2b = E2b::new(e2b_port.addr.clone());
    // envd's calls as the SDK makes them once it has a sandbox (`Sandbox.connect`): the key.
    let made = Made { id: far.to_string(), token: token.to_string() };

    let ran = e2b.run(&made, "echo e2b-$((40+2)) on $(hostname)", false, None).await;
    assert!(output(&ran).contains("e2b-42"), "process.Start through node {entry}: {ran:?}");
    let written = e2b.write(&made, "/tmp/e2b-far.txt", b"far away").await;
    assert_eq!(written.status, 200, "POST /files: {}", written.text());
    let read = e2b.read(&made, "/tmp/e2b-far.txt").await;
    assert_eq!((read.status, read.text().as_str()), (200, "far away"));
    let pty = e2b.run(&made, "stty size; echo pty-$((40+2))", true, None).await;
    let out = output(&pty);
    assert!(out.contains("pty-42") && out.contains("24 80"), "a terminal through node {entry}: {out:?}");

    let console_port = Forward::open(&cluster.nodes[entry], CONSOLE_PORT);
    let (mut socket, _) = tokio_tungstenite::connect_async(format!("ws://{}/ws/terminal", console_port.addr))
        .await
        .expect("the console's terminal socket");
    let hello = serde_json::json!({"token": token, "sandbox_id": far, "rows": 30, "cols": 100});
    socket.send(Message::text(hello.to_string())).await.unwrap();
    socket.send(Message::binary(b"stty size; echo console-$((40+2)); exit 5\n".to_vec())).await.unwrap();
    let mut seen = Vec::new();
    let mut exit = None;
    let read = async {
        while let Some(message) = socket.next().await {
            match message.expect("a terminal message") {
                Message::Binary(bytes) => seen.extend_from_slice(&bytes),
                Message::Text(text) => {
                    let value: serde_json::Value = serde_json::from_str(text.as_str()).unwrap();
                    assert!(value.get("error").is_none(), "the console's terminal: {value}");
                    if let Some(code) = value.get("exit") {
                        exit = code.as_i64();
                        break;
                    }
                }
                Message::Close(_) => break,
                _ => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), read).await.expect("the console's terminal within 60 s");
    let seen = String::from_utf8_lossy(&seen);
    assert!(seen.contains("console-42") && seen.contains("30 100"), "{seen:?}");
    assert_eq!(exit, Some(5), "{seen:?}");
}
