//! One call path for every front-end: the layers the gRPC listener serves (traces, RPC metrics,
//! stream limits, the cluster relay, then the gate and the audit log in front of the handlers)
//! composed once ([`CallLayers`]), and a gRPC client over that same stack in-process
//! ([`Calls`]). A front-end that is not gRPC (E2B's REST and envd, the console) turns its wire
//! into `sandbox.v1` requests and makes them through [`Calls`] as a [`Caller`]: each is a real
//! gRPC request carrying the caller's credential (`authorization: Bearer`) and trace context
//! (`traceparent`), so auth, audit, relay, metrics, traces and limits are those
//! `service/rpc_table.rs` gives the gRPC API, and no layer is copied by hand.

use std::net::SocketAddr;

use sandboxd_proto::v1::sandbox_service_client::SandboxServiceClient;
use tonic::body::Body;
use tonic::metadata::{AsciiMetadataValue, MetadataValue};
use tonic::service::Routes;
use tonic::{Request, Status};
use tower::ServiceBuilder;
use tower_layer::{Identity, Layer, Stack};

use super::forward::ForwardLayer;
use super::stream_limit::StreamLimitLayer;
use crate::metrics::RpcLayer;
use crate::otel::TraceLayer;

/// The served stack as one cloneable service (the routes behind every layer).
pub type CallStack =
    tower::util::BoxCloneSyncService<http::Request<Body>, http::Response<Body>, std::convert::Infallible>;

/// The gRPC client of `SandboxService` over the served stack, in-process.
pub type Calls = SandboxServiceClient<CallStack>;

/// The layers in front of the routes, outermost first: the trace span, the RPC metrics, the
/// per-connection stream limit, the cluster relay. The gRPC listener and every in-process
/// front-end wrap the routes in exactly these.
pub type CallLayers =
    Stack<ForwardLayer, Stack<StreamLimitLayer, Stack<RpcLayer, Stack<TraceLayer, Identity>>>>;

/// [`CallLayers`] for a server entered at `local` (the span's `server.address`).
pub fn layers(local: Option<SocketAddr>, limit: &StreamLimitLayer, forward: &ForwardLayer) -> CallLayers {
    ServiceBuilder::new()
        .layer(TraceLayer::new(local))
        .layer(RpcLayer)
        .layer(limit.clone())
        .layer(forward.clone())
        .into_inner()
}

/// A client of the routes behind `layers`, messages bounded by `max_message` both ways.
pub fn client(layers: &CallLayers, routes: Routes, max_message: usize) -> Calls {
    let stack = CallStack::new(layers.layer(routes));
    SandboxServiceClient::new(stack)
        .max_decoding_message_size(max_message)
        .max_encoding_message_size(max_message)
}

/// Who a front-end calls for: the credential it was given (presented as `authorization:
/// Bearer`, checked by the gate as any gRPC caller's) and the W3C trace context it arrived with.
#[derive(Clone, Debug, Default)]
pub struct Caller {
    bearer: Option<AsciiMetadataValue>,
    traceparent: Option<AsciiMetadataValue>,
    tracestate: Option<AsciiMetadataValue>,
}

impl Caller {
    /// The caller presenting `credential` (none: what a server without keys allows).
    pub fn new(credential: Option<&str>) -> Result<Self, Status> {
        let bearer = credential
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(|c| {
                MetadataValue::try_from(format!("Bearer {c}"))
                    .map_err(|_| Status::unauthenticated("the credential is not a valid header value"))
            })
            .transpose()?;
        Ok(Self { bearer, ..Self::default() })
    }

    /// The same caller continuing the trace in `headers` (`traceparent`, `tracestate`).
    pub fn traced(mut self, headers: &http::HeaderMap) -> Self {
        let value = |name| {
            headers.get(name).and_then(|v| v.to_str().ok()).and_then(|v| MetadataValue::try_from(v).ok())
        };
        self.traceparent = value("traceparent");
        self.tracestate = value("tracestate");
        self
    }

    /// `message` as this caller's request.
    pub fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        let metadata = request.metadata_mut();
        if let Some(bearer) = &self.bearer {
            metadata.insert("authorization", bearer.clone());
        }
        if let Some(parent) = &self.traceparent {
            metadata.insert("traceparent", parent.clone());
        }
        if let Some(state) = &self.tracestate {
            metadata.insert("tracestate", state.clone());
        }
        request
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_presents_its_credential_and_trace_context() {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".parse().unwrap(),
        );
        let request = Caller::new(Some(" key ")).unwrap().traced(&headers).request(());
        assert_eq!(request.metadata().get("authorization").unwrap(), "Bearer key");
        assert!(request.metadata().get("traceparent").is_some());
        assert!(Caller::new(None).unwrap().request(()).metadata().get("authorization").is_none());
        assert_eq!(Caller::new(Some("a\nb")).unwrap_err().code(), tonic::Code::Unauthenticated);
    }
}
