//! `Exec`, and what `ExecStream` shares with it: the request as the backend takes it (the
//! timeout capped by the call's deadline) and how an exec's end is counted and reported.

use crate::service::rpc_table::name as rpc;
use sandboxd_proto::v1 as pb;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use super::{convert, deadline, span, SandboxApi};
use crate::auth::Principal;
use crate::core::spec::{ExecErrorType, ExecParams, ExecResult, SandboxHandle};

pub(super) async fn exec(
    api: &SandboxApi,
    request: Request<pb::ExecRequest>,
) -> Result<Response<pb::ExecResponse>, Status> {
    let span = span(rpc::EXEC, &request.get_ref().sandbox_id);
    async {
        let _slot = api.quotas.exec_slot(api, &Principal::of(&request))?;
        let (handle, command, params, answer_by) = exec_request(api, request).await?;
        let backend = api.backend().clone();
        let run = async move { backend.exec(&handle, &command, &params).await }.in_current_span();
        let result = match answer_by {
            // The command's timeout is the deadline's: it is killed then, and its exit report
            // may come late on a loaded host. The caller hears DEADLINE_EXCEEDED in time either
            // way (never its own client's CANCELLED); the kill goes on in the background.
            Some(by) => match tokio::time::timeout(by, tokio::spawn(run)).await {
                Ok(joined) => {
                    joined.map_err(|e| Status::internal(format!("the exec task failed: {e}")))??
                }
                Err(_) => {
                    crate::metrics::global().exec_result(ExecErrorType::Timeout.as_str());
                    return Err(past_deadline());
                }
            },
            None => run.await?,
        };
        Ok(Response::new(pb::ExecResponse::from(exec_outcome(result, answer_by.is_some())?)))
    }
    .instrument(span)
    .await
}

/// An exec request as the backend takes it: the sandbox, the command, its parameters with
/// the timeout capped by the call's deadline, and, when that cap applied, by when the answer
/// must leave (`deadline::answer_by`).
// `Exec` and `ExecStream` share `exec_request`'s check: the table must give them one scope.
const _: () = assert!(
    super::rpc_table::scope(rpc::EXEC) as u8 == super::rpc_table::scope(rpc::EXEC_STREAM) as u8,
    "Exec and ExecStream share exec_request's scope check"
);

pub(super) async fn exec_request(
    api: &SandboxApi,
    request: Request<pb::ExecRequest>,
) -> Result<(SandboxHandle, String, ExecParams, Option<std::time::Duration>), Status> {
    let deadline = deadline::grpc_timeout(request.metadata());
    let principal = Principal::of(&request);
    let handle = api
        .authorize_handle(
            &principal,
            &request.get_ref().sandbox_id,
            const { super::rpc_table::scope(rpc::EXEC) },
        )
        .await?;
    let req = request.into_inner();
    let requested = req.timeout_s.map(|t| convert::seconds("timeout_s", t)).transpose()?;
    let (timeout, capped) = deadline::cap(requested.or(api.backend().default_exec_timeout()), deadline);
    let params = ExecParams {
        cwd: req.cwd,
        env: api.call_env(&handle, convert::sorted(req.env)),
        timeout,
        user: req.user,
        stdin: req.stdin,
    };
    Ok((handle, req.command, params, deadline.filter(|_| capped).map(deadline::answer_by)))
}

/// How an exec ended, for `Exec` and `ExecStream` alike: counted once in the exec-results
/// metric; a timeout that was the call's deadline (not the command's own) is DEADLINE_EXCEEDED.
pub(super) fn exec_outcome(result: ExecResult, capped: bool) -> Result<ExecResult, Status> {
    crate::metrics::global().exec_result(result.error_type.map(|e| e.as_str()).unwrap_or(""));
    if let Some(kind) = result.failure_kind {
        crate::metrics::global().failure(kind);
        crate::otel::attribute("failure.kind", kind.reason());
    }
    if capped && result.error_type == Some(ExecErrorType::Timeout) {
        return Err(past_deadline());
    }
    Ok(result)
}

/// The answer to an exec the call's deadline cut short.
fn past_deadline() -> Status {
    Status::deadline_exceeded("the call's deadline passed before the command finished")
}
