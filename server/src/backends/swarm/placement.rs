//! Where a sandbox runs, from Swarm's replicated state (any manager answers): its service's
//! task names the node, `docker node inspect` gives the node's state and address. No catalog
//! of our own: a sandbox's node is cached (a task never moves: `restart-condition none`), a
//! node's state only for `cluster.node_cache_s`. Also the channels to the other nodes'
//! sandboxd and the cluster token they are called with.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tonic::transport::{Channel, Endpoint};

use super::argv;
use crate::backends::docker::cli::DockerCli;
use crate::backends::docker::failure::CliError;
use crate::config::ClusterSection;
use crate::error::{ProviderError, Result};

pub use crate::service::forward::{CLUSTER_TOKEN_HEADER, TENANT_HEADER};

/// How long a node's state is waited for when an older reading of it can stand in.
const STALE_NODE_WAIT: Duration = Duration::from_secs(1);

/// A Swarm node as this server needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    pub id: String,
    pub hostname: String,
    /// Swarm's `Status.State`: `ready`, `down`, `unknown`, `disconnected`.
    pub state: String,
    /// `HOST:PORT` of the node's sandboxd.
    pub addr: String,
    /// `active`, `pause` or `drain`.
    pub availability: String,
}

impl NodeInfo {
    pub fn is_down(&self) -> bool {
        self.state != "ready"
    }

    /// A node as the Engine API describes it (the same rules as [`parse_node`]).
    pub fn from_engine(node: &super::engine::Node, peer_port: u16) -> Self {
        let label = node.spec.labels.as_ref().and_then(|l| l.get(argv::NODE_ADDR_LABEL)).map(String::as_str);
        NodeInfo {
            id: node.id.clone(),
            hostname: node.description.hostname.clone(),
            state: node.status.state.to_ascii_lowercase(),
            addr: node_addr(label.unwrap_or(""), &node.status.addr, peer_port),
            availability: node.spec.availability.to_ascii_lowercase(),
        }
    }
}

/// A node's sandboxd: the `sandboxd.addr` label when set, else its Swarm address and `peer_port`.
fn node_addr(label: &str, swarm_addr: &str, peer_port: u16) -> String {
    if !label.is_empty() && label != "<no value>" {
        label.to_string()
    } else if swarm_addr.contains(':') {
        format!("[{swarm_addr}]:{peer_port}")
    } else {
        format!("{swarm_addr}:{peer_port}")
    }
}

/// Where one sandbox is: its node, and whether that is this server's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub node: NodeInfo,
    pub local: bool,
}

/// One task line of [`argv::service_ps_args`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskLine {
    /// The service (the sandbox id): `Name` is `service.slot`.
    pub service: String,
    pub node: String,
    pub desired: String,
    /// `CurrentState`'s first word, lower case (`running`, `pending`, `failed`, …).
    pub current: String,
    pub error: String,
}

/// Parses [`argv::service_ps_args`] output, newest task first per service as docker prints it.
pub fn parse_tasks(text: &str) -> Vec<TaskLine> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| {
            let mut f = l.split('\t');
            let name = f.next()?.trim();
            // Older tasks of a slot are printed as ` \_ name.1`.
            let name = name.trim_start_matches(|c: char| c == '\\' || c == '_' || c.is_whitespace());
            let service = name.rsplit_once('.').map_or(name, |(s, _)| s).to_string();
            Some(TaskLine {
                service,
                node: f.next().unwrap_or_default().trim().to_string(),
                desired: f.next().unwrap_or_default().trim().to_ascii_lowercase(),
                current: f
                    .next()
                    .unwrap_or_default()
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_ascii_lowercase(),
                error: f.next().unwrap_or_default().trim().to_string(),
            })
        })
        .collect()
}

/// Parses [`argv::node_inspect_args`] output; the address is the label's, else the node's
/// Swarm address with `peer_port`.
pub fn parse_node(text: &str, peer_port: u16) -> Option<NodeInfo> {
    let mut f = text.trim_end_matches('\n').split('\t');
    let id = f.next()?.trim().to_string();
    let hostname = f.next()?.trim().to_string();
    let state = f.next()?.trim().to_ascii_lowercase();
    let swarm_addr = f.next()?.trim().to_string();
    let availability = f.next().unwrap_or_default().trim().to_ascii_lowercase();
    let label = f.next().unwrap_or_default().trim();
    let addr = node_addr(label, &swarm_addr, peer_port);
    (!id.is_empty()).then_some(NodeInfo { id, hostname, state, addr, availability })
}

