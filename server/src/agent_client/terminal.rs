//! Terminals through the sandbox's agent: the pty (or the pipes) is allocated in the sandbox,
//! sized at spawn, resized by an ioctl there, and signals go to the terminal's foreground
//! process group (a pipe session's own group) from inside: no `docker exec` per session,
//! resize or signal, no pid record. The session lives in the agent; an [`AgentTerminal`] is one
//! holder's stream of it (a `SessionOpen` or `SessionAttach` request on the agent's channel).

use std::sync::Arc;
use std::time::Duration;

use sandboxd_agent::protocol::{
    DetachReason, Event, FailureKind, Request, SessionInfo, SessionStart, WindowSize,
};
use tokio::sync::{mpsc, watch, Mutex};

use super::channel::{AgentChannel, Call};
use crate::core::backend::TerminalSession;
use crate::core::spec::{PtySpec, Signal};
use crate::core::terminal::{AttachSpec, PtyError, TerminalInfo, TerminalMode};
use crate::error::{ProviderError, Result};

/// How long the agent has to answer an open, an attach or a listing.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `close` waits for the session's end (the agent HUPs, then KILLs after 2 s).
const CLOSE_WAIT: Duration = Duration::from_secs(10);
/// Output chunks queued between the agent's channel and the stream (each at most the agent's
/// chunk size); the agent's credit is granted as they are queued, so a stream that stops
/// reading stops its session's sender in the agent, never the program or other sessions.
const OUTPUT_QUEUE: usize = 16;
/// Requests queued from the stream to the agent.
const CONTROL_QUEUE: usize = 64;

/// What a call gets when the channel ends under a session's stream.
const AGENT_LOST: &str =
    "the sandbox's agent went away: the sandbox is gone or no longer running, or the agent was killed in it";
/// What a stream gets when its sandbox is closed under it.
const SANDBOX_GONE: &str = "the session's sandbox is gone (closed under the session)";

/// How a holder's stream ended.
#[derive(Debug, Clone)]
enum End {
    /// The program exited with this code.
    Exit(i32),
    /// The stream ended and the session runs on (detached, or let go by this process).
    Detached,
    /// Another attach took the session over.
    TakenOver(String),
    /// The holder wrote more input than the agent queues for a program that does not read it;
    /// the session runs on.
    InputFull(String),
    /// The channel to the agent ended.
    Failed(String),
}

/// What the stream asks of the task that owns the agent request.
enum Control {
    /// Send this frame on the request.
    Send(Request),
    /// The stream went away: `Abandon` (the session's detach timeout applies) and stop.
    Release,
    /// Stop without a word to the agent: the sandbox is gone (the stream fails).
    Forget,
}

/// One holder's stream of a session in the sandbox's agent.
pub struct AgentTerminal {
    id: String,
    mode: TerminalMode,
    offset: u64,
    control: mpsc::Sender<Control>,
    output: Mutex<mpsc::Receiver<Vec<u8>>>,
    stderr: Mutex<mpsc::Receiver<Vec<u8>>>,
    end: watch::Receiver<Option<End>>,
}

/// `spec`'s program in the sandbox: `shell` interactively, or `shell -c COMMAND`.
fn argv(shell: &str, spec: &PtySpec) -> Vec<String> {
    match &spec.command {
        None => vec![shell.to_string()],
        Some(command) => vec![shell.to_string(), "-c".to_string(), command.clone()],
    }
}

/// What a session runs, as `ListPtySessions` shows it: the command of `shell -c COMMAND`.
fn command_of(argv: &[String]) -> String {
    match argv {
        [_, flag, command] if flag == "-c" => command.clone(),
        _ => argv.join(" "),
    }
}

impl From<SessionInfo> for TerminalInfo {
    fn from(s: SessionInfo) -> Self {
        let size = s.pty.unwrap_or_default();
        TerminalInfo {
            command: command_of(&s.argv),
            mode: if s.pty.is_some() { TerminalMode::Pty } else { TerminalMode::Pipe },
            rows: size.rows,
            cols: size.cols,
            exit_code: s.exit_code,
            attached: s.attached,
            retained_bytes: s.retained_bytes(),
            session_id: s.session_id,
        }
    }
}

