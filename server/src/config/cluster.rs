//! The `cluster` section: one Docker host (the default) or a node of a Docker Swarm.

use std::time::Duration;

use serde::Deserialize;

use super::rules::{within_client_bound, ConfigError};
use super::seconds;

/// How the sandboxes of this server are spread (`cluster.mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClusterMode {
    /// One Docker host: sandboxes are this daemon's containers (the default).
    #[default]
    Single,
    /// A node of a Docker Swarm: a sandbox is a one-replica service placed by Swarm, and any
    /// node answers for any sandbox by forwarding to the node it runs on.
    Swarm,
}

/// The `cluster` section: single host (default) or Docker Swarm.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterSection {
    pub mode: ClusterMode,
    /// The port every node's sandboxd listens on, at the node's Swarm address (`docker node
    /// inspect`'s `Status.Addr`); a node label `sandboxd.addr=HOST:PORT` overrides it per node.
    pub peer_port: u16,
    /// Swarm placement constraints added to every sandbox (`node.labels.sandboxes==yes`).
    pub constraints: Vec<String>,
    /// How long a node's address and state are reused before Swarm is asked again.
    #[serde(rename = "node_cache_s", deserialize_with = "seconds::required")]
    pub node_cache: Duration,
}

/// The port a sandboxd of the cluster listens on unless configured otherwise.
pub const DEFAULT_PEER_PORT: u16 = 50051;

impl Default for ClusterSection {
    fn default() -> Self {
        Self {
            mode: ClusterMode::Single,
            peer_port: DEFAULT_PEER_PORT,
            constraints: Vec::new(),
            node_cache: Duration::from_secs(1),
        }
    }
}

impl ClusterSection {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.peer_port == 0 {
            return Err(ConfigError::new("cluster.peer_port", "must be in 1..=65535 (got 0)"));
        }
        for c in &self.constraints {
            let ok = ["==", "!="].iter().any(|op| c.contains(op)) && !c.starts_with('-');
            if !ok {
                return Err(ConfigError::new(
                    "cluster.constraints",
                    format!("each must be `ATTRIBUTE==VALUE` or `ATTRIBUTE!=VALUE` (got {c:?})"),
                ));
            }
        }
        within_client_bound("cluster.node_cache_s", Some(self.node_cache))
    }
}
