//! The console's JSON reads and its one action, each a `sandbox.v1` call through the served stack
//! (`service/calls.rs`, in-process), as a gRPC client's would be.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;
use sandboxd_proto::v1 as pb;
use serde_json::{json, Value};
use tonic::Status;

use super::{error, ConsoleFront};
use crate::auth::Principal;
use crate::e2b::inproc::request;

/// Pages of `List` read for one answer (at most 1000 sandboxes each).
const MAX_PAGES: usize = 20;
/// Lines of a sandbox's log shown.
const LOG_LINES: u32 = 200;

fn reply(result: Result<Value, Status>) -> Response {
    match result {
        Ok(body) => Json(body).into_response(),
        Err(status) => error(status),
    }
}

/// Who the credential is: `{"kind": "operator" | "tenant" | "token", "name": …}`.
pub async fn whoami(State(front): State<ConsoleFront>, headers: HeaderMap) -> Response {
    let who = ConsoleFront::credential(&headers).and_then(|c| front.principal(c));
    reply(who.map(|p| match &p {
        Principal::Operator => json!({ "kind": "operator" }),
        Principal::Tenant(t) => json!({ "kind": "tenant", "name": t.name }),
        Principal::Token(_) => json!({ "kind": "token", "name": p.tenant() }),
    }))
}

pub fn status_name(status: i32) -> &'static str {
    match pb::SandboxStatus::try_from(status).unwrap_or(pb::SandboxStatus::Unspecified) {
        pb::SandboxStatus::Unspecified => "unspecified",
        pb::SandboxStatus::Starting => "starting",
        pb::SandboxStatus::Running => "running",
        pb::SandboxStatus::Stopped => "stopped",
        pb::SandboxStatus::Error => "error",
        pb::SandboxStatus::Unknown => "unknown",
        pb::SandboxStatus::Paused => "paused",
        pb::SandboxStatus::Hibernated => "hibernated",
    }
}

/// One sandbox as the page shows it.
pub fn sandbox_json(info: &pb::SandboxInfo, node: Option<&str>) -> Value {
    let reference = info.sandbox.clone().unwrap_or_default();
    let labels: std::collections::BTreeMap<_, _> = reference.metadata.into_iter().collect();
    json!({
        "id": reference.sandbox_id,
        "image": info.image,
        "status": status_name(info.status),
        "runtime": info.runtime,
        "labels": labels,
        "created_at_unix_ms": info.created_at_unix_ms,
        "expires_at_unix_ms": info.expires_at_unix_ms,
        "node": node,
    })
}

/// Every sandbox the caller may see (`List`, its pages followed), each with its node.
pub async fn sandboxes(State(front): State<ConsoleFront>, headers: HeaderMap) -> Response {
    let run = async {
        let caller = front.caller(&headers)?;
        let mut infos = Vec::new();
        let mut page_token = String::new();
        for _ in 0..MAX_PAGES {
            let list = pb::ListRequest { page_size: 1000, page_token, ..Default::default() };
            let page = front.calls().list(request(&caller, list)).await?.into_inner();
            infos.extend(page.sandboxes);
            if page.next_page_token.is_empty() {
                break;
            }
            page_token = page.next_page_token;
        }
        let nodes = futures_util::future::join_all(
            infos.iter().map(|i| front.node_of(i.sandbox.as_ref().map_or("", |s| s.sandbox_id.as_str()))),
        )
        .await;
        let list: Vec<Value> = infos.iter().zip(&nodes).map(|(i, n)| sandbox_json(i, Some(n))).collect();
        Ok(json!({ "sandboxes": list }))
    };
    reply(run.await)
}

/// A part of one sandbox's page: its value, or `{"error": …}` (a sandbox whose agent cannot list
/// processes still shows the rest).
fn part(result: Result<Value, Status>) -> Value {
    result.unwrap_or_else(|s| json!({ "error": s.message(), "code": format!("{:?}", s.code()) }))
}

