//! `StartProcess`, `ListProcesses`, `AttachProcess`, `SignalProcess`: background processes
//! supervised by the sandbox's agent. All need `operate` on the sandbox.

use crate::service::rpc_table::name as rpc;
use sandboxd_proto::v1 as pb;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use super::{convert, span, BoxStream, SandboxApi};
use crate::auth::Principal;
use crate::core::processes::{self, ProcessEvent, ProcessInfo, ProcessStart};

impl From<ProcessInfo> for pb::ProcessInfo {
    fn from(p: ProcessInfo) -> Self {
        pb::ProcessInfo {
            process_id: p.process_id,
            pid: p.pid,
            command: p.command,
            user: p.user,
            started_at_unix_ms: p.started_at_unix_ms,
            running: p.exit_code.is_none(),
            exit_code: p.exit_code,
            retained_bytes: p.end_offset.saturating_sub(p.oldest_offset),
            pty: p.pty,
            attached: p.attached,
            oldest_offset: p.oldest_offset,
            end_offset: p.end_offset,
        }
    }
}

impl From<ProcessEvent> for pb::AttachProcessResponse {
    fn from(e: ProcessEvent) -> Self {
        use pb::attach_process_response::Event;
        pb::AttachProcessResponse {
            event: Some(match e {
                ProcessEvent::Attached { offset, pid } => {
                    Event::Attached(pb::ProcessAttached { offset, pid })
                }
                ProcessEvent::Output { data, offset, stderr } => {
                    Event::Output(pb::ProcessOutput { data, offset, stderr })
                }
                ProcessEvent::Exited { code } => Event::Exited(pb::ProcessExited { exit_code: code }),
            }),
        }
    }
}

pub(super) async fn start_process(
    api: &SandboxApi,
    request: Request<pb::StartProcessRequest>,
) -> Result<Response<pb::StartProcessResponse>, Status> {
    let principal = Principal::of(&request);
    let req = request.into_inner();
    async {
        let start = ProcessStart {
            command: req.command,
            argv: req.argv,
            cwd: req.cwd,
            env: convert::sorted(req.env),
            user: req.user,
            pty: if req.pty { Some(processes::terminal_size(req.rows, req.cols)?) } else { None },
        };
        start.check()?;
        let handle = api
            .authorize_handle(
                &principal,
                &req.sandbox_id,
                const { super::rpc_table::scope(rpc::START_PROCESS) },
            )
            .await?;
        let started = api.backend().start_process(&handle, &start).await?;
        Ok(Response::new(pb::StartProcessResponse { process_id: started.process_id, pid: started.pid }))
    }
    .instrument(span(rpc::START_PROCESS, &req.sandbox_id))
    .await
}

pub(super) async fn list_processes(
    api: &SandboxApi,
    request: Request<pb::ListProcessesRequest>,
) -> Result<Response<pb::ListProcessesResponse>, Status> {
    let principal = Principal::of(&request);
    let req = request.into_inner();
    async {
        let handle = api
            .authorize_handle(
                &principal,
                &req.sandbox_id,
                const { super::rpc_table::scope(rpc::LIST_PROCESSES) },
            )
            .await?;
        let list = api.backend().list_processes(&handle).await?;
        Ok(Response::new(pb::ListProcessesResponse { processes: list.into_iter().map(Into::into).collect() }))
    }
    .instrument(span(rpc::LIST_PROCESSES, &req.sandbox_id))
    .await
}

pub(super) async fn signal_process(
    api: &SandboxApi,
    request: Request<pb::SignalProcessRequest>,
) -> Result<Response<pb::SignalProcessResponse>, Status> {
    let principal = Principal::of(&request);
    let req = request.into_inner();
    async {
        let signal = processes::parse_signal("signal", &req.signal)?;
        let handle = api
            .authorize_handle(
                &principal,
                &req.sandbox_id,
                const { super::rpc_table::scope(rpc::SIGNAL_PROCESS) },
            )
            .await?;
        api.backend().signal_process(&handle, &req.process_id, signal).await?;
        Ok(Response::new(pb::SignalProcessResponse {}))
    }
    .instrument(span(rpc::SIGNAL_PROCESS, &req.sandbox_id))
    .await
}

/// The stream ends with `exited`, or a status (ABORTED when another attach took over); the
/// caller leaving detaches and the process runs on.
pub(super) async fn attach_process(
    api: &SandboxApi,
    request: Request<pb::AttachProcessRequest>,
) -> Result<Response<BoxStream<pb::AttachProcessResponse>>, Status> {
    let principal = Principal::of(&request);
    let req = request.into_inner();
    let span = span(rpc::ATTACH_PROCESS, &req.sandbox_id);
    let events = async {
        let handle = api
            .authorize_handle(
                &principal,
                &req.sandbox_id,
                const { super::rpc_table::scope(rpc::ATTACH_PROCESS) },
            )
            .await?;
        Ok::<_, Status>(api.backend().attach_process(&handle, &req.process_id, req.since).await?)
    }
    .instrument(span.clone())
    .await?;
    let shutdown = api.shutdown.clone();
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let at_shutdown = Err(crate::error::ProviderError::Unavailable(
        "the server is shutting down; the process runs on".into(),
    ));
    tokio::spawn(
        async move {
            super::pump::pump(&tx, shutdown, events, Some(at_shutdown), |event| {
                let last = !matches!(event, Ok(ProcessEvent::Attached { .. } | ProcessEvent::Output { .. }));
                (event.map(Into::into).map_err(Status::from), last)
            })
            .await
        }
        .instrument(span),
    );
    Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
}
