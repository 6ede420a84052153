//! The agent exec engine: commands and files go to the sandbox's resident agent over one
//! persistent channel per sandbox (see `channel`): its unix socket (`socket`) where the sandbox
//! was started with one, else a serve channel its host opens (Docker: `docker exec -i … serve`),
//! and the host's fallback engine (Docker: `docker exec`) for a sandbox where the agent cannot
//! run (each fallback said once in the log, per sandbox). Everything it needs from the runtime
//! goes through [`host::AgentHost`]; this module never names a backend.

pub mod binary;
pub mod channel;
mod exec;
mod files;
mod forward;
pub mod host;
mod procs;
pub mod run_dirs;
pub mod socket;
pub mod terminal;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandboxd_agent::protocol;

use self::channel::{AgentChannel, OpenError, Transport};
pub(crate) use self::exec::AGENT_LOST;
use self::exec::{drive, Sink, FIRST_CHECK};
use self::host::AgentHost;
use self::run_dirs::{InFlight, RunDirs};
use crate::core::backend::{ExecStream, FileDownload, StreamEvent, TerminalSession, UploadSource};
use crate::core::exec_engine::{no_sessions, spawn_stream, ExecEngine, ExecSpec};
use crate::core::fs::Xattr;
use crate::core::record_map::{Record, RecordMap};
use crate::core::spec::PtySpec;
use crate::core::spec::{ExecErrorType, ExecResult};
use crate::core::terminal::{AttachSpec, TerminalInfo};
use crate::error::Result;

/// Largest download served through the agent's exec channel: it (a `docker exec` stdout, about
/// 110 MB/s here) wins on small files by skipping `docker cp`'s fixed cost, `docker cp` wins on
/// large ones (about 220 MB/s out). On the socket every size goes through the agent.
const AGENT_DOWNLOAD_MAX: u64 = 8 << 20;

type Slot = Arc<tokio::sync::Mutex<Option<Arc<AgentChannel>>>>;

/// Commands through the sandbox's agent.
pub struct AgentEngine {
    /// The runtime the sandboxes run in: their channels, state and fallback engine.
    host: Arc<dyn AgentHost>,
    /// Everything kept of each sandbox, in one record by name (one `forget` drops it).
    reaches: RecordMap<Reach>,
    /// Where run directories live (`<root>/<sandbox id>/run`); `None`: no socket transport
    /// (the reason was logged when the server started).
    run_dirs: Option<RunDirs>,
    /// Whether new sandboxes get a socket (`exec.transport: socket`); sandboxes that have one
    /// are reached on it either way.
    new_sockets: bool,
    /// Output each terminal session retains for re-attaches (`server.pty.retain_bytes`).
    retain_bytes: AtomicU64,
}

/// What the engine keeps of one sandbox. A record whose every part is empty is dropped.
#[derive(Default)]
struct Reach {
    /// Its channel's slot (opened on first use).
    slot: Option<Slot>,
    /// What is known about its container (id, image user, run directory).
    facts: Option<Facts>,
    /// It has no usable agent: the host's fallback engine serves it.
    without_agent: bool,
    /// Its socket cannot be used: the exec channel serves it (said once).
    exec_only: bool,
}

impl Record for Reach {
    fn is_empty(&self) -> bool {
        self.slot.is_none() && self.facts.is_none() && !self.without_agent && !self.exec_only
    }
}

/// What reaching a sandbox's agent on its socket needs.
#[derive(Debug, Clone)]
pub struct Facts {
    /// The container's full id (the socket's peer must run in it).
    pub container_id: String,
    /// The user a command runs as when none is named (the image's user).
    pub default_user: Option<String>,
    /// Its run directory on this host; `None`: started without one (an older server), or
    /// with its socket inside the sandbox (`inner`).
    pub run_dir: Option<PathBuf>,
    /// The agent's socket is inside the sandbox only (a sandbox made to be checkpointed): a
    /// relay (`agent connect`) through the host reaches it.
    pub inner: bool,
}

