//! The bidirectional `Pty` RPC: one terminal session per call. Input, resizes, signals and
//! close flow in; `opened`, output, stderr and the exit code flow out. A caller that half-closes
//! or cancels, or a server shutting down, closes the session in the container.

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
use crate::backend::TerminalSession;
use crate::spec::{PtySpec, Signal};
use crate::terminal::{PtyError, TerminalMode};

/// Requests read ahead while an input write is blocked (the stream is still watched for a
/// half-close or cancel; these wait for the write).
const QUEUED_WHILE_BLOCKED: usize = 64;

/// Largest output message: bursts are batched up to this.
const MAX_OUTPUT_MESSAGE: usize = 1 << 20;

fn pty_status(e: PtyError) -> Status {
    match e {
        PtyError::Invalid { field, message } => invalid(&field, message),
        PtyError::Timeout(d) => Status::deadline_exceeded(format!("timed out after {d:?}")),
        other => Status::failed_precondition(format!("pty session failed: {other}")),
    }
}

fn out(response: Out) -> Result<pb::PtyResponse, Status> {
    Ok(pb::PtyResponse { response: Some(response) })
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
    let open = match first?.and_then(|m| m.request) {
        Some(In::Open(open)) => open,
        _ => return Err(invalid("open", "the first PtyRequest must be a PtyOpen")),
    };
    let span = tracing::info_span!("rpc", rpc = "Pty", sandbox_id = %open.sandbox_id, session_id = tracing::field::Empty);
    let session = async {
        let mut spec = PtySpec::from_open(&open).map_err(|e| invalid(e.field, e.message))?;
        api.authorize(&principal, &open.sandbox_id, crate::auth::Scope::Operate).await?;
        let handle = api.handle(&open.sandbox_id).await?;
        spec.env = api.call_env(&handle, std::mem::take(&mut spec.env));
        let slot = api.pty_slots.acquire(&handle.sandbox_id)?;
        Ok::<_, Status>((api.backend().open_terminal(&handle, &spec).await?, slot))
    }
    .instrument(span.clone())
    .await?;
    let (session, slot) = session;
    span.record("session_id", session.id());

    let (tx, rx) = mpsc::channel::<Result<pb::PtyResponse, Status>>(16);
    let opened =
        pb::PtyOpened { session_id: session.id().to_string(), mode: session.mode().as_str().to_string() };
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
                    // The caller is gone: end the session's processes.
                    let _ = session.close().await;
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
        Err(e) => {
            let _ = tx.send(Err(pty_status(e))).await;
        }
    }
    let _ = session.close().await;
}

/// The caller's requests, until it closes, cancels, or the server shuts down.
async fn pump_input(
    session: Arc<dyn TerminalSession>,
    mut requests: Streaming<pb::PtyRequest>,
    tx: mpsc::Sender<Result<pb::PtyResponse, Status>>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    // Requests that arrived while an input write was blocked, in order.
    let mut queued = std::collections::VecDeque::new();
    loop {
        let message = if let Some(request) = queued.pop_front() {
            Ok(Some(pb::PtyRequest { request }))
        } else {
            tokio::select! {
            m = requests.message() => m,
            _ = shutdown.wait_for(|down| *down) => {
                tracing::info!("server shutting down: closing pty session");
                break;
            }
            _ = tx.closed() => break,
            // The program ended: let go of the stream so it ends after the exit message (the
            // output pump drains what is left and closes the session).
            _ = session.wait_exit(None) => return,
            }
        };
        let request = match message {
            Ok(Some(m)) => m.request,
            Ok(None) | Err(_) => break, // half-close or cancel
        };
        // A write the program does not read blocks: the caller's cancel, a shutdown or the
        // program's end must still end the session, so the request runs inside the select.
        if matches!(request, Some(In::Close(_))) {
            break;
        }
        let handle = async {
            match request {
                Some(In::Input(bytes)) => session.write(&bytes).await,
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
                Some(In::Close(_)) | Some(In::Open(_)) | None => Err(PtyError::Invalid {
                    field: "open".into(),
                    message: "only the first PtyRequest may be a PtyOpen".into(),
                }),
            }
        };
        // The caller's stream is read meanwhile, so a half-close, a cancel or a Close ends the
        // session even while a write is blocked; other requests wait their turn, in order.
        tokio::pin!(handle);
        let mut reading = true;
        let result = loop {
            tokio::select! {
                r = &mut handle => break Some(r),
                _ = shutdown.wait_for(|down| *down) => break None,
                _ = tx.closed() => break None,
                _ = session.wait_exit(None) => return,
                m = requests.message(), if reading => match m {
                    Ok(Some(m)) if matches!(m.request, Some(In::Close(_))) => break None,
                    Ok(Some(m)) => {
                        queued.push_back(m.request);
                        // Bounded: past a few requests, wait for the write before reading more.
                        reading = queued.len() < QUEUED_WHILE_BLOCKED;
                    }
                    Ok(None) | Err(_) => break None,
                },
            }
        };
        // `None`: the caller or the server ends the session.
        let Some(result) = result else { break };
        if let Err(e) = result {
            if session.closed() && !matches!(e, PtyError::Invalid { .. }) {
                continue; // the output pump reports how the session ended
            }
            let _ = tx.send(Err(pty_status(e))).await;
            break;
        }
    }
    if let Err(e) = session.close().await {
        tracing::warn!(error = %e, "closing pty session failed");
    }
}
