//! E2B's control plane (spec/openapi.yml's sandbox calls) over the gRPC handlers: `Create`,
//! `List`, `Status`, `Close`, `SetTimeout`, `Pause`, `Resume`, `Grant`, `Stats`.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandboxd_proto::v1 as pb;
use sandboxd_proto::v1::sandbox_service_server::SandboxService;
use serde::Deserialize;
use serde_json::{json, Value};
use tonic::Status;

use super::errors;
use super::inproc::request;
use super::{E2bFront, ENVD_VERSION};
use crate::auth::Principal;

/// E2B's default sandbox lifetime when a create names none (seconds).
const DEFAULT_TIMEOUT_S: u64 = 15;
/// What E2B calls the service that runs the sandbox.
const CLIENT_ID: &str = "sandboxd";

type Reply = Result<Response, Response>;

fn refuse(status: Status) -> Response {
    errors::rest(status)
}

/// The JSON body, or 400 naming what is wrong with it.
fn body<T: serde::de::DeserializeOwned + Default>(bytes: &[u8]) -> Result<T, Status> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        Status::invalid_argument(format!("request body field `{path}`: {}", e.inner()))
    })
}

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
    /// false: the sandbox gets no egress (`network_policy` deny-all).
    allow_internet_access: Option<bool>,
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
    let principal = front.api_caller(&headers).map_err(refuse)?;
    let new: NewSandbox = body(&bytes).map_err(refuse)?;
    let template = new.template_id.unwrap_or_else(|| "base".into());
    let image = front.inner.config.templates.get(&template).cloned().ok_or_else(|| {
        let known: Vec<&str> = front.inner.config.templates.keys().map(String::as_str).collect();
        refuse(Status::not_found(format!(
            "template {template:?} not found; this server's templates (server.e2b.templates): {known:?}"
        )))
    })?;
    let ttl = seconds("timeout", new.timeout.unwrap_or(DEFAULT_TIMEOUT_S)).map_err(refuse)?;
    let network_policy = match new.allow_internet_access {
        Some(false) => {
            Some(pb::NetworkPolicy { default_action: pb::EgressAction::Deny as i32, ..Default::default() })
        }
        _ => None,
    };
    let spec = pb::SandboxSpec {
        image,
        ttl_s: Some(ttl),
        env: new.env_vars.unwrap_or_default().into_iter().collect(),
        metadata: new.metadata.unwrap_or_default().into_iter().map(|(k, v)| (encode_key(&k), v)).collect(),
        network_policy,
        ..Default::default()
    };
    let created = front
        .audited(
            &principal,
            "Create",
            front.api().create(request(&principal, pb::CreateRequest { spec: Some(spec) })),
        )
        .await;
    let sandbox = created.map_err(refuse)?.into_inner().sandbox.unwrap_or_default();
    let token = envd_token(&front, &principal, &sandbox.sandbox_id).await.map_err(refuse)?;
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
async fn envd_token(front: &E2bFront, principal: &Principal, sandbox_id: &str) -> Result<String, Status> {
    let grant = pb::GrantRequest {
        sandbox_id: sandbox_id.to_string(),
        scope: pb::TokenScope::Operate as i32,
        // As long as the owner token `Create` returns (Grant caps it at that).
        ttl_s: Some(crate::config::DEFAULT_OWNER_TOKEN_TTL.as_secs_f64()),
    };
    Ok(front
        .audited(principal, "Grant", front.api().grant(request(principal, grant)))
        .await?
        .into_inner()
        .token)
}

fn rfc3339(unix_ms: i64) -> String {
    let at = SystemTime::UNIX_EPOCH + Duration::from_millis(unix_ms.max(0) as u64);
    humantime::format_rfc3339_millis(at).to_string()
}

fn state_name(status: i32) -> &'static str {
    match pb::SandboxStatus::try_from(status) {
        Ok(pb::SandboxStatus::Paused) => "paused",
        _ => "running",
    }
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
    principal: &Principal,
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
        let page = front.api().list(request(principal, req)).await?.into_inner();
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
        out.push(match s {
            "running" => pb::SandboxStatus::Running as i32,
            "paused" => pb::SandboxStatus::Paused as i32,
            other => {
                return Err(Status::invalid_argument(format!("state {other:?}: allowed are running, paused")))
            }
        });
    }
    if out.is_empty() {
        out = vec![pb::SandboxStatus::Running as i32, pb::SandboxStatus::Paused as i32];
    }
    Ok(out)
}

