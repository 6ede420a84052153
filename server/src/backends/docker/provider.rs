//! `DockerProvider`: create, drive and remove sandboxes through the docker CLI, as NeMo Gym's
//! provider does, plus the ownership checks a multi-tenant service needs.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::argv;
use super::cli::{CommandOutput, DockerCli, Pool, PoolSizes};
use super::events::StateWatch;
use super::failure::CliError;
use super::failure::DockerFailureKind;
use super::records::{DiskState, Records, SandboxRecord};
use super::transport::cli::DockerExecEngine;
use super::transport::ExecEngine;
use crate::agent_client::binary::install as install_agent;
use crate::agent_client::AgentEngine;
use crate::config::{DockerConfig, ExecEngineKind, ExecTransport};
use crate::core::spec::SandboxHandle;
use crate::error::{ProviderError, Result};

/// Where sandboxes' run directories go (`<state_dir>/sandboxes`), or `None` when the socket
/// transport cannot work here (said once, with why).
fn socket_root(state_dir: &std::path::Path) -> Option<PathBuf> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let reason = if let Some(host) = env("DOCKER_HOST").filter(|h| !h.starts_with("unix://")) {
        Some(format!("DOCKER_HOST is {host:?}, not a local unix socket: a bind-mounted socket would be on the daemon's host"))
    } else if let Some(context) = env("DOCKER_CONTEXT").filter(|c| c != "default") {
        Some(format!("DOCKER_CONTEXT is {context:?}: its daemon may be on another host"))
    // SAFETY: geteuid has no preconditions.
    } else if unsafe { libc::geteuid() } != 0 {
        Some(
            "the server does not run as root (the agent's socket and its directory are root-only)"
                .to_string(),
        )
    } else {
        None
    };
    let root = state_dir.join("sandboxes");
    let reason = reason.or_else(|| {
        // `--mount` separates its fields with commas.
        root.to_string_lossy()
            .contains(',')
            .then(|| format!("{} holds a comma, which a docker --mount cannot name", root.display()))
    });
    let reason = reason.or_else(|| {
        crate::agent_client::run_dirs::make_private_dir(&root)
            .err()
            .map(|e| format!("cannot make {}: {e}", root.display()))
    });
    match reason {
        None => Some(root),
        Some(reason) => {
            tracing::warn!(%reason, "sandboxes' agents get no socket; their docker exec channel serves them");
            None
        }
    }
}

/// How many closed ids `status` remembers.
const CLOSED_MEMORY: usize = 65_536;

/// How long a removal waits for one another caller has in progress.
const REMOVAL_WAIT: Duration = Duration::from_secs(30);

/// Entries in the provider's per-sandbox caches (`DockerProvider::cache_sizes`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheSizes {
    /// Sandboxes with a record (`records.rs`): each live sandbox at most once.
    pub records: usize,
    /// Handles of live sandboxes.
    pub handles: usize,
    /// Ids this process closed (bounded by a fixed size).
    pub closed: usize,
    /// Sandboxes with a terminal session open, and those sessions.
    pub pty_sandboxes: usize,
    pub pty_sessions: usize,
    /// The agent engine's records (`agent_client`), its channel slots among them, and
    /// sandboxes known to have no usable agent.
    pub agent_records: usize,
    pub agent_channels: usize,
    pub without_agent: usize,
    /// Owned containers in the events table (all of them, whoever made them).
    pub states: usize,
}

