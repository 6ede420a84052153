//! `List` and `SetTimeout`: what this service owns, and how long each sandbox may live.

use crate::service::rpc_table::name as rpc;
use sandboxd_proto::v1 as pb;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use super::status::invalid;
use super::{convert, SandboxApi};
use crate::core::inventory::{ListQuery, PageKey, SandboxSummary};
use crate::core::spec::{SandboxId, SandboxStatus};

/// `page_size` when the request leaves it at 0.
pub const DEFAULT_PAGE_SIZE: u32 = 100;
/// The largest `page_size`.
pub const MAX_PAGE_SIZE: u32 = 1000;

pub(super) async fn list(
    api: &SandboxApi,
    request: Request<pb::ListRequest>,
) -> Result<Response<pb::ListResponse>, Status> {
    let principal = crate::auth::Principal::of(&request);
    SandboxApi::require_key(&principal, rpc::LIST)?;
    let req = request.into_inner();
    async move {
        let mut query = query(req)?;
        query.tenant = principal.tenant().map(String::from);
        let page = api.lifecycle().list(query).await?;
        Ok(Response::new(pb::ListResponse {
            sandboxes: page
                .sandboxes
                .into_iter()
                .map(|mut s| {
                    s.expires_at_unix_ms = api.lifecycle().lease_end(&s.sandbox_id, s.expires_at_unix_ms);
                    info(s)
                })
                .collect(),
            next_page_token: page.next.map(|k| k.to_token()).unwrap_or_default(),
        }))
    }
    .instrument(tracing::info_span!("rpc", rpc = rpc::LIST))
    .await
}

fn query(req: pb::ListRequest) -> Result<ListQuery, Status> {
    let page_size = match req.page_size {
        0 => DEFAULT_PAGE_SIZE,
        n if n <= MAX_PAGE_SIZE => n,
        n => return Err(invalid("page_size", format!("must be at most {MAX_PAGE_SIZE} (got {n})"))),
    };
    let statuses = req.statuses.iter().map(|&s| status_from_proto(s)).collect::<Result<Vec<_>, _>>()?;
    let after = match req.page_token.as_str() {
        "" => None,
        token => Some(PageKey::from_token(token)?),
    };
    Ok(ListQuery {
        labels: convert::sorted(req.labels),
        statuses,
        page_size: page_size as usize,
        after,
        tenant: None,
        ..Default::default()
    })
}

pub(super) fn status_from_proto(value: i32) -> Result<SandboxStatus, Status> {
    SandboxStatus::try_from_wire(value).ok_or_else(|| {
        invalid(
            "statuses",
            format!(
                "{value} is not a state to filter by (STARTING, RUNNING, PAUSED, STOPPED, ERROR, UNKNOWN)"
            ),
        )
    })
}

pub(super) fn info(s: SandboxSummary) -> pb::SandboxInfo {
    pb::SandboxInfo {
        created_at_unix_ms: s.created_at_unix_ms(),
        status: s.status.to_wire() as i32,
        image: s.image,
        expires_at_unix_ms: s.expires_at_unix_ms,
        runtime: s.runtime.unwrap_or_default(),
        sandbox: Some(pb::SandboxRef {
            sandbox_id: s.sandbox_id,
            ports: s.ports.into_iter().map(u32::from).collect(),
            workdir: s.workdir,
            metadata: s.metadata.into_iter().collect(),
            token: String::new(),
        }),
    }
}

/// Move a sandbox's lease to `ttl_s` from now (capped by `server.max_ttl_s`); it survives a
/// server restart (see `lease`).
pub(super) async fn set_timeout(
    api: &SandboxApi,
    request: Request<pb::SetTimeoutRequest>,
) -> Result<Response<pb::SetTimeoutResponse>, Status> {
    let principal = crate::auth::Principal::of(&request);
    let req = request.into_inner();
    let span = super::span(rpc::SET_TIMEOUT, &req.sandbox_id);
    async move {
        let id = SandboxId::parse("sandbox_id", &req.sandbox_id)?;
        api.authorize(&principal, id.as_str(), const { super::rpc_table::scope(rpc::SET_TIMEOUT) }).await?;
        let ttl = convert::seconds("ttl_s", req.ttl_s)?;
        let expires_at_unix_ms = api.lifecycle().set_timeout(&id, ttl).await?;
        tracing::info!(expires_at_unix_ms, "lease moved");
        Ok(Response::new(pb::SetTimeoutResponse { expires_at_unix_ms }))
    }
    .instrument(span)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_size_and_statuses_are_checked() {
        let q = query(pb::ListRequest::default()).unwrap();
        assert_eq!(q.page_size, 100);
        let err = query(pb::ListRequest { page_size: 1001, ..Default::default() }).unwrap_err();
        assert!(err.message().contains("page_size"));
        let err = query(pb::ListRequest { statuses: vec![0], ..Default::default() }).unwrap_err();
        assert!(err.message().contains("statuses"));
        let err = query(pb::ListRequest { page_token: "nope".into(), ..Default::default() }).unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.message().contains("page_token"));
    }
}