async fn list(front: E2bFront, headers: HeaderMap, query: ListQuery, paged: bool) -> Reply {
    let principal = front.api_caller(&headers).map_err(refuse)?;
    let labels = parse_metadata(query.metadata.as_deref()).map_err(refuse)?;
    let states = parse_states(query.state.as_deref()).map_err(refuse)?;
    let all = list_all(&front, &principal, labels, states).await.map_err(refuse)?;
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
async fn find(front: &E2bFront, principal: &Principal, id: &str) -> Result<pb::SandboxInfo, Status> {
    front.status(principal, id).await?;
    let all = list_all(front, principal, BTreeMap::new(), vec![]).await?;
    all.into_iter()
        .find(|i| i.sandbox.as_ref().is_some_and(|s| s.sandbox_id == id))
        .ok_or_else(|| Status::not_found(format!("sandbox {id:?} not found")))
}

/// `GET /sandboxes/{id}`.
pub async fn info(State(front): State<E2bFront>, headers: HeaderMap, Path(id): Path<String>) -> Reply {
    let principal = front.api_caller(&headers).map_err(refuse)?;
    let info = find(&front, &principal, &id).await.map_err(refuse)?;
    Ok(Json(listed(&front, &info)).into_response())
}

/// `DELETE /sandboxes/{id}`: `Close`.
pub async fn kill(State(front): State<E2bFront>, headers: HeaderMap, Path(id): Path<String>) -> Reply {
    let principal = front.api_caller(&headers).map_err(refuse)?;
    // Close of an unknown id succeeds in sandboxd (idempotent); E2B answers 404, which the
    // SDK's `kill` turns into `False`.
    front.status(&principal, &id).await.map_err(refuse)?;
    front
        .audited(
            &principal,
            "Close",
            front.api().close(request(&principal, pb::CloseRequest { sandbox_id: id })),
        )
        .await
        .map_err(refuse)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn set_ttl(front: &E2bFront, principal: &Principal, id: &str, ttl: f64) -> Result<(), Status> {
    let set = front
        .api()
        .set_timeout(request(principal, pb::SetTimeoutRequest { sandbox_id: id.into(), ttl_s: ttl }));
    front.audited(principal, "SetTimeout", set).await?;
    Ok(())
}

/// `POST /sandboxes/{id}/timeout`: `SetTimeout`.
pub async fn set_timeout(
    State(front): State<E2bFront>,
    headers: HeaderMap,
    Path(id): Path<String>,
    bytes: axum::body::Bytes,
) -> Reply {
    let principal = front.api_caller(&headers).map_err(refuse)?;
    let req: TimeoutBody = body(&bytes).map_err(refuse)?;
    let timeout = req.timeout.ok_or_else(|| refuse(Status::invalid_argument("`timeout` is required")))?;
    set_ttl(&front, &principal, &id, seconds("timeout", timeout).map_err(refuse)?).await.map_err(refuse)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /sandboxes/{id}/refreshes`: keep it alive `duration` seconds more from now.
pub async fn refresh(
    State(front): State<E2bFront>,
    headers: HeaderMap,
    Path(id): Path<String>,
    bytes: axum::body::Bytes,
) -> Reply {
    let principal = front.api_caller(&headers).map_err(refuse)?;
    let req: RefreshBody = body(&bytes).map_err(refuse)?;
    set_ttl(&front, &principal, &id, seconds("duration", req.duration.unwrap_or(60)).map_err(refuse)?)
        .await
        .map_err(refuse)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /sandboxes/{id}/pause`: `Pause` (409 when already paused, as E2B).
pub async fn pause(State(front): State<E2bFront>, headers: HeaderMap, Path(id): Path<String>) -> Reply {
    let principal = front.api_caller(&headers).map_err(refuse)?;
    let status = front.status(&principal, &id).await.map_err(refuse)?.status;
    if status == pb::SandboxStatus::Paused as i32 {
        return Err(refuse(Status::already_exists(format!("sandbox {id:?} is already paused"))));
    }
    front
        .audited(
            &principal,
            "Pause",
            front.api().pause(request(&principal, pb::PauseRequest { sandbox_id: id })),
        )
        .await
        .map_err(refuse)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `Resume` if paused, then the lease, then the sandbox as `POST /sandboxes` returns it.
async fn resume_and_describe(
    front: &E2bFront,
    principal: &Principal,
    id: &str,
    timeout: Option<u64>,
) -> Reply {
    let status = front.status(principal, id).await.map_err(refuse)?.status;
    let was_paused = status == pb::SandboxStatus::Paused as i32;
    if was_paused {
        let resume = front.api().resume(request(principal, pb::ResumeRequest { sandbox_id: id.into() }));
        front.audited(principal, "Resume", resume).await.map_err(refuse)?;
    }
    let mut info = find(front, principal, id).await.map_err(refuse)?;
    if let Some(t) = timeout {
        // E2B's connect extends a sandbox's life, never shortens it.
        let ttl = seconds("timeout", t).map_err(refuse)?;
        let now_ms =
            SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_millis() as i64;
        let wanted = now_ms + (ttl * 1000.0) as i64;
        if info.expires_at_unix_ms.is_some_and(|end| end < wanted) {
            set_ttl(front, principal, id, ttl).await.map_err(refuse)?;
            info = find(front, principal, id).await.map_err(refuse)?;
        }
    }
    let token = envd_token(front, principal, id).await.map_err(refuse)?;
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
    let principal = front.api_caller(&headers).map_err(refuse)?;
    let req: TimeoutBody = body(&bytes).map_err(refuse)?;
    resume_and_describe(&front, &principal, &id, req.timeout).await.map(|r| {
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
    let principal = front.api_caller(&headers).map_err(refuse)?;
    let req: TimeoutBody = body(&bytes).map_err(refuse)?;
    resume_and_describe(&front, &principal, &id, req.timeout).await
}

/// `POST /sandboxes/{id}/fork`: `Fork` (the children start from a snapshot of the running
/// sandbox's filesystem; its memory is not carried over), then each child's lease and token.
pub async fn fork(
    State(front): State<E2bFront>,
    headers: HeaderMap,
    Path(id): Path<String>,
    bytes: axum::body::Bytes,
) -> Reply {
    let principal = front.api_caller(&headers).map_err(refuse)?;
    let req: ForkBody = body(&bytes).map_err(refuse)?;
    let ttl = req.timeout.map(|t| seconds("timeout", t)).transpose().map_err(refuse)?;
    let parent = find(&front, &principal, &id).await.map_err(refuse)?;
    let template = listed(&front, &parent)["templateID"].clone();
    let fork = front.api().fork(request(
        &principal,
        pb::ForkRequest {
            sandbox_id: id,
            count: req.count.unwrap_or(1),
            labels: Default::default(),
            ..Default::default()
        },
    ));
    let forked = front.audited(&principal, "Fork", fork).await.map_err(refuse)?.into_inner();
    let mut out = Vec::new();
    for child in forked.sandboxes {
        let made = async {
            if let Some(ttl) = ttl {
                set_ttl(&front, &principal, &child.sandbox_id, ttl).await?;
            }
            envd_token(&front, &principal, &child.sandbox_id).await
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

/// `GET /sandboxes/{id}/metrics`: one sample now, from `Stats`.
pub async fn metrics(State(front): State<E2bFront>, headers: HeaderMap, Path(id): Path<String>) -> Reply {
    let principal = front.api_caller(&headers).map_err(refuse)?;
    let stats = front
        .api()
        .stats(request(&principal, pb::StatsRequest { sandbox_id: id }))
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
    fn metadata_filters_and_states_parse_or_name_the_fault() {
        let labels = parse_metadata(Some("a%3D1&b=2")).unwrap();
        assert_eq!(labels["a"], "1");
        assert_eq!(labels["b"], "2");
        assert_eq!(parse_metadata(Some("novalue")).unwrap_err().code(), tonic::Code::InvalidArgument);
        assert_eq!(parse_states(Some("paused")).unwrap(), vec![pb::SandboxStatus::Paused as i32]);
        assert_eq!(parse_states(None).unwrap().len(), 2);
        assert!(parse_states(Some("dead")).unwrap_err().message().contains("running, paused"));
    }
}