/// The sandbox provider backed by the local docker CLI.
pub struct DockerProvider {
    pub(super) cli: DockerCli,
    pub(super) config: DockerConfig,
    /// How commands reach a sandbox (`exec.engine`).
    pub(super) engine: Arc<dyn ExecEngine>,
    /// How a create's readiness probe reaches its sandbox: the agent, or on the docker engine
    /// `docker exec` in the create pool, so a create never waits behind client execs.
    pub(super) create_engine: Arc<dyn ExecEngine>,
    /// The agent engine when it is the configured one (files go through it too).
    pub(super) agent: Option<Arc<AgentEngine>>,
    /// The host file every new sandbox bind-mounts as its agent.
    pub(super) agent_binary: Option<PathBuf>,
    /// Everything kept about each sandbox, in one record (`records.rs`).
    pub(super) records: Records,
    /// The service networks (Docker names) this server made or found: a hint only, dropped
    /// when Docker says one is gone (`runtime.rs`).
    pub(super) networks: Mutex<HashSet<String>>,
    /// Serialises this server's making and removing of networks (`runtime.rs`).
    pub(super) network_gate: tokio::sync::Mutex<()>,
    /// This deployment's networks seen without a sandbox, since when (the sweep's grace).
    pub(super) idle_networks: Mutex<HashMap<String, i64>>,
    pub(super) networks_pruned_ms: std::sync::atomic::AtomicI64,
    /// Networks Docker refuses to remove though no container is on them (an endpoint count it
    /// leaked, moby/moby#42119): noted once, never asked again (`runtime.rs`).
    pub(super) networks_held_by_docker: Mutex<HashSet<String>>,
    /// Owned containers' states, kept current by `docker events`.
    pub(super) states: StateWatch,
    /// Containers found gone since the last sweep (`prune_gone`): the sweep's listing reports
    /// them, whichever caller pruned them (bounded: the oldest half goes past its size).
    gone_since_sweep: Mutex<Vec<String>>,
    /// Ids this process closed, so their status reads `stopped` rather than unknown.
    closed: Mutex<HashSet<String>>,
    /// Held while snapshots are counted (`server.max_snapshots`).
    pub(super) snapshot_lock: tokio::sync::Mutex<()>,
    /// Commits counted but not finished yet: they hold a place under the bound.
    pub(super) snapshots_in_flight: Arc<std::sync::atomic::AtomicUsize>,
    /// Images' configured users as a create last read them (when, user).
    pub(super) image_users: Mutex<HashMap<String, (std::time::Instant, String)>>,
    /// The daemon's registered runtimes as `docker info` last listed them (`oci_runtime.rs`).
    pub(super) daemon_runtimes: tokio::sync::Mutex<Option<(std::time::Instant, Vec<String>)>>,
    /// Where loop disks go (`<state_dir>/disks`, `disk.rs`), each sandbox's file, and when
    /// the sweep last looked for files whose container is gone.
    pub(super) disks_dir: PathBuf,
    pub(super) disks_pruned_ms: std::sync::atomic::AtomicI64,
    /// Disk files formatted ahead of creates (`disk_stock.rs`).
    pub(super) disk_stock: super::disk_stock::DiskStock,
    /// Removals a close left to the background (`closing.rs`), their records' directory
    /// (`<state_dir>/closing`) and what they share with this provider.
    pub(super) removals: tokio_util::task::TaskTracker,
    pub(super) closing_dir: PathBuf,
    /// Records of the snapshots calls are making (`snapshot_making.rs`).
    pub(super) snapshotting_dir: PathBuf,
    pub(super) closings: Arc<super::removal_state::Closings>,
    /// The local daemon's Engine API for a create's start, rename and layer inspect, when the
    /// CLI reaches the daemon through a local socket (`engine_api.rs`); `None`: the CLI only.
    pub(super) engine_api: Option<super::engine_api::EngineApi>,
    /// The daemon's data root (`docker info`'s DockerRootDir), once asked (`live.rs`).
    pub(super) data_root: tokio::sync::OnceCell<PathBuf>,
    /// Each daemon runtime's restore directory (`runsc_direct.rs`; `None`: not registered
    /// through `scripts/sandboxd-runsc`), once asked.
    pub(super) restore_dirs: Mutex<HashMap<String, Option<PathBuf>>>,
}

impl DockerProvider {
    /// A provider using the `docker` on `PATH` (or `$SANDBOXD_DOCKER`), its sandboxes' run
    /// directories under the default state directory.
    pub fn new(config: DockerConfig) -> Result<Self> {
        Self::new_in(config, crate::config::default_state_dir())
    }

    /// As `new`, sandboxes' run directories under `state_dir` (`server.state_dir`).
    pub fn new_in(config: DockerConfig, state_dir: PathBuf) -> Result<Self> {
        let binary = DockerCli::locate().map_err(ProviderError::Unavailable)?;
        let mut provider = Self::with_binary_in(config, binary, state_dir)?;
        provider.engine_api = super::engine_api::EngineApi::local();
        Ok(provider)
    }

