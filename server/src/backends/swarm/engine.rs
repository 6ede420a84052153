//! The Docker Engine API on the local daemon's unix socket, for what cluster mode asks of Swarm
//! often or must ask fast: a pool claim is one `POST /configs/create` (≈ 5 ms here, where
//! `docker config create` is ≈ 45 ms, most of it the CLI's own start), and the periodic reads of
//! members, claims, tasks and nodes cost no process. Everything else stays on the docker CLI.
//! Only the fields read are modelled; one connection per call (a unix socket connects in µs).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use serde::Deserialize;

pub use crate::backends::docker::engine_api::EngineError;

/// `Spec.Name` and `Spec.Labels` of a Swarm object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Annotations {
    #[serde(rename = "Name", default)]
    pub name: String,
    #[serde(rename = "Labels", default)]
    pub labels: Option<BTreeMap<String, String>>,
}

impl Annotations {
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.as_ref()?.get(key).map(String::as_str)
    }
}

/// A Swarm config: a small record in the managers' replicated (raft) state.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Config {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "CreatedAt", default)]
    pub created_at: String,
    #[serde(rename = "Spec")]
    pub spec: ConfigSpec,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ConfigSpec {
    #[serde(flatten)]
    pub meta: Annotations,
    /// Base64, as the API carries it.
    #[serde(rename = "Data", default)]
    pub data: String,
}

impl Config {
    pub fn name(&self) -> &str {
        &self.spec.meta.name
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        self.spec.meta.label(key)
    }

    /// The record's bytes.
    pub fn data(&self) -> Vec<u8> {
        base64::engine::general_purpose::STANDARD.decode(&self.spec.data).unwrap_or_default()
    }

    /// How old the record is, when its creation time reads.
    pub fn age(&self) -> Option<Duration> {
        humantime::parse_rfc3339(self.created_at.trim()).ok()?.elapsed().ok()
    }
}

