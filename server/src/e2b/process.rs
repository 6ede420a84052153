//! envd's `process.Process` over the gRPC `Pty` RPC (one session per command: pipe mode for
//! commands, terminal mode for `pty`), `ListProcesses` and `SignalProcess`.
//!
//! E2B's process outlives the call that started it and takes input, resizes and signals by
//! pid from any later call; a gRPC `Pty` session takes them on its own stream. So this
//! front-end holds each session's stream for the life of the process (a [`Held`] in the
//! [`Table`]): input, resizes and signals are sent down it, and its output is fanned out to
//! the `Start` stream and to every `Connect`. The process itself is the agent's, as for any
//! gRPC client.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::ConnectInfo;
use axum::extract::{Path, State};
use axum::http::{Extensions, HeaderMap, Version};
use axum::response::Response;
use futures_util::{Stream, StreamExt};
use sandboxd_proto::envd::process as ep;
use sandboxd_proto::v1 as pb;
use sandboxd_proto::v1::pty_request::Request as In;
use sandboxd_proto::v1::pty_response::Response as Out;
use tokio::sync::{broadcast, mpsc};
use tonic::Status;

use super::connect::{self, CallKind};
use super::connection::Connection;
use super::inproc::Caller;
use super::inproc::{request, streaming};
use super::{basic_user, E2bFront};

/// Output events kept for a slow reader before it skips ahead.
const FANOUT: usize = 4096;

/// What a held session's readers get.
#[derive(Debug, Clone)]
enum Event {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    Pty(Vec<u8>),
    End(i32),
    Failed(Status),
}

/// One session this front-end holds.
struct Held {
    sandbox_id: String,
    pid: u32,
    process_id: String,
    tag: Option<String>,
    config: ep::ProcessConfig,
    pty: bool,
    input: mpsc::Sender<pb::PtyRequest>,
    output: broadcast::Sender<Event>,
}

/// The sessions held, by (sandbox, pid).
#[derive(Default)]
pub struct Table {
    held: Mutex<HashMap<(String, u32), Arc<Held>>>,
}

impl Table {
    fn get(&self, sandbox_id: &str, selector: Option<&ep::ProcessSelector>) -> Result<Arc<Held>, Status> {
        let held = self.held.lock().expect("process table");
        let found = match selector.and_then(|s| s.selector.as_ref()) {
            Some(ep::process_selector::Selector::Pid(pid)) => {
                held.get(&(sandbox_id.to_string(), *pid)).cloned()
            }
            Some(ep::process_selector::Selector::Tag(tag)) => held
                .values()
                .find(|h| h.sandbox_id == sandbox_id && h.tag.as_deref() == Some(tag.as_str()))
                .cloned(),
            None => return Err(Status::invalid_argument("process: a pid or tag selector is required")),
        };
        found.ok_or_else(|| {
            Status::not_found(format!("process {selector:?} not found in sandbox {sandbox_id:?}"))
        })
    }
}

