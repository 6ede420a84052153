//! `Watch`: lifecycle events of the sandboxes this service owns (a tenant's: its own), from the
//! backend's one event source, fanned out to every watcher through [`crate::core::watch::EventHub`].
//!
//! Each watcher has a queue of `server.limits.watch_buffer_events`; a watcher whose queue is
//! full (it stopped reading) or who fell behind the hub is ended with RESOURCE_EXHAUSTED after
//! what it had queued, so no watcher makes the server buffer without bound. A watcher is ended
//! with UNAVAILABLE when the event source stops (it could not know what it missed).
//!
//! In a cluster the other nodes' events are merged in (`SandboxBackend::peer_events`); a `Watch`
//! another node makes for that ([`NodeOnly`]) is served this node's own events only.

use crate::service::rpc_table::name as rpc;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use sandboxd_proto::v1 as pb;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc::error::TrySendError;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use super::inventory::{info, status_from_proto};
use super::{convert, BoxStream, SandboxApi};
use crate::auth::Principal;
use crate::core::inventory::ListQuery;
use crate::core::watch::{EventKind, NodeOnly, PeerEvents, SandboxEvent, WatchFilter};

/// How long a new watch waits for the event source to come up.
const SOURCE_WAIT: Duration = Duration::from_secs(10);

/// Sandboxes listed per page for `include_existing`.
const EXISTING_PAGE: usize = 1000;

pub(super) async fn watch(
    api: &SandboxApi,
    request: Request<pb::WatchRequest>,
) -> Result<Response<BoxStream<pb::WatchResponse>>, Status> {
    let principal = Principal::of(&request);
    SandboxApi::require_key(&principal, rpc::WATCH)?;
    let node_only = request.extensions().get::<NodeOnly>().cloned();
    let req = request.into_inner();
    let span = tracing::info_span!("rpc", rpc = rpc::WATCH);
    let labels = convert::sorted(req.labels);
    crate::core::metadata::validate_metadata("labels", &labels)?;
    let statuses = req.statuses.iter().map(|&s| status_from_proto(s)).collect::<Result<Vec<_>, _>>()?;
    let tenant = match &node_only {
        Some(merging) => merging.tenant.clone(),
        None => principal.tenant().map(String::from),
    };
    let hub = api
        .backend()
        .event_hub()
        .ok_or_else(|| Status::unimplemented("this backend cannot tell lifecycle events"))?;
    // Subscribed before the listing, so nothing between the two is missed (an event may
    // repeat what the listing shows).
    let mut events = hub.subscribe();
    if !hub.until_up(SOURCE_WAIT).await {
        return Err(Status::unavailable(
            "the server's event source (docker events) is not running; try again",
        ));
    }
    let mut peers = match node_only {
        Some(_) => None,
        None => {
            let filter =
                WatchFilter { labels: labels.clone(), statuses: statuses.clone(), tenant: tenant.clone() };
            api.backend().peer_events(&filter).await
        }
    };
    let mut existing = Vec::new();
    if req.include_existing {
        let mut query = ListQuery {
            labels: labels.clone(),
            statuses: statuses.clone(),
            page_size: EXISTING_PAGE,
            after: None,
            tenant: tenant.clone(),
            ..Default::default()
        };
        loop {
            let page = api.backend().list(&query).instrument(span.clone()).await?;
            existing.extend(page.sandboxes);
            match page.next {
                Some(next) => query.after = Some(next),
                None => break,
            }
        }
    }
    let buffer = api.policy.limits.watch_buffer_events as usize;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<pb::WatchResponse, Status>>(buffer);
    let (end_tx, end_rx) = tokio::sync::oneshot::channel::<Status>();
    let lifecycle = api.lifecycle().clone();
    let mut shutdown = api.shutdown.clone();
    tokio::spawn(
        async move {
            for mut sandbox in existing {
                sandbox.expires_at_unix_ms =
                    lifecycle.lease_end(&sandbox.sandbox_id, sandbox.expires_at_unix_ms);
                let event = SandboxEvent {
                    kind: EventKind::Existing,
                    sandbox,
                    tenant: None,
                    time_unix_ms: crate::core::watch::now_ms(),
                    exit_code: None,
                    oom_killed: false,
                    reason: String::new(),
                    failure_kind: None,
                };
                if tx.send(Ok(wire(&event))).await.is_err() {
                    return;
                }
            }
            let end = loop {
                let event = tokio::select! {
                    event = events.recv() => event,
                    Some(event) = next_peer_event(&mut peers) => match event {
                        Ok(event) => Ok(Arc::new(event)),
                        Err(why) => break Status::resource_exhausted(format!(
                            "watcher fell behind: {why}; watch again (with include_existing)"
                        )),
                    },
                    leave = super::pump::leaving(&tx, &mut shutdown) => match leave {
                        super::pump::Leave::Caller => return,
                        super::pump::Leave::Shutdown => break Status::unavailable("the server is shutting down"),
                    },
                    () = hub.until_down() => {
                        break Status::unavailable(
                            "the server's event source (docker events) restarted; events may have been \
                             missed: watch again (with include_existing)",
                        );
                    }
                };
                let event: Arc<SandboxEvent> = match event {
                    Ok(event) => event,
                    Err(RecvError::Lagged(n)) => {
                        break Status::resource_exhausted(format!(
                            "watcher fell behind: {n} events passed it; watch again (with include_existing)"
                        ));
                    }
                    Err(RecvError::Closed) => break Status::unavailable("the event source ended"),
                };
                if !event.matches(&labels, &statuses, tenant.as_deref()) {
                    continue;
                }
                match tx.try_send(Ok(wire(&event))) {
                    Ok(()) => {}
                    Err(TrySendError::Full(_)) => {
                        break Status::resource_exhausted(format!(
                            "watcher fell behind: {buffer} events were waiting for it \
                             (server.limits.watch_buffer_events); watch again (with include_existing)"
                        ));
                    }
                    Err(TrySendError::Closed(_)) => return,
                }
            };
            tracing::info!(code = ?end.code(), reason = end.message(), "watch ended");
            let _ = end_tx.send(end);
        }
        .instrument(span),
    );
    // What was queued is delivered first, then the reason the watch ended.
    let ended = futures_util::stream::once(end_rx).filter_map(|end| async move { end.ok().map(Err) });
    Ok(Response::new(Box::pin(ReceiverStream::new(rx).chain(ended))))
}

