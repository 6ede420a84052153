//! Terminal sessions (`Pty` RPC): opening one, reading, writing, signals, close. `pty().exec`
//! (one command through a terminal, the marker protocol) is in `pty/exec.rs`.

mod exec;

pub use exec::PtyExecOptions;
pub(crate) use exec::PtyExecState;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;

use crate::client::RawClient;
use crate::error::{ClientError, Result, StreamEnd};
use crate::proto;
use crate::proto::pty_request::Request as Req;
use crate::proto::pty_response::Response as Resp;
use sandboxd_proto::contract::{Signal, TerminalMode};

/// How long `close()` waits for the server to end the stream before dropping the call.
const CLOSE_WAIT: Duration = Duration::from_secs(5);
/// How long opening (or attaching) a session waits for the server's `opened`: a server that
/// never answers is a timeout, not a call that waits forever.
const OPEN_WAIT: Duration = Duration::from_secs(60);
/// Requests queued towards the server before `write` waits.
const REQUEST_QUEUE: usize = 64;

/// What `pty().create` opens: the shared contract's [`PtySpec`] (command, cwd, env, size, user,
/// mode).
pub use sandboxd_proto::contract::PtySpec;

/// The name this client gave [`PtySpec`] before it moved into the shared contract.
pub type PtyOptions = PtySpec;

/// What a terminal namespace needs of the sandbox it belongs to (the sandbox handle
/// implements it; `pty` depends on this, not on the handle).
pub(crate) trait PtyHost: Send + Sync {
    fn id(&self) -> &str;
    fn rpc(&self) -> RawClient;
    /// Refuses a stopped sandbox.
    fn ensure_live(&self) -> Result<()>;
    /// The default sessions `pty().exec` reuses; the lock serialises its calls.
    fn pty_exec(&self) -> &tokio::sync::Mutex<PtyExecState>;
}

/// The terminal namespace of a sandbox: [`crate::Sandbox::pty`].
pub struct Pty<'a> {
    sandbox: &'a dyn PtyHost,
}

impl<'a> Pty<'a> {
    pub(crate) fn new(sandbox: &'a dyn PtyHost) -> Self {
        Pty { sandbox }
    }

    /// Opens a session.
    pub async fn create(&self, spec: PtySpec) -> Result<PtySession> {
        self.sandbox.ensure_live()?;
        PtySession::open(self.sandbox, spec).await
    }

    /// Holds a session the sandbox's agent keeps (by its [`PtySession::id`]), from any process:
    /// its retained output from offset `since` (`0`: all still retained) comes first, then live
    /// output. `takeover` ends the current holder's stream (ABORTED); without it a held session
    /// is FAILED_PRECONDITION. An unknown id is NOT_FOUND, a `since` older than what is retained
    /// OUT_OF_RANGE.
    pub async fn attach(&self, session_id: &str, takeover: bool, since: u64) -> Result<PtySession> {
        self.sandbox.ensure_live()?;
        let attach = proto::PtyAttach {
            sandbox_id: self.sandbox.id().to_string(),
            session_id: session_id.to_string(),
            takeover,
            since,
        };
        PtySession::start(self.sandbox, Req::Attach(attach)).await
    }

    /// The sessions the sandbox's agent keeps (running, or ended and not yet forgotten), oldest
    /// first.
    pub async fn list(&self) -> Result<Vec<PtySessionInfo>> {
        let request = proto::ListPtySessionsRequest { sandbox_id: self.sandbox.id().to_string() };
        Ok(self.sandbox.rpc().list_pty_sessions(request).await?.into_inner().sessions)
    }
}

/// One row of [`Pty::list`]: id, command, mode, size, running or its exit code, whether a
/// stream holds it, the output bytes retained for an attach's `since`.
pub use crate::proto::PtySessionInfo;

#[derive(Clone, Debug, Default)]
struct SessionState {
    /// How the session ended, once known (an exit may precede the stream's end).
    end: Option<StreamEnd>,
    /// The response stream is over.
    done: bool,
}