/// The agent's first answer to `call`: `SessionOpened` (id, offset), or why not.
async fn opened(call: &mut Call, failed: fn(FailureKind, String) -> ProviderError) -> Result<(String, u64)> {
    let event = tokio::time::timeout(ANSWER_TIMEOUT, call.events.recv()).await;
    match event {
        Ok(Some(Event::SessionOpened { session_id, offset, .. })) => Ok((session_id, offset)),
        Ok(Some(Event::Failed { kind, message })) => {
            call.finish();
            Err(failed(kind, message))
        }
        Ok(Some(other)) => {
            Err(ProviderError::Pty(format!("the sandbox's agent answered a session request with {other:?}")))
        }
        Ok(None) => {
            call.finish();
            Err(ProviderError::Pty(AGENT_LOST.into()))
        }
        Err(_) => Err(ProviderError::Pty(format!(
            "the sandbox's agent did not answer within {}s",
            ANSWER_TIMEOUT.as_secs()
        ))),
    }
}

fn open_failure(kind: FailureKind, message: String) -> ProviderError {
    match kind {
        FailureKind::Invalid => ProviderError::invalid("open", message),
        _ => ProviderError::Pty(message),
    }
}

fn attach_failure(kind: FailureKind, message: String) -> ProviderError {
    match kind {
        FailureKind::NoSession => ProviderError::SessionNotFound(message),
        FailureKind::Held => ProviderError::SessionHeld(message),
        FailureKind::OutOfRange => ProviderError::OutOfRange(message),
        FailureKind::Invalid => ProviderError::invalid("attach", message),
        _ => ProviderError::Pty(message),
    }
}

/// Start `spec` in the sandbox and hold it: `user` already normalised (`None`: the image's),
/// `retain_bytes` of output kept for re-attaches.
pub async fn open(
    channel: &AgentChannel,
    shell: &str,
    spec: &PtySpec,
    user: Option<&str>,
    retain_bytes: u64,
) -> Result<Arc<dyn TerminalSession>> {
    let start = SessionStart {
        argv: argv(shell, spec),
        env: spec.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        cwd: spec.cwd.clone(),
        user: user.map(String::from).or_else(|| channel.default_user.clone()),
        pty: (spec.mode == TerminalMode::Pty).then_some(WindowSize { rows: spec.rows, cols: spec.cols }),
        retain_bytes,
        detach_timeout_ms: spec.detach_timeout.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        attach: true,
    };
    let mut call = channel
        .call(Request::SessionOpen(start))
        .await
        .ok_or_else(|| ProviderError::Pty(AGENT_LOST.into()))?;
    let (id, offset) = opened(&mut call, open_failure).await?;
    tracing::info!(session_id = %id, "pty session opened in the sandbox's agent");
    Ok(AgentTerminal::start(id, spec.mode, offset, call))
}

/// Hold the session `attach` names from its `since` on.
pub async fn attach(
    channel: &AgentChannel,
    name: &str,
    attach: &AttachSpec,
) -> Result<Arc<dyn TerminalSession>> {
    // The mode is the session's own: ask the agent first (an unknown id is NOT_FOUND here).
    let mode = list(channel)
        .await?
        .into_iter()
        .find(|s| s.session_id == attach.session_id)
        .map(|s| s.mode)
        .ok_or_else(|| {
        ProviderError::SessionNotFound(format!(
            "no session {:?} in sandbox {name} (ListPtySessions shows the sessions it keeps)",
            attach.session_id
        ))
    })?;
    let request = Request::SessionAttach {
        session_id: attach.session_id.clone(),
        since: Some(attach.since),
        takeover: attach.takeover,
    };
    let mut call = channel.call(request).await.ok_or_else(|| ProviderError::Pty(AGENT_LOST.into()))?;
    let (id, offset) = opened(&mut call, attach_failure).await?;
    tracing::info!(session_id = %id, offset, takeover = attach.takeover, "pty session attached");
    Ok(AgentTerminal::start(id, mode, offset, call))
}

/// Every session the sandbox's agent keeps, oldest first.
pub async fn list(channel: &AgentChannel) -> Result<Vec<TerminalInfo>> {
    let mut call =
        channel.call(Request::ListSessions).await.ok_or_else(|| ProviderError::Pty(AGENT_LOST.into()))?;
    let event = tokio::time::timeout(ANSWER_TIMEOUT, call.events.recv()).await;
    call.finish();
    match event {
        Ok(Some(Event::Sessions(list))) => Ok(list.into_iter().map(TerminalInfo::from).collect()),
        Ok(Some(Event::Failed { message, .. })) => Err(ProviderError::Pty(message)),
        Ok(Some(other)) => {
            Err(ProviderError::Pty(format!("the sandbox's agent answered a listing with {other:?}")))
        }
        Ok(None) => Err(ProviderError::Pty(AGENT_LOST.into())),
        Err(_) => Err(ProviderError::Pty(format!(
            "the sandbox's agent did not list its sessions within {}s",
            ANSWER_TIMEOUT.as_secs()
        ))),
    }
}