/// The next event of the other nodes of a cluster; never, on one host.
async fn next_peer_event(peers: &mut Option<PeerEvents>) -> Option<Result<SandboxEvent, String>> {
    match peers {
        Some(peers) => peers.next().await,
        None => std::future::pending().await,
    }
}

/// Who closed a sandbox, for its REMOVED event.
pub(super) fn closed_by(principal: &Principal) -> String {
    match principal {
        Principal::Operator => "closed by Close (operator)".to_string(),
        Principal::Tenant(t) => format!("closed by Close (tenant {:?})", t.name),
        Principal::Token(c) => format!("closed by Close (token {})", c.jti),
    }
}

fn wire(event: &SandboxEvent) -> pb::WatchResponse {
    let kind = match event.kind {
        EventKind::Created => pb::SandboxEventKind::Created,
        EventKind::Ready => pb::SandboxEventKind::Ready,
        EventKind::Paused => pb::SandboxEventKind::Paused,
        EventKind::Resumed => pb::SandboxEventKind::Resumed,
        EventKind::Stopped => pb::SandboxEventKind::Stopped,
        EventKind::LeaseExpired => pb::SandboxEventKind::LeaseExpired,
        EventKind::Removed => pb::SandboxEventKind::Removed,
        EventKind::Existing => pb::SandboxEventKind::Existing,
        EventKind::Hibernated => pb::SandboxEventKind::Hibernated,
    };
    pb::WatchResponse {
        event: Some(pb::SandboxEvent {
            kind: kind as i32,
            sandbox_id: event.sandbox.sandbox_id.clone(),
            sandbox: Some(info(event.sandbox.clone())),
            time_unix_ms: event.time_unix_ms,
            exit_code: event.exit_code,
            oom_killed: event.oom_killed,
            reason: event.reason.clone(),
            failure_kind: crate::core::failure::FailureKind::to_wire(event.failure_kind),
        }),
    }
}
