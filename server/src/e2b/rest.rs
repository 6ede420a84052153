//! E2B's control plane (spec/openapi.yml's sandbox calls) over the gRPC handlers: `Create`,
//! `List`, `Status`, `Close`, `SetTimeout`, `Pause`, `Resume`, `Grant`, `Stats`.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandboxd_proto::v1 as pb;
use serde::Deserialize;
use serde_json::{json, Value};
use tonic::Status;

use super::errors;
use super::inproc::request;
use super::inproc::Caller;
use super::{E2bFront, ENVD_VERSION};

/// E2B's default sandbox lifetime when a create names none (seconds).
const DEFAULT_TIMEOUT_S: u64 = 15;
/// The deadline of a create through E2B: its SDK's default request timeout (30 s). A create the
/// host cannot start by then is answered 429 with `Retry-After` (the admission queue's
/// estimate) instead of leaving the SDK's own timer to end the request.
const CREATE_DEADLINE: &str = "30S";
/// What E2B calls the service that runs the sandbox.
const CLIENT_ID: &str = "sandboxd";

type Reply = Result<Response, Response>;

fn refuse(status: Status) -> Response {
    errors::rest(status)
}

use super::body::body;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NewSandbox {
    #[serde(rename = "templateID")]
    template_id: Option<String>,
    timeout: Option<u64>,
    metadata: Option<BTreeMap<String, String>>,
    env_vars: Option<BTreeMap<String, String>>,
    /// Accepted and ignored: every sandbox's envd is reached with its token (as E2B does now).
    #[allow(dead_code)]
    secure: Option<bool>,
    /// false: the sandbox gets no egress (`network_policy` deny-all). The SDK sends it in
    /// snake case, the one field of its body that is.
    #[serde(alias = "allow_internet_access")]
    allow_internet_access: Option<bool>,
    /// The per-sandbox firewall (network.rs).
    network: Option<super::network::Network>,
    /// `autoPause` and friends (lifecycle.rs).
    #[serde(flatten)]
    lifecycle: super::lifecycle::Lifecycle,
}

