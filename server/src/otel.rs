//! OpenTelemetry traces (`server.tracing`), off unless an OTLP endpoint is configured.
//!
//! The `tracing` spans the server already makes (one per RPC in `service/`, the docker
//! commands of `docker/cli.rs`, creates, terminal sessions) are exported by
//! `tracing-opentelemetry` through the OTLP/gRPC exporter (on the tonic the service already
//! builds). [`TraceLayer`], outermost around the gRPC server, opens one server span per call,
//! continuing the caller's W3C `traceparent`/`tracestate` (gRPC metadata are HTTP/2 headers),
//! and writes its own context back into the request's headers, so the cluster relay
//! (`docker/swarm/forward.rs`, which passes headers on) makes the owning node's span a child of
//! the entry node's.
//!
//! Spans go to the SDK's batch processor: a bounded queue (`MAX_QUEUE`) drained by a thread of
//! its own. A call never waits on the collector. An export that fails is retried for up to
//! `EXPORT_TIMEOUT`, so a collector away that long loses nothing while the queue holds;
//! past the queue's bound new spans are dropped (counted by the SDK), never blocking.
//!
//! The agent protocol carries no trace context (it would cost bytes on every request for what
//! the server can record itself): the agent's timing lands as span events of the calling span,
//! recorded where its replies arrive (`agent.first_byte`, and `agent.spawn`/`agent.exit` from
//! the wall time the agent measured).

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use futures_util::future::Either;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::Layer;

use crate::config::TracingSection;

/// Spans waiting for export at most; past it new spans are dropped, calls never wait.
pub const MAX_QUEUE: usize = 4096;
/// How often a batch goes to the collector.
const EXPORT_EVERY: Duration = Duration::from_millis(500);
/// One export's bound, retries included (the export thread's, never a call's): a collector
/// away for less than this loses no span (while the queue holds them).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// The target of debug events meant for traces only (the log filter leaves them out).
pub const EVENTS: &str = "sandboxd::otel";

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether traces are exported (the hooks below do nothing otherwise).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The running exporter; [`Exporter::shutdown`] sends what is queued.
pub struct Exporter {
    provider: SdkTracerProvider,
}

/// The `tracing` layer that feeds the exporter.
pub type SpanLayer = Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync>;

/// The exporter and the `tracing` layer that feeds it, or `None` when `server.tracing` has no
/// endpoint. Must run inside the tokio runtime (the exporter's channel lives there).
pub fn start(config: &TracingSection) -> Result<Option<(Exporter, SpanLayer)>, String> {
    let Some(endpoint) = &config.otlp_endpoint else { return Ok(None) };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .with_retry_policy(
            opentelemetry_otlp::RetryPolicy::recommended()
                .with_max_retries(20)
                .with_initial_delay(Duration::from_millis(100))
                .with_max_delay(Duration::from_secs(1)),
        )
        .build()
        .map_err(|e| format!("server.tracing.otlp_endpoint {endpoint:?}: {e}"))?;
    let batches = BatchSpanProcessor::builder(exporter)
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_max_queue_size(MAX_QUEUE)
                .with_max_export_batch_size(512)
                .with_scheduled_delay(EXPORT_EVERY)
                .build(),
        )
        .build();
    let resource = Resource::builder()
        .with_service_name(config.service_name.clone())
        .with_attribute(KeyValue::new("host.name", hostname()))
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(batches)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(config.sampling_ratio))))
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("sandboxd");
    // Info spans (every RPC, creates, sessions), the docker commands (debug spans) and the
    // events meant for traces; nothing of other crates.
    let filter = Targets::new()
        .with_target("sandboxd", tracing::Level::INFO)
        .with_target("sandboxd::backends::docker::cli", tracing::Level::DEBUG)
        .with_target(EVENTS, tracing::Level::DEBUG);
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_filter(filter);
    ENABLED.store(true, Ordering::Relaxed);
    Ok(Some((Exporter { provider }, Box::new(layer))))
}

impl Exporter {
    /// Sends what is queued, waiting at most `within` (a collector that is down costs no more).
    pub fn shutdown(self, within: Duration) {
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let provider = self.provider;
        std::thread::spawn(move || {
            let _ = provider.shutdown();
            let _ = done_tx.send(());
        });
        let _ = done_rx.recv_timeout(within);
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default()
}

/// Sets attribute `key` on the current span (sandbox id, tenant, runtime, failure kind,
/// bytes); nothing when traces are off.
pub fn attribute(key: &'static str, value: impl Into<opentelemetry::Value>) {
    if enabled() {
        tracing::Span::current().set_attribute(key, value);
    }
}

/// Adds event `name` to the current span at `at` (now when `None`); nothing when traces are off.
pub fn event(name: &'static str, at: Option<SystemTime>, attributes: Vec<KeyValue>) {
    if enabled() {
        match at {
            Some(at) => tracing::Span::current().add_event_with_timestamp(name, at, attributes),
            None => tracing::Span::current().add_event(name, attributes),
        }
    }
}

// ----- W3C trace context in HTTP/2 headers ----------------------------------------------------

struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

struct HeaderInjector<'a>(&'a mut http::HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) =
            (http::HeaderName::from_bytes(key.as_bytes()), http::HeaderValue::from_str(&value))
        {
            self.0.insert(name, value);
        }
    }
}

