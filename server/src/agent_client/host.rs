//! What the agent client needs from whatever runs a sandbox, and nothing more: a byte channel
//! to sandbox X's agent, whether X is running, what X's container is, and the engine that
//! serves X where no agent can run. Docker implements it (`backends::docker::agent_host`: the
//! socket's facts from `docker inspect`, the channel by `docker exec -i`); another runtime or
//! backend implements it and reuses this client unchanged. The client never names a backend.

use tokio::io::{AsyncRead, AsyncWrite};

use crate::core::exec_engine::ExecEngine;
use crate::error::ProviderError;

/// What the host knows about a sandbox's container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFacts {
    /// The container's full id (an agent socket's peer must run in it).
    pub container_id: String,
    /// The user a command runs as when none is named (the image's).
    pub default_user: Option<String>,
    /// Whether the sandbox was started with its agent on a socket.
    pub socket_started: bool,
    /// Whether that socket is inside the sandbox only (a sandbox made to be checkpointed): the
    /// host reaches it by a relay ([`ServeMode::Relay`]).
    pub inner_socket: bool,
}

/// What a serve channel runs in the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServeMode {
    /// `agent serve`: an agent of its own on the channel's stdio.
    Serve,
    /// `agent connect`: the channel's stdio relayed to the sandbox's `init` agent on its socket
    /// inside the sandbox (the sessions live in `init`, which a checkpoint saves).
    Relay,
}

/// The host process that carries a serve channel (`docker exec -i … serve`): held while the
/// channel lives, aborted when it ends.
#[tonic::async_trait]
pub trait ServeProcess: Send {
    /// Wait for the process to end (after its output ended).
    async fn wait(&mut self);
    /// Stop the process (the channel ended).
    async fn abort(&mut self);
}

/// A byte channel to a sandbox's agent (`agent serve` on its stdio), opened by the host.
pub struct ServeChannel {
    pub stdin: Box<dyn AsyncWrite + Send + Unpin>,
    pub stdout: Box<dyn AsyncRead + Send + Unpin>,
    /// The agent's diagnostics (and, when it could not start, why).
    pub stderr: Option<Box<dyn AsyncRead + Send + Unpin>>,
    pub process: Box<dyn ServeProcess>,
}

/// The runtime a sandbox runs in, as the agent client sees it. Sandboxes are named by id.
#[tonic::async_trait]
pub trait AgentHost: Send + Sync + 'static {
    /// Start the agent binary at `agent_path` serving (or relaying, `mode`) on its stdio, as
    /// root, in sandbox `name`.
    async fn open_serve(&self, name: &str, agent_path: &str, mode: ServeMode)
        -> Result<ServeChannel, String>;

    /// What the host knows of sandbox `name`'s container: `Ok(None)` when its answer could not
    /// be read, `Err` when the host could not be asked.
    async fn facts(&self, name: &str) -> Result<Option<HostFacts>, String>;

    /// Whether sandbox `name` runs and is not paused, so a command can run in it (false when
    /// the host cannot be asked).
    async fn is_running(&self, name: &str) -> bool;

    /// Whether the host certainly has no sandbox `name`, neither made nor being made (an
    /// unreachable host is not that).
    async fn is_gone(&self, name: &str) -> bool;

    /// A call's failure said in the sandbox's terms when its state explains it (gone, paused,
    /// stopped); other errors unchanged.
    async fn explain(&self, name: &str, e: ProviderError) -> ProviderError;

    /// The identity of the host's runtime (the daemon's id), recorded beside each run
    /// directory so that only this runtime's leftovers are pruned; `Err`: why it is unknown.
    async fn runtime_id(&self) -> Result<String, String>;

    /// The engine that serves a sandbox whose agent cannot run (and large downloads).
    fn fallback(&self) -> &dyn ExecEngine;

    /// Bytes one buffered `exec` keeps per stream.
    fn output_limit(&self) -> usize;
}