struct SessionInner {
    id: String,
    mode: TerminalMode,
    offset: u64,
    requests: StdMutex<Option<mpsc::Sender<proto::PtyRequest>>>,
    output: tokio::sync::Mutex<mpsc::UnboundedReceiver<Vec<u8>>>,
    stderr: tokio::sync::Mutex<mpsc::UnboundedReceiver<Vec<u8>>>,
    state: watch::Receiver<SessionState>,
    closed: AtomicBool,
    reader: tokio::task::AbortHandle,
}

impl Drop for SessionInner {
    fn drop(&mut self) {
        // Dropping the call ends the session server-side.
        self.reader.abort();
    }
}

/// A live terminal session. Cheap to clone; the session ends when `close()` is called or the
/// last clone is dropped.
#[derive(Clone)]
pub struct PtySession {
    inner: Arc<SessionInner>,
}

impl std::fmt::Debug for PtySession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PtySession").field("id", &self.inner.id).field("mode", &self.inner.mode).finish()
    }
}

impl PtySession {
    async fn open(sandbox: &dyn PtyHost, spec: PtySpec) -> Result<PtySession> {
        Self::start(sandbox, Req::Open(spec.to_open(sandbox.id()))).await
    }

    /// A `Pty` call whose first request is `first` (an open or an attach).
    async fn start(sandbox: &dyn PtyHost, first: Req) -> Result<PtySession> {
        let (tx, rx) = mpsc::channel(REQUEST_QUEUE);
        tx.send(proto::PtyRequest { request: Some(first) }).await.map_err(|_| ClientError::Closed)?;
        let opening = async {
            let mut stream = sandbox.rpc().pty(ReceiverStream::new(rx)).await?.into_inner();
            let first = stream.message().await?;
            Ok::<_, ClientError>((stream, first))
        };
        let (stream, first) =
            tokio::time::timeout(OPEN_WAIT, opening).await.map_err(|_| ClientError::Timeout)??;
        let opened = match first {
            Some(proto::PtyResponse { response: Some(Resp::Opened(opened)) }) => opened,
            Some(other) => {
                return Err(ClientError::Pty(format!(
                    "expected `opened` as the first response, got {other:?}"
                )))
            }
            None => return Err(ClientError::Pty("the session ended before it opened".to_string())),
        };
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        let (err_tx, err_rx) = mpsc::unbounded_channel();
        let (state_tx, state_rx) = watch::channel(SessionState::default());
        let reader = tokio::spawn(route_responses(stream, out_tx, err_tx, state_tx));
        Ok(PtySession {
            inner: Arc::new(SessionInner {
                id: opened.session_id,
                mode: TerminalMode::from_wire(&opened.mode).unwrap_or(TerminalMode::Pty),
                offset: opened.offset,
                requests: StdMutex::new(Some(tx)),
                output: tokio::sync::Mutex::new(out_rx),
                stderr: tokio::sync::Mutex::new(err_rx),
                state: state_rx,
                closed: AtomicBool::new(false),
                reader: reader.abort_handle(),
            }),
        })
    }

    /// The server's session id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// Offset in the session's output of the first byte this stream carried (0 for a session
    /// this stream opened; the replay point of an attach).
    pub fn offset(&self) -> u64 {
        self.inner.offset
    }

    /// `"pty"` or `"pipe"`.
    pub fn mode(&self) -> TerminalMode {
        self.inner.mode
    }

    /// True for a terminal session (not pipe mode).
    pub fn is_pty(&self) -> bool {
        self.inner.mode != TerminalMode::Pipe
    }

    /// The program's exit code once it exited.
    pub fn exit_code(&self) -> Option<i32> {
        match self.inner.state.borrow().end {
            Some(StreamEnd::Exited(code)) => Some(code),
            _ => None,
        }
    }

    /// True while the program runs and the session is not closed.
    pub fn is_live(&self) -> bool {
        if self.inner.closed.load(Ordering::SeqCst) {
            return false;
        }
        let state = self.inner.state.borrow();
        state.end.is_none() && !state.done
    }

    /// The next output chunk (the terminal; stdout in pipe mode). An empty `Vec` means the
    /// program exited and all its output was read. `timeout` bounds the wait
    /// ([`ClientError::Timeout`]); a session that failed returns its error.
    pub async fn read(&self, timeout: Option<Duration>) -> Result<Vec<u8>> {
        let mut rx = self.inner.output.lock().await;
        self.next_chunk(&mut rx, timeout).await
    }