#[derive(Debug, Default, Deserialize)]
struct TimeoutBody {
    timeout: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
struct ForkBody {
    timeout: Option<u64>,
    count: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
struct RefreshBody {
    duration: Option<u64>,
}

fn seconds(field: &str, value: u64) -> Result<f64, Status> {
    if value == 0 {
        return Err(Status::invalid_argument(format!("`{field}` must be at least 1 second")));
    }
    Ok(value as f64)
}

/// `POST /sandboxes` and `POST /v2/sandboxes`: `Create` with the template's image.
pub async fn create(State(front): State<E2bFront>, headers: HeaderMap, bytes: axum::body::Bytes) -> Reply {
    let caller = front.api_caller(&headers).map_err(refuse)?;
    let new: NewSandbox = body(&bytes).map_err(refuse)?;
    let template = new.template_id.unwrap_or_else(|| "base".into());
    // A configured or built template, else one of the caller's snapshots (E2B creates from a
    // snapshot by naming it as the template).
    // Who it is, for the templates it built (its own records); the Create itself is refused by
    // the stack's gate when the key is wrong, as any gRPC caller's is (and counted so).
    let who = front.api_identity(&headers).ok();
    let resolved = super::templates::resolve(&front, who.as_ref(), &template);
    let (image, snapshot_id) = match &resolved {
        Some(resolved) => (resolved.image.clone(), None),
        None => match super::snapshots::snapshot_of_template(&front, &caller, &template).await {
            Ok(Some(snapshot)) => (String::new(), Some(snapshot)),
            Err(e) => return Err(refuse(e)),
            Ok(None) => {
                let known: Vec<&str> = front.inner.config.templates.keys().map(String::as_str).collect();
                return Err(refuse(Status::not_found(format!(
                    "template {template:?} not found; this server's templates (server.e2b.templates): {known:?}, \
                     one built with Template.build, or a snapshot id"
                ))));
            }
        },
    };
    let ttl = seconds("timeout", new.timeout.unwrap_or(DEFAULT_TIMEOUT_S)).map_err(refuse)?;
    let pauses = new.lifecycle.pauses().map_err(refuse)?;
    let firewall = match &new.network {
        Some(network) => super::network::policy(network).map_err(refuse)?,
        None => None,
    };
    let network_policy = match (new.allow_internet_access, firewall) {
        (Some(false), Some(mut policy)) => {
            policy.default_action = pb::EgressAction::Deny as i32;
            policy.rules.retain(|r| r.action == pb::EgressAction::Allow as i32);
            Some(policy)
        }
        (Some(false), None) => {
            Some(pb::NetworkPolicy { default_action: pb::EgressAction::Deny as i32, ..Default::default() })
        }
        (_, firewall) => firewall,
    };
    // A sandbox its timeout pauses gets the front-end timer's margin from the start: with the
    // bare timeout as its lease, a slow create's answer could reach `arm` after the lease ended
    // and the sweep removed it (E2B's test_auto_pause_without_auto_resume_requires_connect).
    let lease = if pauses { ttl + super::lifecycle::LEASE_MARGIN.as_secs_f64() } else { ttl };
    let spec = pb::SandboxSpec {
        image,
        ttl_s: Some(lease),
        env: new.env_vars.unwrap_or_default().into_iter().collect(),
        metadata: new.metadata.unwrap_or_default().into_iter().map(|(k, v)| (encode_key(&k), v)).collect(),
        network_policy,
        snapshot_id,
        ..Default::default()
    };
    let mut call = request(&caller, pb::CreateRequest { spec: Some(spec) });
    call.metadata_mut().insert("grpc-timeout", tonic::metadata::MetadataValue::from_static(CREATE_DEADLINE));
    // The caller's own name among its tenant's clients (the create queue's fairness), if given.
    if let Some(client) = headers
        .get(crate::service::CLIENT_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| tonic::metadata::MetadataValue::try_from(v).ok())
    {
        call.metadata_mut().insert(crate::service::CLIENT_HEADER, client);
    }
    let created = front.calls().create(call).await;
    let sandbox = created.map_err(refuse)?.into_inner().sandbox.unwrap_or_default();
    if let Some(resolved) = &resolved {
        if let Err(e) = super::templates::start(&front, &caller, &sandbox.sandbox_id, resolved).await {
            let close = request(&caller, pb::CloseRequest { sandbox_id: sandbox.sandbox_id });
            let _ = front.calls().close(close).await;
            return Err(refuse(e));
        }
    }
    if pauses {
        let after = Duration::from_secs_f64(ttl);
        super::lifecycle::arm(&front, &caller, &sandbox.sandbox_id, after).await.map_err(refuse)?;
    }
    let token = envd_token(&front, &caller, &sandbox.sandbox_id).await.map_err(refuse)?;
    let out = json!({
        "templateID": template,
        "sandboxID": sandbox.sandbox_id,
        "clientID": CLIENT_ID,
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": token,
        "domain": front.domain(),
    });
    Ok((StatusCode::CREATED, Json(out)).into_response())
}

/// envd's access token: a capability token of scope operate for this one sandbox (`Grant`),
/// never the caller's API key.
async fn envd_token(front: &E2bFront, caller: &Caller, sandbox_id: &str) -> Result<String, Status> {
    let grant = pb::GrantRequest {
        sandbox_id: sandbox_id.to_string(),
        scope: pb::TokenScope::Operate as i32,
        // As long as the owner token `Create` returns (Grant caps it at that).
        ttl_s: Some(crate::config::DEFAULT_OWNER_TOKEN_TTL.as_secs_f64()),
    };
    let token = front.calls().grant(request(caller, grant)).await?.into_inner().token;
    front.inner.signed_tokens.remember(sandbox_id, &token, |t| front.authenticates(t));
    Ok(token)
}

fn rfc3339(unix_ms: i64) -> String {
    let at = SystemTime::UNIX_EPOCH + Duration::from_millis(unix_ms.max(0) as u64);
    humantime::format_rfc3339_millis(at).to_string()
}

fn state_name(status: i32) -> &'static str {
    if is_paused(status) {
        "paused"
    } else {
        "running"
    }
}

/// E2B's paused: frozen (`Pause`) or hibernated (`Hibernate`, a pause on gVisor); `Resume`
/// wakes either.
fn is_paused(status: i32) -> bool {
    matches!(
        pb::SandboxStatus::try_from(status),
        Ok(pb::SandboxStatus::Paused) | Ok(pb::SandboxStatus::Hibernated)
    )
}

/// One sandbox as E2B lists and describes it.
fn listed(front: &E2bFront, info: &pb::SandboxInfo) -> Value {
    let sandbox = info.sandbox.clone().unwrap_or_default();
    let template = front
        .inner
        .config
        .templates
        .iter()
        .find(|(_, image)| **image == info.image)
        .map_or_else(|| info.image.clone(), |(name, _)| name.clone());
    let end = info.expires_at_unix_ms.unwrap_or(i64::MAX / 2);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    json!({
        "templateID": template,
        "alias": template,
        "sandboxID": sandbox.sandbox_id,
        "clientID": CLIENT_ID,
        "startedAt": rfc3339(info.created_at_unix_ms),
        "endAt": rfc3339(end.min(253_402_300_799_000)),
        "envdVersion": ENVD_VERSION,
        // sandboxd's sandboxes share the host unless the spec limits them; E2B's SDK needs
        // numbers: the host's CPUs, and 0 for "no limit" in MiB.
        "cpuCount": cpus,
        "memoryMB": 0,
        "diskSizeMB": 0,
        "state": state_name(info.status),
        "metadata": sandbox.metadata.iter().map(|(k, v)| (decode_key(k), v.clone())).collect::<BTreeMap<_, _>>(),
        "domain": front.domain(),
    })
}

/// Every sandbox the caller sees that carries `labels` and is in one of `statuses`.
async fn list_all(
    front: &E2bFront,
    caller: &Caller,
    labels: BTreeMap<String, String>,
    statuses: Vec<i32>,
) -> Result<Vec<pb::SandboxInfo>, Status> {
    let mut out = Vec::new();
    let mut page_token = String::new();
    loop {
        let req = pb::ListRequest {
            labels: labels.clone().into_iter().collect(),
            statuses: statuses.clone(),
            page_size: 1000,
            page_token,
        };
        let page = front.calls().list(request(caller, req)).await?.into_inner();
        out.extend(page.sandboxes);
        if page.next_page_token.is_empty() {
            return Ok(out);
        }
        page_token = page.next_page_token;
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    /// `k1=v1&k2=v2`, URL-encoded as one parameter.
    metadata: Option<String>,
    /// `running`, `paused`, or both comma-separated.
    state: Option<String>,
    limit: Option<usize>,
    #[serde(rename = "nextToken")]
    next_token: Option<String>,
}

fn parse_metadata(query: Option<&str>) -> Result<BTreeMap<String, String>, Status> {
    let mut labels = BTreeMap::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let decoded = percent_encoding::percent_decode_str(pair).decode_utf8_lossy().to_string();
        let (k, v) = decoded.split_once('=').ok_or_else(|| {
            Status::invalid_argument(format!("metadata filter {decoded:?} must be key=value"))
        })?;
        labels.insert(encode_key(k), v.to_string());
    }
    Ok(labels)
}

/// Prefix of a metadata key E2B allows and sandboxd's (Docker's label) rules do not.
const ENCODED_KEY: &str = "e2b.x.";

/// E2B's metadata keys are free-form; sandboxd's are Docker label keys. A key that is already
/// one is kept as is (gRPC clients see and filter it unchanged); any other is stored as
/// `e2b.x.<hex of its bytes>`, a label key, and read back as the original.
fn encode_key(key: &str) -> String {
    let valid = crate::core::metadata::validate_key("metadata", key).is_ok() && !key.starts_with(ENCODED_KEY);
    if valid {
        return key.to_string();
    }
    let hex: String = key.bytes().map(|b| format!("{b:02x}")).collect();
    format!("{ENCODED_KEY}{hex}")
}

fn decode_key(key: &str) -> String {
    let Some(hex) = key.strip_prefix(ENCODED_KEY) else { return key.to_string() };
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| hex.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect();
    bytes.and_then(|b| String::from_utf8(b).ok()).unwrap_or_else(|| key.to_string())
}

fn parse_states(query: Option<&str>) -> Result<Vec<i32>, Status> {
    let mut out = Vec::new();
    for s in query.unwrap_or("").split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match s {
            "running" => out.push(pb::SandboxStatus::Running as i32),
            // Hibernated is E2B's paused too (a pause on a runtime that checkpoints).
            "paused" => out.extend([pb::SandboxStatus::Paused as i32, pb::SandboxStatus::Hibernated as i32]),
            other => {
                return Err(Status::invalid_argument(format!("state {other:?}: allowed are running, paused")))
            }
        }
    }
    if out.is_empty() {
        out = vec![
            pb::SandboxStatus::Running as i32,
            pb::SandboxStatus::Paused as i32,
            pb::SandboxStatus::Hibernated as i32,
        ];
    }
    Ok(out)
}