/// `POST /process.Process/{method}`.
pub async fn call(
    State(front): State<E2bFront>,
    Path(method): Path<String>,
    version: Version,
    extensions: Extensions,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let cut = resets(version, &extensions);
    let Some(kind) = CallKind::from_headers(&headers) else {
        return connect::unary_error(&Status::invalid_argument(
            "content-type must be application/json, application/proto or application/connect+json|proto",
        ));
    };
    let fail = |status: Status| {
        if kind.streaming {
            connect::streaming_error(kind, &status)
        } else {
            connect::unary_error(&status)
        }
    };
    let (caller, sandbox_id) = match (front.envd_caller(&headers), front.envd_sandbox(&headers)) {
        (Ok(p), Ok(s)) => (p, s),
        (Err(e), _) | (_, Err(e)) => return fail(e),
    };
    let message = match connect::request_message(kind, &body) {
        Ok(m) => m,
        Err(e) => return fail(e),
    };
    let user = match basic_user(&headers) {
        Ok(u) => u,
        Err(e) => return fail(e),
    };
    let timeout = connect::timeout(&headers);
    let ctx = Ctx { front: front.clone(), caller, sandbox_id };
    macro_rules! unary {
        ($req:literal, $resp:literal, $f:expr) => {{
            let result = match connect::decode(kind.codec, $req, message) {
                Ok(req) => $f(ctx, req).await,
                Err(e) => Err(e),
            };
            match result {
                Ok(resp) => connect::unary_ok(kind, $resp, &resp),
                Err(e) => fail(e),
            }
        }};
    }
    match method.as_str() {
        "Start" | "Connect" if !kind.streaming => connect::unary_error(&Status::invalid_argument(format!(
            "{method} is server-streaming: use application/connect+json or application/connect+proto"
        ))),
        "Start" => {
            let req: ep::StartRequest = match connect::decode(kind.codec, "process.StartRequest", message) {
                Ok(r) => r,
                Err(e) => return fail(e),
            };
            match start(ctx, req, user).await {
                Ok(events) => connect::streaming_response(
                    kind,
                    "process.StartResponse",
                    timeout,
                    events.map(cut).map(|e| e.map(|event| ep::StartResponse { event: Some(event) })),
                ),
                Err(e) => fail(e),
            }
        }
        "Connect" => {
            let req: ep::ConnectRequest = match connect::decode(kind.codec, "process.ConnectRequest", message)
            {
                Ok(r) => r,
                Err(e) => return fail(e),
            };
            match attach(&ctx, req.process.as_ref()).await {
                Ok(events) => connect::streaming_response(
                    kind,
                    "process.ConnectResponse",
                    timeout,
                    events.map(cut).map(|e| e.map(|event| ep::ConnectResponse { event: Some(event) })),
                ),
                Err(e) => fail(e),
            }
        }
        "List" => unary!("process.ListRequest", "process.ListResponse", list),
        "SendInput" => unary!("process.SendInputRequest", "process.SendInputResponse", send_input),
        "Update" => unary!("process.UpdateRequest", "process.UpdateResponse", update),
        "SendSignal" => unary!("process.SendSignalRequest", "process.SendSignalResponse", send_signal),
        "CloseStdin" => unary!("process.CloseStdinRequest", "process.CloseStdinResponse", close_stdin),
        "StreamInput" => fail(Status::unimplemented(
            "process.StreamInput (a client stream) is not served by sandboxd; use SendInput",
        )),
        other => fail(Status::unimplemented(format!("process.Process has no method {other:?}"))),
    }
}

struct Ctx {
    front: E2bFront,
    caller: Caller,
    sandbox_id: String,
}

