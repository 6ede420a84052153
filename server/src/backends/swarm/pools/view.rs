//! A node's view of the cluster's pools: one reading of Swarm's state (definitions, members,
//! claims, the members' tasks, the nodes) and what it makes of it, per pool: the ready members
//! (oldest first, on nodes that are up) and the counts the leader refills by.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::Instant;

use super::super::engine::{Config, Service};
use super::super::placement::NodeInfo;
use super::super::records;
use crate::core::pools::{PoolKey, PoolSpec};

/// One pool as this node knows it.
#[derive(Debug, Clone)]
pub(super) struct Def {
    pub(super) spec: PoolSpec,
    pub(super) key: String,
    pub(super) from_config: bool,
}

/// A member ready to be claimed.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Member {
    pub(super) id: String,
    /// The node it runs on.
    pub(super) node: NodeInfo,
    pub(super) image: String,
    pub(super) workdir: Option<String>,
    pub(super) shell: String,
}

/// What one reading of Swarm says, per pool key.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Counts {
    pub(super) ready: usize,
    pub(super) claimed: usize,
    /// Members alive but not ready (starting, or whose start was abandoned).
    pub(super) unready: usize,
}

/// This node's view of the pools, as of the last reading.
#[derive(Default)]
pub(super) struct View {
    pub(super) read_at: Option<Instant>,
    pub(super) defs: BTreeMap<PoolKey, Def>,
    pub(super) ready: HashMap<String, VecDeque<Member>>,
    pub(super) counts: HashMap<String, Counts>,
    pub(super) leader: bool,
    /// Members being claimed through this node right now: never offered twice here.
    pub(super) taking: HashSet<String>,
    /// The leader's starts under way, and its back-off after a failed one, per pool key.
    pub(super) starting: HashMap<String, usize>,
    pub(super) retry_at: HashMap<String, Instant>,
}

/// One full reading of the pools' state in Swarm.
pub(super) struct Reading {
    pub(super) defs: BTreeMap<PoolKey, Def>,
    pub(super) members: Vec<Service>,
    pub(super) claims: Vec<Config>,
    /// Service id → (node id, task state) of every task Swarm wants running.
    pub(super) tasks: HashMap<String, (String, String)>,
    /// Every node, by id.
    pub(super) nodes: HashMap<String, NodeInfo>,
    pub(super) leader: bool,
}

/// The view from one reading: each pool's ready members (oldest first) and counts.
pub(super) fn take_into(view: &mut View, r: &Reading) {
    let claimed: HashSet<&str> =
        r.claims.iter().filter_map(|c| c.label(records::CLAIM_SANDBOX_LABEL)).collect();
    let mut ready: HashMap<String, VecDeque<Member>> = HashMap::new();
    let mut counts: HashMap<String, Counts> = HashMap::new();
    let mut members: Vec<&Service> = r.members.iter().collect();
    members.sort_by(|a, b| a.created_at.cmp(&b.created_at));
    for service in members {
        let Some(key) = service.label(records::POOL_KEY_LABEL) else { continue };
        // A member without a task Swarm wants running is over (the sweep removes it).
        let Some((node_id, state)) = r.tasks.get(&service.id) else { continue };
        let count = counts.entry(key.to_string()).or_default();
        if claimed.contains(service.name()) {
            count.claimed += 1;
            continue;
        }
        let node = r.nodes.get(node_id).filter(|n| !n.is_down());
        match (service.label(records::POOL_READY_LABEL), node) {
            (Some(shell), Some(node)) if state == "running" => {
                count.ready += 1;
                let container = &service.spec.task_template.container;
                ready.entry(key.to_string()).or_default().push_back(Member {
                    id: service.name().to_string(),
                    node: node.clone(),
                    image: container.image.clone(),
                    workdir: Some(container.dir.clone()).filter(|d| !d.is_empty()),
                    shell: shell.to_string(),
                });
            }
            _ => count.unready += 1,
        }
    }
    for queue in ready.values_mut() {
        queue.retain(|m| !view.taking.contains(&m.id));
    }
    view.defs = r.defs.clone();
    view.ready = ready;
    view.counts = counts;
    view.leader = r.leader;
    view.read_at = Some(Instant::now());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(name: &str, key: &str, ready: Option<&str>, created: &str) -> Service {
        let mut labels = serde_json::json!({ records::POOL_KEY_LABEL: key });
        if let Some(shell) = ready {
            labels[records::POOL_READY_LABEL] = serde_json::json!(shell);
        }
        serde_json::from_value(serde_json::json!({
            "ID": format!("svc-{name}"),
            "CreatedAt": created,
            "Spec": { "Name": name, "Labels": labels, "TaskTemplate": { "ContainerSpec": { "Image": "img", "Dir": "" } } }
        }))
        .unwrap()
    }

    fn claim(id: &str) -> Config {
        serde_json::from_value(serde_json::json!({
            "ID": format!("cfg-{id}"),
            "CreatedAt": "2026-12-01T00:00:00Z",
            "Spec": { "Name": records::claim_config_name(id), "Labels": { records::CLAIM_LABEL: "1", records::CLAIM_SANDBOX_LABEL: id }, "Data": "" }
        }))
        .unwrap()
    }

    /// The view a reading gives: ready members oldest first, only running ones on ready nodes,
    /// claimed and unready ones counted apart, members without a running task left out.
    #[test]
    fn a_reading_becomes_ready_members_and_counts() {
        let members = vec![
            service("b", "k", Some("/bin/sh"), "2026-12-01T00:00:02Z"),
            service("a", "k", Some("/bin/sh"), "2026-12-01T00:00:01Z"),
            service("starting", "k", None, "2026-12-01T00:00:03Z"),
            service("claimed", "k", Some("sh"), "2026-12-01T00:00:00Z"),
            service("on-down-node", "k", Some("sh"), "2026-12-01T00:00:00Z"),
            service("over", "k", Some("sh"), "2026-12-01T00:00:00Z"),
        ];
        let running = |node: &str| (node.to_string(), "running".to_string());
        let tasks = HashMap::from([
            ("svc-a".to_string(), running("n1")),
            ("svc-b".to_string(), running("n2")),
            ("svc-starting".to_string(), ("n1".to_string(), "preparing".to_string())),
            ("svc-claimed".to_string(), running("n1")),
            ("svc-on-down-node".to_string(), running("n3")),
        ]);
        let node = |id: &str, state: &str| {
            let info = NodeInfo {
                id: id.into(),
                hostname: format!("h{}", &id[1..]),
                state: state.into(),
                addr: String::new(),
                availability: "active".into(),
            };
            (id.to_string(), info)
        };
        let nodes = HashMap::from([node("n1", "ready"), node("n2", "ready"), node("n3", "down")]);
        let reading = Reading {
            defs: BTreeMap::new(),
            members,
            claims: vec![claim("claimed")],
            tasks,
            nodes,
            leader: true,
        };
        let mut view = View::default();
        take_into(&mut view, &reading);
        let ready: Vec<(&str, &str)> =
            view.ready["k"].iter().map(|m| (m.id.as_str(), m.node.hostname.as_str())).collect();
        assert_eq!(ready, [("a", "h1"), ("b", "h2")]);
        assert_eq!(view.counts["k"], Counts { ready: 2, claimed: 1, unready: 2 });
        assert!(view.leader);
    }
}
