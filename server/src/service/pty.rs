//! The bidirectional `Pty` RPC: one terminal session per call. Input, resizes, signals and
//! close flow in; `opened`, output, stderr and the exit code flow out. A caller that half-closes
//! or cancels, or a server shutting down, closes the session in the container.

use crate::service::rpc_table::name as rpc;
use std::sync::Arc;
use std::time::Duration;

use sandboxd_proto::v1 as pb;
use sandboxd_proto::v1::pty_request::Request as In;
use sandboxd_proto::v1::pty_response::Response as Out;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Response, Status, Streaming};
use tracing::Instrument;

use super::status::invalid;
use super::{BoxStream, SandboxApi};
use crate::core::backend::TerminalSession;
use crate::core::spec::{PtySpec, Signal};
use crate::core::terminal::{AttachSpec, PtyError, TerminalMode};

/// Requests read ahead while an input write is blocked (the stream is still watched for a
/// half-close or cancel; these wait for the write).
const QUEUED_WHILE_BLOCKED: usize = 64;

/// Largest output message: bursts are batched up to this.
const MAX_OUTPUT_MESSAGE: usize = 1 << 20;

fn pty_status(e: PtyError) -> Status {
    match e {
        PtyError::Invalid { field, message } => invalid(&field, message),
        PtyError::Timeout(d) => Status::deadline_exceeded(format!("timed out after {d:?}")),
        PtyError::TakenOver(message) => Status::aborted(message),
        PtyError::Exhausted(message) => Status::resource_exhausted(message),
        PtyError::Unsupported(message) => Status::unimplemented(message),
        other => Status::failed_precondition(format!("pty session failed: {other}")),
    }
}

fn out(response: Out) -> Result<pb::PtyResponse, Status> {
    Ok(pb::PtyResponse { response: Some(response) })
}

/// What the first request asks for.
enum First {
    Open(pb::PtyOpen),
    Attach(pb::PtyAttach),
}

/// Longest session id an attach may name (the agent's are 16 hex digits).
const MAX_SESSION_ID: usize = 128;

/// An attach's session id: 1..=128 characters of `[A-Za-z0-9_-]`.
pub(super) fn check_session_id(field: &str, id: &str) -> Result<(), Status> {
    let ok = !id.is_empty()
        && id.len() <= MAX_SESSION_ID
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(invalid(field, format!("must be 1..={MAX_SESSION_ID} characters of A-Z, a-z, 0-9, '-' or '_' (a PtyOpened.session_id)")))
    }
}

pub(super) async fn serve_pty(
    api: SandboxApi,
    principal: crate::auth::Principal,
    mut requests: Streaming<pb::PtyRequest>,
) -> Result<Response<BoxStream<pb::PtyResponse>>, Status> {
    let wait = api.first_message_timeout();
    let first = tokio::time::timeout(wait, requests.message()).await.map_err(|_| {
        Status::deadline_exceeded(format!(
            "no PtyOpen within {wait:?} (server.limits.first_message_timeout_s)"
        ))
    })?;
    let (sandbox_id, first) = match first?.and_then(|m| m.request) {
        Some(In::Open(open)) => (open.sandbox_id.clone(), First::Open(open)),
        Some(In::Attach(attach)) => (attach.sandbox_id.clone(), First::Attach(attach)),
        _ => return Err(invalid("open", "the first PtyRequest must be a PtyOpen or a PtyAttach")),
    };
    let span = tracing::info_span!("rpc", rpc = rpc::PTY, sandbox_id = %sandbox_id, session_id = tracing::field::Empty);
    let session = async {
        // Arguments first: a bad one changes nothing.
        let open = match &first {
            First::Open(open) => Some(PtySpec::from_open(open).map_err(|e| invalid(e.field, e.message))?),
            First::Attach(attach) => {
                check_session_id("attach.session_id", &attach.session_id)?;
                None
            }
        };
        let handle = api
            .authorize_handle(&principal, &sandbox_id, const { super::rpc_table::scope(rpc::PTY) })
            .await?;
        let open = open.map(|mut spec| {
            spec.env = api.call_env(&handle, std::mem::take(&mut spec.env));
            spec
        });
        let slot = api.pty_slots.acquire(&handle.sandbox_id)?;
        let session = match (open, &first) {
            (Some(spec), _) => api.backend().open_terminal(&handle, &spec).await?,
            (None, First::Attach(attach)) => {
                let attach = AttachSpec {
                    session_id: attach.session_id.clone(),
                    takeover: attach.takeover,
                    since: attach.since,
                };
                api.backend().attach_terminal(&handle, &attach).await?
            }
            (None, First::Open(_)) => unreachable!("an open always has its spec"),
        };
        Ok::<_, Status>((session, slot))
    }
    .instrument(span.clone())
    .await?;
    let (session, slot) = session;
    span.record("session_id", session.id());

    let (tx, rx) = mpsc::channel::<Result<pb::PtyResponse, Status>>(16);
    let opened = pb::PtyOpened {
        session_id: session.id().to_string(),
        mode: session.mode().as_str().to_string(),
        offset: session.offset(),
    };
    let _ = tx.send(out(Out::Opened(opened))).await;

    let live = crate::metrics::GaugeGuard::hold(&crate::metrics::global().pty_sessions);
    let output = pump_output(session.clone(), tx.clone());
    // The session's slot is given back when its output ends (it ends with the session).
    tokio::spawn(
        async move {
            output.await;
            drop(live);
            drop(slot)
        }
        .instrument(span.clone()),
    );
    tokio::spawn(pump_input(session, requests, tx, api.shutdown.clone()).instrument(span));
    Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
}

