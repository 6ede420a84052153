//! The E2B-compatible endpoint (`server.e2b`): a second front-end over the same core as the
//! gRPC service, so that the `e2b` SDK works unchanged against sandboxd. Every handler here
//! turns an E2B request into the `sandbox.v1` request the gRPC handler takes and calls that
//! handler in-process (`SandboxService` on [`SandboxApi`], the caller's [`Principal`] in the
//! request's extensions, as the gRPC gate puts it): authorization, tenancy, quotas, policy and
//! every sandbox operation are the gRPC service's own; nothing is implemented twice.
//!
//! One listener serves both halves, told apart by path:
//! - control plane (rest.rs): `/sandboxes…`, `/v2/sandboxes…`, authenticated by `X-API-Key`
//!   (a tenant key, the operator key, or nothing on a server without keys);
//! - envd (process.rs, filesystem.rs: Connect; files.rs: `/files`, `/health`), the sandbox
//!   named by the `E2b-Sandbox-Id` header or a `<port>-<sandbox id>.<domain>` host name,
//!   authenticated by `X-Access-Token` (the capability token `POST /sandboxes` returned).

mod connect;
pub(crate) mod errors;
mod files;
mod filesystem;
pub(crate) mod inproc;
mod process;
mod rest;

use std::sync::Arc;

use axum::http::HeaderMap;
use axum::routing::{get, post};
use axum::Router;
use tonic::Status;

use crate::auth::{AccessGate, Principal};
use crate::config::E2bSection;
use crate::service::SandboxApi;

/// The envd version reported to the SDK: the features it gates that sandboxd serves
/// (stdin, default user, octet-stream uploads), and none it does not (file metadata xattrs,
/// entry info in watch events).
pub const ENVD_VERSION: &str = "0.5.7";

/// What the handlers share.
#[derive(Clone)]
pub struct E2bFront {
    inner: Arc<Inner>,
}

struct Inner {
    api: SandboxApi,
    gate: AccessGate,
    config: E2bSection,
    /// The gRPC service's audit log: the calls this front-end makes are logged as its own are.
    audit: Option<Arc<crate::audit::AuditLog>>,
    processes: process::Table,
    watchers: filesystem::Watchers,
    /// `$HOME` by (sandbox, user): E2B resolves relative paths against it.
    homes: std::sync::Mutex<std::collections::HashMap<(String, String), String>>,
}

impl E2bFront {
    pub fn new(
        api: SandboxApi,
        gate: AccessGate,
        config: E2bSection,
        audit: Option<Arc<crate::audit::AuditLog>>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                api,
                gate,
                config,
                audit,
                processes: process::Table::default(),
                watchers: filesystem::Watchers::default(),
                homes: Default::default(),
            }),
        }
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
            .route("/health", get(files::health))
            .route("/files", get(files::read).post(files::write))
            .route("/process.Process/{method}", post(process::call))
            .route("/filesystem.Filesystem/{method}", post(filesystem::call))
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
        axum::serve(listener, self.router()).with_graceful_shutdown(stopped).await
    }

    fn api(&self) -> &SandboxApi {
        &self.inner.api
    }

    /// Sandbox `id` as `principal` sees it, by the gRPC `Status` handler: the authorization a
    /// call on a sandbox starts with (another tenant's sandbox is `NotFound`).
    async fn status(
        &self,
        principal: &Principal,
        id: &str,
    ) -> Result<sandboxd_proto::v1::StatusResponse, Status> {
        use sandboxd_proto::v1::sandbox_service_server::SandboxService;
        let status = sandboxd_proto::v1::StatusRequest { sandbox_id: id.to_string() };
        Ok(self.api().status(inproc::request(principal, status)).await?.into_inner())
    }

    /// `call`, the in-process handler of RPC `method`, audited as the gRPC service audits it
    /// (every mutating call this front-end makes goes through here).
    async fn audited<T>(
        &self,
        principal: &Principal,
        method: &str,
        call: impl std::future::Future<Output = Result<T, Status>>,
    ) -> Result<T, Status> {
        crate::audit::in_process(self.inner.audit.as_ref(), principal, method, call).await
    }

    /// The caller by one of its credentials, through the gRPC service's own gate.
    fn principal(&self, credential: Option<&str>) -> Result<Principal, Status> {
        self.inner.gate.principal_of_credential(credential)
    }

    /// The control plane's caller: `X-API-Key`.
    fn api_caller(&self, headers: &HeaderMap) -> Result<Principal, Status> {
        self.principal(header(headers, "x-api-key"))
    }

    /// envd's caller: `X-Access-Token` (the sandbox's capability token), or an `X-API-Key`.
    fn envd_caller(&self, headers: &HeaderMap) -> Result<Principal, Status> {
        self.principal(header(headers, "x-access-token").or_else(|| header(headers, "x-api-key")))
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
        principal: &Principal,
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
                use sandboxd_proto::v1::sandbox_service_server::SandboxService;
                let exec = sandboxd_proto::v1::ExecRequest {
                    sandbox_id: sandbox_id.to_string(),
                    command: "printf %s \"$HOME\"".into(),
                    user: (!user.is_empty()).then(|| user.to_string()),
                    timeout_s: Some(10.0),
                    ..Default::default()
                };
                let out = self
                    .audited(principal, "Exec", self.api().exec(inproc::request(principal, exec)))
                    .await?
                    .into_inner();
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