/// A name that is one plain path component (sandbox ids are), so it can name a directory.
fn plain_component(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

impl AgentEngine {
    /// `socket_root`: where sandbox run directories live, `None` for no socket transport;
    /// `new_sockets`: whether new sandboxes get one there (`exec.transport`).
    pub fn new(host: Arc<dyn AgentHost>, socket_root: Option<PathBuf>, new_sockets: bool) -> Self {
        Self {
            host,
            reaches: RecordMap::default(),
            run_dirs: socket_root.map(RunDirs::new),
            new_sockets,
            retain_bytes: AtomicU64::new(protocol::DEFAULT_RETAIN_BYTES),
        }
    }

    /// Where sandbox `sandbox_id`'s run directory is, when this server can reach sockets.
    pub fn run_dir_for(&self, sandbox_id: &str) -> Option<PathBuf> {
        let dirs = self.run_dirs.as_ref().filter(|_| plain_component(sandbox_id))?;
        Some(dirs.root().join(sandbox_id).join("run"))
    }

    /// The run directory a new sandbox `sandbox_id` gets, when new sandboxes get sockets.
    pub fn new_run_dir(&self, sandbox_id: &str) -> Option<PathBuf> {
        self.run_dir_for(sandbox_id).filter(|_| self.new_sockets)
    }

    /// Make a new sandbox's run directory (0700, owned by this server, the daemon recorded
    /// beside it): its path and the create's hold on it, or `None` when new sandboxes get no
    /// socket.
    pub async fn make_run_dir(&self, sandbox_id: &str) -> Option<std::io::Result<(PathBuf, InFlight<'_>)>> {
        let run_dir = self.new_run_dir(sandbox_id)?;
        let dirs = self.run_dirs.as_ref()?;
        Some(dirs.make(self.host(), sandbox_id, &run_dir).await.map(|hold| (run_dir, hold)))
    }

    /// As `make_run_dir`, for a sandbox whose runtime decides (`docker.runtimes[].transport`):
    /// `socket` says whether it gets one, whatever `exec.transport` says.
    pub async fn make_run_dir_for_runtime(
        &self,
        sandbox_id: &str,
        socket: bool,
    ) -> Option<std::io::Result<(PathBuf, InFlight<'_>)>> {
        let run_dir = self.run_dir_for(sandbox_id).filter(|_| socket)?;
        let dirs = self.run_dirs.as_ref()?;
        Some(dirs.make(self.host(), sandbox_id, &run_dir).await.map(|hold| (run_dir, hold)))
    }

    /// Prune the run directories sandboxes left behind ([`run_dirs`]'s rules), at most every few
    /// minutes (the sweep calls this on each pass).
    pub async fn prune_run_dirs_due(&self) {
        if let Some(dirs) = &self.run_dirs {
            dirs.prune_due(self.host()).await;
        }
    }

    /// Prune now the run directories left behind at least `min_age` ago: the sandbox ids.
    pub async fn prune_run_dirs(&self, min_age: Duration) -> Vec<String> {
        match &self.run_dirs {
            Some(dirs) => dirs.prune(self.host(), min_age).await,
            None => Vec::new(),
        }
    }

    /// A create tells what it knows about its container (the name it runs under now).
    pub fn started(&self, name: &str, facts: Facts) {
        self.reaches.update(name, |r| r.facts = Some(facts));
    }

    /// The sandbox's facts: known from its create, else asked of the host once (kept).
    async fn facts(&self, name: &str) -> Option<Facts> {
        if let Some(f) = self.reaches.read(name, |r| r.facts.clone()).flatten() {
            return Some(f);
        }
        let host::HostFacts { container_id, default_user, socket_started, inner_socket } =
            self.host.facts(name).await.ok()??;
        let run_dir = self.run_dir_for(name).filter(|_| socket_started);
        let facts = Facts { container_id, default_user, run_dir, inner: inner_socket };
        self.started(name, facts.clone());
        Some(facts)
    }

    /// The image's user of a sandbox started on the socket with `-u 0` (a non-root image).
    pub async fn image_user_of(&self, name: &str) -> Option<String> {
        let facts = self.facts(name).await?;
        if !facts.inner {
            self.run_dirs.as_ref()?;
            facts.run_dir.as_ref()?;
        }
        facts.default_user
    }

    /// The user a fallback `docker exec` runs as: the named one, else the image's (a sandbox
    /// whose agent runs as root has root as its container user).
    async fn fallback_user(&self, name: &str, user: Option<&str>) -> Option<String> {
        if let Some(user) = user {
            return Some(user.to_string());
        }
        let facts = self.facts(name).await?;
        if !facts.inner {
            self.run_dirs.as_ref()?;
        }
        facts.default_user
    }

    /// Whether the sandbox's agent socket is inside it (reached by a relay): known from its
    /// create, else from its labels (one inspect, kept).
    async fn inner(&self, name: &str) -> bool {
        self.facts(name).await.is_some_and(|f| f.inner)
    }

    /// Note once per sandbox that its socket is not used, and why.
    fn exec_only(&self, name: &str, reason: &str) {
        if !self.reaches.update(name, |r| std::mem::replace(&mut r.exec_only, true)) {
            tracing::warn!(sandbox_id = %name, %reason, "the agent's socket is not used for this sandbox; its docker exec channel serves it");
        }
    }

    /// A channel on the sandbox's socket, or `None` (the exec channel answers instead).
    async fn open_socket(&self, name: &str) -> Option<AgentChannel> {
        self.run_dirs.as_ref()?;
        if self.reaches.read(name, |r| r.exec_only).unwrap_or(false) {
            return None;
        }
        let facts = self.facts(name).await?;
        let Some(run_dir) = facts.run_dir.clone() else {
            self.exec_only(
                name,
                "it was started without a socket (by an older server, or with exec.engine docker)",
            );
            return None;
        };
        let stream = match socket::connect(&run_dir, &facts.container_id) {
            Ok(stream) => stream,
            // Not for good: the next call tries the socket again.
            Err(socket::SocketError::Busy(reason)) => {
                tracing::warn!(sandbox_id = %name, %reason, "the agent's socket is busy; its docker exec channel serves this call");
                return None;
            }
            Err(e) => {
                self.exec_only(name, &e.to_string());
                return None;
            }
        };
        match Self::over(name, stream, &facts).await {
            Ok(channel) => Some(channel),
            Err(reason) => {
                self.exec_only(name, &reason);
                None
            }
        }
    }

    /// The channel over a connected, checked socket.
    async fn over(
        name: &str,
        stream: std::os::unix::net::UnixStream,
        facts: &Facts,
    ) -> std::result::Result<AgentChannel, String> {
        stream.set_nonblocking(true).map_err(|e| e.to_string())?;
        let stream = tokio::net::UnixStream::from_std(stream).map_err(|e| e.to_string())?;
        AgentChannel::over_socket(name, stream, facts.default_user.clone())
            .await
            .map_err(|e| format!("{e:?}"))
    }

    /// Wait for a just-started sandbox's socket and its probe's verdict: `Ok(shell)` (`""`:
    /// the image has none), `Err(Some(detail))` when the probe failed, `Err(None)` when the
    /// socket did not come up (the caller falls back to probing by exec).
    pub async fn await_ready(
        &self,
        name: &str,
        patience: Duration,
    ) -> std::result::Result<String, Option<String>> {
        let facts = self.reaches.read(name, |r| r.facts.clone()).flatten().ok_or(None)?;
        if facts.inner {
            return self.await_ready_by_relay(name, patience).await;
        }
        let run_dir = facts.run_dir.clone().ok_or(None)?;
        let give_up = tokio::time::Instant::now() + patience;
        let mut next_check = tokio::time::Instant::now() + FIRST_CHECK;
        let mut pause = Duration::from_millis(2);
        let stream = loop {
            match socket::connect(&run_dir, &facts.container_id) {
                Ok(stream) => break stream,
                Err(socket::SocketError::Refused(reason)) => {
                    self.exec_only(name, &reason);
                    return Err(None);
                }
                Err(socket::SocketError::Absent(_) | socket::SocketError::Busy(_)) => {}
            }
            let now = tokio::time::Instant::now();
            if now >= give_up {
                self.exec_only(name, "its agent's socket did not come up");
                return Err(None);
            }
            if now >= next_check {
                if !self.host.is_running(name).await {
                    return Err(Some(format!("sandbox {name} stopped before its agent was up")));
                }
                next_check = now + FIRST_CHECK;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        };
        let channel = match Self::over(name, stream, &facts).await {
            Ok(channel) => Arc::new(channel),
            Err(reason) => {
                self.exec_only(name, &reason);
                return Err(None);
            }
        };
        let slot = self.slot(name).ok_or(None)?;
        *slot.lock().await = Some(channel.clone());
        match tokio::time::timeout_at(give_up, channel.settled()).await {
            Ok(Some(r)) if r.state == protocol::ReadyState::Ready => Ok(r.shell),
            Ok(Some(r)) => Err(Some(r.detail)),
            Ok(None) => Err(Some(AGENT_LOST.to_string())),
            Err(_) => Err(Some("the agent's readiness probe did not settle in time".to_string())),
        }
    }

    /// `await_ready` for an agent whose socket is inside the sandbox: a relay to it (the relay
    /// waits for the socket to be bound), then its probe's verdict, as on a socket.
    async fn await_ready_by_relay(
        &self,
        name: &str,
        patience: Duration,
    ) -> std::result::Result<String, Option<String>> {
        let give_up = tokio::time::Instant::now() + patience;
        let channel = match AgentChannel::open(self.host(), name, host::ServeMode::Relay).await {
            Ok(channel) => Arc::new(channel),
            Err(OpenError::NoAgent(reason) | OpenError::Transport(reason)) => {
                if !self.host.is_running(name).await {
                    return Err(Some(format!("sandbox {name} stopped before its agent was up")));
                }
                tracing::warn!(sandbox_id = %name, %reason, "no relay to the sandbox's agent; probing by exec");
                return Err(None);
            }
        };
        let slot = self.slot(name).ok_or(None)?;
        *slot.lock().await = Some(channel.clone());
        match tokio::time::timeout_at(give_up, channel.settled()).await {
            Ok(Some(r)) if r.state == protocol::ReadyState::Ready => Ok(r.shell),
            Ok(Some(r)) => Err(Some(r.detail)),
            Ok(None) => Err(Some(AGENT_LOST.to_string())),
            Err(_) => Err(Some("the agent's readiness probe did not settle in time".to_string())),
        }
    }

    /// Let go of the sandbox's channel (its `docker exec -i` ends, and so does the agent it
    /// ran, or the relay to its `init` agent); the next call opens another. A checkpoint needs
    /// no exec running (`live.rs`).
    pub fn disconnect(&self, name: &str) {
        self.reaches.update(name, |r| r.slot = None);
    }

    /// How the sandbox's channel reaches its agent now (`None`: no channel open).
    pub fn transport(&self, name: &str) -> Option<Transport> {
        let slot = self.reaches.read(name, |r| r.slot.clone()).flatten()?;
        let guard = slot.try_lock().ok()?;
        guard.as_ref().filter(|c| c.is_alive()).map(|c| c.transport)
    }

    /// Output each terminal session keeps for re-attaches (`server.pty.retain_bytes`).
    pub fn set_retain_bytes(&self, bytes: u64) {
        self.retain_bytes.store(bytes, Ordering::Relaxed);
    }

    /// Records kept, channel slots among them, and sandboxes known to have no agent.
    pub fn cache_sizes(&self) -> (usize, usize, usize) {
        self.reaches.survey(|m| {
            let slots = m.values().filter(|r| r.slot.is_some()).count();
            (m.len(), slots, m.values().filter(|r| r.without_agent).count())
        })
    }

    /// The sandbox's channel slot, made on first use.
    fn slot(&self, name: &str) -> Option<Slot> {
        self.reaches.update(name, |r| Some(r.slot.get_or_insert_with(Slot::default).clone()))
    }

    fn host(&self) -> &dyn AgentHost {
        &*self.host
    }

    /// The sandbox's channel, opened on first use and reopened after the agent died; `None`
    /// means "use docker exec for this call".
    pub async fn channel(&self, name: &str) -> Option<Arc<AgentChannel>> {
        if self.reaches.read(name, |r| r.without_agent).unwrap_or(false) {
            return None;
        }
        let slot = self.slot(name)?;
        let mut guard = slot.lock().await;
        if let Some(channel) = guard.as_ref().filter(|c| c.is_alive()) {
            return Some(channel.clone());
        }
        let mode = if self.inner(name).await {
            host::ServeMode::Relay
        } else {
            if let Some(channel) = self.open_socket(name).await {
                tracing::debug!(sandbox_id = %name, agent_pid = channel.agent_pid, "agent socket connected");
                let channel = Arc::new(channel);
                *guard = Some(channel.clone());
                return Some(channel);
            }
            host::ServeMode::Serve
        };
        match AgentChannel::open(self.host(), name, mode).await {
            Ok(channel) => {
                tracing::debug!(sandbox_id = %name, agent_pid = channel.agent_pid, "agent channel open");
                let channel = Arc::new(channel);
                *guard = Some(channel.clone());
                Some(channel)
            }
            Err(OpenError::NoAgent(reason)) => {
                tracing::warn!(sandbox_id = %name, %reason, "the sandbox's agent cannot run; using docker exec for it");
                self.reaches.update(name, |r| r.without_agent = true);
                None
            }
            Err(OpenError::Transport(reason)) => {
                tracing::debug!(sandbox_id = %name, %reason, "agent channel not opened; docker exec answers this call");
                None
            }
        }
    }
}

#[tonic::async_trait]
impl ExecEngine for AgentEngine {
    async fn exec(&self, spec: ExecSpec<'_>) -> ExecResult {
        let Some(channel) = self.channel(spec.name).await else {
            let user = self.fallback_user(spec.name, spec.user).await;
            return self.host.fallback().exec(ExecSpec { user: user.as_deref(), ..spec }).await;
        };
        let limit = self.host.output_limit();
        let Some(call) = exec::start(&channel, spec, limit as u64).await else {
            return ExecResult::failed(ExecErrorType::Sandbox, AGENT_LOST);
        };
        let timeout = spec.params.timeout;
        let mut sink = Sink::Buffer { stdout: Vec::new(), stderr: Vec::new() };
        let started = Instant::now();
        let mut result = drive(self.host(), spec.name, call, timeout, &mut sink, None, limit).await;
        if let Sink::Buffer { stdout, mut stderr } = sink {
            if result.error_type != Some(ExecErrorType::Timeout) {
                stderr.extend_from_slice(&result.stderr);
                result.stdout = stdout;
                result.stderr = stderr;
            }
        }
        tracing::debug!(elapsed = ?started.elapsed(), code = result.return_code, "agent exec");
        result
    }

    async fn exec_stream(&self, spec: ExecSpec<'_>) -> ExecStream {
        let Some(channel) = self.channel(spec.name).await else {
            let user = self.fallback_user(spec.name, spec.user).await;
            return self.host.fallback().exec_stream(ExecSpec { user: user.as_deref(), ..spec }).await;
        };
        let Some(call) = exec::start(&channel, spec, u64::MAX).await else {
            return ExecStream::finished(ExecResult::failed(ExecErrorType::Sandbox, AGENT_LOST));
        };
        let timeout = spec.params.timeout;
        let (host, name) = (self.host.clone(), spec.name.to_string());
        spawn_stream(move |tx, stop| async move {
            let mut sink = Sink::Stream(tx.clone());
            let result = drive(&*host, &name, call, timeout, &mut sink, Some(stop), usize::MAX).await;
            let _ = tx.send(StreamEvent::Exit(result)).await;
        })
    }

    async fn upload(
        &self,
        name: &str,
        source: UploadSource<'_>,
        size: u64,
        path: &str,
        mode: u32,
        xattrs: &[Xattr],
    ) -> Result<u64> {
        let Some(channel) = self.channel(name).await else {
            return self.host.fallback().upload(name, source, size, path, mode, xattrs).await;
        };
        match files::upload(&channel, name, source, size, path, mode, xattrs).await {
            Err(e) => Err(self.host.explain(name, e).await),
            ok => ok,
        }
    }

    async fn download(&self, name: &str, path: &str) -> Result<Box<dyn FileDownload>> {
        let Some(channel) = self.channel(name).await else {
            return self.host.fallback().download(name, path).await;
        };
        let download = match files::AgentDownload::open(&channel, name, path).await {
            Ok(download) => download,
            Err(e) => return Err(self.host.explain(name, e).await),
        };
        if channel.transport == Transport::Socket || download.size() <= AGENT_DOWNLOAD_MAX {
            return Ok(Box::new(download));
        }
        // A large file: the fallback (`docker cp`) streams it faster than the agent's stdio
        // channel (the agent has already checked the path); dropping the agent's read cancels it.
        drop(download);
        self.host.fallback().download(name, path).await
    }

    /// A terminal in the sandbox's agent; the docker transport's where the agent cannot run.
    async fn open_terminal(
        &self,
        name: &str,
        shell: &str,
        spec: &PtySpec,
        user: Option<&str>,
    ) -> Result<Arc<dyn TerminalSession>> {
        let Some(channel) = self.channel(name).await else {
            let user = self.fallback_user(name, user).await;
            return self.host.fallback().open_terminal(name, shell, spec, user.as_deref()).await;
        };
        terminal::open(&channel, shell, spec, user, self.retain_bytes.load(Ordering::Relaxed)).await
    }

    async fn attach_terminal(&self, name: &str, attach: &AttachSpec) -> Result<Arc<dyn TerminalSession>> {
        let Some(channel) = self.channel(name).await else { return Err(no_sessions(name)) };
        terminal::attach(&channel, name, attach).await
    }

    async fn list_terminals(&self, name: &str) -> Result<Vec<TerminalInfo>> {
        let Some(channel) = self.channel(name).await else { return Err(no_sessions(name)) };
        terminal::list(&channel).await
    }

    fn renamed(&self, from: &str, to: &str) {
        self.reaches.rename(from, to);
    }

    fn forget(&self, name: &str) {
        let facts = self.reaches.take(name).and_then(|r| r.facts);
        // The sandbox is gone: so is its run directory (its socket), wherever it was made.
        let run_dir = facts.and_then(|f| f.run_dir).or_else(|| self.run_dir_for(name));
        if let Some(sandbox_dir) = run_dir.as_deref().and_then(Path::parent) {
            if let Err(e) = std::fs::remove_dir_all(sandbox_dir) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(sandbox_id = %name, dir = %sandbox_dir.display(), error = %e, "cannot remove the sandbox's run directory");
                }
            }
        }
    }
}
