//! Prometheus metrics, served as OpenMetrics text on `--metrics-listen`.
//!
//! One process-wide registry (like Prometheus's default registry): the docker layer, the
//! service and the transport each add to it with a one-line hook, and the provider needs no
//! handle threaded through it. `prometheus-client` is the Prometheus project's own Rust crate.
//!
//! The transport layer ([`RpcLayer`]) sees every call's method, final gRPC code (from the
//! trailers, or the headers of a trailers-only answer) and duration; it is also where a failed
//! call is logged, once, with its code and message.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RpcLabels {
    pub service: String,
    pub method: String,
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabels {
    pub service: String,
    pub method: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CommandLabels {
    pub command: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorTypeLabels {
    pub error_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DirectionLabels {
    pub direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SandboxLabels {
    pub sandbox_id: String,
}

/// A sandbox and the OCI runtime it runs on.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SandboxRuntimeLabels {
    pub sandbox_id: String,
    pub runtime: String,
}

/// Per-sandbox usage gauges (`server.metrics.per_sandbox`), refreshed by [`crate::core::usage_metrics`].
#[derive(Default)]
pub struct SandboxUsage {
    /// `sandboxd_sandbox_runtime_info{sandbox_id, runtime} 1`: the OCI runtime each runs on.
    pub runtime_info: Family<SandboxRuntimeLabels, Gauge>,
    /// The runtime each series above was set with, to remove it.
    runtimes: std::sync::Mutex<std::collections::HashMap<String, String>>,
    pub cpu_seconds: Family<SandboxLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub memory_bytes: Family<SandboxLabels, Gauge>,
    pub memory_limit_bytes: Family<SandboxLabels, Gauge>,
    pub pids: Family<SandboxLabels, Gauge>,
    pub network_rx_bytes: Family<SandboxLabels, Gauge>,
    pub network_tx_bytes: Family<SandboxLabels, Gauge>,
    pub block_read_bytes: Family<SandboxLabels, Gauge>,
    pub block_write_bytes: Family<SandboxLabels, Gauge>,
}

impl SandboxUsage {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "sandbox_cpu_usage_seconds",
            "CPU time a sandbox used (Stats)",
            self.cpu_seconds.clone(),
        );
        let gauges = [
            (
                "sandbox_memory_usage_bytes",
                "Memory a sandbox uses, page cache left out (Stats)",
                &self.memory_bytes,
            ),
            (
                "sandbox_memory_limit_bytes",
                "A sandbox's memory cap, or the host's memory",
                &self.memory_limit_bytes,
            ),
            ("sandbox_pids", "Processes and threads in a sandbox", &self.pids),
            (
                "sandbox_network_rx_bytes",
                "Bytes a sandbox received, loopback left out",
                &self.network_rx_bytes,
            ),
            ("sandbox_network_tx_bytes", "Bytes a sandbox sent, loopback left out", &self.network_tx_bytes),
            ("sandbox_block_read_bytes", "Bytes a sandbox read from block devices", &self.block_read_bytes),
            ("sandbox_block_write_bytes", "Bytes a sandbox wrote to block devices", &self.block_write_bytes),
        ];
        for (name, help, family) in gauges {
            registry.register(name, help, family.clone());
        }
        registry.register(
            "sandbox_runtime_info",
            "The OCI runtime a sandbox runs on (runc, runsc), as a label; always 1",
            self.runtime_info.clone(),
        );
    }

    /// Says which runtime `sandbox_id` runs on (`""`: not recorded).
    pub fn set_runtime(&self, sandbox_id: &str, runtime: &str) {
        let mut runtimes = self.runtimes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = runtimes.insert(sandbox_id.to_string(), runtime.to_string()) {
            if old != runtime {
                self.runtime_info
                    .remove(&SandboxRuntimeLabels { sandbox_id: sandbox_id.to_string(), runtime: old });
            }
        }
        let key = SandboxRuntimeLabels { sandbox_id: sandbox_id.to_string(), runtime: runtime.to_string() };
        self.runtime_info.get_or_create(&key).set(1);
    }

    /// Sets every gauge of `sandbox_id` from one reading.
    pub fn set(&self, sandbox_id: &str, s: &crate::core::stats::SandboxStats) {
        let key = SandboxLabels { sandbox_id: sandbox_id.to_string() };
        let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.cpu_seconds.get_or_create(&key).set(s.cpu_usage_ns as f64 / 1e9);
        self.memory_bytes.get_or_create(&key).set(int(s.memory_usage_bytes));
        self.memory_limit_bytes.get_or_create(&key).set(int(s.memory_limit_bytes));
        self.pids.get_or_create(&key).set(int(s.pids));
        self.network_rx_bytes.get_or_create(&key).set(int(s.network_rx_bytes));
        self.network_tx_bytes.get_or_create(&key).set(int(s.network_tx_bytes));
        self.block_read_bytes.get_or_create(&key).set(int(s.block_read_bytes));
        self.block_write_bytes.get_or_create(&key).set(int(s.block_write_bytes));
    }

    /// Drops every gauge of `sandbox_id` (it is gone).
    pub fn remove(&self, sandbox_id: &str) {
        let runtime = self.runtimes.lock().unwrap_or_else(|e| e.into_inner()).remove(sandbox_id);
        if let Some(runtime) = runtime {
            self.runtime_info.remove(&SandboxRuntimeLabels { sandbox_id: sandbox_id.to_string(), runtime });
        }
        let key = SandboxLabels { sandbox_id: sandbox_id.to_string() };
        self.cpu_seconds.remove(&key);
        for family in [
            &self.memory_bytes,
            &self.memory_limit_bytes,
            &self.pids,
            &self.network_rx_bytes,
            &self.network_tx_bytes,
            &self.block_read_bytes,
            &self.block_write_bytes,
        ] {
            family.remove(&key);
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TenantLabels {
    pub tenant: String,
}

impl TenantLabels {
    pub fn of(tenant: &str) -> Self {
        Self { tenant: tenant.to_string() }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub state: String,
}

/// A warm pool: its owner (`""`: the operator's and the config file's) and name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    pub tenant: String,
    pub pool: String,
}

/// A gauge of a fractional quantity (CPUs reserved).
pub type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;
/// A counter of a fractional quantity (seconds used).
pub type FloatCounter = Counter<f64, std::sync::atomic::AtomicU64>;

fn seconds_histogram() -> Histogram {
    // 1 ms .. ~33 s
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// Every metric sandboxd exports.
pub struct Metrics {
    registry: Registry,
    pub rpc_requests: Family<RpcLabels, Counter>,
    pub rpc_duration: Family<MethodLabels, Histogram, fn() -> Histogram>,
    pub sandboxes_live: Gauge,
    pub creates_in_progress: Gauge,
    pub pty_sessions: Gauge,
    pub docker_duration: Family<CommandLabels, Histogram, fn() -> Histogram>,
    pub permit_wait: Histogram,
    pub exec_results: Family<ErrorTypeLabels, Counter>,
    /// Failures by kind (`FailureKind`'s reason): failed calls and failed exec results.
    pub failures: Family<FailureLabels, Counter>,
    pub bytes: Family<DirectionLabels, Counter>,
    pub sandbox_usage: SandboxUsage,
    /// Per tenant (only with `server.auth.tenants_file`): sandboxes, CPUs and memory reserved
    /// (from the daemon, refreshed every few seconds), execs in flight and creates (this process).
    pub tenant_sandboxes: Family<TenantLabels, Gauge>,
    pub tenant_cpus: Family<TenantLabels, FloatGauge>,
    pub tenant_memory_mib: Family<TenantLabels, Gauge>,
    pub tenant_execs_in_flight: Family<TenantLabels, Gauge>,
    pub tenant_creates: Family<TenantLabels, Counter>,
    /// Per tenant: the sum of its closed sandboxes' usage receipts (`crate::core::receipts`).
    pub tenant_sandbox_seconds: Family<TenantLabels, FloatCounter>,
    pub tenant_cpu_seconds: Family<TenantLabels, FloatCounter>,
    /// Sandboxes by state (`crate::state_metrics`, refreshed from the backend's listing).
    pub sandboxes_by_state: Family<StateLabels, Gauge>,
    /// Warm pools' fill (this process's pools, refreshed by the refill task).
    pub pool_ready: Family<PoolLabels, Gauge>,
    pub pool_target: Family<PoolLabels, Gauge>,
    /// The create admission queue (`crate::core::admission`): creates holding a start slot,
    /// creates waiting for one, and calls refused with a retry delay.
    pub admission_starting: Gauge,
    pub admission_waiting: Gauge,
    pub admission_refused: Counter,
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("sandboxd");
        let m = Metrics {
            rpc_requests: Family::default(),
            rpc_duration: Family::new_with_constructor(seconds_histogram),
            sandboxes_live: Gauge::default(),
            creates_in_progress: Gauge::default(),
            pty_sessions: Gauge::default(),
            docker_duration: Family::new_with_constructor(seconds_histogram),
            permit_wait: seconds_histogram(),
            exec_results: Family::default(),
            failures: Family::default(),
            bytes: Family::default(),
            sandbox_usage: SandboxUsage::default(),
            tenant_sandboxes: Family::default(),
            tenant_cpus: Family::default(),
            tenant_memory_mib: Family::default(),
            tenant_execs_in_flight: Family::default(),
            tenant_creates: Family::default(),
            tenant_sandbox_seconds: Family::default(),
            tenant_cpu_seconds: Family::default(),
            sandboxes_by_state: Family::default(),
            pool_ready: Family::default(),
            pool_target: Family::default(),
            admission_starting: Gauge::default(),
            admission_waiting: Gauge::default(),
            admission_refused: Counter::default(),
            registry: Registry::default(),
        };
        registry.register(
            "rpc_requests",
            "gRPC calls by method and final status code",
            m.rpc_requests.clone(),
        );
        registry.register(
            "rpc_duration_seconds",
            "gRPC call duration, to the end of the response stream",
            m.rpc_duration.clone(),
        );
        registry.register(
            "sandboxes_live",
            "Sandboxes this process created and has not closed",
            m.sandboxes_live.clone(),
        );
        registry.register("creates_in_progress", "Create calls running now", m.creates_in_progress.clone());
        registry.register("pty_sessions", "Terminal sessions open now", m.pty_sessions.clone());
        registry.register(
            "docker_command_duration_seconds",
            "Lifetime of docker CLI subprocesses, by docker subcommand",
            m.docker_duration.clone(),
        );
        registry.register(
            "docker_permit_wait_seconds",
            "Time waiting for a slot of a docker pool (exec, create, control, transfer concurrency)",
            m.permit_wait.clone(),
        );
        registry.register(
            "exec_results",
            "Exec results by error type (none: the command ran to its exit)",
            m.exec_results.clone(),
        );
        registry.register(
            "failures",
            "Failed calls and exec results by failure kind (OOM_KILLED, SANDBOX_GONE, ...)",
            m.failures.clone(),
        );
        registry.register("transfer_bytes", "File bytes moved by Upload and Download", m.bytes.clone());
        m.sandbox_usage.register(&mut registry);
        registry.register(
            "tenant_sandboxes",
            "A tenant's sandboxes on the daemon (not stopped)",
            m.tenant_sandboxes.clone(),
        );
        registry.register(
            "tenant_cpus_reserved",
            "CPUs a tenant's sandboxes reserve (spec.resources.cpu)",
            m.tenant_cpus.clone(),
        );
        registry.register(
            "tenant_memory_reserved_mib",
            "Memory a tenant's sandboxes reserve, in MiB (spec.resources.memory_mib)",
            m.tenant_memory_mib.clone(),
        );
        registry.register(
            "tenant_execs_in_flight",
            "A tenant's Exec and ExecStream calls running now (this process)",
            m.tenant_execs_in_flight.clone(),
        );
        registry.register(
            "tenant_creates",
            "Sandboxes a tenant created (forks count per child; this process)",
            m.tenant_creates.clone(),
        );
        registry.register(
            "tenant_sandbox_seconds",
            "Wall time of a tenant's closed sandboxes: the sum of their usage receipts",
            m.tenant_sandbox_seconds.clone(),
        );
        registry.register(
            "tenant_cpu_seconds",
            "CPU time of a tenant's closed sandboxes: the sum of their usage receipts",
            m.tenant_cpu_seconds.clone(),
        );
        registry.register(
            "sandboxes",
            "Sandboxes of this service by state (the backend's listing, every tenant's)",
            m.sandboxes_by_state.clone(),
        );
        registry.register("pool_ready", "Ready, unclaimed members of a warm pool", m.pool_ready.clone());
        registry.register("pool_target", "The ready members a warm pool keeps", m.pool_target.clone());
        registry.register(
            "admission_starting",
            "Creates holding one of this host's start slots (server.admission.max_starting)",
            m.admission_starting.clone(),
        );
        registry.register(
            "admission_waiting",
            "Creates waiting in the fair queue for a start slot",
            m.admission_waiting.clone(),
        );
        registry.register(
            "admission_refused",
            "Creates refused with a retry delay (CAPACITY) because no start slot could serve them in time",
            m.admission_refused.clone(),
        );
        Metrics { registry, ..m }
    }

    /// The OpenMetrics text of every metric.
    pub fn render(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }

    /// Counts one exec's outcome (`""` is `none`).
    pub fn exec_result(&self, error_type: &str) {
        let error_type = if error_type.is_empty() { "none" } else { error_type };
        self.exec_results.get_or_create(&ErrorTypeLabels { error_type: error_type.into() }).inc();
    }

    /// Counts one failure of `kind` (a failed call or an exec result that names one).
    pub fn failure(&self, kind: sandboxd_proto::contract::FailureKind) {
        self.failures.get_or_create(&FailureLabels { kind: kind.reason().into() }).inc();
    }

    /// Counts file bytes moved in `direction` (`upload`, `download`).
    pub fn transferred(&self, direction: &str, bytes: u64) {
        self.bytes.get_or_create(&DirectionLabels { direction: direction.into() }).inc_by(bytes);
    }

    /// Records one docker subprocess's lifetime.
    pub fn docker_command(&self, command: &str, elapsed: Duration) {
        self.docker_duration
            .get_or_create(&CommandLabels { command: command.into() })
            .observe(elapsed.as_secs_f64());
    }
}

/// The process's metrics.
pub fn global() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

/// Adds one to a gauge until dropped (creates in progress, open sessions).
pub struct GaugeGuard(&'static Gauge);

impl GaugeGuard {
    pub fn hold(gauge: &'static Gauge) -> Self {
        gauge.inc();
        Self(gauge)
    }
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Serves `GET /metrics` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::routing::get;
    let app = axum::Router::new().route(
        "/metrics",
        get(|| async {
            (
                [(http::header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
                global().render(),
            )
        }),
    );
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await
}

/// Checks `--metrics-listen`: loopback, unless the operator said `--insecure`.
pub fn check_listen(addr: SocketAddr, insecure: bool) -> Result<(), String> {
    if addr.ip().is_loopback() || insecure {
        Ok(())
    } else {
        Err(format!("refusing to serve metrics on non-loopback {addr}; pass --insecure to allow it"))
    }
}

// ----- the transport layer ------------------------------------------------------------------

/// A tower layer around the whole gRPC server: counts and times every call by its final code,
/// and logs each failed call once.
#[derive(Clone, Copy, Debug, Default)]
pub struct RpcLayer;

impl<S> tower_layer::Layer<S> for RpcLayer {
    type Service = RpcService<S>;
    fn layer(&self, inner: S) -> RpcService<S> {
        RpcService { inner }
    }
}

#[derive(Clone, Debug)]
pub struct RpcService<S> {
    inner: S,
}

/// One call being observed: who, since when; recorded exactly once.
struct Call {
    service: String,
    method: String,
    start: Instant,
}

impl Call {
    fn from_path(path: &str) -> Self {
        let (service, method) = path.trim_start_matches('/').split_once('/').unwrap_or(("", path));
        Call { service: service.into(), method: method.into(), start: Instant::now() }
    }

    fn finish(self, code: tonic::Code, message: &str) {
        let m = global();
        let name = sandboxd_proto::contract::code_name(code);
        m.rpc_requests
            .get_or_create(&RpcLabels {
                service: self.service.clone(),
                method: self.method.clone(),
                code: name.into(),
            })
            .inc();
        m.rpc_duration
            .get_or_create(&MethodLabels { service: self.service.clone(), method: self.method.clone() })
            .observe(self.start.elapsed().as_secs_f64());
        if code != tonic::Code::Ok {
            tracing::warn!(service = %self.service, rpc = %self.method, code = name, error = %message, "rpc failed");
        }
    }
}

/// `grpc-status` and the percent-decoded `grpc-message` of a header map, when present.
fn status_of(headers: &http::HeaderMap) -> Option<(tonic::Code, String)> {
    let code = headers.get("grpc-status")?.to_str().ok()?.parse::<i32>().ok()?;
    let message = headers
        .get("grpc-message")
        .and_then(|v| v.to_str().ok())
        .map(|m| percent_encoding::percent_decode_str(m).decode_utf8_lossy().into_owned())
        .unwrap_or_default();
    Some((tonic::Code::from_i32(code), message))
}

impl<S, B> tower_service::Service<http::Request<B>> for RpcService<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn std::future::Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let call = Call::from_path(request.uri().path());
        let future = self.inner.call(request);
        Box::pin(async move {
            let response = match future.await {
                Ok(r) => r,
                Err(e) => {
                    call.finish(tonic::Code::Unknown, "the transport failed the call");
                    return Err(e);
                }
            };
            // A trailers-only answer (most errors) carries the status in its headers.
            if let Some((code, message)) = status_of(response.headers()) {
                call.finish(code, &message);
                return Ok(response);
            }
            let (parts, body) = response.into_parts();
            let body = tonic::body::Body::new(ObservedBody { inner: body, call: Some(call) });
            Ok(http::Response::from_parts(parts, body))
        })
    }
}

/// A response body that records its call when the trailers pass (or when it is dropped
/// before them: the caller went away).
struct ObservedBody {
    inner: tonic::body::Body,
    call: Option<Call>,
}

impl http_body::Body for ObservedBody {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(trailers) = frame.trailers_ref() {
                    let (code, message) =
                        status_of(trailers).unwrap_or((tonic::Code::Unknown, "no grpc-status".into()));
                    if let Some(call) = self.call.take() {
                        call.finish(code, &message);
                    }
                }
            }
            Poll::Ready(Some(Err(status))) => {
                if let Some(call) = self.call.take() {
                    call.finish(status.code(), status.message());
                }
            }
            Poll::Ready(None) => {
                if let Some(call) = self.call.take() {
                    call.finish(tonic::Code::Unknown, "the response ended without a status");
                }
            }
            Poll::Pending => {}
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

impl Drop for ObservedBody {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            call.finish(tonic::Code::Cancelled, "the caller went away before the end of the response");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_what_was_recorded() {
        let m = global();
        m.exec_result("");
        m.exec_result("timeout");
        m.transferred("upload", 5);
        Call::from_path("/sandbox.v1.SandboxService/Status").finish(tonic::Code::NotFound, "gone");
        let text = m.render();
        assert!(text.contains("sandboxd_exec_results_total{error_type=\"none\"}"), "{text}");
        assert!(text.contains("sandboxd_transfer_bytes_total{direction=\"upload\"}"), "{text}");
        assert!(
            text.contains(
                "sandboxd_rpc_requests_total{service=\"sandbox.v1.SandboxService\",method=\"Status\",code=\"NOT_FOUND\"} 1"
            ),
            "{text}"
        );
        assert!(check_listen("10.0.0.1:9000".parse().unwrap(), false).is_err());
        assert!(check_listen("127.0.0.1:9000".parse().unwrap(), false).is_ok());
    }
}
