//! The E2B-compatible endpoint (`server.e2b`): a second front-end over the same core as the
//! gRPC service, so that the `e2b` SDK works unchanged against sandboxd. Every handler here
//! turns an E2B request into the `sandbox.v1` request the gRPC API takes and makes it through
//! the served stack in-process ([`Calls`], `service/calls.rs`) as the caller's credential: the
//! gate, the audit log, the cluster relay, metrics, traces and limits are the gRPC API's
//! (`service/rpc_table.rs`), and every sandbox operation is its own; nothing is implemented twice.
//!
//! One listener serves both halves, told apart by path:
//! - control plane (rest.rs): `/sandboxes…`, `/v2/sandboxes…`, authenticated by `X-API-Key`
//!   (a tenant key, the operator key, or nothing on a server without keys);
//! - envd (process.rs, filesystem.rs: Connect; files.rs: `/files`, `/health`), the sandbox
//!   named by the `E2b-Sandbox-Id` header or a `<port>-<sandbox id>.<domain>` host name,
//!   authenticated by `X-Access-Token` (the capability token `POST /sandboxes` returned).

mod body;
mod connect;
mod connection;
pub(crate) mod errors;
mod files;
mod filesystem;
mod gzip;
pub(crate) mod inproc;
mod lifecycle;
mod network;
mod owners;
mod process;
mod rest;
mod signed;
mod snapshots;
mod templates;

use std::sync::Arc;

use axum::http::HeaderMap;
use axum::routing::{get, post};
use axum::Router;
use tonic::Status;

use crate::auth::{AccessGate, Principal};
use crate::config::E2bSection;
use crate::service::calls::{Caller, Calls};
use crate::service::template_build::TemplateEngine;

/// The envd version reported to the SDK: the features it gates that sandboxd serves (stdin,
/// default user, octet-stream and gzip uploads, entry info in watch events (0.6.3), the
/// network-mounts flag of a watch (0.6.4: accepted; sandboxd's watches have no such limit)), and
/// per-file metadata (0.6.2: `X-Metadata-*` uploads kept as the files' `user.e2b.*` extended
/// attributes, shown in every entry).
pub const ENVD_VERSION: &str = "0.6.4";

/// What the handlers share.
#[derive(Clone)]
pub struct E2bFront {
    inner: Arc<Inner>,
}

struct Inner {
    calls: Calls,
    /// Who a credential is, for this front-end's own bookkeeping only (templates are a
    /// tenant's; a signed URL's kept token is let go once it no longer authenticates); never to
    /// authorize a sandbox call: the stack's gate does that on every call.
    gate: AccessGate,
    /// Template builds' image lookups and commits, which have no RPC (`TemplateEngine`).
    engine: TemplateEngine,
    config: E2bSection,
    processes: process::Table,
    watchers: filesystem::Watchers,
    /// Owner names and upload owners per sandbox.
    owners: owners::Owners,
    /// The envd access tokens handed out, by sandbox: the keys of signed `/files` URLs.
    signed_tokens: signed::Tokens,
    /// The pause timers of sandboxes whose E2B timeout pauses them.
    lifecycles: lifecycle::Timers,
    /// `$HOME` by (sandbox, user): E2B resolves relative paths against it.
    homes: std::sync::Mutex<std::collections::HashMap<(String, String), String>>,
    /// E2B's template names, builds and uploads (templates.rs).
    templates: templates::Registry,
    /// The runtimes that checkpoint: there `pause` hibernates (memory to disk, freed) rather
    /// than freezes, and a snapshot is a live one.
    checkpointing: std::collections::BTreeSet<String>,
}

