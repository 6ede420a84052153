//! `ListPtySessions`: the terminal and pipe sessions a sandbox's agent keeps, for `PtyAttach`.

use crate::service::rpc_table::name as rpc;
use sandboxd_proto::v1 as pb;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use super::{span, SandboxApi};
use crate::auth::Principal;
use crate::core::spec::SandboxId;
use crate::core::terminal::TerminalInfo;

impl From<TerminalInfo> for pb::PtySessionInfo {
    fn from(s: TerminalInfo) -> Self {
        pb::PtySessionInfo {
            session_id: s.session_id,
            command: s.command,
            mode: s.mode.as_str().to_string(),
            rows: u32::from(s.rows),
            cols: u32::from(s.cols),
            running: s.exit_code.is_none(),
            exit_code: s.exit_code,
            attached: s.attached,
            retained_bytes: s.retained_bytes,
        }
    }
}

pub(super) async fn list_pty_sessions(
    api: &SandboxApi,
    request: Request<pb::ListPtySessionsRequest>,
) -> Result<Response<pb::ListPtySessionsResponse>, Status> {
    let principal = Principal::of(&request);
    let req = request.into_inner();
    async {
        let id = SandboxId::parse("sandbox_id", &req.sandbox_id)?;
        // Listing shows what runs (the commands): a terminal's scope, not a reader's.
        let handle = api
            .authorize_handle(
                &principal,
                id.as_str(),
                const { super::rpc_table::scope(rpc::LIST_PTY_SESSIONS) },
            )
            .await?;
        let sessions = api.backend().list_terminals(&handle).await?;
        Ok(Response::new(pb::ListPtySessionsResponse {
            sessions: sessions.into_iter().map(pb::PtySessionInfo::from).collect(),
        }))
    }
    .instrument(span(rpc::LIST_PTY_SESSIONS, &req.sandbox_id))
    .await
}
