//! Any node answers any RPC: a tower layer in front of the gRPC routes reads the sandbox id of a
//! call about one sandbox (field 1 of its first message, or field 1 of the message there),
//! asks the cluster (a [`Cluster`]; Swarm's is in `backends/swarm/relay.rs`) where that sandbox
//! runs and, when it is another node, relays the whole HTTP/2
//! call to that node's sandboxd: unary, server-streaming and the bidirectional `Pty`,
//! `PortForward` and `Upload` streams alike, bytes untouched. The caller's headers go along (its
//! bearer is checked by the owning node, as on one host), the deadline is what is left of the
//! caller's, and a caller that goes away resets the relayed stream. The cluster token marks a
//! relayed call, so the owning node serves it itself and a call never travels twice. A `Watch`
//! carrying the cluster token is another node merging this node's events: it is served with
//! this node's own events only, for the tenant the merging node names ([`NodeOnly`]).

use crate::service::rpc_table::name as rpc;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use futures_util::StreamExt;
use http_body_util::BodyExt;
use subtle::ConstantTimeEq;
use tonic::body::Body;
use tonic::Status;

use super::rpc_table::IdAt;
use crate::core::watch::NodeOnly;

/// The metadata key that carries the cluster token on a call between nodes: the receiving
/// node serves such a call itself, never forwarding it again.
pub const CLUSTER_TOKEN_HEADER: &str = "x-sandboxd-cluster-token";

/// The metadata key that names, on another node's `Watch` merging this node's events, the
/// tenant of the caller it merges for (absent: the operator, who sees every sandbox).
pub const TENANT_HEADER: &str = "x-sandboxd-tenant";

/// What relaying needs from a cluster, whatever runs it: where a sandbox runs, a channel to a
/// node's sandboxd, and the token the nodes present to each other.
#[async_trait::async_trait]
pub trait Cluster: Send + Sync + 'static {
    /// What runs the cluster, as errors name it ("Swarm").
    fn name(&self) -> &str;
    /// The cluster token (compared in constant time with the one a relayed call carries).
    fn token(&self) -> &str;
    /// The node sandbox `id` runs on; `None` when the cluster knows no such sandbox.
    async fn locate(&self, id: &str) -> crate::error::Result<Option<NodePlace>>;
    /// A (lazily connected, cached) channel to the sandboxd at `addr`.
    fn channel(&self, addr: &str) -> crate::error::Result<tonic::transport::Channel>;
}

/// Where a sandbox runs, as the relay needs it.
#[derive(Debug, Clone)]
pub struct NodePlace {
    /// This node: the call is served here.
    pub local: bool,
    pub hostname: String,
    /// `HOST:PORT` of the node's sandboxd.
    pub addr: String,
    /// The cluster's word for the node's state (for the error when it is down).
    pub state: String,
    /// The node cannot answer (a `Close` is then served here).
    pub down: bool,
}

/// The service whose calls are relayed.
const SERVICE_PREFIX: &str = "/sandbox.v1.SandboxService/";

/// How long a call may take to send its first message before it is refused here.
const FIRST_MESSAGE_WAIT: Duration = Duration::from_secs(30);

/// The calls about one sandbox, which run where it runs: the table's relayed rows
/// (`service/rpc_table.rs`). `Create`, `List`, `Watch`, pools, tokens, volumes and snapshots
/// (which cluster mode does not offer) are answered by the node called.
fn routed(method: &str) -> Option<IdAt> {
    super::rpc_table::forwarded(method)
}