impl E2bFront {
    /// `checkpointing`: the runtimes that checkpoint (`docker.runtimes` with `checkpoint: true`).
    pub fn new(
        calls: Calls,
        config: E2bSection,
        gate: AccessGate,
        engine: TemplateEngine,
        checkpointing: std::collections::BTreeSet<String>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                calls,
                gate,
                engine,
                config,
                processes: process::Table::default(),
                watchers: filesystem::Watchers::default(),
                owners: owners::Owners::default(),
                signed_tokens: signed::Tokens::default(),
                lifecycles: lifecycle::Timers::default(),
                homes: Default::default(),
                templates: templates::Registry::new().expect("a temporary directory for template uploads"),
                checkpointing,
            }),
        }
    }

    /// Whether `runtime` (a sandbox's, as `Status` and `List` report it) checkpoints.
    fn checkpoints(&self, runtime: &str) -> bool {
        self.inner.checkpointing.contains(runtime)
    }

    /// Pause `sandbox_id` as E2B means it: on a runtime that checkpoints (gVisor) a `Hibernate`,
    /// its memory kept on disk and freed, as E2B's pause keeps a sandbox's memory without holding
    /// it; elsewhere a `Pause` (frozen, memory held). `status` is the sandbox's own.
    pub(crate) async fn pause_sandbox(
        &self,
        caller: &Caller,
        sandbox_id: &str,
        status: &sandboxd_proto::v1::StatusResponse,
    ) -> Result<(), Status> {
        use sandboxd_proto::v1 as pb;
        if self.checkpoints(&status.runtime) {
            let hibernate = pb::HibernateRequest { sandbox_id: sandbox_id.into() };
            self.calls().hibernate(inproc::request(caller, hibernate)).await?;
        } else {
            let pause = pb::PauseRequest { sandbox_id: sandbox_id.into() };
            self.calls().pause(inproc::request(caller, pause)).await?;
        }
        Ok(())
    }

    /// Both halves on one router.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/sandboxes", post(rest::create).get(rest::list_v1))
            .route("/v2/sandboxes", post(rest::create).get(rest::list_v2))
            .route("/sandboxes/{id}", get(rest::info).delete(rest::kill))
            .route("/sandboxes/{id}/timeout", post(rest::set_timeout))
            .route("/sandboxes/{id}/refreshes", post(rest::refresh))
            .route("/sandboxes/{id}/pause", post(rest::pause))
            .route("/sandboxes/{id}/resume", post(rest::resume))
            .route("/sandboxes/{id}/connect", post(rest::connect))
            .route("/v2/sandboxes/{id}/connect", post(rest::connect))
            .route("/sandboxes/{id}/metrics", get(rest::metrics))
            .route("/sandboxes/{id}/fork", post(rest::fork))
            .route("/sandboxes/{id}/snapshots", post(snapshots::create))
            .route("/snapshots", get(snapshots::list))
            .route("/sandboxes/{id}/network", axum::routing::put(network::update))
            .route("/templates/{id}", axum::routing::delete(snapshots::delete))
            .route("/health", get(files::health))
            .route("/files", get(files::read).post(files::write))
            .route("/process.Process/{method}", post(process::call))
            .route("/filesystem.Filesystem/{method}", post(filesystem::call))
            .merge(templates::routes())
            .fallback(errors::no_route)
            .layer(axum::extract::DefaultBodyLimit::max(files::MULTIPART_LIMIT))
            .with_state(self.clone())
    }

    /// Serves `listener` until `stopped` resolves.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        stopped: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        axum::serve(listener, self.router().into_make_service_with_connect_info::<connection::Connection>())
            .with_graceful_shutdown(stopped)
            .await
    }

    /// The gRPC API through the served stack (a clone per call: its methods take `&mut`).
    fn calls(&self) -> Calls {
        self.inner.calls.clone()
    }

    /// Sandbox `id` as `caller` sees it, by the gRPC `Status` call: the authorization a call on
    /// a sandbox starts with (another tenant's sandbox is `NotFound`).
    async fn status(&self, caller: &Caller, id: &str) -> Result<sandboxd_proto::v1::StatusResponse, Status> {
        let status = sandboxd_proto::v1::StatusRequest { sandbox_id: id.to_string() };
        Ok(self.calls().status(inproc::request(caller, status)).await?.into_inner())
    }

    /// The control plane's caller: `X-API-Key` (the gate checks it on every call).
    fn api_caller(&self, headers: &HeaderMap) -> Result<Caller, Status> {
        Ok(Caller::new(header(headers, "x-api-key"))?.traced(headers))
    }

    /// Who the control plane's caller is (`X-API-Key`), for the front-end's own records (the
    /// templates a tenant sees); its calls are authorized by the stack, not by this.
    fn api_identity(&self, headers: &HeaderMap) -> Result<Principal, Status> {
        self.inner.gate.principal_of_credential(header(headers, "x-api-key"))
    }

    /// Whether `credential` still authenticates (a kept signed-URL key that no longer does is
    /// let go).
    fn authenticates(&self, credential: &str) -> bool {
        self.inner.gate.principal_of_credential(Some(credential)).is_ok()
    }

    /// envd's caller: `X-Access-Token` (the sandbox's capability token), or an `X-API-Key`.
    fn envd_caller(&self, headers: &HeaderMap) -> Result<Caller, Status> {
        let credential = header(headers, "x-access-token").or_else(|| header(headers, "x-api-key"));
        Ok(Caller::new(credential)?.traced(headers))
    }

    /// The sandbox an envd request is for: `E2b-Sandbox-Id`, else the host name
    /// `<port>-<sandbox id>.<server.e2b.domain>`.
    fn envd_sandbox(&self, headers: &HeaderMap) -> Result<String, Status> {
        if let Some(id) = header(headers, "e2b-sandbox-id") {
            return Ok(id.trim().to_string());
        }
        let host = header(headers, "host").or_else(|| header(headers, ":authority"));
        if let (Some(host), Some(domain)) = (host, &self.inner.config.domain) {
            if let Some(id) = sandbox_from_host(host, domain) {
                return Ok(id);
            }
        }
        Err(Status::invalid_argument(
            "no sandbox named: send the E2b-Sandbox-Id header or use the host name <port>-<sandbox id>.<domain>",
        ))
    }

    /// `path` made absolute as E2B does: a relative one is below the user's home (`$HOME` as
    /// the sandbox reports it for that user, asked once per sandbox and user through `Exec`).
    async fn resolve(
        &self,
        caller: &Caller,
        sandbox_id: &str,
        user: &str,
        path: &str,
    ) -> Result<String, Status> {
        if path.starts_with('/') {
            return Ok(path.to_string());
        }
        let key = (sandbox_id.to_string(), user.to_string());
        let cached = self.inner.homes.lock().expect("homes").get(&key).cloned();
        let home = match cached {
            Some(home) => home,
            None => {
                let exec = sandboxd_proto::v1::ExecRequest {
                    sandbox_id: sandbox_id.to_string(),
                    command: "printf %s \"$HOME\"".into(),
                    user: (!user.is_empty()).then(|| user.to_string()),
                    timeout_s: Some(10.0),
                    ..Default::default()
                };
                let out = self.calls().exec(inproc::request(caller, exec)).await?.into_inner();
                // Read from inside the sandbox: only an absolute path without NUL is taken.
                let home = String::from_utf8(out.stdout).unwrap_or_default();
                let home = if out.return_code == 0 && home.starts_with('/') && !home.contains('\0') {
                    home
                } else {
                    "/".to_string()
                };
                self.inner.homes.lock().expect("homes").insert(key, home.clone());
                home
            }
        };
        Ok(format!("{}/{}", home.trim_end_matches('/'), path.trim_start_matches("./")))
    }

    fn domain(&self) -> Option<&str> {
        self.inner.config.domain.as_deref()
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok()).filter(|v| !v.trim().is_empty())
}

