//! The console's two WebSockets. The first message the browser sends is a JSON object with its
//! credential (`token`) and what it wants; the rest is the stream.
//!
//! `/ws/watch`: `{"token"}` → the caller's `Watch` events, one JSON text message each.
//!
//! `/ws/terminal`: `{"token", "sandbox_id", "session_id"?, "takeover"?, "cols", "rows"}` → a
//! `Pty` stream (a new session, or `PtyAttach` to `session_id` replaying its retained output),
//! then: browser binary messages are the keys typed; text messages are `{"resize": {"cols",
//! "rows"}}` or `{"signal": "SIGINT"}`; the server sends binary messages of terminal output and
//! text messages `{"opened": {"session_id", "mode", "offset"}}`, `{"exit": code}` and
//! `{"error": message, "code"}`. When the browser goes, an attached session is detached (it runs
//! on, as after `sandboxctl attach`); a session the page opened ends with it (as `sandboxctl
//! shell`'s does).

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::Response;
use futures_util::{SinkExt, StreamExt};
use sandboxd_proto::v1 as pb;
use sandboxd_proto::v1::pty_request::Request as In;
use sandboxd_proto::v1::pty_response::Response as Out;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::mpsc;
use tonic::Status;

use super::ConsoleFront;
use crate::e2b::inproc::{request, streaming, Caller};

/// The largest message the browser may send (keys typed, a paste).
const MAX_MESSAGE: usize = 1 << 20;

#[derive(Deserialize)]
struct Hello {
    #[serde(default)]
    token: Option<String>,
}

