//! OpenTelemetry traces from the binary (`server.tracing`), received by a real OTLP/gRPC
//! collector in the test (the `opentelemetry-proto` TraceService on tonic): a call made in a
//! caller's trace (the Rust client's `otel` feature carries the context as `traceparent`)
//! produces server spans in that trace, with the caller's span as parent and the handler's
//! and the docker commands' spans below; the agent's timing as span events; an unsampled
//! caller gets no spans. With the collector down, calls answer as fast as ever, and the spans
//! queued meanwhile arrive once it is back.

mod otlp;

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use opentelemetry::context::FutureExt;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use sandboxd_client::{spec, Client, Sandbox};
use testkit::images::BUSYBOX;
use testkit::server::TestServer;
use testkit::TestLabel;

use otlp::{caller, named, text, Collector};

const SANDBOXD: &str = env!("CARGO_BIN_EXE_sandboxd");

fn server(label: &TestLabel, endpoint: &str, service_name: &str) -> TestServer {
    server_with(label, endpoint, service_name, serde_json::json!({}))
}

/// The binary exporting to `endpoint`, with `extra` keys in its `server` section.
fn server_with(
    label: &TestLabel,
    endpoint: &str,
    service_name: &str,
    extra: serde_json::Value,
) -> TestServer {
    // The client's `otel` feature injects through the global propagator.
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    let mut section = serde_json::json!({"tracing": {
        "otlp_endpoint": endpoint, "sampling_ratio": 1.0, "service_name": service_name,
    }});
    section.as_object_mut().unwrap().extend(extra.as_object().cloned().unwrap_or_default());
    TestServer::launch(SANDBOXD, label).config(serde_json::json!({ "server": section })).start()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_trace_continues_through_rpc_handler_docker_and_agent() {
    let label = TestLabel::new();
    let collector = Collector::default();
    let (endpoint, _serving) = collector.serve_on_loopback().await;
    let service_name = format!("sandboxd-traces-{}", &label.value[..8]);
    // A tenant's calls: its name is an attribute of the call's span.
    let dir = tempfile::tempdir().unwrap();
    let tenant = format!("tr-{}", &label.value[..8]);
    let tenants = serde_json::json!({"tenants": [
        {"name": tenant, "key_sha256": sandboxd::auth::tenants::key_sha256("trace-key")},
    ]});
    let tenants_file = dir.path().join("tenants.json");
    std::fs::write(&tenants_file, tenants.to_string()).unwrap();
    let extra =
        serde_json::json!({"state_dir": dir.path().join("state"), "auth": {"tenants_file": tenants_file}});
    let server = server_with(&label, &endpoint, &service_name, extra);
    let client = Client::connect_with_token(server.url.clone(), "trace-key").await.expect("connect");

    let (create_cx, create_trace, create_parent) = caller(true);
    let sandbox = Sandbox::start(&client, spec(BUSYBOX)).with_context(create_cx).await.expect("create");
    let (unsampled_cx, unsampled_trace, _) = caller(false);
    sandbox.exec("true").with_context(unsampled_cx).await.expect("exec");
    let (exec_cx, exec_trace, exec_parent) = caller(true);
    let out = sandbox.exec("echo traced").with_context(exec_cx).await.expect("exec");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "traced");

    // Exec: the server span's parent is the caller's; the handler's span is its child and
    // carries the sandbox id; the agent's timing is there as events (agent engine).
    let spans = collector
        .trace_until(exec_trace, |s| {
            !named(s, "sandbox.v1.SandboxService/Exec").is_empty() && !named(s, "rpc").is_empty()
        })
        .await;
    assert!(spans.iter().all(|r| r.service == service_name), "{spans:#?}");
    let grpc = named(&spans, "sandbox.v1.SandboxService/Exec");
    assert_eq!(grpc.len(), 1, "one server span for the call: {spans:#?}");
    let grpc = grpc[0];
    assert_eq!(grpc.parent_span_id, exec_parent.to_bytes().to_vec(), "the caller's span is the parent");
    assert_eq!(grpc.kind, SpanKind::Server as i32);
    assert_eq!(text(&grpc.attributes, "rpc.method").as_deref(), Some("Exec"));
    assert_eq!(text(&grpc.attributes, "rpc.grpc.status_code").as_deref(), Some("0"));
    assert!(text(&grpc.attributes, "server.address").is_some_and(|a| a == server.addr), "{grpc:?}");
    assert_eq!(text(&grpc.attributes, "tenant").as_deref(), Some(tenant.as_str()), "{grpc:?}");
    let handler = named(&spans, "rpc");
    assert_eq!(handler.len(), 1, "{spans:#?}");
    assert_eq!(handler[0].parent_span_id, grpc.span_id, "the handler's span is the call's child");
    assert_eq!(text(&handler[0].attributes, "sandbox_id").as_deref(), Some(sandbox.id()));
    if testkit::engine() == sandboxd::config::ExecEngineKind::Agent {
        let events: Vec<&str> = handler[0].events.iter().map(|e| e.name.as_str()).collect();
        for event in ["agent.first_byte", "agent.spawn", "agent.exit"] {
            assert!(events.contains(&event), "{event} in {events:?}");
        }
        let exit = handler[0].events.iter().find(|e| e.name == "agent.exit").unwrap();
        assert_eq!(text(&exit.attributes, "exit_code").as_deref(), Some("0"));
    }

    // Create: the docker commands are spans of the same trace, every span's parent is in the
    // trace (one tree), its root's parent the caller's span.
    let spans = collector
        .trace_until(create_trace, |s| {
            !named(s, "sandbox.v1.SandboxService/Create").is_empty() && !named(s, "docker").is_empty()
        })
        .await;
    let grpc = named(&spans, "sandbox.v1.SandboxService/Create");
    assert_eq!(grpc.len(), 1, "{spans:#?}");
    assert_eq!(grpc[0].parent_span_id, create_parent.to_bytes().to_vec());
    assert!(!named(&spans, "docker").is_empty(), "docker commands are spans: {spans:#?}");
    let ids: HashSet<&Vec<u8>> = spans.iter().map(|r| &r.span.span_id).collect();
    for r in &spans {
        if r.span.span_id != grpc[0].span_id {
            assert!(ids.contains(&r.span.parent_span_id), "{} is in the tree: {spans:#?}", r.span.name);
        }
    }

    // The unsampled caller's exec (made before the sampled one) left no span.
    assert!(collector.trace(unsampled_trace).is_empty(), "an unsampled traceparent is respected");
    sandbox.stop().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_do_not_wait_for_a_collector_that_is_down_and_its_spans_arrive_later() {
    let label = TestLabel::new();
    // A port nothing listens on (yet).
    let reserved = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = reserved.local_addr().unwrap();
    drop(reserved);
    let server = server(&label, &format!("http://{addr}"), "sandboxd-collector-down");
    let client = Client::connect(server.addr.clone()).await.expect("connect");

    let (cx, trace, _) = caller(true);
    let sandbox = Sandbox::start(&client, spec(BUSYBOX)).with_context(cx.clone()).await.expect("create");
    let mut slowest = Duration::ZERO;
    const EXECS: usize = 20;
    for i in 0..EXECS {
        let started = Instant::now();
        let out = sandbox.exec(&format!("echo {i}")).with_context(cx.clone()).await.expect("exec");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), i.to_string());
        slowest = slowest.max(started.elapsed());
    }
    // An export that failed is retried for 10 s: a call that waited on it would take that long.
    assert!(slowest < Duration::from_secs(3), "an exec took {slowest:?} with the collector down");

    // The collector comes back: what was queued and retried arrives, none lost.
    let collector = Collector::default();
    let listener = tokio::net::TcpListener::bind(addr).await.expect("the collector's port again");
    let _serving = collector.serve(listener);
    let spans =
        collector.trace_until(trace, |s| named(s, "sandbox.v1.SandboxService/Exec").len() >= EXECS).await;
    let by_name: BTreeMap<&str, usize> = spans.iter().fold(BTreeMap::new(), |mut m, r| {
        *m.entry(r.span.name.as_str()).or_default() += 1;
        m
    });
    assert_eq!(by_name.get("sandbox.v1.SandboxService/Exec"), Some(&EXECS), "{by_name:?}");
    assert_eq!(by_name.get("sandbox.v1.SandboxService/Create"), Some(&1), "{by_name:?}");
    sandbox.stop().await.expect("close");
}

