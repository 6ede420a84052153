//! One `Pty` call as a test drives it through the generated stub: its first message (a
//! `PtyOpen` or a `PtyAttach`), requests in, output until a needle or the end, and the session
//! listing (`ListPtySessions`). Every wait is bounded (30 s).

use std::time::{Duration, Instant};

use sandboxd_client::proto;
use sandboxd_client::proto::pty_request::Request as In;
use sandboxd_client::proto::pty_response::Response as Out;
use tokio::sync::mpsc;
use tonic::Streaming;

use crate::raw::RawClient;

/// One `Pty` stream: its requests and its responses.
pub struct Stream {
    tx: mpsc::Sender<proto::PtyRequest>,
    rx: Streaming<proto::PtyResponse>,
}

/// A `PtyRequest` of one alternative.
pub fn req(request: In) -> proto::PtyRequest {
    proto::PtyRequest { request: Some(request) }
}

/// What a stream delivered until it ended.
#[derive(Debug, Default)]
pub struct Seen {
    pub output: Vec<u8>,
    pub exit: Option<i32>,
    pub status: Option<tonic::Status>,
}

impl Stream {
    /// Start a `Pty` call whose first request is `first`; the error when the call is refused.
    pub async fn start(raw: &mut RawClient, first: In) -> Result<(Stream, proto::PtyOpened), tonic::Status> {
        let (tx, requests) = mpsc::channel(64);
        tx.send(req(first)).await.unwrap();
        let mut rx = raw.pty(tokio_stream::wrappers::ReceiverStream::new(requests)).await?.into_inner();
        match rx.message().await?.and_then(|m| m.response) {
            Some(Out::Opened(opened)) => Ok((Stream { tx, rx }, opened)),
            other => panic!("expected opened, got {other:?}"),
        }
    }

    pub async fn open(raw: &mut RawClient, open: proto::PtyOpen) -> (Stream, proto::PtyOpened) {
        Self::start(raw, In::Open(open)).await.expect("open")
    }

    pub async fn attach(
        raw: &mut RawClient,
        sandbox_id: &str,
        session_id: &str,
        takeover: bool,
        since: u64,
    ) -> Result<(Stream, proto::PtyOpened), tonic::Status> {
        let attach = proto::PtyAttach {
            sandbox_id: sandbox_id.into(),
            session_id: session_id.into(),
            takeover,
            since,
        };
        Self::start(raw, In::Attach(attach)).await
    }

    /// The stream's request sender, for a task that writes while the test reads.
    pub fn sender(&self) -> mpsc::Sender<proto::PtyRequest> {
        self.tx.clone()
    }

    pub async fn send(&self, request: In) {
        self.tx.send(req(request)).await.expect("the stream takes requests");
    }

    /// Output until it holds `needle` (or the stream ends, or 30 s pass).
    pub async fn read_until(&mut self, needle: &str) -> Seen {
        let mut seen = Seen::default();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !String::from_utf8_lossy(&seen.output).contains(needle) {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.rx.message()).await {
                Err(_) => {
                    panic!("no {needle:?} within 30 s; got {:?}", String::from_utf8_lossy(&seen.output))
                }
                Ok(Ok(Some(m))) => match m.response {
                    Some(Out::Output(d)) | Some(Out::Stderr(d)) => seen.output.extend(d),
                    Some(Out::Exit(e)) => seen.exit = Some(e.exit_code),
                    _ => {}
                },
                Ok(Ok(None)) => break,
                Ok(Err(status)) => {
                    seen.status = Some(status);
                    break;
                }
            }
        }
        seen
    }

    /// Everything until the stream ends (within 30 s).
    pub async fn drain(&mut self) -> Seen {
        self.drain_within(Duration::from_secs(30)).await
    }

    /// Everything until the stream ends, which must be `within`.
    pub async fn drain_within(&mut self, within: Duration) -> Seen {
        let mut seen = Seen::default();
        let ended = tokio::time::timeout(within, async {
            loop {
                match self.rx.message().await {
                    Ok(Some(m)) => match m.response {
                        Some(Out::Output(d)) | Some(Out::Stderr(d)) => seen.output.extend(d),
                        Some(Out::Exit(e)) => seen.exit = Some(e.exit_code),
                        _ => {}
                    },
                    Ok(None) => break,
                    Err(status) => {
                        seen.status = Some(status);
                        break;
                    }
                }
            }
        })
        .await;
        assert!(ended.is_ok(), "the stream did not end within {within:?}; so far {seen:?}");
        seen
    }
}

/// A pipe-mode `PtyOpen` of `command`.
pub fn pipe_open(sandbox_id: &str, command: &str, detach_timeout_s: Option<f64>) -> proto::PtyOpen {
    proto::PtyOpen {
        sandbox_id: sandbox_id.into(),
        command: Some(command.into()),
        pipe: true,
        detach_timeout_s,
        ..Default::default()
    }
}

/// `ListPtySessions` of the sandbox.
pub async fn sessions(raw: &mut RawClient, sandbox_id: &str) -> Vec<proto::PtySessionInfo> {
    raw.list_pty_sessions(proto::ListPtySessionsRequest { sandbox_id: sandbox_id.into() })
        .await
        .expect("ListPtySessions")
        .into_inner()
        .sessions
}

/// The listed row of one session (it must be listed).
pub async fn session(raw: &mut RawClient, sandbox_id: &str, session_id: &str) -> proto::PtySessionInfo {
    sessions(raw, sandbox_id)
        .await
        .into_iter()
        .find(|s| s.session_id == session_id)
        .unwrap_or_else(|| panic!("session {session_id} is not listed"))
}
