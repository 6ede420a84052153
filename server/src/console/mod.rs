//! The web console (`server.console`): a small page served by sandboxd, off unless
//! `server.console.listen` is set. A third front-end beside gRPC and E2B's: its JSON reads, its
//! actions and its WebSockets make gRPC calls through the served stack in-process (as
//! `crate::e2b` does: `service/calls.rs`, `e2b/inproc.rs`) with the caller's credential; so the
//! gate says who it is (a tenant sees its own sandboxes only, the operator all of them), and the
//! audit log, the cluster relay (a terminal on another node's sandbox), metrics and traces are
//! the gRPC API's.
//!
//! - `GET /` and `/assets/…`: the page, its script and style, and xterm.js (vendored from
//!   Debian's `node-xterm`/`libjs-xterm` by `scripts/bundle-xterm.py`); all in the binary.
//! - `GET /api/…` (api.rs): whoami, sandboxes (List + the node each runs on), one sandbox's
//!   status, usage, processes, terminal sessions and logs, the pools; `POST
//!   /api/sandboxes/{id}/close`. Credential: `Authorization: Bearer <tenant key | token>`.
//! - `GET /ws/watch` (socket.rs): the live events of `Watch`, as JSON.
//! - `GET /ws/terminal` (socket.rs): a terminal on a sandbox, a new session or an attach to one
//!   by id, over the `Pty` RPC. A browser cannot set headers on a WebSocket, so the credential is
//!   the first message (never the URL, which logs and histories keep).

mod api;
mod socket;

use std::sync::Arc;

use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tonic::Status;

use crate::auth::{AccessGate, Principal};
use crate::service::calls::{Caller, Calls};
use crate::service::forward::Cluster;

/// What the handlers share.
#[derive(Clone)]
pub struct ConsoleFront {
    inner: Arc<Inner>,
    /// Where a sandbox runs, in cluster mode (`None`: every sandbox is this host's).
    cluster: Option<Arc<dyn Cluster>>,
}

struct Inner {
    calls: Calls,
    /// Who a credential is, for `whoami` (every call is checked by the gate in the stack).
    gate: AccessGate,
    /// This host's name (the node column on a single host).
    hostname: String,
}

impl ConsoleFront {
    pub fn new(calls: Calls, gate: AccessGate) -> Self {
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".into());
        Self { inner: Arc::new(Inner { calls, gate, hostname }), cluster: None }
    }

    /// The same console, naming each sandbox's node through `cluster`.
    pub fn with_cluster(mut self, cluster: Option<Arc<dyn Cluster>>) -> Self {
        self.cluster = cluster;
        self
    }

    pub fn router(&self) -> Router {
        Router::new()
            .route("/", get(|| async { asset("text/html; charset=utf-8", INDEX) }))
            .route("/assets/console.js", get(|| async { asset("text/javascript", CONSOLE_JS) }))
            .route("/assets/console.css", get(|| async { asset("text/css", CONSOLE_CSS) }))
            .route("/assets/xterm.js", get(|| async { asset("text/javascript", XTERM_JS) }))
            .route("/assets/xterm.css", get(|| async { asset("text/css", XTERM_CSS) }))
            .route("/api/whoami", get(api::whoami))
            .route("/api/sandboxes", get(api::sandboxes))
            .route("/api/sandboxes/{id}", get(api::sandbox))
            .route("/api/sandboxes/{id}/close", post(api::close))
            .route("/api/pools", get(api::pools))
            .route("/ws/watch", get(socket::watch))
            .route("/ws/terminal", get(socket::terminal))
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

    /// The gRPC API through the served stack (a clone per call: its methods take `&mut`).
    fn calls(&self) -> Calls {
        self.inner.calls.clone()
    }

    /// Who `credential` is (none: what a server without keys allows), by the gRPC gate.
    fn principal(&self, credential: Option<&str>) -> Result<Principal, Status> {
        self.inner.gate.principal_of_credential(credential.map(str::trim).filter(|v| !v.is_empty()))
    }

    /// The credential of an HTTP request: `Authorization: Bearer …`.
    fn credential(headers: &HeaderMap) -> Result<Option<&str>, Status> {
        match headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
            Some(v) => Ok(Some(v.strip_prefix("Bearer ").ok_or_else(|| {
                Status::unauthenticated("Authorization: expected `Bearer <key or token>`")
            })?)),
            None => Ok(None),
        }
    }

    /// The caller of an HTTP request, for its calls.
    fn caller(&self, headers: &HeaderMap) -> Result<Caller, Status> {
        Ok(Caller::new(Self::credential(headers)?)?.traced(headers))
    }

    /// The node `sandbox_id` runs on: this host, or the cluster's answer.
    async fn node_of(&self, sandbox_id: &str) -> String {
        match &self.cluster {
            None => self.inner.hostname.clone(),
            Some(cluster) => match cluster.locate(sandbox_id).await {
                Ok(Some(place)) => place.hostname,
                Ok(None) => String::new(),
                Err(e) => {
                    tracing::debug!(%sandbox_id, error = %e, "console: locating a sandbox failed");
                    String::new()
                }
            },
        }
    }
}

const INDEX: &str = include_str!("assets/index.html");
const CONSOLE_JS: &str = include_str!("assets/console.js");
const CONSOLE_CSS: &str = include_str!("assets/console.css");
const XTERM_JS: &str = include_str!("assets/xterm/xterm.js");
const XTERM_CSS: &str = include_str!("assets/xterm/xterm.css");

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            // Nothing from elsewhere: the page works without internet and loads nothing foreign.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; connect-src 'self' ws: wss:; style-src 'self' 'unsafe-inline'",
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::X_FRAME_OPTIONS, "DENY"),
        ],
        body,
    )
        .into_response()
}

/// A gRPC status as the console's JSON error: `{"error": message, "code": name}` with the HTTP
/// status the E2B front-end gives the same code.
fn error(status: Status) -> Response {
    let code = crate::e2b::errors::http_status(status.code());
    let body = serde_json::json!({ "error": status.message(), "code": format!("{:?}", status.code()) });
    (code, axum::Json(body)).into_response()
}