    /// A provider running `binary` as docker (tests use a recording fake).
    pub fn with_binary(config: DockerConfig, binary: PathBuf) -> Result<Self> {
        Self::with_binary_in(config, binary, crate::config::default_state_dir())
    }

    /// As `with_binary`, sandboxes' run directories under `state_dir/sandboxes`.
    pub fn with_binary_in(config: DockerConfig, binary: PathBuf, state_dir: PathBuf) -> Result<Self> {
        let config = config.checked()?;
        let size = |n: i64| usize::try_from(n).unwrap_or(1);
        let cli = DockerCli::with_pools(
            binary,
            PoolSizes {
                exec: size(config.exec.concurrency),
                create: size(config.exec.create_concurrency),
                control: size(config.exec.control_concurrency),
                transfer: size(config.exec.transfer_concurrency),
            },
        );
        let docker = DockerExecEngine::new(cli.clone(), config.clone());
        let agent_binary = match config.exec.engine {
            ExecEngineKind::Docker => None,
            ExecEngineKind::Agent => {
                let dir = config.exec.agent_dir();
                match install_agent(&dir) {
                    Ok(path) => Some(path),
                    Err(e) => {
                        tracing::warn!(dir = %dir.display(), error = %e, "cannot write the exec agent; every sandbox uses docker exec");
                        None
                    }
                }
            }
        };
        let socket_root = agent_binary.as_ref().and_then(|_| socket_root(&state_dir));
        let new_sockets = config.exec.transport == ExecTransport::Socket;
        if agent_binary.is_some() && !new_sockets {
            tracing::info!("exec.transport is channel: new sandboxes' agents answer through docker exec -i");
        }
        let agent = agent_binary.as_ref().map(|_| {
            let host = Arc::new(super::agent_host::DockerAgentHost::new(docker.clone()));
            Arc::new(AgentEngine::new(host, socket_root.clone(), new_sockets))
        });
        let (engine, create_engine): (Arc<dyn ExecEngine>, Arc<dyn ExecEngine>) = match &agent {
            Some(agent) => (agent.clone(), agent.clone()),
            None => {
                (Arc::new(docker), Arc::new(DockerExecEngine::new(cli.in_pool(Pool::Create), config.clone())))
            }
        };
        Ok(Self {
            states: StateWatch::new(cli.in_pool(Pool::Control)),
            cli,
            config,
            engine,
            create_engine,
            agent,
            agent_binary,
            records: Records::default(),
            networks: Mutex::default(),
            network_gate: tokio::sync::Mutex::new(()),
            idle_networks: Mutex::default(),
            networks_pruned_ms: Default::default(),
            networks_held_by_docker: Mutex::default(),
            closed: Mutex::new(HashSet::new()),
            gone_since_sweep: Mutex::default(),
            snapshot_lock: tokio::sync::Mutex::new(()),
            snapshots_in_flight: Arc::default(),
            image_users: Mutex::default(),
            daemon_runtimes: Default::default(),
            disks_dir: state_dir.join("disks"),
            disks_pruned_ms: Default::default(),
            disk_stock: super::disk_stock::DiskStock::new(&state_dir.join("disks")),
            removals: tokio_util::task::TaskTracker::new(),
            closing_dir: state_dir.join("closing"),
            snapshotting_dir: state_dir.join("snapshotting"),
            closings: Arc::default(),
            engine_api: None,
            data_root: Default::default(),
            restore_dirs: Mutex::default(),
        })
    }

    /// Whether new sandboxes get the agent's socket (the agent engine on `exec.transport:
    /// socket`, a local daemon, this server as root).
    pub fn agent_socket(&self) -> bool {
        self.agent.as_ref().is_some_and(|a| a.new_run_dir("x").is_some())
    }

    /// The image's user of a sandbox whose agent was started as root for it (`-u 0`), `None`
    /// for any other sandbox.
    pub(super) async fn agent_started_as(&self, name: &str) -> Option<String> {
        self.agent.as_ref()?.image_user_of(name).await
    }

