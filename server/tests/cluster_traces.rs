//! One trace across the test cluster (`scripts/cluster-up.sh`, 2 nodes, `server.tracing` on
//! every node): a call made through the node that does not own the sandbox is the entry
//! node's server span (parent: the client's span), the owning node's server span (parent: the
//! entry node's, carried by the relay), and below it the handler's span with the agent's
//! timing (or the docker command's span). The collector runs in the test, listening inside node 1's network namespace (the
//! nodes cannot reach the host's loopback).

mod otlp;

use std::os::fd::AsRawFd;
use std::path::Path;

use opentelemetry::context::FutureExt;
use sandboxd_client::{spec, Sandbox};
use testkit::cluster::TestCluster;
use testkit::images;

use otlp::{caller, named, text, Collector};

/// Node 1's address in the cluster's own network (`cluster-lib.sh`'s `node_addr 1`).
const NODE1: &str = "10.231.0.11";

/// A listener on `addr`, made inside network namespace `netns` (a thread that enters it; the
/// socket stays in that namespace).
fn listen_in(netns: &str, addr: std::net::SocketAddr) -> std::net::TcpListener {
    let path = format!("/run/netns/{netns}");
    std::thread::spawn(move || {
        let ns = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        // SAFETY: setns on this thread only, with a namespace file descriptor we own.
        let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
        let listener = std::net::TcpListener::bind(addr).expect("bind the collector in the node's namespace");
        listener.set_nonblocking(true).unwrap();
        listener
    })
    .join()
    .expect("the namespace thread")
}

#[test]
fn a_call_through_another_node_is_one_trace_client_entry_owner_agent() {
    // A port for the collector: nothing else listens in node 1's fresh namespace.
    let port = 20_000 + (uuid::Uuid::new_v4().as_u128() % 20_000) as u16;
    let config = format!(
        "server:\n  tracing:\n    otlp_endpoint: http://{NODE1}:{port}\n    service_name: sandboxd-cluster\n"
    );
    let cluster = TestCluster::start(
        2,
        Path::new(env!("CARGO_BIN_EXE_sandboxd")),
        &[("SANDBOXD_CLUSTER_IMAGES", images::BUSYBOX), ("SANDBOXD_CLUSTER_CONFIG", &config)],
    );
    let listener = listen_in(&cluster.nodes[0].name, format!("{NODE1}:{port}").parse().unwrap());
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let collector = Collector::default();
        let _serving = collector.serve(tokio::net::TcpListener::from_std(listener).unwrap());
        let clients = cluster.clients().await;
        let sandbox = Sandbox::start(&clients[0], spec(images::BUSYBOX)).await.expect("create");

        // One exec through each node: one of them is not the owner and relays.
        let mut traces = Vec::new();
        for client in &clients {
            let (cx, trace, parent) = caller(true);
            let on = Sandbox::connect(client, sandbox.id()).await.expect("connect");
            let out = on.exec("echo relayed").with_context(cx).await.expect("exec");
            assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "relayed");
            traces.push((trace, parent));
        }
        let mut relayed = 0;
        for (trace, client_span) in traces {
            // Each node exports on its own schedule: wait for the entry's span (the client's
            // child) and the owner's span the handler runs under, whichever node sends first.
            let client = client_span.to_bytes().to_vec();
            let spans = collector
                .trace_until(trace, |s| {
                    let servers = named(s, "sandbox.v1.SandboxService/Exec");
                    servers.iter().any(|x| x.parent_span_id == client)
                        && named(s, "rpc")
                            .iter()
                            .any(|h| servers.iter().any(|x| x.span_id == h.parent_span_id))
                })
                .await;
            let servers = named(&spans, "sandbox.v1.SandboxService/Exec");
            let entry = servers
                .iter()
                .find(|s| s.parent_span_id == client_span.to_bytes().to_vec())
                .unwrap_or_else(|| panic!("a server span under the client's: {spans:#?}"));
            let handler = named(&spans, "rpc");
            assert_eq!(handler.len(), 1, "one handler, on the owner: {spans:#?}");
            assert_eq!(text(&handler[0].attributes, "sandbox_id").as_deref(), Some(sandbox.id()));
            let owner = match servers.len() {
                1 => *entry,
                2 => {
                    relayed += 1;
                    let owner = servers.iter().find(|s| s.span_id != entry.span_id).unwrap();
                    assert_eq!(owner.parent_span_id, entry.span_id, "the owner's span is the entry's child");
                    assert_ne!(
                        text(&owner.attributes, "server.address"),
                        text(&entry.attributes, "server.address"),
                        "two nodes"
                    );
                    *owner
                }
                n => panic!("{n} server spans: {spans:#?}"),
            };
            assert_eq!(handler[0].parent_span_id, owner.span_id, "the handler runs under the owner's span");
            // The work itself, on the owner, under the handler: the agent's timing as events, or
            // (a sandbox the agent cannot reach) the `docker exec` span.
            let events: Vec<&str> = handler[0].events.iter().map(|e| e.name.as_str()).collect();
            let docker_below = named(&spans, "docker").iter().any(|d| d.parent_span_id == handler[0].span_id);
            assert!(
                (events.contains(&"agent.exit") && events.contains(&"agent.spawn")) || docker_below,
                "the agent's events or a docker span under the handler: {spans:#?}"
            );
        }
        assert_eq!(relayed, 1, "exactly one of the two nodes relayed to the owner");
        sandbox.stop().await.expect("close");
    });
    assert!(cluster.down(), "the cluster is removed");
}
