//! Calls from this node's sandboxd to another node's `SandboxPeer` service: the client, and
//! the cluster token every such call carries.

use std::time::Duration;

use sandboxd_proto::v1::sandbox_peer_client::SandboxPeerClient;
use tonic::Request;

use super::placement::CLUSTER_TOKEN_HEADER;
use crate::error::{ProviderError, Result};

/// Bytes per chunk of an image sent to another node.
pub(super) const CHUNK: usize = 1 << 20;
/// How long a node may take to say which images (or snapshots) it has.
pub(super) const ASK_TIMEOUT: Duration = Duration::from_secs(10);

/// A request to another node's peer service, with the cluster token.
pub(super) fn peer_request<T>(token: &str, message: T, timeout: Option<Duration>) -> Result<Request<T>> {
    let mut request = Request::new(message);
    let bad = |_| ProviderError::Unavailable("the cluster token is not a valid header value".into());
    request.metadata_mut().insert(CLUSTER_TOKEN_HEADER, token.parse().map_err(bad)?);
    request.metadata_mut().insert("authorization", format!("Bearer {token}").parse().map_err(bad)?);
    if let Some(timeout) = timeout {
        request.set_timeout(timeout);
    }
    Ok(request)
}

pub(super) fn peer_client(addr: &str) -> Result<SandboxPeerClient<tonic::transport::Channel>> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| ProviderError::Unavailable(format!("bad node address {addr}: {e}")))?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .initial_stream_window_size(Some(8 << 20))
        .initial_connection_window_size(Some(16 << 20))
        .connect_lazy();
    Ok(SandboxPeerClient::new(channel).max_decoding_message_size(4 * CHUNK))
}