/// Exec latency with traces off, and on (every call sampled, the collector up): the cost of
/// tracing, printed (`cargo test -p sandboxd --test traces figures -- --ignored --nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn figures() {
    const N: usize = 200;
    let label = TestLabel::new();
    let collector = Collector::default();
    let (endpoint, _serving) = collector.serve_on_loopback().await;
    let off = TestServer::launch(SANDBOXD, &label).start();
    let on = server(&label, &endpoint, "sandboxd-figures");
    for (name, server) in [("off", &off), ("on", &on)] {
        let client = Client::connect(server.addr.clone()).await.expect("connect");
        let sandbox = Sandbox::start(&client, spec(BUSYBOX)).await.expect("create");
        for _ in 0..20 {
            sandbox.exec("true").await.unwrap();
        }
        let mut took = Vec::with_capacity(N);
        for _ in 0..N {
            let (cx, _, _) = caller(true);
            let started = Instant::now();
            sandbox.exec("true").with_context(cx).await.unwrap();
            took.push(started.elapsed());
        }
        took.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        eprintln!(
            "exec with tracing {name}: median {:.2} ms, p90 {:.2} ms ({N} execs)",
            ms(took[N / 2]),
            ms(took[N * 9 / 10])
        );
        sandbox.stop().await.expect("close");
    }
}
