//! Cluster-wide `Watch`. Each node tells the events of its own sandboxes (its daemon's
//! `docker events`, the READY of the creates it completed); the node a client watches through
//! merges every other node's: for each watcher it opens a `Watch` on every peer with the cluster
//! token and the caller's tenant (`TENANT_HEADER`), which the peer serves with its own events
//! only. Peers are Swarm's nodes (`docker node ls`, re-read every few seconds, so a node that
//! joins is followed and one that leaves is dropped). Each peer is followed on its own and
//! retried when its stream ends or cannot open: a dead peer never ends nor stalls the caller's
//! stream, and its events while it is unreachable are missed (a watcher that must not miss any
//! lists again, or watches with `include_existing`). A watcher that falls behind a peer's
//! events is ended as on one host (RESOURCE_EXHAUSTED).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use sandboxd_proto::v1 as pb;
use sandboxd_proto::v1::sandbox_service_client::SandboxServiceClient;

use super::engine::Engine;
use super::placement::{NodeInfo, Swarm, CLUSTER_TOKEN_HEADER, TENANT_HEADER};
use crate::core::inventory::SandboxSummary;
use crate::core::spec::SandboxStatus;
use crate::core::watch::{EventKind, PeerEvents, SandboxEvent, WatchFilter};

/// How often the node list is read again (and how long one reading serves every watcher).
const NODES_REREAD: Duration = Duration::from_secs(5);
/// How long a new watch waits for the peers to subscribe before it lists and streams anyway.
const SUBSCRIBE_WAIT: Duration = Duration::from_secs(5);
/// A peer whose stream failed is tried again after this, doubling up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(5);
/// Events queued from the peers for one watcher.
const QUEUE: usize = 1024;

/// The other nodes, read from Swarm, shared by every watcher of this node.
pub struct Peers {
    swarm: Arc<Swarm>,
    engine: Engine,
    peer_port: u16,
    read: Mutex<Option<(Instant, Vec<NodeInfo>)>>,
}

impl Peers {
    pub fn new(swarm: Arc<Swarm>, engine: Engine, peer_port: u16) -> Arc<Self> {
        Arc::new(Self { swarm, engine, peer_port, read: Mutex::default() })
    }

    /// Every node but this one, at most [`NODES_REREAD`] old; the last reading when Swarm does
    /// not answer.
    async fn others(&self) -> Vec<NodeInfo> {
        if let Some((at, nodes)) = self.read.lock().ok().and_then(|r| r.clone()) {
            if at.elapsed() < NODES_REREAD {
                return nodes;
            }
        }
        match self.engine.nodes().await {
            Ok(nodes) => {
                let others: Vec<NodeInfo> = nodes
                    .iter()
                    .filter(|n| n.id != self.swarm.self_id())
                    .map(|n| NodeInfo::from_engine(n, self.peer_port))
                    .collect();
                if let Ok(mut read) = self.read.lock() {
                    *read = Some((Instant::now(), others.clone()));
                }
                others
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the swarm's nodes; following the ones known");
                self.read.lock().ok().and_then(|r| r.clone()).map(|(_, n)| n).unwrap_or_default()
            }
        }
    }

    /// The other nodes' events matching `filter`, for one watcher: resolves once every node
    /// known now answered its first `Watch` (subscribed, or failed) or [`SUBSCRIBE_WAIT`]
    /// passed. Following stops when the stream is dropped.
    pub async fn merge(self: &Arc<Self>, filter: WatchFilter) -> PeerEvents {
        let (tx, rx) = tokio::sync::mpsc::channel(QUEUE);
        let (first_tx, first_rx) = tokio::sync::oneshot::channel();
        let follower = tokio::spawn(follow_all(self.clone(), filter, tx, first_tx));
        let _ = tokio::time::timeout(SUBSCRIBE_WAIT, first_rx).await;
        let guard = AbortOnDrop(follower);
        Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx).map(move |event| {
            let _keep = &guard;
            event
        }))
    }
}

