//! `Stats` and `StatsStream`: readings of a sandbox's resource usage (read scope).

use crate::service::rpc_table::name as rpc;
use std::time::Duration;

use sandboxd_proto::v1 as pb;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use super::status::invalid;
use super::{span, BoxStream, SandboxApi};
use crate::auth::Principal;
use crate::core::spec::SandboxId;
use crate::core::stats::SandboxStats;
use crate::error::ProviderError;

pub(super) async fn stats(
    api: &SandboxApi,
    request: Request<pb::StatsRequest>,
) -> Result<Response<pb::StatsResponse>, Status> {
    let principal = Principal::of(&request);
    let req = request.into_inner();
    let span = span(rpc::STATS, &req.sandbox_id);
    async move {
        let id = SandboxId::parse("sandbox_id", &req.sandbox_id)?;
        api.authorize(&principal, id.as_str(), const { super::rpc_table::scope(rpc::STATS) }).await?;
        Ok(Response::new(wire(api.backend().stats(&id).await?)))
    }
    .instrument(span)
    .await
}

/// `interval_s` when the request leaves it at 0.
const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);

pub(super) async fn stats_stream(
    api: &SandboxApi,
    request: Request<pb::StatsStreamRequest>,
) -> Result<Response<BoxStream<pb::StatsResponse>>, Status> {
    let principal = Principal::of(&request);
    let req = request.into_inner();
    let span = span(rpc::STATS_STREAM, &req.sandbox_id);
    let (id, interval, first) = async {
        let id = SandboxId::parse("sandbox_id", &req.sandbox_id)?;
        let interval = match req.interval_s {
            0.0 => DEFAULT_INTERVAL,
            s if (0.1..=3600.0).contains(&s) => Duration::from_secs_f64(s),
            s => {
                return Err(invalid(
                    "interval_s",
                    format!("must be 0.1 to 3600 seconds, or 0 for 1 (got {s})"),
                ))
            }
        };
        api.authorize(&principal, id.as_str(), const { super::rpc_table::scope(rpc::STATS_STREAM) }).await?;
        // The first reading's errors (unknown, stopped) are the call's.
        let first = api.backend().stats(&id).await?;
        Ok::<_, Status>((id, interval, first))
    }
    .instrument(span.clone())
    .await?;
    let backend = api.backend().clone();
    let mut shutdown = api.shutdown.clone();
    // One reading waits at most: a caller that stops reading is not read for.
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tokio::spawn(
        async move {
            let mut reading = Ok(first);
            loop {
                match reading {
                    Ok(stats) => {
                        if tx.send(Ok(wire(stats))).await.is_err() {
                            return;
                        }
                    }
                    // The sandbox stopped or went: the stream is over.
                    Err(ProviderError::Stopped(_) | ProviderError::SandboxNotFound(_)) => return,
                    Err(e) => {
                        let _ = tx.send(Err(Status::from(e))).await;
                        return;
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(interval) => {}
                    _ = tx.closed() => return,
                    _ = shutdown.wait_for(|down| *down) => return,
                }
                reading = backend.stats(&id).await;
            }
        }
        .instrument(span),
    );
    Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
}

pub(super) fn wire(s: SandboxStats) -> pb::StatsResponse {
    pb::StatsResponse {
        read_at_unix_ns: s.read_at_unix_ns,
        cpu_usage_ns: s.cpu_usage_ns,
        cpu_limit: s.cpu_limit,
        memory_usage_bytes: s.memory_usage_bytes,
        memory_limit_bytes: s.memory_limit_bytes,
        memory_peak_bytes: s.memory_peak_bytes,
        pids: s.pids,
        network_rx_bytes: s.network_rx_bytes,
        network_tx_bytes: s.network_tx_bytes,
        block_read_bytes: s.block_read_bytes,
        block_write_bytes: s.block_write_bytes,
        cgroup_version: s.cgroup_version.to_string(),
    }
}