/// `argv` as one command line for the sandbox's shell: every word single-quoted, so nothing
/// in it is interpreted (the program is E2B's `cmd` with its `args`).
fn shell_line(cmd: &str, args: &[String]) -> String {
    std::iter::once(cmd)
        .chain(args.iter().map(String::as_str))
        .map(|w| format!("'{}'", w.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

fn start_event(pid: u32) -> ep::ProcessEvent {
    ep::ProcessEvent { event: Some(ep::process_event::Event::Start(ep::process_event::StartEvent { pid })) }
}

/// The Start/Connect stream of one held session from now on.
fn events(
    pid: u32,
    rx: broadcast::Receiver<Event>,
) -> impl Stream<Item = Result<ep::ProcessEvent, Status>> + Send {
    use ep::process_event::{data_event::Output, DataEvent, EndEvent, Event as E};
    let first = futures_util::stream::iter([Ok(start_event(pid))]);
    let rest = futures_util::stream::unfold(rx, |mut rx| async move {
        match rx.recv().await {
            Err(broadcast::error::RecvError::Closed) => None,
            item => Some((item, rx)),
        }
    })
    .filter_map(|item| async move {
        let data = |o| Some(Ok(ep::ProcessEvent { event: Some(E::Data(DataEvent { output: Some(o) })) }));
        match item {
            Ok(Event::Stdout(b)) => data(Output::Stdout(b)),
            Ok(Event::Stderr(b)) => data(Output::Stderr(b)),
            Ok(Event::Pty(b)) => data(Output::Pty(b)),
            Ok(Event::End(code)) => Some(Ok(ep::ProcessEvent {
                event: Some(E::End(EndEvent {
                    exit_code: code,
                    exited: true,
                    status: format!("exit status {code}"),
                    error: None,
                })),
            })),
            Ok(Event::Failed(status)) => Some(Err(status)),
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!(skipped = n, "an E2B process stream fell behind; output skipped");
                None
            }
            Err(broadcast::error::RecvError::Closed) => None,
        }
    });
    first.chain(until_end(rest))
}

/// Ends the stream after the end event (or an error): nothing follows them.
fn until_end<S>(s: S) -> impl Stream<Item = Result<ep::ProcessEvent, Status>> + Send
where
    S: Stream<Item = Result<ep::ProcessEvent, Status>> + Send,
{
    s.scan(false, |done, item| {
        if *done {
            return std::future::ready(None);
        }
        *done =
            matches!(&item, Err(_) | Ok(ep::ProcessEvent { event: Some(ep::process_event::Event::End(_)) }));
        std::future::ready(Some(item))
    })
}

/// `Start`: a `Pty` session (pipe mode unless `pty`), held for the process's life.
async fn start(
    ctx: Ctx,
    req: ep::StartRequest,
    user: Option<String>,
) -> Result<impl Stream<Item = Result<ep::ProcessEvent, Status>> + Send, Status> {
    let config = req.process.ok_or_else(|| Status::invalid_argument("process: is required"))?;
    if config.cmd.is_empty() {
        return Err(Status::invalid_argument("process.cmd: must not be empty"));
    }
    // A relative working directory is below the user's home, as E2B resolves it.
    let cwd = match config.cwd.as_deref() {
        Some(dir) if !dir.is_empty() && !dir.starts_with('/') => {
            Some(ctx.front.resolve(&ctx.caller, &ctx.sandbox_id, user.as_deref().unwrap_or(""), dir).await?)
        }
        _ => config.cwd.clone(),
    };
    let size = req.pty.as_ref().and_then(|p| p.size);
    let open = pb::PtyOpen {
        sandbox_id: ctx.sandbox_id.clone(),
        command: Some(shell_line(&config.cmd, &config.args)),
        cwd,
        env: config.envs.clone(),
        rows: size.map_or(0, |s| s.rows),
        cols: size.map_or(0, |s| s.cols),
        user,
        pipe: req.pty.is_none(),
        detach_timeout_s: None,
    };
    let (input, rx) = mpsc::channel::<pb::PtyRequest>(64);
    input
        .send(pb::PtyRequest { request: Some(In::Open(open)) })
        .await
        .map_err(|_| Status::internal("the session's input closed"))?;
    let requests = tokio_stream::wrappers::ReceiverStream::new(rx);
    let mut calls = ctx.front.calls();
    let mut responses = calls.pty(streaming(&ctx.caller, requests)).await?.into_inner();
    let session_id = match responses.next().await {
        Some(Ok(pb::PtyResponse { response: Some(Out::Opened(opened)) })) => opened.session_id,
        Some(Err(status)) => return Err(status),
        _ => return Err(Status::internal("the Pty session did not open")),
    };
    let pid = pid_of(&ctx, &session_id).await?;
    let (output, rx) = broadcast::channel(FANOUT);
    let held = Arc::new(Held {
        sandbox_id: ctx.sandbox_id.clone(),
        pid,
        process_id: session_id,
        tag: req.tag,
        config,
        pty: req.pty.is_some(),
        input,
        output: output.clone(),
    });
    let key = (ctx.sandbox_id.clone(), pid);
    ctx.front.inner.processes.held.lock().expect("process table").insert(key.clone(), held.clone());
    let front = ctx.front.clone();
    tokio::spawn(async move {
        while let Some(item) = responses.next().await {
            let event = match item {
                Ok(pb::PtyResponse { response: Some(Out::Output(b)) }) if held.pty => Event::Pty(b),
                Ok(pb::PtyResponse { response: Some(Out::Output(b)) }) => Event::Stdout(b),
                Ok(pb::PtyResponse { response: Some(Out::Stderr(b)) }) => Event::Stderr(b),
                Ok(pb::PtyResponse { response: Some(Out::Exit(exit)) }) => Event::End(exit.exit_code),
                Ok(_) => continue,
                Err(status) => Event::Failed(connection_lost(&held.sandbox_id, status)),
            };
            let last = matches!(event, Event::End(_) | Event::Failed(_));
            let _ = held.output.send(event);
            if last {
                // The rest of the stream (its trailers): the call ends OK, not cancelled.
                while responses.next().await.is_some() {}
                break;
            }
        }
        front.inner.processes.held.lock().expect("process table").remove(&key);
    });
    Ok(events(pid, rx))
}

/// What a process stream passes its events through: a `cut_off` error makes an HTTP/1 connection's
/// close a reset, so the cut reads as a dropped connection (HTTP/2 resets the stream by itself).
/// Called as the connection polls the response, which is when its socket may be touched.
fn resets(
    version: Version,
    extensions: &Extensions,
) -> impl Fn(Result<ep::ProcessEvent, Status>) -> Result<ep::ProcessEvent, Status> + Send + Copy + 'static {
    let connection = extensions
        .get::<ConnectInfo<Connection>>()
        .filter(|_| version <= Version::HTTP_11)
        .map(|info| info.0);
    move |event| {
        if let (Err(status), Some(connection)) = (&event, connection) {
            if connect::is_cut_off(status) {
                connection.reset_when_closed();
            }
        }
        event
    }
}

/// A process stream whose session was lost (FAILED_PRECONDITION: the session or its sandbox
/// went away under it) is cut off, as envd's proxy cuts off a stream whose sandbox died
/// (`connect::cut_off`; its status, UNAVAILABLE "the connection ... ended", is what the server
/// logs). The SDK then probes `/health` itself, and reports the sandbox killed or at its end of
/// life when it is gone (the original error otherwise). Any other failure stays as it was.
fn connection_lost(sandbox_id: &str, status: Status) -> Status {
    if status.code() != tonic::Code::FailedPrecondition {
        return status;
    }
    connect::cut_off(Status::unavailable(format!(
        "the connection to sandbox {sandbox_id} ended before the stream completed ({})",
        status.message()
    )))
}

/// The pid of the agent's session `process_id` (`ListProcesses`). A backend with no process
/// supervisor (a cluster's Swarm tasks, `exec.engine: docker`) lists none: the session is then
/// known by a number above any kernel pid (`pid_max` is at most 2^22), held in this table only.
async fn pid_of(ctx: &Ctx, process_id: &str) -> Result<u32, Status> {
    static UNLISTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1 << 22);
    let listed = ctx
        .front
        .calls()
        .list_processes(request(&ctx.caller, pb::ListProcessesRequest { sandbox_id: ctx.sandbox_id.clone() }))
        .await;
    let list = match listed {
        Ok(list) => list.into_inner(),
        Err(status) if status.code() == tonic::Code::FailedPrecondition => {
            return Ok(UNLISTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1);
        }
        Err(status) => return Err(status),
    };
    list.processes.iter().find(|p| p.process_id == process_id).map(|p| p.pid).ok_or_else(|| {
        Status::internal(format!("session {process_id:?} is not in the sandbox's process list"))
    })
}

