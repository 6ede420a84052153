//! What exists, cluster-wide, from Swarm's state: `List` (services carrying the ownership label,
//! their labels, their tasks' states), one sandbox's status from its task, and what the sweep
//! needs to know of each (its lease, whether its task will never run again; `crate::core::expiry`
//! decides).

use std::collections::BTreeMap;
use std::time::UNIX_EPOCH;

use super::argv;
use super::backend::SwarmBackend;
use super::placement::TaskLine;
use super::records;
use crate::backends::docker::failure::CliError;
use crate::core::claims::Claim;
use crate::core::expiry::{Owned, OwnedListing, Stage};
use crate::core::inventory::{page, ListPage, ListQuery, SandboxSummary};
use crate::core::lease;
use crate::core::spec::{SandboxId, SandboxStatus};
use crate::error::{ProviderError, Result};

/// One sandbox service as `docker service inspect` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ServiceInfo {
    pub id: String,
    pub created_ns: i128,
    pub labels: BTreeMap<String, String>,
    pub image: String,
    pub workdir: Option<String>,
    pub ports: Vec<u16>,
    pub metadata: BTreeMap<String, String>,
    pub tenant: Option<String>,
    /// What its spec asked for (`--reserve-cpu`, `--reserve-memory`): a fork's children ask
    /// the same, never the server's default limits on top.
    pub reserved_nano_cpus: Option<i64>,
    pub reserved_memory_mib: Option<u64>,
}

/// One line of [`argv::service_inspect_args`].
pub(super) fn parse_service(line: &str) -> Option<ServiceInfo> {
    let mut f = line.splitn(6, '\t');
    let id = f.next()?.trim().to_string();
    let created: String = serde_json::from_str(f.next()?).ok()?;
    let labels: BTreeMap<String, String> =
        serde_json::from_str::<Option<BTreeMap<String, String>>>(f.next()?).ok()?.unwrap_or_default();
    let image = f.next().unwrap_or_default().trim().to_string();
    let resources: Option<TaskResources> =
        f.next().and_then(|r| serde_json::from_str(r.trim()).ok()).flatten();
    let reserved = resources.and_then(|r| r.reservations).unwrap_or_default();
    let workdir = f.next().map(str::trim).filter(|w| !w.is_empty()).map(String::from);
    let created = humantime::parse_rfc3339(created.trim()).ok()?;
    let created_ns = created.duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as i128).unwrap_or(0);
    let ports = labels
        .get(crate::backends::docker::argv::PORTS_LABEL)
        .map(|p| p.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_default();
    Some(ServiceInfo {
        id,
        created_ns,
        image,
        workdir,
        ports,
        metadata: crate::backends::docker::labels::metadata_from_labels(&labels),
        tenant: labels.get(crate::auth::TENANT_LABEL).cloned(),
        reserved_nano_cpus: (reserved.nano_cpus > 0).then_some(reserved.nano_cpus),
        reserved_memory_mib: (reserved.memory_bytes > 0).then_some(reserved.memory_bytes >> 20),
        labels,
    })
}

/// `Spec.TaskTemplate.Resources` of a service, as far as a fork reads it.
#[derive(Debug, Default, serde::Deserialize)]
struct TaskResources {
    #[serde(rename = "Reservations", default)]
    reservations: Option<Reserved>,
}

#[derive(Debug, Default, serde::Deserialize)]
struct Reserved {
    #[serde(rename = "NanoCPUs", default)]
    nano_cpus: i64,
    #[serde(rename = "MemoryBytes", default)]
    memory_bytes: u64,
}

/// A sandbox's state from its newest task.
pub(super) fn task_status(task: Option<&TaskLine>) -> SandboxStatus {
    let Some(task) = task else { return SandboxStatus::Stopped };
    match task.current.as_str() {
        "running" => SandboxStatus::Running,
        "new" | "pending" | "assigned" | "accepted" | "preparing" | "ready" | "starting" => {
            SandboxStatus::Starting
        }
        "failed" | "rejected" => SandboxStatus::Error,
        _ => SandboxStatus::Stopped,
    }
}