#[derive(Deserialize)]
struct TerminalHello {
    #[serde(default)]
    token: Option<String>,
    sandbox_id: String,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    takeover: bool,
    #[serde(default)]
    cols: u32,
    #[serde(default)]
    rows: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
enum Control {
    #[serde(rename = "resize")]
    Resize { cols: u32, rows: u32 },
    #[serde(rename = "signal")]
    Signal(String),
}

fn status_message(status: &Status) -> Message {
    let body = json!({ "error": status.message(), "code": format!("{:?}", status.code()) });
    Message::Text(body.to_string().into())
}

/// How long a socket may stay open before its first message names the caller.
const HELLO_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// The first message: a JSON text naming the caller, within [`HELLO_WITHIN`]; anything else
/// ends the socket.
async fn hello<T: serde::de::DeserializeOwned>(socket: &mut WebSocket) -> Result<T, Status> {
    let first = async {
        loop {
            match socket.recv().await {
                Some(Ok(Message::Text(text))) => {
                    return serde_json::from_str(text.as_str())
                        .map_err(|e| Status::invalid_argument(format!("the first message: {e}")))
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                _ => return Err(Status::invalid_argument("the first message must be a JSON text")),
            }
        }
    };
    tokio::time::timeout(HELLO_WITHIN, first).await.unwrap_or_else(|_| {
        Err(Status::deadline_exceeded(format!("no first message (the credential) within {HELLO_WITHIN:?}")))
    })
}

pub async fn watch(State(front): State<ConsoleFront>, upgrade: WebSocketUpgrade) -> Response {
    upgrade.max_message_size(MAX_MESSAGE).on_upgrade(move |mut socket| async move {
        if let Err(status) = watch_socket(&front, &mut socket).await {
            let _ = socket.send(status_message(&status)).await;
        }
        let _ = socket.close().await;
    })
}

async fn watch_socket(front: &ConsoleFront, socket: &mut WebSocket) -> Result<(), Status> {
    let hello: Hello = hello(socket).await?;
    let caller = Caller::new(hello.token.as_deref())?;
    let watch = pb::WatchRequest { include_existing: false, ..Default::default() };
    let mut events = front.calls().watch(request(&caller, watch)).await?.into_inner();
    let _ = socket.send(Message::Text(json!({ "watching": true }).to_string().into())).await;
    loop {
        tokio::select! {
            event = events.next() => {
                let Some(event) = event else { return Ok(()) };
                let Some(event) = event?.event else { continue };
                let kind = pb::SandboxEventKind::try_from(event.kind)
                    .map(|k| k.as_str_name().trim_start_matches("SANDBOX_EVENT_KIND_").to_ascii_lowercase())
                    .unwrap_or_default();
                let body = json!({
                    "event": {
                        "kind": kind,
                        "sandbox_id": event.sandbox_id,
                        "sandbox": event.sandbox.as_ref().map(|s| super::api::sandbox_json(s, None)),
                        "time_unix_ms": event.time_unix_ms,
                        "exit_code": event.exit_code,
                        "reason": event.reason,
                    }
                });
                if socket.send(Message::Text(body.to_string().into())).await.is_err() {
                    return Ok(());
                }
            }
            incoming = socket.recv() => match incoming {
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return Ok(()),
                Some(Ok(_)) => {}
            },
        }
    }
}

pub async fn terminal(State(front): State<ConsoleFront>, upgrade: WebSocketUpgrade) -> Response {
    upgrade.max_message_size(MAX_MESSAGE).on_upgrade(move |mut socket| async move {
        if let Err(status) = terminal_socket(&front, &mut socket).await {
            let _ = socket.send(status_message(&status)).await;
        }
        let _ = socket.close().await;
    })
}

async fn terminal_socket(front: &ConsoleFront, socket: &mut WebSocket) -> Result<(), Status> {
    let hello: TerminalHello = hello(socket).await?;
    let caller = Caller::new(hello.token.as_deref())?;
    let first = match hello.session_id.filter(|s| !s.is_empty()) {
        Some(session_id) => In::Attach(pb::PtyAttach {
            sandbox_id: hello.sandbox_id,
            session_id,
            takeover: hello.takeover,
            since: 0,
        }),
        None => In::Open(pb::PtyOpen {
            sandbox_id: hello.sandbox_id,
            rows: hello.rows,
            cols: hello.cols,
            ..Default::default()
        }),
    };
    let attached = matches!(first, In::Attach(_));
    let (input, requests) = mpsc::channel::<pb::PtyRequest>(64);
    input.send(pb::PtyRequest { request: Some(first) }).await.map_err(|_| Status::internal("pty input"))?;
    let requests = tokio_stream::wrappers::ReceiverStream::new(requests);
    // The gRPC `Pty` call, through the served stack (relayed to the sandbox's node, audited).
    let mut output = front.calls().pty(streaming(&caller, requests)).await?.into_inner();
    let (mut to_browser, mut from_browser) = socket.split();
    loop {
        tokio::select! {
            item = output.next() => match item {
                None => return Ok(()),
                Some(Err(status)) => {
                    let _ = to_browser.send(status_message(&status)).await;
                    return Ok(());
                }
                Some(Ok(pb::PtyResponse { response })) => {
                    let message = match response {
                        Some(Out::Opened(o)) => Message::Text(
                            json!({ "opened": { "session_id": o.session_id, "mode": o.mode, "offset": o.offset } })
                                .to_string()
                                .into(),
                        ),
                        Some(Out::Output(bytes) | Out::Stderr(bytes)) => Message::Binary(bytes.into()),
                        Some(Out::Exit(exit)) => {
                            Message::Text(json!({ "exit": exit.exit_code }).to_string().into())
                        }
                        None => continue,
                    };
                    if to_browser.send(message).await.is_err() {
                        break;
                    }
                }
            },
            incoming = from_browser.next() => {
                let request = match incoming {
                    Some(Ok(Message::Binary(bytes))) => In::Input(bytes.to_vec()),
                    Some(Ok(Message::Text(text))) => match serde_json::from_str::<Control>(text.as_str()) {
                        Ok(Control::Resize { cols, rows }) => In::Resize(pb::PtyResize { rows, cols }),
                        Ok(Control::Signal(name)) => In::Signal(pb::PtySignal { name }),
                        Err(e) => {
                            let status = Status::invalid_argument(format!(
                                "a text message is {{\"resize\": {{\"cols\", \"rows\"}}}} or {{\"signal\": name}}: {e}"
                            ));
                            let _ = to_browser.send(status_message(&status)).await;
                            continue;
                        }
                    },
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
                };
                if input.send(pb::PtyRequest { request: Some(request) }).await.is_err() {
                    break;
                }
            }
        }
    }
    // The browser went: an attached session runs on; one opened here ends with its stream.
    if attached {
        let _ = input.send(pb::PtyRequest { request: Some(In::Detach(pb::PtyDetach {})) }).await;
        // Let the handler read the detach before the stream half-closes.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), output.next()).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_messages_are_resize_or_signal_only() {
        let resize: Control = serde_json::from_str(r#"{"resize": {"cols": 120, "rows": 40}}"#).unwrap();
        assert!(matches!(resize, Control::Resize { cols: 120, rows: 40 }));
        let signal: Control = serde_json::from_str(r#"{"signal": "SIGINT"}"#).unwrap();
        assert!(matches!(signal, Control::Signal(name) if name == "SIGINT"));
        for bad in [r#"{"input": "ls"}"#, r#"{"resize": {"cols": 1}}"#, "[]", r#"{"signal": 2}"#] {
            assert!(serde_json::from_str::<Control>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_terminal_hello_needs_a_sandbox() {
        let hello: TerminalHello = serde_json::from_str(
            r#"{"token": "k", "sandbox_id": "s", "session_id": "x", "cols": 80, "rows": 24}"#,
        )
        .unwrap();
        assert_eq!((hello.sandbox_id.as_str(), hello.session_id.as_deref()), ("s", Some("x")));
        assert!(serde_json::from_str::<TerminalHello>(r#"{"token": "k"}"#).is_err());
    }
}