    /// Prune now the run directories sandboxes left behind at least `min_age` ago (the sweep
    /// does this every few minutes with `run_dirs::PRUNE_AGE`): the sandbox ids.
    pub async fn prune_run_dirs(&self, min_age: Duration) -> Vec<String> {
        match &self.agent {
            Some(agent) => agent.prune_run_dirs(min_age).await,
            None => Vec::new(),
        }
    }

    /// How the sandbox `name`'s agent channel reaches it now (`None`: no channel open).
    pub fn agent_transport(&self, name: &str) -> Option<crate::agent_client::channel::Transport> {
        self.agent.as_ref()?.transport(name)
    }

    pub fn config(&self) -> &DockerConfig {
        &self.config
    }

    pub fn cli(&self) -> &DockerCli {
        &self.cli
    }

    pub(super) fn control_timeout(&self) -> Option<Duration> {
        self.config.exec.default_timeout
    }

    /// Run a short docker control command (inspect, rm, port, start, rename, ps) in the control
    /// pool, which execs and transfers never fill. A failure comes classified; `?` maps it.
    pub(super) async fn control(&self, args: Vec<String>) -> std::result::Result<CommandOutput, CliError> {
        self.cli.in_pool(Pool::Control).run(&args, self.control_timeout(), None).await
    }

    /// `docker rm -f name`, done when the container is gone: already gone is success, and a
    /// removal another caller has in progress is waited for (up to [`REMOVAL_WAIT`]) instead of
    /// failing this one.
    pub(super) async fn remove_container(&self, name: &str) -> std::result::Result<(), CliError> {
        self.remove_container_with(name, &self.disk_of(name)).await
    }