/// This server's view of the swarm.
pub struct Swarm {
    cli: DockerCli,
    timeout: Option<Duration>,
    /// The Swarm node id of this server's own daemon.
    self_id: String,
    peer_port: u16,
    node_cache: Duration,
    token: String,
    owners: Mutex<HashMap<String, String>>,
    nodes: Mutex<HashMap<String, (Instant, NodeInfo)>>,
    channels: Mutex<HashMap<String, Channel>>,
}

impl Swarm {
    /// Asks the local daemon which node it is; it must be an active Swarm manager (only
    /// managers can say where any service runs).
    pub async fn join(cli: DockerCli, cluster: &ClusterSection, token: String) -> Result<Self> {
        let timeout = Some(Duration::from_secs(30));
        let out = cli.run(&argv::swarm_info_args(), timeout, None).await?;
        let text = out.stdout_text();
        let mut f = text.trim().split('\t');
        let (id, state, manager) = (f.next().unwrap_or(""), f.next().unwrap_or(""), f.next().unwrap_or(""));
        if state != "active" || id.is_empty() {
            return Err(ProviderError::Unavailable(format!(
                "cluster.mode swarm: the local Docker daemon is not in a swarm (its swarm state is {state:?})"
            )));
        }
        if manager != "true" {
            return Err(ProviderError::Unavailable(
                "cluster.mode swarm: the local Docker daemon is a worker; sandboxd runs beside managers"
                    .into(),
            ));
        }
        Ok(Self {
            cli,
            timeout,
            self_id: id.to_string(),
            peer_port: cluster.peer_port,
            node_cache: cluster.node_cache,
            token,
            owners: Mutex::default(),
            nodes: Mutex::default(),
            channels: Mutex::default(),
        })
    }

    pub fn self_id(&self) -> &str {
        &self.self_id
    }

    pub fn token(&self) -> &str {
        &self.token
    }

    /// A docker control command against the local manager.
    pub async fn docker(
        &self,
        args: Vec<String>,
    ) -> std::result::Result<crate::backends::docker::cli::CommandOutput, CliError> {
        self.cli.run(&args, self.timeout, None).await
    }

