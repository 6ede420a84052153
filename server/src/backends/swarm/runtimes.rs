//! Placement by OCI runtime in cluster mode. A Swarm task has no `--runtime`: its container runs
//! on its node daemon's *default* runtime (`docker info`'s `DefaultRuntime`; `daemon.json`
//! `"default-runtime"`). So a node runs gVisor sandboxes when its daemon's default is `runsc`,
//! whatever else it has registered, and a create asking for a runtime goes only to the nodes
//! whose default it is, by `node.id!=` constraints beside the image's.
//!
//! What a node's tasks run on is advertised in Swarm's state, so any manager can place by it:
//! the node label `sandboxd.runtime` (each node's sandboxd sets it on its own node at start
//! from its daemon's `DefaultRuntime` when that is not `runc`; an operator may set it with
//! `docker node update --label-add`), else the daemon's own engine label `sandboxd.runtime`
//! (`daemon.json` `"labels"`), else `runc` (the Engine's default). A runtime no active node
//! advertises is FAILED_PRECONDITION naming it and what each node offers; nothing is created
//! (with no active node at all the create is left to Swarm, which waits for one, as before).

use super::backend::SwarmBackend;
use super::engine::Node;
use crate::core::spec::SandboxSpec;
use crate::error::{ProviderError, Result};

/// The node label (and engine label) naming the runtime a node's tasks run on, as its daemon
/// knows it.
pub const RUNTIME_NODE_LABEL: &str = "sandboxd.runtime";

/// The runtime `node`'s tasks run on, as its daemon knows it.
pub fn node_runtime(node: &Node) -> String {
    let label = |labels: &Option<std::collections::BTreeMap<String, String>>| {
        labels
            .as_ref()
            .and_then(|l| l.get(RUNTIME_NODE_LABEL))
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    label(&node.spec.labels)
        .or_else(|| label(&node.description.engine.labels))
        .unwrap_or_else(|| crate::config::DEFAULT_RUNTIME.to_string())
}

/// One node as placement sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRuntime {
    pub id: String,
    pub hostname: String,
    pub availability: String,
    /// As its daemon knows it ([`node_runtime`]).
    pub runtime: String,
}

impl NodeRuntime {
    pub fn of(node: &Node) -> Self {
        Self {
            id: node.id.clone(),
            hostname: node.description.hostname.clone(),
            availability: node.spec.availability.to_ascii_lowercase(),
            runtime: node_runtime(node),
        }
    }
}

/// The constraints that keep a create of runtime `name` (`daemon_name` as the daemons know it)
/// on the active nodes that run it; FAILED_PRECONDITION naming it when none does.
pub fn placement(nodes: &[NodeRuntime], name: &str, daemon_name: &str) -> Result<Vec<String>> {
    let active: Vec<&NodeRuntime> = nodes.iter().filter(|n| n.availability == "active").collect();
    // No active node at all: Swarm's own answer (the task waits for one), as without runtimes.
    if active.is_empty() {
        return Ok(Vec::new());
    }
    if active.iter().any(|n| n.runtime == daemon_name) {
        return Ok(active
            .iter()
            .filter(|n| n.runtime != daemon_name)
            .map(|n| format!("node.id!={}", n.id))
            .collect());
    }
    let offered: Vec<String> = active.iter().map(|n| format!("{} {}", n.hostname, n.runtime)).collect();
    Err(ProviderError::FailedPrecondition(format!(
        "spec.runtime: runtime {name:?} (the daemons' {daemon_name:?}) runs on no active node of the cluster \
         (active nodes and the runtime their tasks run on: {}); a Swarm task runs on its node daemon's \
         default runtime, advertised by the node label or engine label {RUNTIME_NODE_LABEL}",
        if offered.is_empty() { "none".to_string() } else { offered.join(", ") }
    )))
}