async fn list(front: E2bFront, headers: HeaderMap, query: ListQuery, paged: bool) -> Reply {
    let caller = front.api_caller(&headers).map_err(refuse)?;
    let labels = parse_metadata(query.metadata.as_deref()).map_err(refuse)?;
    let states = parse_states(query.state.as_deref()).map_err(refuse)?;
    let all = list_all(&front, &caller, labels, states).await.map_err(refuse)?;
    let start = match &query.next_token {
        Some(t) if !t.is_empty() => t.parse::<usize>().map_err(|_| {
            refuse(Status::invalid_argument(format!("nextToken {t:?} is not one this server gave")))
        })?,
        _ => 0,
    };
    let limit = if paged { query.limit.unwrap_or(100).clamp(1, 1000) } else { usize::MAX };
    let page: Vec<Value> = all.iter().skip(start).take(limit).map(|i| listed(&front, i)).collect();
    let mut response = Json(page).into_response();
    if paged && start.saturating_add(limit) < all.len() {
        let next = HeaderValue::from_str(&(start + limit).to_string()).expect("digits");
        response.headers_mut().insert("x-next-token", next);
    }
    Ok(response)
}

/// `GET /v2/sandboxes`: paged by `limit` / `nextToken` (`X-Next-Token` names the next page).
pub async fn list_v2(
    State(front): State<E2bFront>,
    headers: HeaderMap,
    Query(query): Query<ListQuery>,
) -> Reply {
    list(front, headers, query, true).await
}