    /// The next stderr chunk (pipe mode only; a terminal session has none), like [`Self::read`].
    pub async fn read_stderr(&self, timeout: Option<Duration>) -> Result<Vec<u8>> {
        let mut rx = self.inner.stderr.lock().await;
        self.next_chunk(&mut rx, timeout).await
    }

    async fn next_chunk(
        &self,
        rx: &mut mpsc::UnboundedReceiver<Vec<u8>>,
        timeout: Option<Duration>,
    ) -> Result<Vec<u8>> {
        let next = match timeout {
            None => rx.recv().await,
            Some(t) => tokio::time::timeout(t, rx.recv()).await.map_err(|_| ClientError::Timeout)?,
        };
        match next {
            Some(chunk) => Ok(chunk),
            None => self.at_eof(),
        }
    }

    /// What a read returns once the stream is over.
    fn at_eof(&self) -> Result<Vec<u8>> {
        let closed = self.inner.closed.load(Ordering::SeqCst);
        match self.inner.state.borrow().end.clone() {
            Some(StreamEnd::Exited(_)) => Ok(Vec::new()),
            Some(StreamEnd::Failed { code, message }) => {
                if closed && code == tonic::Code::Cancelled {
                    Ok(Vec::new())
                } else {
                    Err(ClientError::Status { code, message, failure_kind: None })
                }
            }
            Some(StreamEnd::Ended) | None if closed => Ok(Vec::new()),
            Some(StreamEnd::Ended) => {
                Err(ClientError::Pty("the session ended without an exit status".to_string()))
            }
            None => Err(ClientError::Closed),
        }
    }

    /// Drops output that arrived but was not read (before a marked command).
    fn discard_pending(&self) {
        if let Ok(mut rx) = self.inner.output.try_lock() {
            while rx.try_recv().is_ok() {}
        }
        if let Ok(mut rx) = self.inner.stderr.try_lock() {
            while rx.try_recv().is_ok() {}
        }
    }