impl AgentTerminal {
    fn start(id: String, mode: TerminalMode, offset: u64, call: Call) -> Arc<dyn TerminalSession> {
        let (control, control_rx) = mpsc::channel(CONTROL_QUEUE);
        let (out_tx, output) = mpsc::channel(OUTPUT_QUEUE);
        let (err_tx, stderr) = mpsc::channel(OUTPUT_QUEUE);
        let (end_tx, end) = watch::channel(None);
        tokio::spawn(route(call, control_rx, out_tx, err_tx, end_tx));
        Arc::new(Self {
            id,
            mode,
            offset,
            control,
            output: Mutex::new(output),
            stderr: Mutex::new(stderr),
            end,
        })
    }

    fn ended(&self) -> Option<End> {
        self.end.borrow().clone()
    }

    /// What a read returns once its queue ended: nothing more, or why the stream broke.
    fn after_end(&self) -> Result<Vec<u8>, PtyError> {
        match self.ended() {
            Some(End::TakenOver(message)) => Err(PtyError::TakenOver(message)),
            Some(End::InputFull(message)) => Err(PtyError::Exhausted(message)),
            Some(End::Failed(message)) => Err(PtyError::Failed(message)),
            _ => Ok(Vec::new()),
        }
    }

    async fn read_from(
        &self,
        queue: &Mutex<mpsc::Receiver<Vec<u8>>>,
        timeout: Option<Duration>,
    ) -> Result<Vec<u8>, PtyError> {
        let mut rx = queue.lock().await;
        let next = match timeout {
            None => rx.recv().await,
            Some(d) if d.is_zero() => match rx.try_recv() {
                Ok(chunk) => Some(chunk),
                Err(mpsc::error::TryRecvError::Empty) => return Err(PtyError::Timeout(d)),
                Err(mpsc::error::TryRecvError::Disconnected) => None,
            },
            Some(d) => tokio::time::timeout(d, rx.recv()).await.map_err(|_| PtyError::Timeout(d))?,
        };
        match next {
            Some(chunk) => Ok(chunk),
            None => self.after_end(),
        }
    }

    async fn send(&self, request: Request) -> Result<(), PtyError> {
        if self.ended().is_some() || self.control.send(Control::Send(request)).await.is_err() {
            return Err(PtyError::Failed(format!("session {} ended", self.id)));
        }
        Ok(())
    }
}

/// The task that owns the agent request: output into the queues (granting credit as it goes),
/// the stream's requests to the agent, and how the stream ended.
async fn route(
    mut call: Call,
    mut control: mpsc::Receiver<Control>,
    out_tx: mpsc::Sender<Vec<u8>>,
    err_tx: mpsc::Sender<Vec<u8>>,
    end: watch::Sender<Option<End>>,
) {
    let mut pending: Option<(bool, Vec<u8>)> = None;
    let finish = |call: &mut Call, how: End| {
        call.finish();
        end.send_if_modified(|e| {
            if e.is_none() {
                *e = Some(how);
                true
            } else {
                false
            }
        });
    };
    loop {
        let target = if matches!(pending, Some((true, _))) { err_tx.clone() } else { out_tx.clone() };
        tokio::select! {
            event = call.events.recv(), if pending.is_none() => match event {
                Some(Event::Output { stderr, data, .. }) => pending = Some((stderr, data)),
                Some(Event::SessionExit { code }) => return finish(&mut call, End::Exit(code)),
                Some(Event::Detached { reason: DetachReason::TakenOver, message }) => {
                    return finish(&mut call, End::TakenOver(message))
                }
                Some(Event::Detached { reason: DetachReason::InputFull, message }) => {
                    return finish(&mut call, End::InputFull(message))
                }
                Some(Event::Detached { .. }) => return finish(&mut call, End::Detached),
                // A resize or signal the agent could not do: the session goes on.
                Some(Event::Failed { kind, message }) => {
                    tracing::warn!(?kind, %message, "the sandbox's agent refused a session request");
                }
                Some(_) => {}
                None => return finish(&mut call, End::Failed(AGENT_LOST.into())),
            },
            permit = target.reserve(), if pending.is_some() => {
                let Ok(permit) = permit else {
                    // The reader is gone: the stream's owner releases or closes the session.
                    pending = None;
                    continue;
                };
                if let Some((_, data)) = pending.take() {
                    let n = data.len() as u64;
                    permit.send(data);
                    call.send(Request::Credit(n)).await;
                }
            },
            request = control.recv() => match request {
                Some(Control::Send(request)) => {
                    call.send(request).await;
                }
                Some(Control::Release) | None => {
                    call.send(Request::Abandon).await;
                    return finish(&mut call, End::Detached);
                }
                Some(Control::Forget) => return finish(&mut call, End::Failed(SANDBOX_GONE.into())),
            },
        }
    }
}

