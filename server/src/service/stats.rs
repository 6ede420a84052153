//! `Stats`: one reading of a sandbox's resource usage (read scope).

use sandboxd_proto::v1 as pb;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use super::{span, SandboxApi};
use crate::auth::{Principal, Scope};
use crate::spec::SandboxId;
use crate::stats::SandboxStats;

pub(super) async fn stats(
    api: &SandboxApi,
    request: Request<pb::StatsRequest>,
) -> Result<Response<pb::StatsResponse>, Status> {
    let principal = Principal::of(&request);
    let req = request.into_inner();
    let span = span("Stats", &req.sandbox_id);
    async move {
        let id = SandboxId::parse("sandbox_id", &req.sandbox_id)?;
        api.authorize(&principal, id.as_str(), Scope::Read).await?;
        Ok(Response::new(wire(api.backend().stats(&id).await?)))
    }
    .instrument(span)
    .await
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