/// `GET /sandboxes`: the running sandboxes, unpaged.
pub async fn list_v1(
    State(front): State<E2bFront>,
    headers: HeaderMap,
    Query(mut query): Query<ListQuery>,
) -> Reply {
    query.state.get_or_insert_with(|| "running".into());
    list(front, headers, query, false).await
}

/// The sandbox as the caller sees it: `Status` first (authorization; another tenant's is 404).
async fn find(front: &E2bFront, caller: &Caller, id: &str) -> Result<pb::SandboxInfo, Status> {
    front.status(caller, id).await?;
    let all = list_all(front, caller, BTreeMap::new(), vec![]).await?;
    all.into_iter()
        .find(|i| i.sandbox.as_ref().is_some_and(|s| s.sandbox_id == id))
        .ok_or_else(|| Status::not_found(format!("sandbox {id:?} not found")))
}

/// `GET /sandboxes/{id}`.
pub async fn info(State(front): State<E2bFront>, headers: HeaderMap, Path(id): Path<String>) -> Reply {
    let caller = front.api_caller(&headers).map_err(refuse)?;
    let info = find(&front, &caller, &id).await.map_err(refuse)?;
    Ok(Json(listed(&front, &info)).into_response())
}

/// `DELETE /sandboxes/{id}`: `Close`.
pub async fn kill(State(front): State<E2bFront>, headers: HeaderMap, Path(id): Path<String>) -> Reply {
    let caller = front.api_caller(&headers).map_err(refuse)?;
    // Close of an unknown id succeeds in sandboxd (idempotent); E2B answers 404, which the
    // SDK's `kill` turns into `False`.
    front.status(&caller, &id).await.map_err(refuse)?;
    front
        .calls()
        .close(request(&caller, pb::CloseRequest { sandbox_id: id.clone() }))
        .await
        .map_err(refuse)?;
    super::owners::forget(&front, &id);
    super::lifecycle::forget(&front, &id);
    front.inner.signed_tokens.forget(&id);
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn set_ttl(front: &E2bFront, caller: &Caller, id: &str, ttl: f64) -> Result<(), Status> {
    let set = pb::SetTimeoutRequest { sandbox_id: id.into(), ttl_s: ttl };
    front.calls().set_timeout(request(caller, set)).await?;
    Ok(())
}

/// `POST /sandboxes/{id}/timeout`: `SetTimeout`.
pub async fn set_timeout(
    State(front): State<E2bFront>,
    headers: HeaderMap,
    Path(id): Path<String>,
    bytes: axum::body::Bytes,
) -> Reply {
    let caller = front.api_caller(&headers).map_err(refuse)?;
    let req: TimeoutBody = body(&bytes).map_err(refuse)?;
    let timeout = req.timeout.ok_or_else(|| refuse(Status::invalid_argument("`timeout` is required")))?;
    if super::lifecycle::pauses(&front, &id) {
        // Its timeout pauses it: the timer moves (0: now).
        let after = Duration::from_secs(timeout);
        super::lifecycle::arm(&front, &caller, &id, after).await.map_err(refuse)?;
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    set_ttl(&front, &caller, &id, seconds("timeout", timeout).map_err(refuse)?).await.map_err(refuse)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /sandboxes/{id}/refreshes`: keep it alive `duration` seconds more from now.
pub async fn refresh(
    State(front): State<E2bFront>,
    headers: HeaderMap,
    Path(id): Path<String>,
    bytes: axum::body::Bytes,
) -> Reply {
    let caller = front.api_caller(&headers).map_err(refuse)?;
    let req: RefreshBody = body(&bytes).map_err(refuse)?;
    if super::lifecycle::pauses(&front, &id) {
        let after = Duration::from_secs(req.duration.unwrap_or(60).max(1));
        super::lifecycle::arm(&front, &caller, &id, after).await.map_err(refuse)?;
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    set_ttl(&front, &caller, &id, seconds("duration", req.duration.unwrap_or(60)).map_err(refuse)?)
        .await
        .map_err(refuse)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /sandboxes/{id}/pause`: `Pause` (409 when already paused, as E2B).
pub async fn pause(State(front): State<E2bFront>, headers: HeaderMap, Path(id): Path<String>) -> Reply {
    let caller = front.api_caller(&headers).map_err(refuse)?;
    let status = front.status(&caller, &id).await.map_err(refuse)?;
    if is_paused(status.status) {
        return Err(refuse(Status::already_exists(format!("sandbox {id:?} is already paused"))));
    }
    front.pause_sandbox(&caller, &id, &status).await.map_err(refuse)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `Resume` if paused, then the lease, then the sandbox as `POST /sandboxes` returns it.
async fn resume_and_describe(front: &E2bFront, caller: &Caller, id: &str, timeout: Option<u64>) -> Reply {
    let status = front.status(caller, id).await.map_err(refuse)?.status;
    let was_paused = is_paused(status);
    if was_paused {
        let resume = pb::ResumeRequest { sandbox_id: id.into() };
        front.calls().resume(request(caller, resume)).await.map_err(refuse)?;
    }
    if super::lifecycle::pauses(front, id) {
        // Resumed (or running): its next pause is a timeout from now.
        let after = Duration::from_secs(timeout.unwrap_or(DEFAULT_TIMEOUT_S).max(1));
        super::lifecycle::arm(front, caller, id, after).await.map_err(refuse)?;
    }
    let mut info = find(front, caller, id).await.map_err(refuse)?;
    if let Some(t) = timeout.filter(|_| !super::lifecycle::pauses(front, id)) {
        // E2B's connect extends a sandbox's life, never shortens it.
        let ttl = seconds("timeout", t).map_err(refuse)?;
        let now_ms =
            SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_millis() as i64;
        let wanted = now_ms + (ttl * 1000.0) as i64;
        if info.expires_at_unix_ms.is_some_and(|end| end < wanted) {
            set_ttl(front, caller, id, ttl).await.map_err(refuse)?;
            info = find(front, caller, id).await.map_err(refuse)?;
        }
    }
    let token = envd_token(front, caller, id).await.map_err(refuse)?;
    let mut out = listed(front, &info);
    out["envdAccessToken"] = json!(token);
    let code = if was_paused { StatusCode::CREATED } else { StatusCode::OK };
    Ok((code, Json(out)).into_response())
}

/// `POST /sandboxes/{id}/resume`.
pub async fn resume(
    State(front): State<E2bFront>,
    headers: HeaderMap,
    Path(id): Path<String>,
    bytes: axum::body::Bytes,
) -> Reply {
    let caller = front.api_caller(&headers).map_err(refuse)?;
    let req: TimeoutBody = body(&bytes).map_err(refuse)?;
    resume_and_describe(&front, &caller, &id, req.timeout).await.map(|r| {
        let (mut parts, body) = r.into_parts();
        parts.status = StatusCode::CREATED;
        Response::from_parts(parts, body)
    })
}

/// `POST /sandboxes/{id}/connect` and `/v2/…/connect`: resume when paused, set the timeout.
pub async fn connect(
    State(front): State<E2bFront>,
    headers: HeaderMap,
    Path(id): Path<String>,
    bytes: axum::body::Bytes,
) -> Reply {
    let caller = front.api_caller(&headers).map_err(refuse)?;
    let req: TimeoutBody = body(&bytes).map_err(refuse)?;
    resume_and_describe(&front, &caller, &id, req.timeout).await
}

/// `POST /sandboxes/{id}/fork`: `Fork`, then each child's lease and token. On a runtime that
/// checkpoints the fork is live (each child restored from a live snapshot, its processes and
/// memory going on), as E2B's fork carries a sandbox's memory; elsewhere the children start
/// from a snapshot of the sandbox's filesystem.
pub async fn fork(
    State(front): State<E2bFront>,
    headers: HeaderMap,
    Path(id): Path<String>,
    bytes: axum::body::Bytes,
) -> Reply {
    let caller = front.api_caller(&headers).map_err(refuse)?;
    let req: ForkBody = body(&bytes).map_err(refuse)?;
    let ttl = req.timeout.map(|t| seconds("timeout", t)).transpose().map_err(refuse)?;
    let parent = find(&front, &caller, &id).await.map_err(refuse)?;
    let live = front.checkpoints(&parent.runtime);
    let template = listed(&front, &parent)["templateID"].clone();
    let fork = pb::ForkRequest {
        sandbox_id: id,
        count: req.count.unwrap_or(1),
        labels: Default::default(),
        live,
        ..Default::default()
    };
    let forked = front.calls().fork(request(&caller, fork)).await.map_err(refuse)?.into_inner();
    let mut out = Vec::new();
    for child in forked.sandboxes {
        let made = async {
            if let Some(ttl) = ttl {
                set_ttl(&front, &caller, &child.sandbox_id, ttl).await?;
            }
            envd_token(&front, &caller, &child.sandbox_id).await
        }
        .await;
        out.push(match made {
            Ok(token) => json!({ "sandbox": {
                "templateID": template,
                "sandboxID": child.sandbox_id,
                "clientID": CLIENT_ID,
                "envdVersion": ENVD_VERSION,
                "envdAccessToken": token,
                "domain": front.domain(),
            }}),
            Err(e) => {
                json!({ "error": { "code": errors::http_status(e.code()).as_u16(), "message": e.message() } })
            }
        });
    }
    Ok((StatusCode::CREATED, Json(out)).into_response())
}

#[derive(Debug, Default, Deserialize)]
pub struct MetricsQuery {
    /// Unix seconds: the range asked for (E2B's `start` / `end`).
    start: Option<i64>,
    end: Option<i64>,
}

/// E2B's collection bucket: a sample taken now belongs to a range ending up to this long ago.
const METRICS_BUCKET_S: i64 = 5;

/// Whether a sample taken at `now_s` of a sandbox started at `started_s` answers the range.
fn sample_in_range(query: &MetricsQuery, started_s: i64, now_s: i64) -> bool {
    let end = query.end.unwrap_or(now_s);
    let start = query.start.unwrap_or(i64::MIN);
    end >= started_s.saturating_sub(METRICS_BUCKET_S) && end >= now_s - METRICS_BUCKET_S && start <= now_s
}

/// `GET /sandboxes/{id}/metrics?start=&end=`: one sample now, from `Stats`, when the range
/// reaches now (a range that ended before the sandbox started, or a bucket ago, has none).
pub async fn metrics(
    State(front): State<E2bFront>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(range): Query<MetricsQuery>,
) -> Reply {
    let caller = front.api_caller(&headers).map_err(refuse)?;
    if let (Some(start), Some(end)) = (range.start, range.end) {
        if start > end {
            return Err(refuse(Status::invalid_argument(format!("start {start} is after end {end}"))));
        }
    }
    let info = find(&front, &caller, &id).await.map_err(refuse)?;
    let now_s = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs() as i64;
    if !sample_in_range(&range, info.created_at_unix_ms / 1000, now_s) {
        return Ok(Json(Vec::<Value>::new()).into_response());
    }
    let stats = front
        .calls()
        .stats(request(&caller, pb::StatsRequest { sandbox_id: id }))
        .await
        .map_err(refuse)?
        .into_inner();
    let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let cpus = if stats.cpu_limit > 0.0 {
        stats.cpu_limit.ceil() as usize
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    };
    // One sample has no interval to turn cumulative CPU time into a percentage: E2B's
    // `cpuUsedPct` is reported as 0 here (Stats' `cpu_usage_ns` is the cumulative figure).
    let sample = json!({
        "timestamp": rfc3339(now.as_millis() as i64),
        "timestampUnix": now.as_secs(),
        "cpuCount": cpus,
        "cpuUsedPct": 0.0,
        "memUsed": stats.memory_usage_bytes,
        "memTotal": stats.memory_limit_bytes,
        "memCache": 0,
        "diskUsed": 0,
        "diskTotal": 0,
    });
    Ok(Json(vec![sample]).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e2b_metadata_keys_round_trip_through_label_keys() {
        for key in ["sandbox_test_id", "Upper", "a b", "e2b.x.61", "ok-key.1", "ü"] {
            let stored = encode_key(key);
            assert!(crate::core::metadata::validate_key("m", &stored).is_ok(), "{stored}");
            assert_eq!(decode_key(&stored), key);
        }
        assert_eq!(encode_key("plain.key"), "plain.key");
    }

    #[test]
    fn a_metrics_sample_now_answers_only_ranges_that_reach_now() {
        let q = |start, end| MetricsQuery { start, end };
        assert!(sample_in_range(&q(None, None), 1_000, 1_010));
        assert!(sample_in_range(&q(Some(990), Some(1_009)), 1_000, 1_010));
        assert!(!sample_in_range(&q(Some(-2_600), Some(-800)), 1_000, 1_010), "before the sandbox");
        assert!(!sample_in_range(&q(Some(1_000), Some(1_002)), 1_000, 1_010), "a bucket ago");
        assert!(!sample_in_range(&q(Some(1_020), None), 1_000, 1_010), "in the future");
    }

    #[test]
    fn metadata_filters_and_states_parse_or_name_the_fault() {
        let labels = parse_metadata(Some("a%3D1&b=2")).unwrap();
        assert_eq!(labels["a"], "1");
        assert_eq!(labels["b"], "2");
        assert_eq!(parse_metadata(Some("novalue")).unwrap_err().code(), tonic::Code::InvalidArgument);
        assert_eq!(
            parse_states(Some("paused")).unwrap(),
            vec![pb::SandboxStatus::Paused as i32, pb::SandboxStatus::Hibernated as i32]
        );
        assert_eq!(state_name(pb::SandboxStatus::Hibernated as i32), "paused");
        assert_eq!(parse_states(None).unwrap().len(), 3, "running, paused and hibernated");
        assert!(parse_states(Some("dead")).unwrap_err().message().contains("running, paused"));
    }
}