/// `Connect`: the held session's output from now on (authorized as a read of the sandbox).
async fn attach(
    ctx: &Ctx,
    selector: Option<&ep::ProcessSelector>,
) -> Result<impl Stream<Item = Result<ep::ProcessEvent, Status>> + Send, Status> {
    authorize(ctx).await?;
    let held = ctx.front.inner.processes.get(&ctx.sandbox_id, selector)?;
    Ok(events(held.pid, held.output.subscribe()))
}

/// Calls on held sessions need what the gRPC process calls need (scope operate, the caller's
/// own sandbox): `ListProcesses` checks it.
async fn authorize(ctx: &Ctx) -> Result<(), Status> {
    ctx.front
        .calls()
        .list_processes(request(&ctx.caller, pb::ListProcessesRequest { sandbox_id: ctx.sandbox_id.clone() }))
        .await?;
    Ok(())
}

async fn list(ctx: Ctx, _req: ep::ListRequest) -> Result<ep::ListResponse, Status> {
    let list = ctx
        .front
        .calls()
        .list_processes(request(&ctx.caller, pb::ListProcessesRequest { sandbox_id: ctx.sandbox_id.clone() }))
        .await?
        .into_inner();
    let held = ctx.front.inner.processes.held.lock().expect("process table");
    let processes = list
        .processes
        .into_iter()
        .filter(|p| p.running)
        .map(|p| match held.get(&(ctx.sandbox_id.clone(), p.pid)) {
            Some(h) => ep::ProcessInfo { config: Some(h.config.clone()), pid: p.pid, tag: h.tag.clone() },
            None => ep::ProcessInfo {
                config: Some(ep::ProcessConfig { cmd: p.command, ..Default::default() }),
                pid: p.pid,
                tag: None,
            },
        })
        .collect();
    Ok(ep::ListResponse { processes })
}

