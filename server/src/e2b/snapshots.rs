//! E2B's snapshot API over sandboxd's snapshots: `POST /sandboxes/{id}/snapshots` (`Snapshot`,
//! its E2B name a label), `GET /snapshots` (`ListSnapshots`, by source sandbox and name),
//! `DELETE /templates/{id}` of a snapshot id (`DeleteSnapshot`), and a create whose
//! `templateID` names a snapshot (`SandboxSpec.snapshot_id`, see [`snapshot_of_template`]).
//! E2B treats a snapshot as a template: the same id goes where a template name goes.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandboxd_proto::v1 as pb;
use serde::Deserialize;
use serde_json::{json, Value};
use tonic::Status;

use super::inproc::request;
use super::inproc::Caller;
use super::{errors, E2bFront};

/// The label that carries a snapshot's E2B name.
const NAME_LABEL: &str = "e2b.snapshot-name";
/// The tag E2B gives a named snapshot (`<name>:default`).
const DEFAULT_TAG: &str = "default";

type Reply = Result<Response, Response>;

#[derive(Debug, Default, Deserialize)]
struct NewSnapshot {
    name: Option<String>,
    /// E2B's memory mode, accepted: a snapshot here keeps memory where the runtime checkpoints
    /// (a live `Checkpoint`) and is the filesystem elsewhere.
    #[allow(dead_code)]
    memory: Option<Value>,
}

/// A snapshot as E2B describes it: its id, and its names (`<name>:default` when named).
fn described(info: &pb::SnapshotInfo) -> Value {
    let names: Vec<String> = match info.labels.get(NAME_LABEL) {
        Some(name) => vec![format!("{name}:{DEFAULT_TAG}")],
        None => vec![info.snapshot_id.clone()],
    };
    json!({ "snapshotID": info.snapshot_id, "names": names })
}

/// `name` checked as E2B names are: not empty, at most 128 characters of letters, digits,
/// `-`, `_` and `.`.
fn check_name(name: &str) -> Result<(), Status> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(Status::invalid_argument(format!("name {name:?}: 1 to 128 of letters, digits, '-', '_' and '.'")))
    }
}

/// `POST /sandboxes/{id}/snapshots`.
pub async fn create(
    State(front): State<E2bFront>,
    headers: HeaderMap,
    Path(id): Path<String>,
    bytes: axum::body::Bytes,
) -> Reply {
    let caller = front.api_caller(&headers).map_err(errors::rest)?;
    let new: NewSnapshot = super::body::body(&bytes).map_err(errors::rest)?;
    let mut labels = std::collections::HashMap::new();
    if let Some(name) = new.name.filter(|n| !n.is_empty()) {
        // A name without its tag; E2B's `name:tag` keeps only the name.
        let name = name.split_once(':').map_or(name.as_str(), |(n, _)| n).to_string();
        check_name(&name).map_err(errors::rest)?;
        labels.insert(NAME_LABEL.to_string(), name);
    }
    // E2B's snapshot keeps the sandbox's memory: on a runtime that checkpoints it is a live one
    // (`Checkpoint`: a sandbox made from it is restored with its processes), elsewhere the
    // filesystem (`Snapshot`).
    let status = front.status(&caller, &id).await.map_err(errors::rest)?;
    let taken = if front.checkpoints(&status.runtime) {
        let live = pb::CheckpointRequest { sandbox_id: id, labels, leave_running: Some(true) };
        front.calls().checkpoint(request(&caller, live)).await.map(|r| r.into_inner().snapshot)
    } else {
        let snapshot = pb::SnapshotRequest { sandbox_id: id, labels };
        front.calls().snapshot(request(&caller, snapshot)).await.map(|r| r.into_inner().snapshot)
    };
    let info = taken.map_err(errors::rest)?.unwrap_or_default();
    Ok((StatusCode::CREATED, Json(described(&info))).into_response())
}

#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    #[serde(rename = "sandboxID")]
    sandbox_id: Option<String>,
    name: Option<String>,
    limit: Option<usize>,
    #[serde(rename = "nextToken")]
    next_token: Option<String>,
}