    /// The tasks of services `ids` (missing services are left out).
    pub async fn tasks(&self, ids: &[String]) -> Result<Vec<TaskLine>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let stdout = match self.docker(argv::service_ps_args(ids)).await {
            Ok(out) => out.stdout,
            Err(CliError::Failed(f)) if f.stderr.to_ascii_lowercase().contains("no such service") => f.stdout,
            Err(e) => return Err(e.into()),
        };
        Ok(parse_tasks(&String::from_utf8_lossy(&stdout)))
    }

    /// The node (hostname) sandbox `id`'s task was given; `None` while none was (or no such
    /// service).
    pub async fn node_of(&self, id: &str) -> Result<Option<String>> {
        if let Some(node) = self.owners.lock().ok().and_then(|o| o.get(id).cloned()) {
            return Ok(Some(node));
        }
        let tasks = self.tasks(&[id.to_string()]).await?;
        let Some(task) = tasks.into_iter().find(|t| t.service == id && !t.node.is_empty()) else {
            return Ok(None);
        };
        if let Ok(mut owners) = self.owners.lock() {
            owners.insert(id.to_string(), task.node.clone());
        }
        Ok(Some(task.node))
    }

    /// A node by id or hostname, at most `cluster.node_cache_s` old.
    pub async fn node(&self, node: &str) -> Result<NodeInfo> {
        if let Some((at, info)) = self.nodes.lock().ok().and_then(|n| n.get(node).cloned()) {
            if at.elapsed() < self.node_cache {
                return Ok(info);
            }
        }
        // With a reading to fall back on, Swarm gets a short while: a manager without a leader
        // (an election) can hold `docker node inspect` for many seconds.
        let stale = self.nodes.lock().ok().is_some_and(|n| n.contains_key(node));
        let limit = if stale { Some(STALE_NODE_WAIT) } else { self.timeout };
        let out = match self.cli.run(&argv::node_inspect_args(node), limit, None).await {
            Ok(out) => out,
            // No answer from Swarm (no leader while it elects one): the node as last read,
            // its state unknown, so the relay asks the node itself rather than trusting Swarm.
            Err(e) => match self.nodes.lock().ok().and_then(|n| n.get(node).cloned()) {
                Some((_, mut info)) => {
                    tracing::debug!(node, error = %e, "Swarm does not answer; using the node as last read");
                    info.state = "unknown (Swarm did not answer)".into();
                    if let Ok(mut nodes) = self.nodes.lock() {
                        nodes.insert(node.to_string(), (Instant::now(), info.clone()));
                    }
                    return Ok(info);
                }
                None => return Err(ProviderError::from(e)),
            },
        };
        let info = parse_node(&out.stdout_text(), self.peer_port).ok_or_else(|| {
            ProviderError::Docker(format!("unexpected docker node inspect output for {node}"))
        })?;
        if let Ok(mut nodes) = self.nodes.lock() {
            nodes.insert(node.to_string(), (Instant::now(), info.clone()));
        }
        Ok(info)
    }

    /// Where sandbox `id` runs; `None` when Swarm has no such sandbox (or has not placed it).
    pub async fn locate(&self, id: &str) -> Result<Option<Placement>> {
        let Some(hostname) = self.node_of(id).await? else { return Ok(None) };
        self.placed(id, &hostname).await.map(Some)
    }

    /// Sandbox `id` runs on node `hostname` (its task says so): remembered, and that node.
    pub async fn placed(&self, id: &str, hostname: &str) -> Result<Placement> {
        if let Ok(mut owners) = self.owners.lock() {
            owners.insert(id.to_string(), hostname.to_string());
        }
        let node = self.node(hostname).await?;
        let local = node.id == self.self_id;
        Ok(Placement { node, local })
    }

    /// The sandboxes whose node is remembered.
    pub fn known(&self) -> Vec<String> {
        self.owners.lock().map(|o| o.keys().cloned().collect()).unwrap_or_default()
    }

    /// Forget a removed sandbox's node.
    pub fn forget(&self, id: &str) {
        if let Ok(mut owners) = self.owners.lock() {
            owners.remove(id);
        }
    }

    /// The (lazily connected, shared) channel to the sandboxd at `addr`.
    pub fn channel(&self, addr: &str) -> Result<Channel> {
        if let Some(channel) = self.channels.lock().ok().and_then(|c| c.get(addr).cloned()) {
            return Ok(channel);
        }
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| ProviderError::Unavailable(format!("bad node address {addr}: {e}")))?
            .connect_timeout(Duration::from_secs(5))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_timeout(Duration::from_secs(10))
            .initial_stream_window_size(Some(8 << 20))
            .initial_connection_window_size(Some(16 << 20));
        let channel = endpoint.connect_lazy();
        if let Ok(mut channels) = self.channels.lock() {
            channels.insert(addr.to_string(), channel.clone());
        }
        Ok(channel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_and_nodes_parse() {
        let text = "sandboxd-aa.1\tn2\tRunning\tRunning 3 seconds ago\t\n \\_ sandboxd-bb.1\tn1\tShutdown\tFailed 1 minute ago\t\"task: non-zero exit (1)\"\n";
        let tasks = parse_tasks(text);
        assert_eq!(tasks.len(), 2);
        assert_eq!(tasks[0].service, "sandboxd-aa");
        assert_eq!((tasks[0].node.as_str(), tasks[0].current.as_str()), ("n2", "running"));
        assert_eq!(tasks[1].service, "sandboxd-bb");
        assert_eq!((tasks[1].desired.as_str(), tasks[1].current.as_str()), ("shutdown", "failed"));

        let node = parse_node("abc\tn1\tready\t10.231.0.11\tactive\t<no value>\n", 50051).unwrap();
        assert_eq!(node.addr, "10.231.0.11:50051");
        assert!(!node.is_down());
        let labelled = parse_node("abc\tn1\tdown\t10.0.0.1\tdrain\t10.9.9.9:7000", 50051).unwrap();
        assert_eq!(labelled.addr, "10.9.9.9:7000");
        assert!(labelled.is_down());
        assert_eq!(labelled.availability, "drain");
    }
}