/// Output (and stderr in pipe mode) to the caller, then the exit code or the failure.
async fn pump_output(session: Arc<dyn TerminalSession>, tx: mpsc::Sender<Result<pb::PtyResponse, Status>>) {
    let stderr_task = (session.mode() == TerminalMode::Pipe).then(|| {
        let (session, tx) = (session.clone(), tx.clone());
        tokio::spawn(async move {
            while let Ok(chunk) = session.read_stderr(None).await {
                if chunk.is_empty() || tx.send(out(Out::Stderr(chunk))).await.is_err() {
                    break;
                }
            }
        })
    });
    let mut pending = None;
    loop {
        let next = match pending.take() {
            Some(next) => next,
            None => session.read(None).await,
        };
        match next {
            Ok(chunk) if chunk.is_empty() => break,
            Ok(mut chunk) => {
                // Whatever else is already waiting goes in the same message: one gRPC message
                // per burst rather than per pty read.
                while chunk.len() < MAX_OUTPUT_MESSAGE {
                    match session.read(Some(Duration::ZERO)).await {
                        Ok(more) if !more.is_empty() => chunk.extend_from_slice(&more),
                        Err(PtyError::Timeout(_)) => break,
                        other => {
                            pending = Some(other);
                            break;
                        }
                    }
                }
                if tx.send(out(Out::Output(chunk))).await.is_err() {
                    // The caller is gone: what a dropped stream gets (the session ends, or
                    // waits its detach timeout for an attach).
                    session.release().await;
                    return;
                }
            }
            Err(e) => {
                let _ = tx.send(Err(pty_status(e))).await;
                let _ = session.close().await;
                return;
            }
        }
    }
    if let Some(task) = stderr_task {
        let _ = task.await;
    }
    match session.wait_exit(Some(Duration::from_secs(30))).await {
        Ok(code) => {
            let _ = tx.send(out(Out::Exit(pb::PtyExit { exit_code: code }))).await;
        }
        // Detached: the stream ends cleanly, the session runs on.
        Err(PtyError::Detached) => return,
        Err(e) => {
            let _ = tx.send(Err(pty_status(e))).await;
        }
    }
    let _ = session.close().await;
}

/// How the caller's side of a stream ended.
enum Leave {
    /// `PtyClose`, or a request that failed: the session ends.
    Close,
    /// `PtyDetach`: the stream ends, the session runs on.
    Detach,
    /// Cancelled, half-closed, the caller gone or the server shutting down: the session ends,
    /// or waits its detach timeout for an attach.
    Release,
}