    /// As `remove_container`, its disk as the caller knows it (a close has taken its record).
    pub(super) async fn remove_container_with(
        &self,
        name: &str,
        disk: &DiskState,
    ) -> std::result::Result<(), CliError> {
        let started = std::time::Instant::now();
        let mut pause = Duration::from_millis(100);
        // The daemon's overlay2 driver cannot remove a layer with a mount on it: the loop
        // disk goes first (`disk.rs`).
        self.detach_disk(name, disk).await;
        loop {
            match self.control(argv::rm_args(name)).await {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == Some(DockerFailureKind::MissingContainer) => return Ok(()),
                Err(e)
                    if e.kind() == Some(DockerFailureKind::RemovalInProgress)
                        && started.elapsed() + pause < REMOVAL_WAIT =>
                {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                Err(e) => return Err(e),
            }
        }
    }

    pub(super) fn remember(&self, handle: &SandboxHandle) {
        // The events stream reports containers removed by anyone, so what is kept about them
        // can go (`prune_gone`).
        self.states.ensure_started();
        self.prune_gone();
        self.records.update(&handle.sandbox_id, |r| r.handle = Some(handle.clone()));
    }

    /// Forget everything kept about containers that no longer exist, whoever removed them (a
    /// Close through another replica, the sweep, `docker rm` from outside), and drop the
    /// terminal sessions that ended; the names are kept for the sweep's listing. Runs at every
    /// sweep and whenever a handle is cached.
    pub fn prune_gone(&self) {
        let gone = self.states.take_gone();
        for name in &gone {
            self.forget_gone(name);
        }
        self.records.drop_ended_terminals();
        if let (false, Ok(mut unreported)) = (gone.is_empty(), self.gone_since_sweep.lock()) {
            if unreported.len() >= CLOSED_MEMORY {
                unreported.drain(..CLOSED_MEMORY / 2);
            }
            unreported.extend(gone);
        }
    }

    /// The containers gone since the last call (the sweep's): pruned now, or earlier by a
    /// create or a size check, so the sweep's caller forgets them too.
    pub(super) fn take_gone_for_sweep(&self) -> Vec<String> {
        self.prune_gone();
        self.gone_since_sweep.lock().map(|mut g| std::mem::take(&mut *g)).unwrap_or_default()
    }

    /// Entries of every per-sandbox structure, after pruning what is gone (for tests and
    /// operators: each is bounded by the live sandboxes and sessions, or by a fixed size).
    pub fn cache_sizes(&self) -> CacheSizes {
        self.prune_gone();
        let (agent_records, agent_channels, without_agent) =
            self.agent.as_ref().map_or((0, 0, 0), |a| a.cache_sizes());
        let (records, handles, pty_sandboxes, pty_sessions) = self.records.sizes();
        CacheSizes {
            records,
            handles,
            closed: self.closed.lock().map_or(0, |s| s.len()),
            pty_sandboxes,
            pty_sessions,
            agent_records,
            agent_channels,
            without_agent,
            states: self.states.size(),
        }
    }

    /// Let go of everything this process keeps of `id`: its record (returned, for what a
    /// removal still needs; its terminal sessions are the caller's to end) and its agent
    /// channel. The one place a sandbox is forgotten.
    pub(super) fn forget(&self, id: &str) -> SandboxRecord {
        self.engine.forget(id);
        self.records.take(id).unwrap_or_default()
    }

    /// As `forget`, for a sandbox whose container is gone (removed by anyone, here or on another
    /// node): its terminal sessions are abandoned in the background (nothing in it to clean up,
    /// only the local clients).
    pub(crate) fn forget_gone(&self, id: &str) {
        let sessions = self.forget(id).terminals;
        if let (false, Ok(runtime)) = (sessions.is_empty(), tokio::runtime::Handle::try_current()) {
            runtime.spawn(async move {
                for session in sessions {
                    session.abandon().await;
                }
            });
        }
    }

    /// As `forget`, its terminal sessions abandoned (their container is going or gone).
    pub(super) async fn forget_all(&self, id: &str) -> SandboxRecord {
        let mut record = self.forget(id);
        for session in std::mem::take(&mut record.terminals) {
            session.abandon().await;
        }
        record
    }

    /// Whether this process hibernated `id` and has not woken it.
    pub(super) fn is_known_hibernated(&self, id: &str) -> bool {
        self.records.read(id, |r| r.hibernated).unwrap_or(false)
    }

    /// Remember that this process closed `id` (bounded: the oldest memory is dropped first).
    pub(super) fn remember_closed(&self, id: &str) {
        if let Ok(mut set) = self.closed.lock() {
            if set.len() >= CLOSED_MEMORY {
                set.clear();
            }
            set.insert(id.to_string());
        }
    }

    /// Whether this process closed `id`.
    pub(crate) fn was_closed(&self, id: &str) -> bool {
        self.closed.lock().is_ok_and(|set| set.contains(id))
    }

    // ----- pty sessions ---------------------------------------------------------------------

    pub(crate) fn track_pty_session(
        &self,
        sandbox_id: &str,
        session: Arc<dyn crate::core::backend::TerminalSession>,
    ) {
        self.records.update(sandbox_id, |r| {
            r.terminals.retain(|s| !s.closed());
            r.terminals.push(session);
        });
    }

    /// Let go of the terminal sessions still open, as their dropped streams would (a session
    /// without a detach timeout ends; one with it waits for an attach, past this server).
    pub async fn close_terminals(&self) {
        for id in &self.records.with_terminals() {
            self.release_pty_sessions(id, false).await;
        }
    }

    /// Detach every stream this process holds on the sandbox's sessions, as `PtyDetach` would
    /// (the stream ends, the session runs on whatever its detach timeout), and wait for each
    /// stream's end: before a checkpoint, whose copies keep the sessions to be attached by id.
    /// A stream that cannot detach is released.
    pub(super) async fn detach_pty_sessions(&self, sandbox_id: &str) {
        use crate::core::terminal::PtyError;
        const DETACH_WAIT: Duration = Duration::from_secs(5);
        let sessions = self.records.update(sandbox_id, |r| std::mem::take(&mut r.terminals));
        for session in sessions.into_iter().filter(|s| !s.closed()) {
            let detached = session.detach().await.is_ok()
                && !matches!(session.wait_exit(Some(DETACH_WAIT)).await, Err(PtyError::Timeout(_)));
            if !detached {
                session.release().await;
            }
        }
    }

    /// Release (or, when the container goes away, abandon) the live sessions of a sandbox.
    pub(super) async fn release_pty_sessions(&self, sandbox_id: &str, abandon: bool) {
        let sessions = self.records.update(sandbox_id, |r| std::mem::take(&mut r.terminals));
        for session in sessions {
            if abandon {
                session.abandon().await;
            } else {
                session.release().await;
            }
        }
    }
}
