//! `server.limits.max_streams_per_connection`: a tower layer that counts the calls in flight on
//! each connection (a call is in flight until its response stream ends or is dropped) and
//! answers RESOURCE_EXHAUSTED, naming the limit, to a call beyond it.
//!
//! HTTP/2's own `SETTINGS_MAX_CONCURRENT_STREAMS` is set above the limit (`http2_cap`): at that
//! cap a client queues its calls silently, so the refusal with a clear code comes first.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};

/// Calls in flight per connection (keyed by the peer's address and port); an entry goes with
/// its last call, so the map holds only connections with calls open.
type Open = Arc<Mutex<HashMap<SocketAddr, u32>>>;

#[derive(Clone)]
pub struct StreamLimitLayer {
    limit: u32,
    open: Open,
}

impl StreamLimitLayer {
    pub fn new(limit: u32) -> Self {
        Self { limit: limit.max(1), open: Open::default() }
    }

    /// The HTTP/2 stream limit to advertise for a per-connection call limit of `limit`.
    pub fn http2_cap(limit: u32) -> u32 {
        limit.saturating_add(limit.max(16))
    }
}

impl<S> tower_layer::Layer<S> for StreamLimitLayer {
    type Service = StreamLimit<S>;
    fn layer(&self, inner: S) -> StreamLimit<S> {
        StreamLimit { inner, limit: self.limit, open: self.open.clone() }
    }
}

#[derive(Clone)]
pub struct StreamLimit<S> {
    inner: S,
    limit: u32,
    open: Open,
}

/// One call's place on its connection, given back on drop.
struct Slot {
    open: Open,
    peer: SocketAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.peer) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.peer);
            }
        }
    }
}

fn peer<B>(request: &http::Request<B>) -> Option<SocketAddr> {
    let ext = request.extensions();
    ext.get::<TcpConnectInfo>()
        .and_then(TcpConnectInfo::remote_addr)
        .or_else(|| ext.get::<TlsConnectInfo<TcpConnectInfo>>().and_then(|t| t.get_ref().remote_addr()))
}

impl<S, B> tower_service::Service<http::Request<B>> for StreamLimit<S>
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
        let slot = match peer(&request) {
            Some(peer) => {
                let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
                let n = open.entry(peer).or_default();
                if *n >= self.limit {
                    let status = tonic::Status::resource_exhausted(format!(
                        "this connection has {n} calls in flight, its limit \
                         (server.limits.max_streams_per_connection = {}); wait for one to end or open another connection",
                        self.limit
                    ));
                    return Box::pin(async move { Ok(status.into_http()) });
                }
                *n += 1;
                Some(Slot { open: self.open.clone(), peer })
            }
            None => None,
        };
        let future = self.inner.call(request);
        Box::pin(async move {
            let response = future.await?;
            let (parts, body) = response.into_parts();
            let body = tonic::body::Body::new(SlotBody { inner: body, slot });
            Ok(http::Response::from_parts(parts, body))
        })
    }
}

/// A response body that holds its call's slot until it ends or is dropped.
struct SlotBody {
    inner: tonic::body::Body,
    slot: Option<Slot>,
}

impl http_body::Body for SlotBody {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            self.slot = None;
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

    #[test]
    fn the_http2_cap_leaves_room_for_the_refusal() {
        assert_eq!(StreamLimitLayer::http2_cap(1024), 2048);
        assert_eq!(StreamLimitLayer::http2_cap(2), 18);
        assert_eq!(StreamLimitLayer::http2_cap(u32::MAX), u32::MAX);
    }
}
