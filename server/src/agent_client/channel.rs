//! One sandbox's agent channel: a connection to the agent's unix socket (`super::socket`), or
//! as the fallback a persistent `agent serve` the host starts (Docker: `docker exec -i -u 0
//! NAME /.sandboxd/agent serve`, `super::host`) whose stdin/stdout carry the agent protocol. Only this process holds either. Requests are
//! multiplexed by id; a reader task routes each event to its request (never waiting on a
//! consumer: each request's output is bounded by its credit, so a stalled consumer holds only
//! its own request's buffer), and when the channel ends (the agent was killed, the container
//! stopped) every request in flight sees its events end.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandboxd_agent::protocol::{self, Event, Request};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use super::binary::AGENT_PATH_IN_SANDBOX;
use super::host::{AgentHost, ServeMode, ServeProcess};

/// How long a new agent has to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(20);

/// The channel reader's buffer. Small on purpose: a channel lives as long as its sandbox, and
/// every page of its buffer a read ever touched stays resident (a 256 KiB buffer held ~90 KiB
/// per channel after the soak, 64 channels ~6 MB). Frame headers and small events are served
/// from it; a body larger than the buffer is read straight into its own allocation.
const READ_BUFFER: usize = 8 * 1024;

/// Why a channel could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// The sandbox has no usable agent (made by an older server, an image it cannot run in):
    /// use `docker exec` for it from now on.
    NoAgent(String),
    /// The container or daemon failed; the next call may try again.
    Transport(String),
}

type Pending = Arc<Mutex<HashMap<u64, mpsc::UnboundedSender<Event>>>>;

/// How a channel reaches its agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// The agent's unix socket: no host process, no daemon in the data path.
    Socket,
    /// `docker exec -i … serve` (the fallback).
    Exec,
    /// `docker exec -i … connect`: relayed to the `init` agent on its socket inside the
    /// sandbox (a sandbox made to be checkpointed); `Hello`, then `Readiness`, as on a socket.
    Relay,
}

/// What the agent's probe said (socket connections only: `Readiness` after `Hello`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    pub state: protocol::ReadyState,
    /// The shell the agent found (`""`: none).
    pub shell: String,
    pub detail: String,
}

/// An open channel to one sandbox's agent.
pub struct AgentChannel {
    frames: mpsc::Sender<Vec<u8>>,
    pending: Pending,
    next_id: AtomicU64,
    alive: Arc<AtomicBool>,
    /// The image's configured user (`docker exec` runs as it when no user is named).
    pub default_user: Option<String>,
    /// The agent's pid in the sandbox (for logs and tests).
    pub agent_pid: u32,
    pub transport: Transport,
    /// The latest `Readiness` the agent sent (`None` on the exec channel, or before it came).
    readiness: tokio::sync::watch::Receiver<Option<Readiness>>,
    _client: Option<Arc<tokio::sync::Mutex<Box<dyn ServeProcess>>>>,
}

/// A request in flight: its events, and a way to talk to it.
pub struct Call {
    pub id: u64,
    pub events: mpsc::UnboundedReceiver<Event>,
    frames: mpsc::Sender<Vec<u8>>,
    pending: Pending,
    done: bool,
}

impl Call {
    /// Send a frame for this request; false when the channel is gone.
    pub async fn send(&self, request: Request) -> bool {
        self.frames.send(request.encode(self.id)).await.is_ok()
    }

    /// Mark the request finished (its last event arrived): dropping it then sends nothing.
    pub fn finish(&mut self) {
        self.done = true;
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        if let Ok(mut p) = self.pending.lock() {
            p.remove(&self.id);
        }
        if !self.done {
            // Cancelled or timed out: stop the command (and its tree) or the transfer.
            let (frames, id) = (self.frames.clone(), self.id);
            let kill = Request::Kill.encode(id);
            if let Err(mpsc::error::TrySendError::Full(kill)) = frames.try_send(kill) {
                tokio::spawn(async move { frames.send(kill).await });
            }
        }
    }
}