impl SwarmBackend {
    /// The constraints for `spec`'s runtime (its own, else `docker.create.runtime`):
    /// INVALID_ARGUMENT naming the offered ones when this server does not offer it,
    /// FAILED_PRECONDITION when no active node runs it.
    pub(super) async fn runtime_constraints(&self, spec: &SandboxSpec) -> Result<Vec<String>> {
        let offered = &self.docker_config.runtimes;
        let name = spec.runtime.as_deref().unwrap_or(self.docker_config.create.runtime.as_str());
        let offer = offered.get(name).ok_or_else(|| {
            ProviderError::invalid(
                "spec.runtime",
                format!("runtime {name:?} is not offered by this server; offered: {}", offered.names()),
            )
        })?;
        let nodes = self.engine.nodes().await.map_err(ProviderError::from)?;
        let nodes: Vec<NodeRuntime> = nodes.iter().map(NodeRuntime::of).collect();
        placement(&nodes, name, offer.daemon_name())
    }

    /// At start: this node's daemon's default runtime, advertised on this node
    /// ([`RUNTIME_NODE_LABEL`]) when it is not what the node already advertises. A failure is
    /// logged (the node then keeps what it advertised).
    pub(super) async fn advertise_runtime(&self) {
        let info =
            self.swarm.docker(vec!["info".into(), "--format".into(), "{{.DefaultRuntime}}".into()]).await;
        let default = match info {
            Ok(out) => out.stdout_text().trim().to_string(),
            Err(e) => {
                tracing::warn!(error = %e, "could not read the daemon's default runtime");
                return;
            }
        };
        if default.is_empty() {
            return;
        }
        let node = match self.engine.node(self.swarm.self_id()).await {
            Ok(node) => node,
            Err(e) => {
                tracing::warn!(error = %e, "could not read this node from Swarm");
                return;
            }
        };
        if node_runtime(&node) == default {
            return;
        }
        let label = format!("{RUNTIME_NODE_LABEL}={default}");
        let args = vec![
            "node".into(),
            "update".into(),
            "--label-add".into(),
            label,
            self.swarm.self_id().to_string(),
        ];
        match self.swarm.docker(args).await {
            Ok(_) => {
                tracing::info!(runtime = %default, "advertised this node's default runtime to the swarm")
            }
            Err(e) => {
                tracing::warn!(error = %e, runtime = %default, "could not advertise this node's runtime")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, availability: &str, runtime: &str) -> NodeRuntime {
        NodeRuntime {
            id: id.into(),
            hostname: format!("h{id}"),
            availability: availability.into(),
            runtime: runtime.into(),
        }
    }

    #[test]
    fn places_on_the_nodes_that_run_the_runtime() {
        let nodes = [node("a", "active", "runc"), node("b", "active", "runsc"), node("c", "drain", "runsc")];
        assert_eq!(placement(&nodes, "runsc", "runsc").unwrap(), vec!["node.id!=a"]);
        assert_eq!(placement(&nodes, "runc", "runc").unwrap(), vec!["node.id!=b"]);
        assert_eq!(placement(&nodes, "gvisor", "runsc").unwrap(), vec!["node.id!=a"]);
        let none = [node("a", "active", "runc"), node("c", "pause", "runsc")];
        let e = placement(&none, "runsc", "runsc").unwrap_err();
        assert!(matches!(e, ProviderError::FailedPrecondition(_)), "{e:?}");
        let text = e.to_string();
        assert!(text.contains("\"runsc\"") && text.contains("ha runc") && !text.contains("hc"), "{text}");
        let idle = [node("c", "drain", "runsc")];
        assert_eq!(placement(&idle, "runc", "runc").unwrap(), Vec::<String>::new(), "left to Swarm");
    }

    #[test]
    fn a_node_runtime_is_its_label_then_its_engine_label_then_runc() {
        let json = |spec: &str, engine: &str| -> Node {
            serde_json::from_str(&format!(
                r#"{{"ID":"x","Description":{{"Hostname":"n","Engine":{{"Labels":{engine}}}}},"Spec":{{"Availability":"active","Labels":{spec}}}}}"#
            ))
            .unwrap()
        };
        assert_eq!(node_runtime(&json("{}", "null")), "runc");
        assert_eq!(node_runtime(&json("{}", r#"{"sandboxd.runtime":"runsc"}"#)), "runsc");
        assert_eq!(
            node_runtime(&json(r#"{"sandboxd.runtime":"runc"}"#, r#"{"sandboxd.runtime":"runsc"}"#)),
            "runc"
        );
    }
}