/// A service, as far as cluster mode reads it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Service {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "CreatedAt", default)]
    pub created_at: String,
    #[serde(rename = "Spec")]
    pub spec: ServiceSpec,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ServiceSpec {
    #[serde(flatten)]
    pub meta: Annotations,
    #[serde(rename = "TaskTemplate", default)]
    pub task_template: TaskTemplate,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct TaskTemplate {
    #[serde(rename = "ContainerSpec", default)]
    pub container: ContainerSpec,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct ContainerSpec {
    #[serde(rename = "Image", default)]
    pub image: String,
    #[serde(rename = "Dir", default)]
    pub dir: String,
}

impl Service {
    /// The service's name: the sandbox id.
    pub fn name(&self) -> &str {
        &self.spec.meta.name
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        self.spec.meta.label(key)
    }

    /// How old the service is, when its creation time reads.
    pub fn age(&self) -> Option<Duration> {
        humantime::parse_rfc3339(self.created_at.trim()).ok()?.elapsed().ok()
    }
}

/// A task: where and in which state one replica of a service is.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Task {
    #[serde(rename = "ServiceID", default)]
    pub service_id: String,
    #[serde(rename = "NodeID", default)]
    pub node_id: String,
    #[serde(rename = "DesiredState", default)]
    pub desired: String,
    #[serde(rename = "Status", default)]
    pub status: TaskStatus,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct TaskStatus {
    #[serde(rename = "State", default)]
    pub state: String,
}

/// A node of the swarm.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Node {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Description", default)]
    pub description: NodeDescription,
    #[serde(rename = "Status", default)]
    pub status: NodeStatus,
    #[serde(rename = "Spec", default)]
    pub spec: NodeSpec,
    #[serde(rename = "ManagerStatus", default)]
    pub manager: Option<ManagerStatus>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct NodeDescription {
    #[serde(rename = "Hostname", default)]
    pub hostname: String,
    #[serde(rename = "Engine", default)]
    pub engine: NodeEngine,
}

/// The node's Docker Engine as Swarm describes it: its labels are the daemon's own
/// (`daemon.json` `labels`, `dockerd --label`), set on the node itself.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct NodeEngine {
    #[serde(rename = "Labels", default)]
    pub labels: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct NodeStatus {
    #[serde(rename = "State", default)]
    pub state: String,
    #[serde(rename = "Addr", default)]
    pub addr: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct NodeSpec {
    #[serde(rename = "Availability", default)]
    pub availability: String,
    #[serde(rename = "Labels", default)]
    pub labels: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct ManagerStatus {
    #[serde(rename = "Leader", default)]
    pub leader: bool,
}

impl Node {
    pub fn is_leader(&self) -> bool {
        self.manager.as_ref().is_some_and(|m| m.leader)
    }
}

/// `?filters=…` for a list call: each `(kind, value)` (`label`, `k=v`; `name`, `x`; …).
pub fn filters(pairs: &[(&str, String)]) -> String {
    let mut map: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (kind, value) in pairs {
        map.entry(kind).or_default().push(value);
    }
    let json = serde_json::to_string(&map).unwrap_or_default();
    format!("?filters={}", percent_encoding::utf8_percent_encode(&json, percent_encoding::NON_ALPHANUMERIC))
}

/// The Engine API of the daemon this server drives.
#[derive(Debug, Clone)]
pub struct Engine {
    socket: PathBuf,
}

impl Engine {
    /// The local daemon's socket, as the docker CLI finds it: `DOCKER_HOST=unix://PATH`, else
    /// `/var/run/docker.sock`. Cluster mode runs beside its daemon, so another kind of
    /// `DOCKER_HOST` (or a `DOCKER_CONTEXT`) is refused.
    pub fn local() -> Result<Self, String> {
        Self::from_env(std::env::var("DOCKER_HOST").ok(), std::env::var("DOCKER_CONTEXT").ok())
    }

    fn from_env(host: Option<String>, context: Option<String>) -> Result<Self, String> {
        if let Some(context) = context.filter(|c| !c.is_empty() && c != "default") {
            return Err(format!(
                "cluster.mode swarm talks to the local daemon's socket, but DOCKER_CONTEXT is {context:?}"
            ));
        }
        let socket = match host.filter(|h| !h.is_empty()) {
            None => PathBuf::from("/var/run/docker.sock"),
            Some(h) => match h.strip_prefix("unix://") {
                Some(path) => PathBuf::from(path),
                None => {
                    return Err(format!(
                        "cluster.mode swarm talks to the local daemon's socket, but DOCKER_HOST is {h:?} \
                         (unset it, or use unix://PATH)"
                    ))
                }
            },
        };
        Ok(Self { socket })
    }

    /// One call: the answer's body on a 2xx status, else `EngineError::Status` with the
    /// daemon's message.
    async fn call(
        &self,
        method: http::Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Bytes, EngineError> {
        crate::backends::docker::engine_api::call(&self.socket, method, path, body).await
    }

    async fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T, EngineError> {
        let bytes = self.call(http::Method::GET, path, None).await?;
        serde_json::from_slice(&bytes).map_err(|e| EngineError::Decode(format!("GET {path}: {e}")))
    }

    /// Creates config `name`; `Ok(false)` when one of that name exists already (Swarm's names
    /// are unique: this is the compare-and-swap).
    pub async fn create_config(
        &self,
        name: &str,
        labels: &BTreeMap<String, String>,
        data: &[u8],
    ) -> Result<bool, EngineError> {
        let body = serde_json::json!({
            "Name": name,
            "Labels": labels,
            "Data": base64::engine::general_purpose::STANDARD.encode(data),
        });
        match self.call(http::Method::POST, "/configs/create", Some(body.to_string().into_bytes())).await {
            Ok(_) => Ok(true),
            Err(EngineError::Status { status: 409, .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The configs carrying every label filter (`k=v` or `k`).
    pub async fn configs(&self, labels: &[&str]) -> Result<Vec<Config>, EngineError> {
        let f: Vec<(&str, String)> = labels.iter().map(|l| ("label", l.to_string())).collect();
        self.get(&format!("/configs{}", filters(&f))).await
    }

    /// Config `name`; `None` when there is none.
    pub async fn config(&self, name: &str) -> Result<Option<Config>, EngineError> {
        match self.get(&format!("/configs/{}", encode_segment(name))).await {
            Ok(config) => Ok(Some(config)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Removes config `name`; already gone is success.
    pub async fn remove_config(&self, name: &str) -> Result<(), EngineError> {
        match self.call(http::Method::DELETE, &format!("/configs/{}", encode_segment(name)), None).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The services carrying every label filter.
    pub async fn services(&self, labels: &[&str]) -> Result<Vec<Service>, EngineError> {
        let f: Vec<(&str, String)> = labels.iter().map(|l| ("label", l.to_string())).collect();
        self.get(&format!("/services{}", filters(&f))).await
    }

    /// Service `name`; `None` when there is none.
    pub async fn service(&self, name: &str) -> Result<Option<Service>, EngineError> {
        match self.get(&format!("/services/{}", encode_segment(name))).await {
            Ok(service) => Ok(Some(service)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The tasks of services `names` that Swarm still wants running.
    pub async fn running_tasks(&self, names: &[&str]) -> Result<Vec<Task>, EngineError> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let mut f = vec![("desired-state", "running".to_string())];
        f.extend(names.iter().map(|n| ("service", n.to_string())));
        self.get(&format!("/tasks{}", filters(&f))).await
    }

    /// Every node of the swarm.
    pub async fn nodes(&self) -> Result<Vec<Node>, EngineError> {
        self.get("/nodes").await
    }

    /// Node `id`.
    pub async fn node(&self, id: &str) -> Result<Node, EngineError> {
        self.get(&format!("/nodes/{}", encode_segment(id))).await
    }
}

/// One path segment (names here are `[a-z0-9-]`, but never trust that).
fn encode_segment(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_is_the_clis_and_nothing_remote() {
        let local = Engine::from_env(None, None).unwrap();
        assert_eq!(local.socket, PathBuf::from("/var/run/docker.sock"));
        let node =
            Engine::from_env(Some("unix:///tmp/c/n1/docker.sock".into()), Some("default".into())).unwrap();
        assert_eq!(node.socket, PathBuf::from("/tmp/c/n1/docker.sock"));
        assert!(Engine::from_env(Some("tcp://10.0.0.1:2375".into()), None)
            .unwrap_err()
            .contains("DOCKER_HOST"));
        assert!(Engine::from_env(None, Some("remote".into())).unwrap_err().contains("DOCKER_CONTEXT"));
    }

    #[test]
    fn filters_are_url_encoded_json() {
        let f = filters(&[("label", "a=b".into()), ("label", "c".into())]);
        let json = percent_encoding::percent_decode_str(f.strip_prefix("?filters=").unwrap())
            .decode_utf8()
            .unwrap()
            .into_owned();
        assert_eq!(json, r#"{"label":["a=b","c"]}"#);
        assert_eq!(encode_segment("sandboxd-claim-x"), "sandboxd%2Dclaim%2Dx");
    }

    #[test]
    fn objects_decode_from_the_apis_json() {
        let configs: Vec<Config> = serde_json::from_str(
            r#"[{"ID":"c1","Version":{"Index":35},"CreatedAt":"2026-12-02T19:55:36.01731961Z",
                "Spec":{"Name":"sandboxd-claim-x","Labels":{"sandboxd.claim":"1"},"Data":"eyJhIjoxfQ=="}}]"#,
        )
        .unwrap();
        assert_eq!(configs[0].name(), "sandboxd-claim-x");
        assert_eq!(configs[0].label("sandboxd.claim"), Some("1"));
        assert_eq!(configs[0].data(), br#"{"a":1}"#);
        assert!(configs[0].age().is_some());
        let node: Node = serde_json::from_str(
            r#"{"ID":"n","Description":{"Hostname":"h1"},"Status":{"State":"ready","Addr":"10.0.0.1"},
                "Spec":{"Availability":"active","Role":"manager"},"ManagerStatus":{"Leader":true,"Reachability":"reachable"}}"#,
        )
        .unwrap();
        assert!(node.is_leader());
        assert_eq!(node.description.hostname, "h1");
        let task: Task = serde_json::from_str(
            r#"{"ID":"t","ServiceID":"s","NodeID":"n","DesiredState":"running","Status":{"State":"running"}}"#,
        )
        .unwrap();
        assert_eq!((task.service_id.as_str(), task.status.state.as_str()), ("s", "running"));
        let service: Service = serde_json::from_str(
            r#"{"ID":"s","CreatedAt":"2026-12-02T19:55:36Z","Spec":{"Name":"sandboxd-x","Labels":null,
                "TaskTemplate":{"ContainerSpec":{"Image":"img","Dir":"/w"}}}}"#,
        )
        .unwrap();
        assert_eq!(
            (service.name(), service.spec.task_template.container.image.as_str()),
            ("sandboxd-x", "img")
        );
        assert_eq!(service.label("x"), None);
    }
}