#[async_trait::async_trait]
impl TerminalSession for AgentTerminal {
    fn id(&self) -> &str {
        &self.id
    }

    fn mode(&self) -> TerminalMode {
        self.mode
    }

    fn closed(&self) -> bool {
        self.ended().is_some()
    }

    fn offset(&self) -> u64 {
        self.offset
    }

    async fn read(&self, timeout: Option<Duration>) -> Result<Vec<u8>, PtyError> {
        self.read_from(&self.output, timeout).await
    }

    async fn read_stderr(&self, timeout: Option<Duration>) -> Result<Vec<u8>, PtyError> {
        self.read_from(&self.stderr, timeout).await
    }

    async fn write(&self, data: &[u8]) -> Result<(), PtyError> {
        for chunk in data.chunks(sandboxd_agent::protocol::MAX_CHUNK) {
            self.send(Request::Stdin(chunk.to_vec())).await?;
        }
        Ok(())
    }

    async fn end_input(&self) -> Result<(), PtyError> {
        if self.mode != TerminalMode::Pipe {
            return Err(PtyError::Invalid {
                field: "stdin_end".into(),
                message: "a terminal has no stdin to close: send Ctrl-D (0x04) as input".into(),
            });
        }
        self.send(Request::StdinEnd).await
    }

    async fn resize(&self, rows: u16, cols: u16) -> Result<(), PtyError> {
        if self.mode == TerminalMode::Pipe {
            return Ok(()); // no terminal to size
        }
        self.send(Request::Resize(WindowSize { rows, cols })).await
    }

    async fn send_signal(&self, signal: Signal) -> Result<(), PtyError> {
        self.send(Request::Signal(signal.number())).await
    }

    async fn wait_exit(&self, timeout: Option<Duration>) -> Result<i32, PtyError> {
        let mut end = self.end.clone();
        let ended = async {
            let seen = end.wait_for(|e| e.is_some()).await.map(|e| e.clone());
            seen.ok().flatten()
        };
        let how = match timeout {
            None => ended.await,
            Some(d) => tokio::time::timeout(d, ended).await.map_err(|_| PtyError::Timeout(d))?,
        };
        match how {
            Some(End::Exit(code)) => Ok(code),
            Some(End::Detached) => Err(PtyError::Detached),
            Some(End::TakenOver(message)) => Err(PtyError::TakenOver(message)),
            Some(End::InputFull(message)) => Err(PtyError::Exhausted(message)),
            Some(End::Failed(message)) => Err(PtyError::Failed(message)),
            None => Err(PtyError::Failed(AGENT_LOST.into())),
        }
    }

    /// `PtyClose`: the session ends (HUP, then KILL); its exit ends the stream.
    async fn close(&self) -> Result<(), PtyError> {
        if self.closed() {
            return Ok(());
        }
        if self.control.send(Control::Send(Request::Kill)).await.is_err() {
            return Ok(());
        }
        if let Err(PtyError::Timeout(_)) = self.wait_exit(Some(CLOSE_WAIT)).await {
            tracing::warn!(session_id = %self.id, "the session did not end within {CLOSE_WAIT:?} of its close");
            let _ = self.control.send(Control::Release).await;
        }
        Ok(())
    }

    async fn detach(&self) -> Result<(), PtyError> {
        self.send(Request::Detach).await
    }

    async fn release(&self) {
        if !self.closed() {
            let _ = self.control.send(Control::Release).await;
            let _ = self.wait_exit(Some(CLOSE_WAIT)).await;
        }
    }

    async fn abandon(&self) {
        let _ = self.control.send(Control::Forget).await;
    }
}