/// One sandbox: status, usage, processes, terminal sessions and the tail of its log. Refused
/// as a whole when the caller may not read it (the `Status` call's answer).
pub async fn sandbox(
    State(front): State<ConsoleFront>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let run = async {
        let caller = front.caller(&headers)?;
        let by_id = || id.clone();
        let status = front
            .calls()
            .status(request(&caller, pb::StatusRequest { sandbox_id: by_id() }))
            .await?
            .into_inner();
        let usage = async {
            let u = front.calls().usage(request(&caller, pb::UsageRequest { sandbox_id: by_id() })).await?;
            let u = u.into_inner().usage.unwrap_or_default();
            Ok(json!({
                "wall_time_s": u.wall_time_s,
                "cpu_time_s": u.cpu_time_s,
                "peak_memory_bytes": u.peak_memory_bytes,
                "disk_write_bytes": u.disk_write_bytes,
                "network_rx_bytes": u.network_rx_bytes,
                "network_tx_bytes": u.network_tx_bytes,
                "processes_started": u.processes_started,
            }))
        };
        let processes = async {
            let list = front
                .calls()
                .list_processes(request(&caller, pb::ListProcessesRequest { sandbox_id: by_id() }))
                .await?
                .into_inner();
            let items: Vec<Value> = list
                .processes
                .iter()
                .map(|p| {
                    json!({
                        "process_id": p.process_id, "pid": p.pid, "command": p.command, "user": p.user,
                        "started_at_unix_ms": p.started_at_unix_ms, "running": p.running,
                        "exit_code": p.exit_code, "pty": p.pty, "attached": p.attached,
                        "retained_bytes": p.retained_bytes,
                    })
                })
                .collect();
            Ok(Value::Array(items))
        };
        let sessions = async {
            let list = front
                .calls()
                .list_pty_sessions(request(&caller, pb::ListPtySessionsRequest { sandbox_id: by_id() }))
                .await?
                .into_inner();
            let items: Vec<Value> = list
                .sessions
                .iter()
                .map(|s| {
                    json!({
                        "session_id": s.session_id, "command": s.command, "mode": s.mode,
                        "rows": s.rows, "cols": s.cols, "running": s.running, "exit_code": s.exit_code,
                        "attached": s.attached, "retained_bytes": s.retained_bytes,
                    })
                })
                .collect();
            Ok(Value::Array(items))
        };
        let logs = async {
            let logs = pb::LogsRequest { sandbox_id: by_id(), follow: false, tail_lines: Some(LOG_LINES) };
            let mut stream = front.calls().logs(request(&caller, logs)).await?.into_inner();
            let mut text = Vec::new();
            while let Some(item) = stream.next().await {
                match item?.output {
                    Some(pb::logs_response::Output::Stdout(b) | pb::logs_response::Output::Stderr(b)) => {
                        text.extend_from_slice(&b)
                    }
                    None => {}
                }
            }
            Ok(Value::String(String::from_utf8_lossy(&text).into_owned()))
        };
        let (usage, processes, sessions, logs) = tokio::join!(usage, processes, sessions, logs);
        Ok(json!({
            "id": id,
            "status": status_name(status.status),
            "runtime": status.runtime,
            "node": front.node_of(&id).await,
            "usage": part(usage),
            "processes": part(processes),
            "sessions": part(sessions),
            "logs": part(logs),
        }))
    };
    reply(run.await)
}

/// `Close`.
pub async fn close(
    State(front): State<ConsoleFront>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let run = async {
        let caller = front.caller(&headers)?;
        let close = pb::CloseRequest { sandbox_id: id.clone() };
        front.calls().close(request(&caller, close)).await?;
        Ok(json!({ "closed": id }))
    };
    reply(run.await)
}

/// The pools the caller sees and their fill.
pub async fn pools(State(front): State<ConsoleFront>, headers: HeaderMap) -> Response {
    let run = async {
        let caller = front.caller(&headers)?;
        let list = front.calls().list_pools(request(&caller, pb::ListPoolsRequest {})).await?.into_inner();
        let items: Vec<Value> = list
            .pools
            .iter()
            .map(|p| {
                json!({
                    "name": p.name, "image": p.spec.as_ref().map(|s| s.image.clone()),
                    "target": p.target, "max": p.max, "ready": p.ready, "in_use": p.in_use,
                    "claimed": p.claimed, "created": p.created, "tenant": p.tenant,
                    "from_config": p.from_config,
                })
            })
            .collect();
        Ok(json!({ "pools": items }))
    };
    reply(run.await)
}