/// `49983-<id>.<domain>[:port]` -> `<id>`.
fn sandbox_from_host(host: &str, domain: &str) -> Option<String> {
    let host =
        host.rsplit_once(':')
            .map_or(host, |(h, p)| if p.chars().all(|c| c.is_ascii_digit()) { h } else { host });
    let label = host.strip_suffix(domain)?.strip_suffix('.')?;
    let (port, id) = label.split_once('-')?;
    (port.parse::<u16>().is_ok() && !id.is_empty() && !id.contains('.')).then(|| id.to_string())
}

/// The user envd calls act as: `Authorization: Basic base64("<user>:")` (the SDK's `user=`);
/// none: the sandbox's own user.
fn basic_user(headers: &HeaderMap) -> Result<Option<String>, Status> {
    use base64::Engine;
    let Some(value) = header(headers, "authorization") else { return Ok(None) };
    let Some(encoded) = value.strip_prefix("Basic ") else { return Ok(None) };
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|_| Status::invalid_argument("Authorization: Basic is not base64"))?;
    let text = String::from_utf8(decoded)
        .map_err(|_| Status::invalid_argument("Authorization: Basic is not UTF-8"))?;
    let user = text.split_once(':').map_or(text.as_str(), |(u, _)| u);
    Ok((!user.is_empty()).then(|| user.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_route_to_their_sandbox() {
        assert_eq!(sandbox_from_host("49983-abc123.sbx.test", "sbx.test").as_deref(), Some("abc123"));
        assert_eq!(sandbox_from_host("49983-abc123.sbx.test:8080", "sbx.test").as_deref(), Some("abc123"));
        assert_eq!(sandbox_from_host("49983-a-b.sbx.test", "sbx.test").as_deref(), Some("a-b"));
        assert_eq!(sandbox_from_host("abc.sbx.test", "sbx.test"), None);
        assert_eq!(sandbox_from_host("49983-abc.other.test", "sbx.test"), None);
        assert_eq!(sandbox_from_host("49983-a.b.sbx.test", "sbx.test"), None);
    }

    #[test]
    fn basic_auth_names_the_user() {
        let mut h = HeaderMap::new();
        assert_eq!(basic_user(&h).unwrap(), None);
        h.insert("authorization", "Basic cm9vdDo=".parse().unwrap()); // "root:"
        assert_eq!(basic_user(&h).unwrap().as_deref(), Some("root"));
        h.insert("authorization", "Basic !!".parse().unwrap());
        assert_eq!(basic_user(&h).unwrap_err().code(), tonic::Code::InvalidArgument);
    }
}
