//! The E2B endpoint enters the same stack as a gRPC call (`service/calls.rs`): its calls are
//! checked by the gate, counted in the RPC metrics, traced (continuing the E2B request's
//! `traceparent`) and audited by the RPC table, with no front-end code naming an RPC. Run
//! against the binary with `--metrics-listen`, an OTLP collector and an audit file.

mod e2b_http;
mod otlp;

use std::time::Duration;

use opentelemetry::trace::TraceId;
use testkit::images::BUSYBOX;
use testkit::metrics::{rpc, sample};
use testkit::server::{scrape, TestServer};
use testkit::TestLabel;

use e2b_http::{output, traceparent, E2b};
use otlp::{named, Collector};

const SANDBOXD: &str = env!("CARGO_BIN_EXE_sandboxd");
const KEY: &str = "e2b-call-path-key";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2b_calls_pass_the_gate_metrics_traces_and_audit_of_the_rpc_table() {
    let label = TestLabel::new();
    let collector = Collector::default();
    let (endpoint, _serving) = collector.serve_on_loopback().await;
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    let server = TestServer::launch(SANDBOXD, &label)
        .token(Some(KEY))
        .flags(&["--metrics-listen", "127.0.0.1:0"])
        .config(serde_json::json!({"server": {
            "audit": audit,
            "e2b": {"listen": "127.0.0.1:0", "templates": {"base": BUSYBOX}},
            "tracing": {
                "otlp_endpoint": endpoint,
                "sampling_ratio": 1.0,
                "service_name": format!("sandboxd-e2b-{}", &label.value[..8]),
            },
        }}))
        .start();
    let e2b = E2b::new(server.e2b_addr.clone().expect("the E2B endpoint's line"));
    let metrics = server.metrics_addr.clone().unwrap();

    // The gate in the stack: a wrong key is the gRPC API's UNAUTHENTICATED, as HTTP 401.
    let refused =
        e2b.call("POST", "/sandboxes", &[("x-api-key", "wrong".into())], "application/json", "{}").await;
    assert_eq!(refused.status, 401, "{}", refused.text());

    let (create_parent, create_trace, create_span) = traceparent();
    let made = e2b.create(KEY, "base", Some(&create_parent)).await;
    let written = e2b.write(&made, "/tmp/e2b.txt", b"through the stack").await;
    assert_eq!(written.status, 200, "{}", written.text());
    let read = e2b.read(&made, "/tmp/e2b.txt").await;
    assert_eq!(read.text(), "through the stack");
    let (run_parent, run_trace, run_span) = traceparent();
    let ran = e2b.run(&made, "echo ran-$((40+2))", false, Some(&run_parent)).await;
    assert!(output(&ran).contains("ran-42"), "{ran:?}");
    assert_eq!(e2b.kill(KEY, &made.id).await.status, 204);

    // Metrics: each E2B call counted as the RPC it made, exactly (no gRPC client called).
    let counted = testkit::wait::until(Duration::from_secs(10), "the E2B calls in the RPC metrics", || {
        let metrics = metrics.clone();
        async move {
            let text = tokio::task::spawn_blocking(move || scrape(&metrics)).await.unwrap();
            let counts: Vec<(&str, f64)> = ["Create", "Grant", "Upload", "Download", "Pty", "Close"]
                .into_iter()
                .map(|m| (m, sample(&text, &rpc(m, "OK"))))
                .collect();
            if counts.iter().all(|(_, n)| *n == 1.0) {
                Ok(text)
            } else {
                Err(format!("{counts:?}"))
            }
        }
    })
    .await;
    assert_eq!(sample(&counted, &rpc("Create", "UNAUTHENTICATED")), 1.0, "the refused create is counted too");

    // Traces: the RPC's server span continues the E2B request's trace, its parent the caller's.
    for (trace, parent, method) in [(create_trace, create_span, "Create"), (run_trace, run_span, "Pty")] {
        let name = format!("sandbox.v1.SandboxService/{method}");
        let trace = TraceId::from_hex(&trace).unwrap();
        let spans = collector.trace_until(trace, |s| !named(s, &name).is_empty()).await;
        let span = named(&spans, &name)[0];
        assert_eq!(hex(&span.parent_span_id), parent, "{name}'s parent is the E2B caller's span");
    }

    // Audit: one line per mutating call, from the table (Status, Download: none); the write's
    // `Exec` hands the uploaded file to the sandbox's user (e2b/owners.rs).
    let lines = std::fs::read_to_string(&audit).expect("the audit log");
    let methods: Vec<String> = lines
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["method"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(methods, ["Create", "Grant", "Upload", "Exec", "Pty", "Close"], "{lines}");
    let close: serde_json::Value = serde_json::from_str(lines.lines().last().unwrap()).unwrap();
    assert_eq!(close["sandbox_id"], made.id.as_str());
    assert_eq!(close["outcome"], "OK");
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
