#![allow(dead_code)] // each suite uses its part
//! A real OTLP/gRPC collector for the trace suites: the `opentelemetry-proto` TraceService on
//! tonic, keeping every span exported to it; and a caller's context to start traces from.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::Span;

/// One span as received, with its resource's `service.name`.
#[derive(Debug, Clone)]
pub struct Received {
    pub service: String,
    pub span: Span,
}

/// The collector: keeps every span exported to it.
#[derive(Clone, Default)]
pub struct Collector {
    spans: Arc<Mutex<Vec<Received>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap();
        for resource_spans in request.into_inner().resource_spans {
            let attributes = resource_spans.resource.map(|r| r.attributes).unwrap_or_default();
            let service = text(&attributes, "service.name").unwrap_or_default();
            for scope in resource_spans.scope_spans {
                spans.extend(scope.spans.into_iter().map(|span| Received { service: service.clone(), span }));
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

impl Collector {
    /// Serves on a fresh loopback port: its endpoint (`http://127.0.0.1:PORT`) and the task.
    pub async fn serve_on_loopback(&self) -> (String, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        (endpoint, self.serve(listener))
    }

    /// Serves on `listener` until the returned task is aborted.
    pub fn serve(&self, listener: tokio::net::TcpListener) -> tokio::task::JoinHandle<()> {
        let service = TraceServiceServer::new(self.clone());
        tokio::spawn(async move {
            let incoming = tonic::transport::server::TcpIncoming::from(listener);
            let _ =
                tonic::transport::Server::builder().add_service(service).serve_with_incoming(incoming).await;
        })
    }

    /// The spans of trace `trace`, once `done` holds for them (or after 30 s).
    pub async fn trace_until(&self, trace: TraceId, done: impl Fn(&[Received]) -> bool) -> Vec<Received> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let spans = self.trace(trace);
            if done(&spans) || Instant::now() > deadline {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn trace(&self, trace: TraceId) -> Vec<Received> {
        let id = trace.to_bytes().to_vec();
        self.spans.lock().unwrap().iter().filter(|r| r.span.trace_id == id).cloned().collect()
    }
}

pub fn text(attributes: &[KeyValue], key: &str) -> Option<String> {
    attributes.iter().find(|kv| kv.key == key).and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
        Value::StringValue(s) => Some(s.clone()),
        Value::IntValue(i) => Some(i.to_string()),
        other => Some(format!("{other:?}")),
    })
}

/// A caller's context: a remote span of a fresh trace, sampled or not.
pub fn caller(sampled: bool) -> (opentelemetry::Context, TraceId, SpanId) {
    let trace = TraceId::from_bytes(*uuid::Uuid::new_v4().as_bytes());
    let span = SpanId::from_bytes(uuid::Uuid::new_v4().as_bytes()[..8].try_into().unwrap());
    let flags = if sampled { TraceFlags::SAMPLED } else { TraceFlags::default() };
    let context = SpanContext::new(trace, span, flags, true, TraceState::default());
    (opentelemetry::Context::new().with_remote_span_context(context), trace, span)
}

pub fn named<'a>(spans: &'a [Received], name: &str) -> Vec<&'a Span> {
    spans.iter().map(|r| &r.span).filter(|s| s.name == name).collect()
}