/// Aborts the task following the peers when the watcher's stream goes.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Follows every other node for one watcher until its stream is dropped; tells `first` once
/// each node of the first reading answered once.
async fn follow_all(
    peers: Arc<Peers>,
    filter: WatchFilter,
    tx: tokio::sync::mpsc::Sender<Result<SandboxEvent, String>>,
    first: tokio::sync::oneshot::Sender<()>,
) {
    let mut following: HashMap<String, AbortOnDrop> = HashMap::new();
    let mut first = Some(first);
    loop {
        let nodes = peers.others().await;
        following.retain(|id, _| nodes.iter().any(|n| &n.id == id));
        let mut answered = Vec::new();
        for node in nodes {
            if following.contains_key(&node.id) {
                continue;
            }
            let (said_tx, said_rx) = tokio::sync::oneshot::channel();
            answered.push(said_rx);
            let task = tokio::spawn(follow_one(
                peers.swarm.clone(),
                node.clone(),
                filter.clone(),
                tx.clone(),
                said_tx,
            ));
            following.insert(node.id, AbortOnDrop(task));
        }
        if let Some(first) = first.take() {
            let all = futures_util::future::join_all(answered);
            tokio::spawn(async move {
                all.await;
                let _ = first.send(());
            });
        }
        tokio::select! {
            _ = tx.closed() => return,
            _ = tokio::time::sleep(NODES_REREAD) => {}
        }
    }
}

/// Follows one node: its `Watch`, opened again after it ends or fails, for as long as the
/// watcher reads. `answered` is told after the first attempt.
async fn follow_one(
    swarm: Arc<Swarm>,
    node: NodeInfo,
    filter: WatchFilter,
    tx: tokio::sync::mpsc::Sender<Result<SandboxEvent, String>>,
    answered: tokio::sync::oneshot::Sender<()>,
) {
    let mut answered = Some(answered);
    let mut retry = RETRY_FIRST;
    loop {
        let opened = Instant::now();
        match open(&swarm, &node, &filter).await {
            Ok(mut stream) => {
                if let Some(a) = answered.take() {
                    let _ = a.send(());
                }
                tracing::debug!(node = %node.hostname, "following a node's events");
                loop {
                    tokio::select! {
                        message = stream.message() => match message {
                            Ok(Some(message)) => {
                                if let Some(event) = event_of(message, &filter) {
                                    if tx.send(Ok(event)).await.is_err() {
                                        return;
                                    }
                                }
                            }
                            Ok(None) => break,
                            // The watcher did not keep up with that node's events: it learns so.
                            Err(status) if status.code() == tonic::Code::ResourceExhausted => {
                                let why = format!("on node {}: {}", node.hostname, status.message());
                                let _ = tx.send(Err(why)).await;
                                return;
                            }
                            Err(status) => {
                                tracing::info!(node = %node.hostname, error = %status.message(), "a node's event stream ended; following it again");
                                break;
                            }
                        },
                        _ = tx.closed() => return,
                    }
                }
            }
            Err(status) => {
                if let Some(a) = answered.take() {
                    let _ = a.send(());
                }
                tracing::debug!(node = %node.hostname, error = %status.message(), "cannot follow a node's events yet");
            }
        }
        if opened.elapsed() > RETRY_MAX * 2 {
            retry = RETRY_FIRST;
        }
        tokio::select! {
            _ = tx.closed() => return,
            _ = tokio::time::sleep(retry) => {}
        }
        retry = (retry * 2).min(RETRY_MAX);
    }
}

/// `Watch` on `node` for this node's merge: its own events only, for the watcher's tenant.
async fn open(
    swarm: &Swarm,
    node: &NodeInfo,
    filter: &WatchFilter,
) -> Result<tonic::Streaming<pb::WatchResponse>, tonic::Status> {
    let channel = swarm.channel(&node.addr).map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let mut client = SandboxServiceClient::new(channel);
    let mut request = tonic::Request::new(pb::WatchRequest {
        labels: filter.labels.clone().into_iter().collect(),
        statuses: filter.statuses.iter().map(|s| s.to_wire() as i32).collect(),
        include_existing: false,
    });
    let bad = |_| tonic::Status::internal("the cluster token or tenant is not a valid header value");
    let token = swarm.token();
    request.metadata_mut().insert("authorization", format!("Bearer {token}").parse().map_err(bad)?);
    request.metadata_mut().insert(CLUSTER_TOKEN_HEADER, token.parse().map_err(bad)?);
    if let Some(tenant) = &filter.tenant {
        request.metadata_mut().insert(TENANT_HEADER, tenant.parse().map_err(bad)?);
    }
    Ok(client.watch(request).await?.into_inner())
}