#[derive(Clone, PartialEq, prost::Message)]
struct ById {
    #[prost(string, tag = "1")]
    sandbox_id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct NestedId {
    #[prost(message, optional, tag = "1")]
    inner: Option<ById>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct PtyFirst {
    #[prost(message, optional, tag = "1")]
    open: Option<ById>,
    #[prost(message, optional, tag = "6")]
    attach: Option<ById>,
}

/// The sandbox id in one (uncompressed) message, when it has one.
fn sandbox_id(at: IdAt, message: &[u8]) -> Option<String> {
    use prost::Message;
    let id = match at {
        IdAt::Field1 => ById::decode(message).ok()?.sandbox_id,
        IdAt::Nested => NestedId::decode(message).ok()?.inner?.sandbox_id,
        IdAt::Pty => {
            let first = PtyFirst::decode(message).ok()?;
            first.open.or(first.attach)?.sandbox_id
        }
    };
    (!id.is_empty()).then_some(id)
}

/// The layer; without a cluster (single host, the default) it passes every call through
/// untouched.
#[derive(Clone, Default)]
pub struct ForwardLayer {
    cluster: Option<Arc<dyn Cluster>>,
}

impl ForwardLayer {
    pub fn new(cluster: Option<Arc<dyn Cluster>>) -> Self {
        Self { cluster }
    }

    /// The cluster calls are relayed through (`None` on a single host).
    pub fn cluster(&self) -> Option<&Arc<dyn Cluster>> {
        self.cluster.as_ref()
    }
}

impl<S> tower_layer::Layer<S> for ForwardLayer {
    type Service = Forward<S>;
    fn layer(&self, inner: S) -> Forward<S> {
        Forward { inner, cluster: self.cluster.clone() }
    }
}

#[derive(Clone)]
pub struct Forward<S> {
    inner: S,
    cluster: Option<Arc<dyn Cluster>>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, B> tower_service::Service<http::Request<B>> for Forward<S>
where
    S: tower_service::Service<http::Request<Body>, Response = http::Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn std::future::Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        // The ready clone serves this call; a fresh clone takes its place (tower's rule).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let method = request.uri().path().strip_prefix(SERVICE_PREFIX).map(str::to_string);
        let at = method.as_deref().and_then(routed);
        let Some(cluster) = self.cluster.clone() else {
            let (parts, body) = request.into_parts();
            return Box::pin(inner.call(http::Request::from_parts(parts, Body::new(body))));
        };
        let Some(at) = at else {
            let (mut parts, body) = request.into_parts();
            if method.as_deref() == Some(rpc::WATCH) && parts.headers.contains_key(CLUSTER_TOKEN_HEADER) {
                // Another node merging this node's events, for the tenant it names.
                if !token_matches(&parts.headers, &cluster) {
                    return Box::pin(async {
                        Ok(Status::unauthenticated("wrong cluster token").into_http())
                    });
                }
                let tenant = parts.headers.get(TENANT_HEADER).and_then(|t| t.to_str().ok()).map(String::from);
                parts.extensions.insert(NodeOnly { tenant });
            }
            return Box::pin(inner.call(http::Request::from_parts(parts, Body::new(body))));
        };
        let closing = method.as_deref() == Some(rpc::CLOSE);
        Box::pin(async move {
            let started = Instant::now();
            let (parts, body) = request.into_parts();
            // A call another node relayed: served here, or refused when its token is wrong.
            if parts.headers.contains_key(CLUSTER_TOKEN_HEADER) {
                if !token_matches(&parts.headers, &cluster) {
                    return Ok(Status::unauthenticated("wrong cluster token").into_http());
                }
                return inner.call(http::Request::from_parts(parts, Body::new(body))).await;
            }
            let (head, rest) = match tokio::time::timeout(FIRST_MESSAGE_WAIT, first_message(body)).await {
                Ok(read) => read,
                Err(_) => return Ok(Status::deadline_exceeded("no request message within 30 s").into_http()),
            };
            let body = rejoin(head.clone(), rest);
            // Only an id of this service's shape is looked up (it goes on a docker command line).
            let id = message_of(&head)
                .and_then(|m| sandbox_id(at, m))
                .filter(|id| crate::core::spec::SandboxId::has_valid_shape(id));
            let placement = match &id {
                Some(id) => match cluster.locate(id).await {
                    Ok(p) => p,
                    Err(e) => {
                        return Ok(Status::unavailable(format!(
                            "cannot ask the cluster where sandbox {id} runs: {e}"
                        ))
                        .into_http())
                    }
                },
                None => None,
            };
            let Some(placement) = placement.filter(|p| !p.local) else {
                return inner.call(http::Request::from_parts(parts, body)).await;
            };
            let id = id.unwrap_or_default();
            let node = &placement;
            // A `Close` whose node cannot answer is this node's: the cluster removes the sandbox.
            let mut local_close = |parts: http::request::Parts| {
                let body = rejoin(head.clone(), Box::pin(futures_util::stream::empty()));
                inner.call(http::Request::from_parts(parts, body))
            };
            if node.down && closing {
                return local_close(parts).await;
            }
            // The node as the cluster reads it, for the error when it is lost.
            let lost = |detail: String| {
                crate::core::failure::status(
                    tonic::Code::Unavailable,
                    format!(
                        "sandbox {id} runs on node {} ({}), which {} reads as {}{detail}",
                        node.hostname,
                        node.addr,
                        cluster.name(),
                        node.state
                    ),
                    Some(crate::core::failure::FailureKind::NodeLost),
                )
                .into_http()
            };
            let mut channel = match cluster.channel(&node.addr) {
                Ok(c) => c,
                Err(e) => return Ok(Status::from(e).into_http()),
            };
            let kept = closing.then(|| parts.clone());
            let mut relayed = http::Request::from_parts(parts, body);
            let headers = relayed.headers_mut();
            if let Ok(token) = http::HeaderValue::from_str(cluster.token()) {
                headers.insert(CLUSTER_TOKEN_HEADER, token);
            }
            // What is left of the caller's deadline after the look-up.
            if let Some(timeout) =
                headers.get("grpc-timeout").and_then(|v| v.to_str().ok()).and_then(crate::grpc_timeout::parse)
            {
                let left = timeout.saturating_sub(started.elapsed()).as_millis().max(1);
                if let Ok(v) = http::HeaderValue::from_str(&format!("{left}m")) {
                    headers.insert("grpc-timeout", v);
                }
            }
            let answer =
                match std::future::poll_fn(|cx| tower_service::Service::poll_ready(&mut channel, cx)).await {
                    Ok(()) => tower_service::Service::call(&mut channel, relayed).await,
                    Err(e) => Err(e),
                };
            match (answer, kept) {
                // A node the cluster cannot vouch for (down, or unknown while Swarm elects a
                // leader) was asked anyway: its answer stands when it served the call; its
                // refusal is the node's loss (its daemon is gone), named as such.
                (Ok(response), _) if node.down && refused(&response) => {
                    let said = response
                        .headers()
                        .get("grpc-message")
                        .and_then(|m| m.to_str().ok())
                        .map(|m| format!("; it said: {}", percent_decode(m)))
                        .unwrap_or_default();
                    Ok(lost(said))
                }
                (Ok(response), _) => Ok(response),
                (Err(_), Some(parts)) => local_close(parts).await,
                (Err(e), None) if node.down => Ok(lost(format!(" and its sandboxd did not answer: {e}"))),
                (Err(e), None) => Ok(unreachable_node(&id, &node.hostname, &node.addr, &e).into_http()),
            }
        })
    }
}

/// Whether a call's cluster token is this cluster's (compared in constant time).
fn token_matches(headers: &http::HeaderMap, cluster: &Arc<dyn Cluster>) -> bool {
    headers
        .get(CLUSTER_TOKEN_HEADER)
        .is_some_and(|token| bool::from(token.as_bytes().ct_eq(cluster.token().as_bytes())))
}

fn unreachable_node(id: &str, node: &str, addr: &str, e: &dyn std::fmt::Display) -> tonic::Status {
    crate::core::failure::status(
        tonic::Code::Unavailable,
        format!("sandbox {id} runs on node {node}, whose sandboxd ({addr}) did not answer: {e}"),
        Some(crate::core::failure::FailureKind::NodeLost),
    )
}

/// Whether a relayed answer is a refusal given at once (a trailers-only gRPC error).
fn refused(response: &http::Response<Body>) -> bool {
    response.headers().get("grpc-status").is_some_and(|s| s.as_bytes() != b"0")
}

/// A `grpc-message` header's text (percent-encoded on the wire).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&text[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

type Rest = Pin<Box<dyn futures_util::Stream<Item = Result<Bytes, BoxError>> + Send>>;

/// Reads the body until one whole gRPC message is in (or the body ends): those bytes, and the
/// rest of the body still to come.
async fn first_message<B>(body: B) -> (Bytes, Rest)
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let mut body = Box::pin(body);
    let mut head = BytesMut::new();
    loop {
        if let Some(needed) = frame_len(&head) {
            if head.len() >= needed {
                break;
            }
        }
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(mut data) = frame.into_data() {
                    head.extend_from_slice(&data.copy_to_bytes(data.remaining()));
                }
            }
            Some(Err(e)) => {
                let e: BoxError = e.into();
                let rest: Rest = Box::pin(futures_util::stream::once(async move { Err(e) }));
                return (head.freeze(), rest);
            }
            None => break,
        }
    }
    let rest: Rest = Box::pin(body.into_data_stream().map(|r| r.map_err(Into::into)));
    (head.freeze(), rest)
}