    /// A stream of output chunks until the program exits; a failure is its last item.
    pub fn output(&self) -> impl futures_util::Stream<Item = Result<Vec<u8>>> + Send + 'static {
        futures_util::stream::unfold(Some(self.clone()), |session| async move {
            let session = session?;
            match session.read(None).await {
                Ok(chunk) if chunk.is_empty() => None,
                Ok(chunk) => Some((Ok(chunk), Some(session))),
                Err(e) => Some((Err(e), None)),
            }
        })
    }

    async fn send(&self, request: Req) -> Result<()> {
        let tx =
            self.inner.requests.lock().ok().and_then(|guard| guard.clone()).ok_or(ClientError::Closed)?;
        tx.send(proto::PtyRequest { request: Some(request) }).await.map_err(|_| ClientError::Closed)
    }

    /// Types `data` into the terminal (stdin in pipe mode).
    pub async fn write(&self, data: &[u8]) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        self.send(Req::Input(data.to_vec())).await
    }

    /// Resizes the terminal (ignored in pipe mode).
    pub async fn resize(&self, rows: u16, cols: u16) -> Result<()> {
        if rows == 0 || cols == 0 {
            return Err(ClientError::InvalidArgument(format!(
                "rows and cols must be > 0, got {rows}x{cols}"
            )));
        }
        self.send(Req::Resize(proto::PtyResize { rows: u32::from(rows), cols: u32::from(cols) })).await
    }

    /// Sends `name` (one of [`Signal::ALL`], `SIGINT` or `INT`) to the terminal's foreground process group (the
    /// session process's group in pipe mode).
    pub async fn send_signal(&self, name: &str) -> Result<()> {
        let name = validate_signal(name)?;
        self.send(Req::Signal(proto::PtySignal { name })).await
    }

    /// Waits for the program's exit code. A session that failed returns its error; `timeout`
    /// bounds the wait ([`ClientError::Timeout`]).
    pub async fn wait_exit(&self, timeout: Option<Duration>) -> Result<i32> {
        let mut state = self.inner.state.clone();
        let wait = async {
            // An error only means the reader is gone; the state says why.
            let _ = state.wait_for(|s| s.end.is_some() || s.done).await;
        };
        match timeout {
            None => wait.await,
            Some(t) => tokio::time::timeout(t, wait).await.map_err(|_| ClientError::Timeout)?,
        }
        let closed = self.inner.closed.load(Ordering::SeqCst);
        let end = self.inner.state.borrow().end.clone();
        match end {
            Some(StreamEnd::Exited(code)) => Ok(code),
            Some(StreamEnd::Failed { code, message }) if !(closed && code == tonic::Code::Cancelled) => {
                Err(ClientError::Status { code, message, failure_kind: None })
            }
            Some(StreamEnd::Ended) if !closed => {
                Err(ClientError::Pty("the session ended without an exit status".to_string()))
            }
            _ => Err(ClientError::Closed),
        }
    }

    /// Ends the session: sends `close`, half-closes, and waits briefly for the server to end
    /// the stream (then drops the call). Idempotent.
    pub async fn close(&self) -> Result<()> {
        if self.inner.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let tx = self.inner.requests.lock().ok().and_then(|mut guard| guard.take());
        if let Some(tx) = tx {
            let close = proto::PtyRequest { request: Some(Req::Close(proto::PtyClose {})) };
            let _ = tokio::time::timeout(CLOSE_WAIT, tx.send(close)).await;
        }
        let mut state = self.inner.state.clone();
        let done = tokio::time::timeout(CLOSE_WAIT, state.wait_for(|s| s.done)).await;
        if !matches!(done, Ok(Ok(_))) {
            self.inner.reader.abort();
        }
        Ok(())
    }

    /// Ends this stream and leaves the session running in the sandbox (re-attach with
    /// [`Pty::attach`]); reads then see the end. Needs the sandbox's agent (UNIMPLEMENTED on
    /// the docker exec engine, whose sessions end with their stream). Idempotent.
    pub async fn detach(&self) -> Result<()> {
        if self.inner.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let tx = self.inner.requests.lock().ok().and_then(|mut guard| guard.take());
        if let Some(tx) = tx {
            let detach = proto::PtyRequest { request: Some(Req::Detach(proto::PtyDetach {})) };
            let _ = tokio::time::timeout(CLOSE_WAIT, tx.send(detach)).await;
            // Kept until the server ended the stream: a half-close now would drop the session.
            let mut state = self.inner.state.clone();
            let done = tokio::time::timeout(CLOSE_WAIT, state.wait_for(|s| s.done)).await;
            drop(tx);
            if !matches!(done, Ok(Ok(_))) {
                self.inner.reader.abort();
            }
        }
        match self.inner.state.borrow().end.clone() {
            Some(StreamEnd::Failed { code, message }) if code != tonic::Code::Cancelled => {
                Err(ClientError::Status { code, message, failure_kind: None })
            }
            _ => Ok(()),
        }
    }

    /// Closes without waiting (the sandbox is being removed anyway).
    pub(crate) fn abandon(&self) {
        if self.inner.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Some(tx) = self.inner.requests.lock().ok().and_then(|mut guard| guard.take()) {
            let _ = tx.try_send(proto::PtyRequest { request: Some(Req::Close(proto::PtyClose {})) });
        }
    }
}

/// Checks a signal name (case-insensitive, `INT` short forms accepted) and returns its
/// canonical `SIG...` spelling.
pub(crate) fn validate_signal(name: &str) -> Result<String> {
    Signal::try_from(name)
        .map(|signal| signal.as_str().to_string())
        .map_err(|e| ClientError::InvalidArgument(e.to_string()))
}