/// The caller's requests, until it closes, detaches, cancels, or the server shuts down.
async fn pump_input(
    session: Arc<dyn TerminalSession>,
    mut requests: Streaming<pb::PtyRequest>,
    tx: mpsc::Sender<Result<pb::PtyResponse, Status>>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    // Requests that arrived while an input write was blocked, in order.
    let mut queued = std::collections::VecDeque::new();
    let leave = loop {
        let message = if let Some(request) = queued.pop_front() {
            Ok(Some(pb::PtyRequest { request }))
        } else {
            tokio::select! {
            m = requests.message() => m,
            leave = super::pump::leaving(&tx, &mut shutdown) => {
                if leave == super::pump::Leave::Shutdown {
                    tracing::info!("server shutting down: letting go of the pty session");
                }
                break Leave::Release;
            }
            // The program ended: let go of the stream so it ends after the exit message (the
            // output pump drains what is left and closes the session).
            _ = session.wait_exit(None) => return,
            }
        };
        let request = match message {
            Ok(Some(m)) => m.request,
            Ok(None) | Err(_) => break Leave::Release, // half-close or cancel
        };
        // A write the program does not read blocks: the caller's cancel, a shutdown or the
        // program's end must still end the session, so the request runs inside the select.
        match request {
            Some(In::Close(_)) => break Leave::Close,
            Some(In::Detach(_)) => break Leave::Detach,
            _ => {}
        }
        let handle = async {
            match request {
                Some(In::Input(bytes)) => session.write(&bytes).await,
                Some(In::StdinEnd(_)) => session.end_input().await,
                Some(In::Resize(r)) => match (u16::try_from(r.rows), u16::try_from(r.cols)) {
                    (Ok(rows), Ok(cols)) if rows > 0 && cols > 0 => session.resize(rows, cols).await,
                    _ => Err(PtyError::Invalid {
                        field: "resize".into(),
                        message: format!("rows and cols must be in 1..=65535 (got {}x{})", r.rows, r.cols),
                    }),
                },
                Some(In::Signal(s)) => match Signal::try_from(s.name.as_str()) {
                    Ok(signal) => session.send_signal(signal).await,
                    Err(e) => Err(PtyError::Invalid { field: "signal".into(), message: e.to_string() }),
                },
                Some(In::Attach(_)) => Err(PtyError::Invalid {
                    field: "attach".into(),
                    message: "only the first PtyRequest may be a PtyAttach".into(),
                }),
                Some(In::Close(_)) | Some(In::Detach(_)) | Some(In::Open(_)) | None => {
                    Err(PtyError::Invalid {
                        field: "open".into(),
                        message: "only the first PtyRequest may be a PtyOpen".into(),
                    })
                }
            }
        };
        // The caller's stream is read meanwhile, so a half-close, a cancel, a Close or a
        // Detach ends the stream even while a write is blocked; other requests wait their
        // turn, in order.
        tokio::pin!(handle);
        let mut reading = true;
        let result = loop {
            tokio::select! {
                r = &mut handle => break Ok(r),
                _ = super::pump::leaving(&tx, &mut shutdown) => break Err(Leave::Release),
                _ = session.wait_exit(None) => return,
                m = requests.message(), if reading => match m {
                    Ok(Some(m)) if matches!(m.request, Some(In::Close(_))) => break Err(Leave::Close),
                    Ok(Some(m)) if matches!(m.request, Some(In::Detach(_))) => break Err(Leave::Detach),
                    Ok(Some(m)) => {
                        queued.push_back(m.request);
                        // Bounded: past a few requests, wait for the write before reading more.
                        reading = queued.len() < QUEUED_WHILE_BLOCKED;
                    }
                    Ok(None) | Err(_) => break Err(Leave::Release),
                },
            }
        };
        let result = match result {
            Ok(result) => result,
            Err(leave) => break leave,
        };
        if let Err(e) = result {
            if session.closed() && !matches!(e, PtyError::Invalid { .. }) {
                continue; // the output pump reports how the session ended
            }
            let _ = tx.send(Err(pty_status(e))).await;
            break Leave::Close;
        }
    };
    match leave {
        Leave::Close => {
            if let Err(e) = session.close().await {
                tracing::warn!(error = %e, "closing pty session failed");
            }
        }
        Leave::Release => session.release().await,
        Leave::Detach => {
            if let Err(e) = session.detach().await {
                // A session that cannot outlive its stream: say so, and end it with the stream.
                let _ = tx.send(Err(pty_status(e))).await;
                if let Err(e) = session.close().await {
                    tracing::warn!(error = %e, "closing pty session failed");
                }
            }
        }
    }
}