/// The caller's trace context in `headers` (empty when there is none or it is malformed).
pub fn extract(headers: &http::HeaderMap) -> opentelemetry::Context {
    TraceContextPropagator::new().extract(&HeaderExtractor(headers))
}

/// Writes `span`'s context into `headers` as `traceparent`/`tracestate`, replacing the caller's.
pub fn inject(span: &tracing::Span, headers: &mut http::HeaderMap) {
    headers.remove("traceparent");
    headers.remove("tracestate");
    TraceContextPropagator::new().inject_context(&span.context(), &mut HeaderInjector(headers));
}

// ----- the transport layer --------------------------------------------------------------------

/// A tower layer around the whole gRPC server: one server span per call, continuing the
/// caller's trace. A pass-through when traces are off.
#[derive(Clone, Debug)]
pub struct TraceLayer {
    /// `None`: traces are off.
    on: Option<Arc<Node>>,
}

#[derive(Debug)]
struct Node {
    host: String,
    address: String,
}

impl TraceLayer {
    /// The layer of a server listening on `local` (`None`: a front-end's in-process calls);
    /// it does nothing while traces are off.
    pub fn new(local: Option<std::net::SocketAddr>) -> Self {
        let address = local.map_or_else(|| "in-process".to_string(), |addr| addr.to_string());
        let on = enabled().then(|| Arc::new(Node { host: hostname(), address }));
        Self { on }
    }
}

impl<S> tower_layer::Layer<S> for TraceLayer {
    type Service = TraceService<S>;
    fn layer(&self, inner: S) -> TraceService<S> {
        TraceService { inner, on: self.on.clone() }
    }
}

#[derive(Clone, Debug)]
pub struct TraceService<S> {
    inner: S,
    on: Option<Arc<Node>>,
}

type BoxFuture<T, E> = Pin<Box<dyn std::future::Future<Output = Result<T, E>> + Send>>;

impl<S, B> tower_service::Service<http::Request<B>> for TraceService<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = Either<S::Future, BoxFuture<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let Some(node) = &self.on else { return Either::Left(self.inner.call(request)) };
        let path = request.uri().path().trim_start_matches('/').to_string();
        let (service, method) = path.split_once('/').unwrap_or(("", &path));
        let span = tracing::info_span!(
            "grpc",
            otel.name = %path,
            otel.kind = "server",
            otel.status_code = tracing::field::Empty,
            otel.status_message = tracing::field::Empty,
            rpc.system = "grpc",
            rpc.service = %service,
            rpc.method = %method,
            rpc.grpc.status_code = tracing::field::Empty,
            node = %node.host,
            server.address = %node.address,
        );
        let _ = span.set_parent(extract(request.headers()));
        // A relay to the owning node (cluster mode) continues from this span.
        inject(&span, request.headers_mut());
        let future = span.in_scope(|| self.inner.call(request));
        Either::Right(Box::pin(async move {
            let response = future.instrument(span.clone()).await?;
            if let Some(code) = grpc_status(response.headers()) {
                record_status(&span, code);
                return Ok(response);
            }
            let (parts, body) = response.into_parts();
            let body = tonic::body::Body::new(TracedBody { inner: body, span });
            Ok(http::Response::from_parts(parts, body))
        }))
    }
}

fn grpc_status(headers: &http::HeaderMap) -> Option<i32> {
    headers.get("grpc-status")?.to_str().ok()?.parse().ok()
}

fn record_status(span: &tracing::Span, code: i32) {
    span.record("rpc.grpc.status_code", code);
    if code != 0 {
        span.record("otel.status_code", "ERROR");
        span.record("otel.status_message", sandboxd_proto::contract::code_name(tonic::Code::from_i32(code)));
    }
}

/// A response body that keeps its call's span open (and current) until the response ends:
/// a stream's span lasts as long as the stream.
struct TracedBody {
    inner: tonic::body::Body,
    span: tracing::Span,
}

impl http_body::Body for TracedBody {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        let _entered = this.span.enter();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(code) = frame.trailers_ref().and_then(grpc_status) {
                    record_status(&this.span, code);
                }
            }
            Poll::Ready(Some(Err(status))) => record_status(&this.span, status.code() as i32),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TraceContextExt;

    #[test]
    fn a_traceparent_is_read_and_a_malformed_one_ignored() {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".parse().unwrap(),
        );
        let cx = extract(&headers);
        let span = cx.span();
        let sc = span.span_context();
        assert!(sc.is_valid() && sc.is_remote() && sc.is_sampled());
        assert_eq!(sc.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");

        headers.insert("traceparent", "00-zz-00f067aa0ba902b7-01".parse().unwrap());
        assert!(!extract(&headers).span().span_context().is_valid());
    }
}