async fn send(ctx: &Ctx, selector: Option<&ep::ProcessSelector>, request: In) -> Result<(), Status> {
    authorize(ctx).await?;
    let held = ctx.front.inner.processes.get(&ctx.sandbox_id, selector)?;
    held.input
        .send(pb::PtyRequest { request: Some(request) })
        .await
        .map_err(|_| Status::not_found(format!("process {} has ended", held.pid)))
}

async fn send_input(ctx: Ctx, req: ep::SendInputRequest) -> Result<ep::SendInputResponse, Status> {
    let bytes = match req.input.and_then(|i| i.input) {
        Some(ep::process_input::Input::Stdin(b)) | Some(ep::process_input::Input::Pty(b)) => b,
        None => return Err(Status::invalid_argument("input: stdin or pty bytes are required")),
    };
    send(&ctx, req.process.as_ref(), In::Input(bytes)).await?;
    Ok(ep::SendInputResponse {})
}

async fn update(ctx: Ctx, req: ep::UpdateRequest) -> Result<ep::UpdateResponse, Status> {
    let size =
        req.pty.and_then(|p| p.size).ok_or_else(|| Status::invalid_argument("pty.size: is required"))?;
    if size.rows == 0 || size.cols == 0 {
        return Err(Status::invalid_argument("pty.size: rows and cols must be > 0"));
    }
    send(&ctx, req.process.as_ref(), In::Resize(pb::PtyResize { rows: size.rows, cols: size.cols })).await?;
    Ok(ep::UpdateResponse {})
}

async fn send_signal(ctx: Ctx, req: ep::SendSignalRequest) -> Result<ep::SendSignalResponse, Status> {
    let name = match ep::Signal::try_from(req.signal) {
        Ok(ep::Signal::Sigkill) => "SIGKILL",
        Ok(ep::Signal::Sigterm) => "SIGTERM",
        _ => return Err(Status::invalid_argument("signal: must be SIGNAL_SIGTERM or SIGNAL_SIGKILL")),
    };
    authorize(&ctx).await?;
    match ctx.front.inner.processes.get(&ctx.sandbox_id, req.process.as_ref()) {
        // Ours: through its session (its process group).
        Ok(held) => {
            let signal = pb::SignalProcessRequest {
                sandbox_id: ctx.sandbox_id.clone(),
                process_id: held.process_id.clone(),
                signal: name.into(),
            };
            ctx.front.calls().signal_process(request(&ctx.caller, signal)).await?;
        }
        // Started by another client: by pid through the agent's table.
        Err(_) => {
            let Some(ep::ProcessSelector { selector: Some(ep::process_selector::Selector::Pid(pid)) }) =
                req.process
            else {
                return Err(Status::not_found("process not found"));
            };
            let list = ctx
                .front
                .calls()
                .list_processes(request(
                    &ctx.caller,
                    pb::ListProcessesRequest { sandbox_id: ctx.sandbox_id.clone() },
                ))
                .await?
                .into_inner();
            let p = list
                .processes
                .into_iter()
                .find(|p| p.pid == pid && p.running)
                .ok_or_else(|| Status::not_found(format!("process {pid} not found")))?;
            let signal = pb::SignalProcessRequest {
                sandbox_id: ctx.sandbox_id.clone(),
                process_id: p.process_id,
                signal: name.into(),
            };
            ctx.front.calls().signal_process(request(&ctx.caller, signal)).await?;
        }
    }
    Ok(ep::SendSignalResponse {})
}

/// `CloseStdin`: the session's `PtyStdinEnd` (a pipe-mode process sees end of input).
async fn close_stdin(ctx: Ctx, req: ep::CloseStdinRequest) -> Result<ep::CloseStdinResponse, Status> {
    send(&ctx, req.process.as_ref(), In::StdinEnd(pb::PtyStdinEnd {})).await?;
    Ok(ep::CloseStdinResponse {})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv_reaches_the_shell_quoted_word_by_word() {
        assert_eq!(
            shell_line("/bin/bash", &["-l".into(), "-c".into(), "echo 'a' $HOME".into()]),
            r#"'/bin/bash' '-l' '-c' 'echo '\''a'\'' $HOME'"#
        );
    }
}