/// `GET /snapshots`: the caller's snapshots, oldest first, paged by `limit` / `nextToken`.
pub async fn list(
    State(front): State<E2bFront>,
    headers: HeaderMap,
    Query(query): Query<ListQuery>,
) -> Reply {
    let caller = front.api_caller(&headers).map_err(errors::rest)?;
    let mut labels = std::collections::HashMap::new();
    if let Some(name) = query.name.filter(|n| !n.is_empty()) {
        let name = name.split_once(':').map_or(name.as_str(), |(n, _)| n).to_string();
        labels.insert(NAME_LABEL.to_string(), name);
    }
    let all = front
        .calls()
        .list_snapshots(request(&caller, pb::ListSnapshotsRequest { labels }))
        .await
        .map_err(errors::rest)?
        .into_inner()
        .snapshots;
    let matching: Vec<&pb::SnapshotInfo> = all
        .iter()
        .filter(|s| query.sandbox_id.as_deref().is_none_or(|id| id.is_empty() || s.source_sandbox_id == id))
        .collect();
    let start = match query.next_token.as_deref().filter(|t| !t.is_empty()) {
        Some(t) => t.parse::<usize>().map_err(|_| {
            errors::rest(Status::invalid_argument(format!("nextToken {t:?} is not one this server gave")))
        })?,
        None => 0,
    };
    let limit = query.limit.unwrap_or(100).clamp(1, 1000);
    let page: Vec<Value> = matching.iter().skip(start).take(limit).map(|s| described(s)).collect();
    let mut response = Json(page).into_response();
    if start.saturating_add(limit) < matching.len() {
        let next = HeaderValue::from_str(&(start + limit).to_string()).expect("digits");
        response.headers_mut().insert("x-next-token", next);
    }
    Ok(response)
}

/// `DELETE /templates/{id}` of a snapshot: `DeleteSnapshot`; 404 when the caller has no
/// snapshot of that id (the SDK's `delete_snapshot` then answers `False`).
pub async fn delete(State(front): State<E2bFront>, headers: HeaderMap, Path(id): Path<String>) -> Reply {
    let caller = front.api_caller(&headers).map_err(errors::rest)?;
    if find(&front, &caller, &id).await.map_err(errors::rest)?.is_none() {
        return Err(errors::rest(Status::not_found(format!("snapshot {id:?} not found"))));
    }
    let delete = request(&caller, pb::DeleteSnapshotRequest { snapshot_id: id });
    front.calls().delete_snapshot(delete).await.map_err(errors::rest)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The caller's snapshot `id`, if it has one.
async fn find(front: &E2bFront, caller: &Caller, id: &str) -> Result<Option<pb::SnapshotInfo>, Status> {
    let all = front
        .calls()
        .list_snapshots(request(caller, pb::ListSnapshotsRequest::default()))
        .await?
        .into_inner()
        .snapshots;
    Ok(all.into_iter().find(|s| s.snapshot_id == id))
}

/// The snapshot a create's `templateID` names, if it names one of the caller's: its id, or
/// `<name>[:tag]` of a named one (the newest of that name).
pub async fn snapshot_of_template(
    front: &E2bFront,
    caller: &Caller,
    template: &str,
) -> Result<Option<String>, Status> {
    let all = front
        .calls()
        .list_snapshots(request(caller, pb::ListSnapshotsRequest::default()))
        .await?
        .into_inner()
        .snapshots;
    let name = template.split_once(':').map_or(template, |(n, _)| n);
    let by_id = all.iter().find(|s| s.snapshot_id == template);
    let by_name = || all.iter().rev().find(|s| s.labels.get(NAME_LABEL).is_some_and(|n| n == name));
    Ok(by_id.or_else(by_name).map(|s| s.snapshot_id.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_snapshot_is_described_by_its_tagged_name() {
        let mut info = pb::SnapshotInfo { snapshot_id: "snap1".into(), ..Default::default() };
        assert_eq!(described(&info)["names"], json!(["snap1"]));
        info.labels.insert(NAME_LABEL.into(), "mine".into());
        assert_eq!(described(&info)["names"], json!(["mine:default"]));
        assert_eq!(described(&info)["snapshotID"], json!("snap1"));
    }

    #[test]
    fn snapshot_names_are_checked() {
        assert!(check_name("snap-test_1.a").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name("a b").unwrap_err().message().contains("letters, digits"));
        assert!(check_name(&"x".repeat(129)).is_err());
    }
}