impl AgentChannel {
    /// Start the agent in `name` (or, `mode` [`ServeMode::Relay`], a relay to its `init` agent)
    /// and wait for its hello; learn the image's user meanwhile.
    pub async fn open(host: &dyn AgentHost, name: &str, mode: ServeMode) -> Result<Self, OpenError> {
        // The user lookup is the host's control question: a crowd of execs must not hold up
        // the channel that would take them off the fallback engine.
        let (client, facts) =
            tokio::join!(host.open_serve(name, AGENT_PATH_IN_SANDBOX, mode), host.facts(name));
        let client = client.map_err(OpenError::Transport)?;
        let default_user = match facts {
            Ok(facts) => facts.and_then(|f| f.default_user),
            Err(e) => return Err(OpenError::Transport(e)),
        };
        let (stdin, stdout, mut stderr, mut client) =
            (client.stdin, client.stdout, client.stderr, client.process);
        let mut reader = BufReader::with_capacity(READ_BUFFER, stdout);
        let hello = tokio::time::timeout(HELLO_TIMEOUT, read_event(&mut reader)).await;
        let agent_pid = match hello {
            Ok(Ok(Some(frame))) => match frame.message {
                Event::Hello { version, pid } if version == protocol::PROTOCOL_VERSION => pid,
                Event::Hello { version, .. } => {
                    return Err(OpenError::NoAgent(format!(
                        "the sandbox's agent speaks protocol {version}, this server {}",
                        protocol::PROTOCOL_VERSION
                    )))
                }
                other => {
                    return Err(OpenError::NoAgent(format!("the agent did not say hello first: {other:?}")))
                }
            },
            Ok(_) => {
                // The client ended without a hello: why is on its stderr.
                client.wait().await;
                let mut text = Vec::new();
                if let Some(s) = stderr.as_mut() {
                    let _ = s.read_to_end(&mut text).await;
                }
                let text = String::from_utf8_lossy(&text).trim().to_string();
                return Err(if text.contains(AGENT_PATH_IN_SANDBOX) || text.contains("exec format error") {
                    OpenError::NoAgent(text)
                } else {
                    OpenError::Transport(text)
                });
            }
            // A late hello is a slow daemon (a loaded host starts `docker exec` in tens of
            // seconds), not a missing agent: this call falls back, the next one tries again.
            Err(_) => {
                return Err(OpenError::Transport(format!(
                    "the agent did not say hello within {}s",
                    HELLO_TIMEOUT.as_secs()
                )))
            }
        };
        let client = Arc::new(tokio::sync::Mutex::new(client));
        // The agent's own diagnostics.
        if let Some(mut stderr) = stderr {
            let sandbox = name.to_string();
            tokio::spawn(async move {
                let mut text = String::new();
                let _ = stderr.read_to_string(&mut text).await;
                for line in text.lines().filter(|l| !l.trim().is_empty()) {
                    tracing::warn!(sandbox_id = %sandbox, "agent: {line}");
                }
            });
        }
        let transport = if mode == ServeMode::Relay { Transport::Relay } else { Transport::Exec };
        Ok(Self::run(name, reader, stdin, default_user, agent_pid, transport, Some(client)))
    }

    /// Connect to the agent's socket (already connected and its peer checked: `stream`) and
    /// read its hello.
    pub async fn over_socket(
        name: &str,
        stream: tokio::net::UnixStream,
        default_user: Option<String>,
    ) -> Result<Self, OpenError> {
        let (read, write) = stream.into_split();
        let mut reader = BufReader::with_capacity(READ_BUFFER, read);
        let hello = tokio::time::timeout(HELLO_TIMEOUT, read_event(&mut reader)).await;
        let agent_pid = match hello {
            Ok(Ok(Some(frame))) => match frame.message {
                Event::Hello { version, pid } if version == protocol::PROTOCOL_VERSION => pid,
                other => {
                    return Err(OpenError::Transport(format!(
                        "the agent's socket did not say a hello of protocol {}: {other:?}",
                        protocol::PROTOCOL_VERSION
                    )))
                }
            },
            Ok(Ok(None)) => return Err(OpenError::Transport("the agent closed its socket at once".into())),
            Ok(Err(e)) => return Err(OpenError::Transport(format!("reading the agent's hello: {e}"))),
            Err(_) => return Err(OpenError::Transport("the agent's socket said no hello".into())),
        };
        Ok(Self::run(name, reader, write, default_user, agent_pid, Transport::Socket, None))
    }