/// The length of the first gRPC frame (5-byte prefix + message) once its prefix is in.
fn frame_len(buf: &[u8]) -> Option<usize> {
    let len = u32::from_be_bytes(buf.get(1..5)?.try_into().ok()?) as usize;
    Some(5 + len)
}

/// The first message of `head`, when it is whole and not compressed.
fn message_of(head: &[u8]) -> Option<&[u8]> {
    let end = frame_len(head)?;
    (head.first() == Some(&0)).then(|| head.get(5..end)).flatten()
}

/// The body again: what was read, then the rest.
fn rejoin(head: Bytes, rest: Rest) -> Body {
    let first = futures_util::stream::once(async move { Ok::<_, BoxError>(head) });
    let stream = first.chain(rest).filter(|r| std::future::ready(!matches!(r, Ok(b) if b.is_empty())));
    Body::new(http_body_util::StreamBody::new(stream.map(|r| r.map(http_body::Frame::data))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use sandboxd_proto::v1 as pb;

    fn framed(message: &impl Message) -> Vec<u8> {
        let bytes = message.encode_to_vec();
        let mut out = vec![0];
        out.extend((bytes.len() as u32).to_be_bytes());
        out.extend(bytes);
        out
    }

    #[test]
    fn the_sandbox_id_is_read_from_every_routed_request() {
        let id = "sandboxd-0123456789abcdef0123456789abcdef".to_string();
        let exec =
            framed(&pb::ExecRequest { sandbox_id: id.clone(), command: "true".into(), ..Default::default() });
        assert_eq!(message_of(&exec).and_then(|m| sandbox_id(IdAt::Field1, m)), Some(id.clone()));
        let upload = framed(&pb::UploadRequest {
            request: Some(pb::upload_request::Request::Header(pb::UploadHeader {
                sandbox_id: id.clone(),
                path: "/x".into(),
                ..Default::default()
            })),
        });
        assert_eq!(message_of(&upload).and_then(|m| sandbox_id(IdAt::Nested, m)), Some(id.clone()));
        let chunk =
            framed(&pb::UploadRequest { request: Some(pb::upload_request::Request::Chunk(vec![1, 2])) });
        assert_eq!(message_of(&chunk).and_then(|m| sandbox_id(IdAt::Nested, m)), None);
        let connect = framed(&pb::ConnectRequest {
            sandbox: Some(pb::SandboxRef { sandbox_id: id.clone(), ..Default::default() }),
        });
        assert_eq!(message_of(&connect).and_then(|m| sandbox_id(IdAt::Nested, m)), Some(id));
        // A half-read frame has no message yet; a compressed one is not read.
        assert_eq!(message_of(&exec[..exec.len() - 1]), None);
        let mut compressed = exec.clone();
        compressed[0] = 1;
        assert_eq!(message_of(&compressed), None);
        assert_eq!(routed("Create"), None);
        assert_eq!(routed("List"), None);
        assert_eq!(routed("Watch"), None);
        assert_eq!(routed("Close"), Some(IdAt::Field1));
        assert_eq!(routed("Usage"), Some(IdAt::Field1));
        assert_eq!(routed("CreateBatch"), None);
        assert_eq!(routed("ListDir"), Some(IdAt::Field1));
        assert_eq!(routed("PortForward"), Some(IdAt::Nested));
        assert_eq!(routed("Pty"), Some(IdAt::Pty));
        let attach = framed(&pb::PtyRequest {
            request: Some(pb::pty_request::Request::Attach(pb::PtyAttach {
                sandbox_id: "sandboxd-x".into(),
                ..Default::default()
            })),
        });
        assert_eq!(message_of(&attach).and_then(|m| sandbox_id(IdAt::Pty, m)), Some("sandboxd-x".into()));
    }

    #[tokio::test]
    async fn a_body_read_up_to_its_first_message_comes_back_whole() {
        let exec = framed(&pb::ExecRequest { sandbox_id: "s".into(), ..Default::default() });
        let mut all = exec.clone();
        all.extend_from_slice(b"more");
        let chunks: Vec<Result<http_body::Frame<Bytes>, std::convert::Infallible>> = vec![
            Ok(http_body::Frame::data(Bytes::copy_from_slice(&all[..3]))),
            Ok(http_body::Frame::data(Bytes::copy_from_slice(&all[3..]))),
        ];
        let body = http_body_util::StreamBody::new(futures_util::stream::iter(chunks));
        let (head, rest) = first_message(body).await;
        assert!(head.len() >= exec.len());
        let joined = rejoin(head, rest).collect().await.unwrap().to_bytes();
        assert_eq!(&joined[..], &all[..]);
    }
}