/// The session's reader: routes output and stderr to their channels and records the end.
/// `exit` is sent after all output, so the output channels close right after it (a read then
/// sees the end even if the server keeps the stream open until the client half-closes).
async fn route_responses(
    mut stream: tonic::codec::Streaming<proto::PtyResponse>,
    output: mpsc::UnboundedSender<Vec<u8>>,
    stderr: mpsc::UnboundedSender<Vec<u8>>,
    state: watch::Sender<SessionState>,
) {
    let mut channels = Some((output, stderr));
    let end = loop {
        match stream.message().await {
            Ok(Some(msg)) => match msg.response {
                Some(Resp::Output(chunk)) => {
                    if let Some((output, _)) = &channels {
                        let _ = output.send(chunk);
                    }
                }
                Some(Resp::Stderr(chunk)) => {
                    if let Some((_, stderr)) = &channels {
                        let _ = stderr.send(chunk);
                    }
                }
                Some(Resp::Exit(exit)) => {
                    state.send_modify(|s| {
                        if s.end.is_none() {
                            s.end = Some(StreamEnd::Exited(exit.exit_code));
                        }
                    });
                    // After the end is recorded, so a read that sees the channel closed also
                    // sees why.
                    channels = None;
                }
                Some(Resp::Opened(_)) | None => {
                    tracing::debug!("ignoring an unexpected pty response");
                }
            },
            Ok(None) => break StreamEnd::Ended,
            Err(status) => {
                break StreamEnd::Failed { code: status.code(), message: status.message().to_string() }
            }
        }
    };
    state.send_modify(|s| {
        if s.end.is_none() {
            s.end = Some(end);
        }
        s.done = true;
    });
    drop(channels);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_are_validated() {
        assert_eq!(validate_signal("SIGINT").ok().as_deref(), Some("SIGINT"));
        assert_eq!(validate_signal("term").ok().as_deref(), Some("SIGTERM"));
        let err = validate_signal("SIGUSR1").expect_err("unsupported");
        assert!(err.to_string().contains("SIGHUP"));
    }

    #[test]
    fn pty_options_defaults() {
        let o = PtyOptions::default();
        assert_eq!((o.rows, o.cols, o.mode), (24, 80, TerminalMode::Pty));
        assert_eq!(PtyOptions::command("ls").command.as_deref(), Some("ls"));
    }

    /// A session whose reader is a test-controlled task; `SessionState` is set directly.
    pub(super) fn fake_session(
        end: Option<StreamEnd>,
        done: bool,
    ) -> (PtySession, mpsc::UnboundedSender<Vec<u8>>) {
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        let (_err_tx, err_rx) = mpsc::unbounded_channel();
        let (req_tx, _req_rx) = mpsc::channel(4);
        let (state_tx, state_rx) = watch::channel(SessionState { end, done });
        let reader = tokio::spawn(async move {
            // Keep the state sender alive for the session's lifetime.
            let _state = state_tx;
            std::future::pending::<()>().await;
        });
        let session = PtySession {
            inner: Arc::new(SessionInner {
                id: "s".into(),
                mode: TerminalMode::Pty,
                offset: 0,
                requests: StdMutex::new(Some(req_tx)),
                output: tokio::sync::Mutex::new(out_rx),
                stderr: tokio::sync::Mutex::new(err_rx),
                state: state_rx,
                closed: AtomicBool::new(false),
                reader: reader.abort_handle(),
            }),
        };
        (session, out_tx)
    }

    #[tokio::test]
    async fn reads_map_the_end_of_the_stream() {
        let (s, tx) = fake_session(Some(StreamEnd::Exited(3)), true);
        tx.send(b"out".to_vec()).expect("send");
        drop(tx);
        assert_eq!(s.read(None).await.expect("chunk"), b"out");
        assert_eq!(s.read(None).await.expect("eof"), b"");
        assert_eq!(s.wait_exit(None).await.expect("exit"), 3);
        assert_eq!(s.exit_code(), Some(3));

        let failed = StreamEnd::Failed { code: tonic::Code::Unavailable, message: "docker down".into() };
        let (s, tx) = fake_session(Some(failed), true);
        drop(tx);
        let err = s.read(Some(Duration::from_secs(1))).await.expect_err("failure");
        assert_eq!(err.code(), tonic::Code::Unavailable);
        assert!(matches!(s.wait_exit(None).await, Err(ClientError::Status { .. })));

        let (s, tx) = fake_session(None, false);
        assert!(matches!(s.read(Some(Duration::from_millis(20))).await, Err(ClientError::Timeout)));
        assert!(matches!(s.wait_exit(Some(Duration::from_millis(20))).await, Err(ClientError::Timeout)));
        drop(tx);
    }
}