/// One event from a peer as this node's watchers take it: the peer served it for the
/// watcher's filter (its tenant included), so it carries that tenant.
fn event_of(message: pb::WatchResponse, filter: &WatchFilter) -> Option<SandboxEvent> {
    let e = message.event?;
    use pb::SandboxEventKind as K;
    let kind = match K::try_from(e.kind).ok()? {
        K::Created => EventKind::Created,
        K::Ready => EventKind::Ready,
        K::Paused => EventKind::Paused,
        K::Resumed => EventKind::Resumed,
        K::Stopped => EventKind::Stopped,
        K::LeaseExpired => EventKind::LeaseExpired,
        K::Removed => EventKind::Removed,
        K::Existing => EventKind::Existing,
        K::Hibernated => EventKind::Hibernated,
        K::Unspecified => return None,
    };
    let info = e.sandbox.unwrap_or_default();
    let sandbox = info.sandbox.unwrap_or_default();
    let summary = SandboxSummary {
        sandbox_id: e.sandbox_id,
        image: info.image,
        status: SandboxStatus::try_from_wire(info.status).unwrap_or_else(|| kind.status_after()),
        created_ns: i128::from(info.created_at_unix_ms) * 1_000_000,
        ports: sandbox.ports.iter().filter_map(|p| u16::try_from(*p).ok()).collect(),
        workdir: sandbox.workdir,
        metadata: sandbox.metadata.into_iter().collect(),
        expires_at_unix_ms: info.expires_at_unix_ms,
        reserved_millicpus: 0,
        reserved_memory_mib: 0,
        pool: None,
        tenant: filter.tenant.clone(),
        runtime: Some(info.runtime).filter(|r| !r.is_empty()),
    };
    Some(SandboxEvent {
        kind,
        sandbox: summary,
        tenant: filter.tenant.clone(),
        time_unix_ms: e.time_unix_ms,
        exit_code: e.exit_code,
        oom_killed: e.oom_killed,
        reason: e.reason,
        failure_kind: crate::core::failure::FailureKind::from_wire(e.failure_kind),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peers_event_reads_back_for_the_watchers_tenant() {
        let filter = WatchFilter { tenant: Some("red".into()), ..Default::default() };
        let message = pb::WatchResponse {
            event: Some(pb::SandboxEvent {
                kind: pb::SandboxEventKind::Stopped as i32,
                sandbox_id: "sandboxd-0123456789abcdef0123456789abcdef".into(),
                sandbox: Some(pb::SandboxInfo {
                    created_at_unix_ms: 7,
                    status: SandboxStatus::Stopped.to_wire() as i32,
                    image: "img".into(),
                    expires_at_unix_ms: Some(9),
                    runtime: "runsc".into(),
                    sandbox: Some(pb::SandboxRef {
                        sandbox_id: "sandboxd-0123456789abcdef0123456789abcdef".into(),
                        ports: vec![80],
                        workdir: Some("/w".into()),
                        metadata: [("run".to_string(), "r1".to_string())].into(),
                        token: String::new(),
                    }),
                }),
                time_unix_ms: 11,
                exit_code: Some(137),
                oom_killed: false,
                reason: String::new(),
                failure_kind: pb::FailureKind::SandboxGone as i32,
            }),
        };
        let event = event_of(message, &filter).unwrap();
        assert_eq!(event.failure_kind, Some(crate::core::failure::FailureKind::SandboxGone));
        assert_eq!(event.kind, EventKind::Stopped);
        assert_eq!(event.sandbox.created_ns, 7_000_000);
        assert_eq!(event.sandbox.metadata.get("run").map(String::as_str), Some("r1"));
        assert_eq!((event.exit_code, event.time_unix_ms), (Some(137), 11));
        assert!(event.matches(&[("run".to_string(), "r1".to_string())].into(), &[], Some("red")));
        let unspecified = pb::WatchResponse { event: Some(pb::SandboxEvent::default()) };
        assert!(event_of(unspecified, &filter).is_none());
    }
}
