//! The Docker Engine API on the local daemon's unix socket, for the calls a create makes on its
//! path (`docker start`, `docker rename`, the layer's `docker inspect`), a reset's first look at
//! the layers (a recycling pool's hand-back), a close's removal in the background (`docker
//! wait`, `docker rm -f`) and cluster mode's Swarm
//! reads and writes (`backends/swarm/engine.rs`): one request here costs a few ms where the
//! docker CLI spends ≈ 20–40 ms (more on a loaded machine) starting itself first. Everything
//! else stays on the CLI. One connection per call (a unix socket connects in µs).
//!
//! A create uses it only where the CLI would reach the same daemon through a local socket
//! ([`EngineApi::local`]), and falls back to the CLI on any failure, so the errors a caller
//! sees stay the CLI's classified ones.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};

use crate::error::ProviderError;

/// The API version asked for: Docker 20.10's, which every newer daemon still serves.
const API_VERSION: &str = "v1.41";

/// One call's bound (a Swarm write waits for the managers' raft).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Why an Engine API call failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("the Docker daemon's socket {socket}: {source}")]
    Connect { socket: String, source: std::io::Error },
    #[error("the Docker Engine API: {0}")]
    Http(String),
    #[error("the Docker Engine API did not answer within {CALL_TIMEOUT:?}")]
    Timeout,
    /// The daemon answered with an error status.
    #[error("the Docker Engine API answered {status}: {message}")]
    Status { status: u16, message: String },
    #[error("unexpected Docker Engine API answer: {0}")]
    Decode(String),
}

impl EngineError {
    /// The daemon said the object does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, EngineError::Status { status: 404, .. })
    }
}

impl From<EngineError> for ProviderError {
    fn from(e: EngineError) -> Self {
        ProviderError::Unavailable(e.to_string())
    }
}

/// One call on `socket`: the answer's body on a 2xx status, else `EngineError::Status` with the
/// daemon's message.
pub async fn call(
    socket: &Path,
    method: http::Method,
    path: &str,
    body: Option<Vec<u8>>,
) -> Result<Bytes, EngineError> {
    let call = async {
        let stream = tokio::net::UnixStream::connect(socket)
            .await
            .map_err(|source| EngineError::Connect { socket: socket.display().to_string(), source })?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| EngineError::Http(e.to_string()))?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let request = http::Request::builder()
            .method(method)
            .uri(format!("/{API_VERSION}{path}"))
            .header(http::header::HOST, "docker")
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| EngineError::Http(e.to_string()))?;
        let response = sender.send_request(request).await.map_err(|e| EngineError::Http(e.to_string()))?;
        let status = response.status();
        let bytes =
            response.into_body().collect().await.map_err(|e| EngineError::Http(e.to_string()))?.to_bytes();
        if status.is_success() {
            return Ok(bytes);
        }
        let message = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(String::from))
            .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned());
        Err(EngineError::Status { status: status.as_u16(), message })
    };
    tokio::time::timeout(CALL_TIMEOUT, call).await.map_err(|_| EngineError::Timeout)?
}

/// The local daemon's API, for a provider whose docker CLI talks to it.
#[derive(Debug, Clone)]
pub struct EngineApi {
    socket: PathBuf,
}

/// Where a container's layers are: what a create reads of its writable layer (a loop disk is
/// mounted on it), a removal to detach that disk, and a reset of the layers below.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerFacts {
    pub id: String,
    pub driver: String,
    pub upper_dir: String,
    /// The image's layers, `:`-separated, top first (`""` when the driver names none).
    pub lower_dir: String,
}

impl LayerFacts {
    /// The CLI's answer to `argv::layer_facts_args`.
    pub fn parse(text: &str) -> Self {
        let mut parts = text.trim().splitn(4, '\t').map(str::to_string);
        let mut next = || parts.next().unwrap_or_default();
        Self { id: next(), driver: next(), upper_dir: next(), lower_dir: next() }
    }

    /// The writable layer's directory (the upper dir's parent, where a loop disk is mounted);
    /// `None` on a driver that names no upper dir.
    pub fn layer_dir(&self) -> Option<PathBuf> {
        let upper = &self.upper_dir;
        Path::new(upper)
            .parent()
            .filter(|_| upper.starts_with('/') && !upper.contains("<no value>"))
            .map(Path::to_path_buf)
    }
}