    /// Start the writer and reader tasks over an open channel.
    fn run<R, W>(
        name: &str,
        mut reader: R,
        stdin: W,
        default_user: Option<String>,
        agent_pid: u32,
        transport: Transport,
        client: Option<Arc<tokio::sync::Mutex<Box<dyn ServeProcess>>>>,
    ) -> Self
    where
        R: tokio::io::AsyncRead + Unpin + Send + 'static,
        W: tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (frames, mut outgoing) = mpsc::channel::<Vec<u8>>(32);
        let pending: Pending = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        let sandbox = name.to_string();
        let (ready_tx, readiness) = tokio::sync::watch::channel(None);
        // Writer: frames in order onto the agent's stdin.
        let writer_alive = alive.clone();
        tokio::spawn(async move {
            let mut stdin = stdin;
            while let Some(frame) = outgoing.recv().await {
                if stdin.write_all(&frame).await.is_err() {
                    break;
                }
            }
            writer_alive.store(false, Ordering::SeqCst);
        });
        // Reader: route events; at the end, drop every pending sender so each call sees it.
        let (reader_pending, reader_alive, reader_client) = (pending.clone(), alive.clone(), client.clone());
        tokio::spawn(async move {
            loop {
                match read_event(&mut reader).await {
                    Ok(Some(frame)) if frame.id == 0 => {
                        if let Event::Readiness { state, shell, detail } = frame.message {
                            let _ = ready_tx.send(Some(Readiness { state, shell, detail }));
                        }
                    }
                    Ok(Some(frame)) => {
                        let target = reader_pending.lock().ok().and_then(|p| p.get(&frame.id).cloned());
                        if let Some(tx) = target {
                            let _ = tx.send(frame.message);
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!(sandbox_id = %sandbox, error = %e, "bad frame from the sandbox's agent");
                        break;
                    }
                }
            }
            reader_alive.store(false, Ordering::SeqCst);
            if let Ok(mut p) = reader_pending.lock() {
                p.clear();
            }
            if let Some(client) = reader_client {
                client.lock().await.abort().await;
            }
            tracing::info!(sandbox_id = %sandbox, "the sandbox's agent channel ended");
        });
        Self {
            frames,
            pending,
            next_id: AtomicU64::new(1),
            alive,
            default_user,
            agent_pid,
            transport,
            readiness,
            _client: client,
        }
    }

    /// Wait for the agent's probe to settle (Ready or Failed); `None` when the channel ended
    /// first or it has no readiness (the exec channel).
    pub async fn settled(&self) -> Option<Readiness> {
        if self.transport == Transport::Exec {
            return None;
        }
        let mut rx = self.readiness.clone();
        let r = rx
            .wait_for(|r| r.as_ref().is_some_and(|r| r.state != protocol::ReadyState::Pending))
            .await
            .ok()?;
        r.clone()
    }

    /// Whether the channel still works.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst) && !self.frames.is_closed()
    }

    /// Start a request; its events arrive on the returned call.
    pub async fn call(&self, request: Request) -> Option<Call> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, events) = mpsc::unbounded_channel();
        self.pending.lock().ok()?.insert(id, tx);
        let call =
            Call { id, events, frames: self.frames.clone(), pending: self.pending.clone(), done: false };
        if !self.is_alive() || !call.send(request).await {
            let mut call = call;
            call.finish();
            return None;
        }
        Some(call)
    }
}

async fn read_event<R: tokio::io::AsyncRead + Unpin>(
    reader: &mut R,
) -> std::io::Result<Option<protocol::Frame<Event>>> {
    let mut header = [0u8; 4];
    match reader.read_exact(&mut header).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let mut body = vec![0u8; protocol::body_len(header, protocol::MAX_FRAME)?];
    reader.read_exact(&mut body).await?;
    protocol::decode_event(&body).map(Some)
}