/// Whether a task will never run again: ended, or told to stop while not running.
fn task_dead(task: Option<&TaskLine>) -> bool {
    match task {
        None => true,
        Some(t) => task_ended(t) || (t.desired == "shutdown" && t.current != "running"),
    }
}

/// Whether a task is in a final state (`restart-condition none`: nothing runs it again).
fn task_ended(task: &TaskLine) -> bool {
    matches!(task.current.as_str(), "failed" | "rejected" | "complete" | "shutdown" | "orphaned")
}

impl SwarmBackend {
    pub(super) async fn inspect_services(&self, ids: &[String]) -> Result<Vec<ServiceInfo>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let stdout = match self.swarm.docker(argv::service_inspect_args(ids)).await {
            Ok(out) => out.stdout,
            // A service removed between the listing and this call is left out.
            Err(CliError::Failed(f)) if f.stderr.to_ascii_lowercase().contains("no such service") => f.stdout,
            Err(e) => return Err(e.into()),
        };
        Ok(String::from_utf8_lossy(&stdout)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .filter_map(parse_service)
            .filter(|s| s.labels.get(crate::backends::docker::argv::SANDBOX_LABEL).is_some_and(|v| v == "1"))
            .collect())
    }

    /// The sandbox services (every node's) matching the query's labels and tenant. Docker's
    /// label filter cannot see a claim's metadata or tenant, so a filtered listing takes every
    /// pool member too ([`page`] filters those by their claims).
    async fn listed(&self, query: &ListQuery) -> Result<(Vec<ServiceInfo>, Vec<TaskLine>)> {
        let filters = argv::list_filters(&query.labels, query.tenant.as_deref());
        let mut ids = self.service_ids(&filters).await?;
        if !filters.is_empty() {
            ids.extend(self.service_ids(&[format!("label={}", records::POOL_KEY_LABEL)]).await?);
            ids.sort();
            ids.dedup();
        }
        let services = self.inspect_services(&ids).await?;
        let names: Vec<String> = services.iter().map(|s| s.id.clone()).collect();
        let tasks = self.swarm.tasks(&names).await?;
        Ok((services, tasks))
    }

    async fn service_ids(&self, filters: &[String]) -> Result<Vec<String>> {
        let out = self.swarm.docker(argv::service_ls_args(filters)).await?;
        Ok(out.stdout_text().lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect())
    }

    /// Every pool claim in Swarm: the claim, and its lease end.
    pub(super) async fn claim_records(&self) -> Result<BTreeMap<String, (Claim, Option<i64>)>> {
        let configs = self.engine.configs(&[&format!("{}=1", records::CLAIM_LABEL)]).await?;
        Ok(configs
            .iter()
            .filter_map(|c| {
                let id = c.label(records::CLAIM_SANDBOX_LABEL)?.to_string();
                let expires = c.label(lease::EXPIRES_LABEL).and_then(|v| v.parse().ok());
                Some((id, (records::read_claim(&c.data())?, expires)))
            })
            .collect())
    }

    pub(super) async fn list_services(&self, query: &ListQuery) -> Result<ListPage> {
        crate::core::metadata::validate_metadata("labels", &query.labels)?;
        let (services, tasks) = self.listed(query).await?;
        // Claims of pool members are the cluster's: read from Swarm when members are listed.
        let members = services.iter().any(|s| s.labels.contains_key(records::POOL_KEY_LABEL));
        let claims = if members { self.claim_records().await? } else { BTreeMap::new() };
        // A sandbox on a node Swarm reads as down is `Unknown`: nobody can ask its daemon.
        let mut down = std::collections::BTreeSet::new();
        let nodes: std::collections::BTreeSet<&str> = tasks.iter().map(|t| t.node.as_str()).collect();
        for node in nodes.into_iter().filter(|n| !n.is_empty()) {
            if self.swarm.node(node).await.is_ok_and(|n| n.is_down()) {
                down.insert(node.to_string());
            }
        }
        let found = services
            .into_iter()
            .filter(|s| SandboxId::has_valid_shape(&s.id))
            .map(|s| {
                let task = tasks.iter().find(|t| t.service == s.id);
                let on_down_node = task.is_some_and(|t| down.contains(&t.node));
                let claim_end = claims.get(&s.id).and_then(|(_, end)| *end);
                SandboxSummary {
                    status: if on_down_node { SandboxStatus::Unknown } else { task_status(task) },
                    expires_at_unix_ms: claim_end
                        .or_else(|| s.labels.get(lease::EXPIRES_LABEL).and_then(|v| v.parse().ok())),
                    reserved_millicpus: s
                        .labels
                        .get(crate::auth::CPUS_LABEL)
                        .and_then(|v| v.parse::<f64>().ok())
                        .map_or(0, |c| (c * 1000.0).round() as u64),
                    reserved_memory_mib: s
                        .labels
                        .get(crate::auth::MEMORY_LABEL)
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0),
                    sandbox_id: s.id,
                    image: s.image,
                    created_ns: s.created_ns,
                    ports: s.ports,
                    workdir: s.workdir,
                    tenant: s.labels.get(crate::auth::TENANT_LABEL).cloned(),
                    pool: s.labels.get(crate::backends::docker::labels::POOL_LABEL).cloned(),
                    runtime: s.labels.get(crate::backends::docker::labels::OCI_RUNTIME_LABEL).cloned(),
                    metadata: s.metadata,
                }
            })
            .collect();
        if !members {
            return Ok(page(found, query));
        }
        let mut all = (*query.claims).clone();
        all.extend(claims.into_iter().map(|(id, (claim, _))| (id, claim)));
        Ok(page(found, &ListQuery { claims: std::sync::Arc::new(all), ..query.clone() }))
    }

    /// Whether this node removes a service whose task ended on another node: only when that
    /// node is not up and this node is the Swarm leader (asked once per sweep).
    async fn sweeps_for_others(&self, task: Option<&TaskLine>, leader: &mut Option<bool>) -> bool {
        if let Some(node) = task.map(|t| t.node.as_str()).filter(|n| !n.is_empty()) {
            if self.swarm.node(node).await.is_ok_and(|n| !n.is_down()) {
                return false;
            }
        }
        if leader.is_none() {
            *leader = Some(self.engine.node(self.swarm.self_id()).await.is_ok_and(|n| n.is_leader()));
        }
        leader.unwrap_or(false)
    }

    /// The status of a sandbox on another node (or on none), from its task; a sandbox Swarm
    /// does not know is `Stopped`, as on one host.
    pub(super) async fn service_status(&self, id: &str) -> Result<SandboxStatus> {
        if !SandboxId::has_valid_shape(id) {
            return Err(ProviderError::SandboxNotFound(id.into()));
        }
        let tasks = self.swarm.tasks(&[id.to_string()]).await?;
        Ok(task_status(tasks.iter().find(|t| t.service == id)))
    }

    /// Every sandbox service, cluster-wide, for the sweep. A lease is enforced by the node the
    /// sandbox runs on (`SetTimeout` runs there, whose state directory holds the moved lease; a
    /// claimed pool member's lease is its claim's). A service whose task will never run again
    /// (its node drained, or back after it was lost) is listed as ended for its own node to
    /// remove (whose watchers then learn why), or for the Swarm leader when that node does not
    /// answer. What this node kept about sandboxes gone since (aliases, nodes, claims) is
    /// forgotten here and reported as gone.
    pub(super) async fn list_owned_services(&self) -> Result<OwnedListing> {
        // Known before the listing: each had its service then, so one missing from it is gone.
        let known = self.known();
        let (services, tasks) = self.listed(&ListQuery::default()).await?;
        let self_node = self.swarm.node(self.swarm.self_id()).await?.hostname;
        let members = services.iter().any(|s| s.labels.contains_key(records::POOL_KEY_LABEL));
        let claims = if members { self.claim_records().await? } else { BTreeMap::new() };
        let mut leader = None;
        let mut owned = Vec::new();
        for s in services.iter().filter(|s| SandboxId::has_valid_shape(&s.id)) {
            let task = tasks.iter().find(|t| t.service == s.id);
            let label = |key: &str| s.labels.get(key).and_then(|v| v.parse::<i64>().ok());
            let ours = task.is_some_and(|t| t.node == self_node);
            let mut ended = label(lease::CREATED_LABEL).is_some() && task_dead(task);
            if ended && !ours && !self.sweeps_for_others(task, &mut leader).await {
                ended = false; // its own node removes it
            }
            // A create still within its deadline is its creator's to finish or remove, until its
            // task ended (then nobody will finish it: its node was lost or drained meanwhile).
            let create_deadline_ms =
                if task.is_some_and(task_ended) { None } else { label(lease::CREATE_DEADLINE_LABEL) };
            let expires_ms =
                claims.get(&s.id).and_then(|(_, end)| *end).or_else(|| label(lease::EXPIRES_LABEL));
            owned.push(Owned {
                name: s.id.clone(),
                stage: if ended { Stage::Ended } else { Stage::Made },
                expires_ms,
                create_deadline_ms,
                lease_here: ours,
            });
        }
        let alive: std::collections::HashSet<&str> = services.iter().map(|s| s.id.as_str()).collect();
        let mut gone = Vec::new();
        // Known on this node, gone from Swarm: forget (and report) them.
        for id in known.into_iter().filter(|id| !alive.contains(id.as_str())) {
            self.forget(&id);
            gone.push(id);
        }
        Ok(OwnedListing { owned, gone })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_line_parses() {
        let line = "sandboxd-0123456789abcdef0123456789abcdef\t\"2026-12-01T23:59:01.123456789Z\"\t\
                    {\"sandboxd.sandbox\":\"1\",\"sandboxd.meta.run\":\"r1\",\"sandboxd.tenant\":\"red\"}\t\
                    sandboxd-test/busybox:1\t                    {\"Limits\":{\"NanoCPUs\":2000000000,\"MemoryBytes\":1073741824},\"Reservations\":{\"NanoCPUs\":500000000,\"MemoryBytes\":268435456}}\t/work";
        let s = parse_service(line).unwrap();
        assert_eq!(s.id, "sandboxd-0123456789abcdef0123456789abcdef");
        assert_eq!(s.metadata.get("run").map(String::as_str), Some("r1"));
        assert_eq!(s.tenant.as_deref(), Some("red"));
        assert_eq!(s.workdir.as_deref(), Some("/work"));
        assert!(s.created_ns > 0);
        // What it asked for is the reservation, not the limits the server's defaults add.
        assert_eq!((s.reserved_nano_cpus, s.reserved_memory_mib), (Some(500_000_000), Some(256)));
        let unreserved = parse_service(
            "sandboxd-0123456789abcdef0123456789abcdef\t\"2026-12-01T23:59:01Z\"\tnull\timg:1\t{\"Limits\":{\"NanoCPUs\":1000000000}}\t",
        )
        .unwrap();
        assert_eq!(
            (unreserved.reserved_nano_cpus, unreserved.reserved_memory_mib, unreserved.workdir),
            (None, None, None)
        );
    }

    #[test]
    fn task_states_map_to_sandbox_states() {
        let task = |desired: &str, current: &str| TaskLine {
            service: "s".into(),
            node: "n1".into(),
            desired: desired.into(),
            current: current.into(),
            error: String::new(),
        };
        assert_eq!(task_status(Some(&task("running", "running"))), SandboxStatus::Running);
        assert_eq!(task_status(Some(&task("running", "preparing"))), SandboxStatus::Starting);
        assert_eq!(task_status(Some(&task("shutdown", "failed"))), SandboxStatus::Error);
        assert_eq!(task_status(None), SandboxStatus::Stopped);
        assert!(task_dead(Some(&task("shutdown", "shutdown"))));
        assert!(!task_dead(Some(&task("running", "running"))));
        // A task on a node that went down keeps running there until Swarm hears back.
        assert!(!task_dead(Some(&task("shutdown", "running"))));
    }
}