impl EngineApi {
    /// The daemon the located docker CLI reaches, when that is a local unix socket: no
    /// `DOCKER_HOST` other than `unix://…`, no context, no `SANDBOXD_DOCKER` stand-in (tests'
    /// fakes must see every call).
    pub fn local() -> Option<Self> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        if env("SANDBOXD_DOCKER").is_some() || env("DOCKER_CONTEXT").is_some_and(|c| c != "default") {
            return None;
        }
        let socket = match env("DOCKER_HOST") {
            None => PathBuf::from("/var/run/docker.sock"),
            Some(host) => PathBuf::from(host.strip_prefix("unix://")?),
        };
        Some(Self { socket })
    }

    fn container_path(name: &str, action: &str) -> String {
        let name = percent_encoding::utf8_percent_encode(name, percent_encoding::NON_ALPHANUMERIC);
        format!("/containers/{name}{action}")
    }

    /// `docker start NAME` (already running is success).
    pub async fn start(&self, name: &str) -> Result<(), EngineError> {
        let path = Self::container_path(name, "/start");
        call(&self.socket, http::Method::POST, &path, None).await.map(|_| ())
    }

    /// `docker rename FROM TO`.
    pub async fn rename(&self, from: &str, to: &str) -> Result<(), EngineError> {
        let to = percent_encoding::utf8_percent_encode(to, percent_encoding::NON_ALPHANUMERIC);
        let path = format!("{}?name={to}", Self::container_path(from, "/rename"));
        call(&self.socket, http::Method::POST, &path, None).await.map(|_| ())
    }

    /// `docker wait NAME` for a container that is stopping: returns once the daemon has handled
    /// its exit (at once when it is not running).
    pub async fn wait(&self, name: &str) -> Result<(), EngineError> {
        let path = format!("{}?condition=not-running", Self::container_path(name, "/wait"));
        call(&self.socket, http::Method::POST, &path, None).await.map(|_| ())
    }

    /// `docker rm -f NAME`.
    pub async fn remove(&self, name: &str) -> Result<(), EngineError> {
        let path = format!("{}?force=true", Self::container_path(name, ""));
        call(&self.socket, http::Method::DELETE, &path, None).await.map(|_| ())
    }

    /// Every subnet the daemon's networks hold: one `GET /networks` (the CLI's `docker network
    /// inspect` of each network costs a request per network: seconds with a thousand).
    pub async fn subnets(&self) -> Result<Vec<String>, EngineError> {
        let bytes = call(&self.socket, http::Method::GET, "/networks", None).await?;
        networks_subnets(&bytes)
    }

    /// The container's id, storage driver, upper and lower dirs (`argv::layer_facts_args`'s
    /// answer).
    pub async fn layer(&self, name: &str) -> Result<LayerFacts, EngineError> {
        let path = Self::container_path(name, "/json");
        let bytes = call(&self.socket, http::Method::GET, &path, None).await?;
        let v: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| EngineError::Decode(e.to_string()))?;
        let text = |p: &str| v.pointer(p).and_then(|x| x.as_str()).unwrap_or_default().to_string();
        Ok(LayerFacts {
            id: text("/Id"),
            driver: text("/GraphDriver/Name"),
            upper_dir: text("/GraphDriver/Data/UpperDir"),
            lower_dir: text("/GraphDriver/Data/LowerDir"),
        })
    }
}

/// The `IPAM.Config[].Subnet` values of a `GET /networks` answer.
fn networks_subnets(body: &[u8]) -> Result<Vec<String>, EngineError> {
    let networks: Vec<serde_json::Value> =
        serde_json::from_slice(body).map_err(|e| EngineError::Decode(e.to_string()))?;
    Ok(networks
        .iter()
        .filter_map(|n| n.pointer("/IPAM/Config").and_then(|c| c.as_array()))
        .flatten()
        .filter_map(|c| c.get("Subnet").and_then(|s| s.as_str()).map(String::from))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clis_layer_facts_read_as_the_apis_and_name_the_layer_dir() {
        let facts = LayerFacts::parse("abc123\tfuse-overlayfs\t/d/fo/x/diff\t/d/fo/l/A:/d/fo/l/B\n");
        assert_eq!(
            facts,
            LayerFacts {
                id: "abc123".into(),
                driver: "fuse-overlayfs".into(),
                upper_dir: "/d/fo/x/diff".into(),
                lower_dir: "/d/fo/l/A:/d/fo/l/B".into(),
            }
        );
        assert_eq!(facts.layer_dir(), Some(PathBuf::from("/d/fo/x")));
        let none = LayerFacts::parse("abc123\tvfs\t<no value>\t<no value>");
        assert_eq!((none.driver.as_str(), none.layer_dir()), ("vfs", None));
    }

    #[test]
    fn every_networks_subnets_are_read_from_one_listing() {
        let body =
            br#"[{"Name":"bridge","IPAM":{"Config":[{"Subnet":"172.17.0.0/16","Gateway":"172.17.0.1"}]}},
            {"Name":"host","IPAM":{"Config":[]}},{"Name":"none","IPAM":{"Config":null}},
            {"Name":"t","IPAM":{"Config":[{"Subnet":"10.128.4.0/24"},{"Subnet":"fd00::/64"}]}}]"#;
        assert_eq!(networks_subnets(body).unwrap(), ["172.17.0.0/16", "10.128.4.0/24", "fd00::/64"]);
        assert!(networks_subnets(b"{}").is_err());
    }
}
