//! envd's `filesystem.Filesystem` over the gRPC file calls: `Stat`, `ListDir`, `MakeDir`,
//! `Rename`, `Remove`, `WatchDir` (the polled watchers, `CreateWatcher` / `GetWatcherEvents` /
//! `RemoveWatcher`, hold a `WatchDir` stream and keep what it sent until polled).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use futures_util::{Stream, StreamExt};
use sandboxd_proto::envd::filesystem as ef;
use sandboxd_proto::v1 as pb;
use tonic::Status;

use super::connect::{self, CallKind};
use super::inproc::request;
use super::inproc::Caller;
use super::{basic_user, owners, E2bFront};

/// Events a polled watcher keeps between two polls; past it the watcher fails (never grows
/// without bound), as a gRPC watcher that stops reading does.
const WATCHER_BACKLOG: usize = 10_000;

/// Polled watchers by id.
#[derive(Default)]
pub struct Watchers {
    by_id: Mutex<HashMap<String, Arc<Watcher>>>,
}

struct Watcher {
    sandbox_id: String,
    events: Mutex<Result<Vec<ef::FilesystemEvent>, Status>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Clone)]
struct Ctx {
    front: E2bFront,
    caller: Caller,
    sandbox_id: String,
    user: String,
}

/// `POST /filesystem.Filesystem/{method}`.
pub async fn call(
    State(front): State<E2bFront>,
    Path(method): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let Some(kind) = CallKind::from_headers(&headers) else {
        return connect::unary_error(&Status::invalid_argument(
            "content-type must be application/json, application/proto or application/connect+json|proto",
        ));
    };
    let fail = |status: Status| {
        if kind.streaming {
            connect::streaming_error(kind, &status)
        } else {
            connect::unary_error(&status)
        }
    };
    let ctx = match (|| {
        Ok::<_, Status>(Ctx {
            front: front.clone(),
            caller: front.envd_caller(&headers)?,
            sandbox_id: front.envd_sandbox(&headers)?,
            user: basic_user(&headers)?.unwrap_or_default(),
        })
    })() {
        Ok(ctx) => ctx,
        Err(e) => return fail(e),
    };
    let message = match connect::request_message(kind, &body) {
        Ok(m) => m,
        Err(e) => return fail(e),
    };
    macro_rules! unary {
        ($req:literal, $resp:literal, $f:expr) => {{
            let result = match connect::decode(kind.codec, $req, message) {
                Ok(req) => $f(ctx, req).await,
                Err(e) => Err(e),
            };
            match result {
                Ok(resp) => connect::unary_ok(kind, $resp, &resp),
                Err(e) => fail(e),
            }
        }};
    }
    match method.as_str() {
        "WatchDir" => {
            if !kind.streaming {
                return connect::unary_error(&Status::invalid_argument(
                    "WatchDir is server-streaming: use application/connect+json or application/connect+proto",
                ));
            }
            let req: ef::WatchDirRequest =
                match connect::decode(kind.codec, "filesystem.WatchDirRequest", message) {
                    Ok(r) => r,
                    Err(e) => return fail(e),
                };
            match watch(&ctx, &req.path, req.recursive, req.include_entry).await {
                Ok(events) => {
                    let start = futures_util::stream::iter([Ok(ef::WatchDirResponse {
                        event: Some(ef::watch_dir_response::Event::Start(
                            ef::watch_dir_response::StartEvent {},
                        )),
                    })]);
                    let rest = events.flat_map(|group| {
                        let responses: Vec<Result<ef::WatchDirResponse, Status>> = match group {
                            Ok(events) => events
                                .into_iter()
                                .map(|fs| {
                                    Ok(ef::WatchDirResponse {
                                        event: Some(ef::watch_dir_response::Event::Filesystem(fs)),
                                    })
                                })
                                .collect(),
                            Err(e) => vec![Err(e)],
                        };
                        futures_util::stream::iter(responses)
                    });
                    connect::streaming_response(
                        kind,
                        "filesystem.WatchDirResponse",
                        connect::timeout(&headers),
                        start.chain(rest),
                    )
                }
                Err(e) => fail(e),
            }
        }
        "Stat" => unary!("filesystem.StatRequest", "filesystem.StatResponse", stat),
        "ListDir" => unary!("filesystem.ListDirRequest", "filesystem.ListDirResponse", list_dir),
        "MakeDir" => unary!("filesystem.MakeDirRequest", "filesystem.MakeDirResponse", make_dir),
        "Move" => unary!("filesystem.MoveRequest", "filesystem.MoveResponse", move_path),
        "Remove" => unary!("filesystem.RemoveRequest", "filesystem.RemoveResponse", remove),
        "CreateWatcher" => {
            unary!("filesystem.CreateWatcherRequest", "filesystem.CreateWatcherResponse", create_watcher)
        }
        "GetWatcherEvents" => {
            unary!(
                "filesystem.GetWatcherEventsRequest",
                "filesystem.GetWatcherEventsResponse",
                watcher_events
            )
        }
        "RemoveWatcher" => {
            unary!("filesystem.RemoveWatcherRequest", "filesystem.RemoveWatcherResponse", remove_watcher)
        }
        other => fail(Status::unimplemented(format!("filesystem.Filesystem has no method {other:?}"))),
    }
}

/// An absolute path as bytes: a relative one below the user's home, as E2B resolves it.
async fn absolute(ctx: &Ctx, field: &str, path: &str) -> Result<Vec<u8>, Status> {
    if path.is_empty() {
        return Err(Status::invalid_argument(format!("{field}: must not be empty")));
    }
    Ok(ctx.front.resolve(&ctx.caller, &ctx.sandbox_id, &ctx.user, path).await?.into_bytes())
}

/// `ls -l`'s permission string of `mode` for a `kind`.
fn permissions(kind: pb::FileType, mode: u32) -> String {
    let mut out = String::with_capacity(10);
    out.push(match kind {
        pb::FileType::Dir => 'd',
        pb::FileType::Symlink => 'l',
        _ => '-',
    });
    for shift in [6u32, 3, 0] {
        let bits = (mode >> shift) & 7;
        out.push(if bits & 4 != 0 { 'r' } else { '-' });
        out.push(if bits & 2 != 0 { 'w' } else { '-' });
        out.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    out
}

fn entry_info(e: pb::FileEntry) -> ef::EntryInfo {
    let kind = pb::FileType::try_from(e.r#type).unwrap_or(pb::FileType::Unspecified);
    let file_type = match kind {
        pb::FileType::File => ef::FileType::File,
        pb::FileType::Dir => ef::FileType::Directory,
        pb::FileType::Symlink => ef::FileType::Symlink,
        _ => ef::FileType::Unspecified,
    };
    ef::EntryInfo {
        name: String::from_utf8_lossy(&e.name).into_owned(),
        r#type: file_type as i32,
        path: String::from_utf8_lossy(&e.path).into_owned(),
        size: e.size as i64,
        mode: e.mode,
        permissions: permissions(kind, e.mode),
        // The numeric ids; `owners::name_entries` puts the sandbox's names in their place.
        owner: e.uid.to_string(),
        group: e.gid.to_string(),
        modified_time: Some(prost_types::Timestamp {
            seconds: e.mtime.div_euclid(1000),
            nanos: (e.mtime.rem_euclid(1000) * 1_000_000) as i32,
        }),
        symlink_target: (kind == pb::FileType::Symlink)
            .then(|| String::from_utf8_lossy(&e.link_target).into_owned()),
        metadata: super::files::metadata_shown(&e.xattrs),
    }
}

async fn entry(ctx: &Ctx, path: &[u8]) -> Result<ef::EntryInfo, Status> {
    let req = pb::StatRequest {
        sandbox_id: ctx.sandbox_id.clone(),
        path: path.to_vec(),
        follow_links: false,
        user: ctx.user.clone(),
    };
    let entry = ctx.front.calls().stat(request(&ctx.caller, req)).await?.into_inner().entry;
    let mut info = [entry_info(entry.unwrap_or_default())];
    if info[0].r#type == ef::FileType::Symlink as i32 {
        // envd describes a link by what it points to: the target's type, and the target's
        // absolute path as `symlink_target` (a dangling link stays a symlink).
        let follow = pb::StatRequest {
            sandbox_id: ctx.sandbox_id.clone(),
            path: path.to_vec(),
            follow_links: true,
            user: ctx.user.clone(),
        };
        if let Ok(target) = ctx.front.calls().stat(request(&ctx.caller, follow)).await {
            let target = entry_info(target.into_inner().entry.unwrap_or_default());
            info[0].r#type = target.r#type;
            if let Some(link) = info[0].symlink_target.take() {
                info[0].symlink_target = Some(link_destination(&String::from_utf8_lossy(path), &link));
            }
        }
    }
    owners::name_entries(&ctx.front, &ctx.caller, &ctx.sandbox_id, &mut info).await?;
    let [info] = info;
    Ok(info)
}

async fn stat(ctx: Ctx, req: ef::StatRequest) -> Result<ef::StatResponse, Status> {
    let path = absolute(&ctx, "path", &req.path).await?;
    Ok(ef::StatResponse { entry: Some(entry(&ctx, &path).await?) })
}

async fn list_dir(ctx: Ctx, req: ef::ListDirRequest) -> Result<ef::ListDirResponse, Status> {
    let path = absolute(&ctx, "path", &req.path).await?;
    let list = pb::ListDirRequest {
        sandbox_id: ctx.sandbox_id.clone(),
        path,
        depth: req.depth.max(1),
        include_hidden: true,
        user: ctx.user.clone(),
    };
    let mut batches = ctx.front.calls().list_dir(request(&ctx.caller, list)).await?.into_inner();
    let mut entries = Vec::new();
    while let Some(batch) = batches.next().await {
        entries.extend(batch?.entries.into_iter().map(entry_info));
    }
    owners::name_entries(&ctx.front, &ctx.caller, &ctx.sandbox_id, &mut entries).await?;
    Ok(ef::ListDirResponse { entries })
}

async fn make_dir(ctx: Ctx, req: ef::MakeDirRequest) -> Result<ef::MakeDirResponse, Status> {
    let path = absolute(&ctx, "path", &req.path).await?;
    // E2B answers ALREADY_EXISTS for an existing path (the SDK's make_dir returns False).
    match entry(&ctx, &path).await {
        Ok(_) => return Err(Status::already_exists(format!("{:?} already exists", req.path))),
        Err(e) if e.code() == tonic::Code::NotFound => {}
        Err(e) => return Err(e),
    }
    let make = pb::MakeDirRequest {
        sandbox_id: ctx.sandbox_id.clone(),
        path: path.clone(),
        parents: true,
        mode: 0,
        user: ctx.user.clone(),
    };
    ctx.front.calls().make_dir(request(&ctx.caller, make)).await?;
    Ok(ef::MakeDirResponse { entry: Some(entry(&ctx, &path).await?) })
}

async fn move_path(ctx: Ctx, req: ef::MoveRequest) -> Result<ef::MoveResponse, Status> {
    let source = absolute(&ctx, "source", &req.source).await?;
    let destination = absolute(&ctx, "destination", &req.destination).await?;
    let rename = pb::RenameRequest {
        sandbox_id: ctx.sandbox_id.clone(),
        source,
        destination: destination.clone(),
        overwrite: true,
        user: ctx.user.clone(),
    };
    ctx.front.calls().rename(request(&ctx.caller, rename)).await?;
    Ok(ef::MoveResponse { entry: Some(entry(&ctx, &destination).await?) })
}

async fn remove(ctx: Ctx, req: ef::RemoveRequest) -> Result<ef::RemoveResponse, Status> {
    let path = absolute(&ctx, "path", &req.path).await?;
    let remove = pb::RemoveRequest {
        sandbox_id: ctx.sandbox_id.clone(),
        path,
        recursive: true,
        user: ctx.user.clone(),
    };
    // E2B's remove of a missing path succeeds.
    match ctx.front.calls().remove(request(&ctx.caller, remove)).await {
        Err(e) if e.code() != tonic::Code::NotFound => Err(e),
        _ => Ok(ef::RemoveResponse {}),
    }
}

/// A `WatchDir` stream's events as E2B names them (relative to the watched directory).
/// The watch of `path` as E2B's events, in groups: every event one change of the sandbox's
/// makes (a landed upload is three) comes in one group, so a poller (`GetWatcherEvents`) sees
/// all of them or none.
async fn watch(
    ctx: &Ctx,
    path: &str,
    recursive: bool,
    include_entry: bool,
) -> Result<impl Stream<Item = Result<Vec<ef::FilesystemEvent>, Status>> + Send + 'static, Status> {
    let dir = absolute(ctx, "path", path).await?;
    let req = pb::WatchDirRequest {
        sandbox_id: ctx.sandbox_id.clone(),
        path: dir.clone(),
        recursive,
        user: ctx.user.clone(),
    };
    let mut stream = ctx.front.calls().watch_dir(request(&ctx.caller, req)).await?.into_inner();
    // The first response says the watch is in place.
    match stream.next().await {
        Some(Ok(_)) => {}
        Some(Err(e)) => return Err(e),
        None => return Err(Status::internal("the watch ended before it started")),
    }
    let base = {
        let mut b = dir;
        if !b.ends_with(b"/") {
            b.push(b'/');
        }
        b
    };
    let dir = base.clone();
    let relative =
        move |p: &[u8]| String::from_utf8_lossy(p.strip_prefix(base.as_slice()).unwrap_or(p)).into_owned();
    let stat_ctx = ctx.clone();
    let groups = stream.map(move |item| {
        let e = match item? {
            pb::WatchDirResponse { event: None } => return Ok(Vec::new()),
            pb::WatchDirResponse { event: Some(e) } => e,
        };
        let one =
            |name: String, t: ef::EventType| ef::FilesystemEvent { name, r#type: t as i32, entry: None };
        Ok(match pb::FileEventType::try_from(e.r#type) {
            // An upload's temporary file is the transfer's own business: E2B's write shows
            // the file itself created, written and given its mode and owner (envd's CREATE,
            // WRITE, CHMOD; sandboxd did all three to the file before it landed).
            _ if is_upload_temp(&e.path) => vec![],
            Ok(pb::FileEventType::Rename) if is_upload_temp(&e.old_path) => vec![
                one(relative(&e.path), ef::EventType::Create),
                one(relative(&e.path), ef::EventType::Write),
                one(relative(&e.path), ef::EventType::Chmod),
            ],
            Ok(pb::FileEventType::Create) => vec![one(relative(&e.path), ef::EventType::Create)],
            Ok(pb::FileEventType::Modify) => vec![one(relative(&e.path), ef::EventType::Write)],
            Ok(pb::FileEventType::Remove) => vec![one(relative(&e.path), ef::EventType::Remove)],
            // E2B reports a move as the old name renamed and the new one created.
            Ok(pb::FileEventType::Rename) => vec![
                one(relative(&e.old_path), ef::EventType::Rename),
                one(relative(&e.path), ef::EventType::Create),
            ],
            _ => vec![],
        })
    });
    // envd 0.6.3's entry info: the entry as it is when the event is sent, for events whose path
    // still exists (none for a remove or a rename away, nor when it is gone by then); read once
    // for a group's events on one path.
    Ok(groups
        .then(move |group: Result<Vec<ef::FilesystemEvent>, Status>| {
            let ctx = stat_ctx.clone();
            let dir = dir.clone();
            async move {
                let mut group = group?;
                if include_entry {
                    let mut read: Option<(String, Option<ef::EntryInfo>)> = None;
                    for event in &mut group {
                        let gone = matches!(
                            ef::EventType::try_from(event.r#type),
                            Ok(ef::EventType::Remove) | Ok(ef::EventType::Rename)
                        );
                        if gone {
                            continue;
                        }
                        if read.as_ref().is_none_or(|(name, _)| *name != event.name) {
                            let mut path = dir.clone();
                            path.extend_from_slice(event.name.as_bytes());
                            read = Some((event.name.clone(), entry(&ctx, &path).await.ok()));
                        }
                        event.entry = read.as_ref().and_then(|(_, e)| e.clone());
                    }
                }
                Ok(group)
            }
        })
        .filter(|group| std::future::ready(!matches!(group, Ok(g) if g.is_empty()))))
}

/// Where a link at `link_path` whose content is `target` points, as an absolute path with `.`
/// and `..` resolved (by the names alone; a link inside the target is not followed).
fn link_destination(link_path: &str, target: &str) -> String {
    let joined = if target.starts_with('/') {
        target.to_string()
    } else {
        let dir = link_path.rsplit_once('/').map_or("", |(d, _)| d);
        format!("{dir}/{target}")
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in joined.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    format!("/{}", parts.join("/"))
}

/// The agent's upload writes `.<name>.sandboxd-upload-<n>-<pid>` and renames it into place.
fn is_upload_temp(path: &[u8]) -> bool {
    let name = path.rsplit(|b| *b == b'/').next().unwrap_or(path);
    name.starts_with(b".") && name.windows(16).any(|w| w == b".sandboxd-upload")
}

async fn create_watcher(
    ctx: Ctx,
    req: ef::CreateWatcherRequest,
) -> Result<ef::CreateWatcherResponse, Status> {
    let mut events = Box::pin(watch(&ctx, &req.path, req.recursive, req.include_entry).await?);
    let id = uuid::Uuid::new_v4().simple().to_string();
    let (tx, rx) = tokio::sync::oneshot::channel::<Arc<Watcher>>();
    let task = tokio::spawn(async move {
        let Ok(watcher) = rx.await else { return };
        while let Some(item) = events.next().await {
            let mut kept = watcher.events.lock().expect("watcher");
            match (&mut *kept, item) {
                (Ok(list), Ok(group)) if list.len() + group.len() <= WATCHER_BACKLOG => list.extend(group),
                (Ok(_), Ok(_)) => {
                    *kept = Err(Status::resource_exhausted(format!(
                        "more than {WATCHER_BACKLOG} events between two GetWatcherEvents"
                    )));
                    return;
                }
                (Ok(_), Err(e)) => {
                    *kept = Err(e);
                    return;
                }
                (Err(_), _) => return,
            }
        }
    });
    let watcher =
        Arc::new(Watcher { sandbox_id: ctx.sandbox_id.clone(), events: Mutex::new(Ok(Vec::new())), task });
    let _ = tx.send(watcher.clone());
    ctx.front.inner.watchers.by_id.lock().expect("watchers").insert(id.clone(), watcher);
    Ok(ef::CreateWatcherResponse { watcher_id: id })
}

fn watcher(ctx: &Ctx, id: &str) -> Result<Arc<Watcher>, Status> {
    let found = ctx.front.inner.watchers.by_id.lock().expect("watchers").get(id).cloned();
    found
        .filter(|w| w.sandbox_id == ctx.sandbox_id)
        .ok_or_else(|| Status::not_found(format!("watcher {id:?} not found")))
}

async fn watcher_events(
    ctx: Ctx,
    req: ef::GetWatcherEventsRequest,
) -> Result<ef::GetWatcherEventsResponse, Status> {
    // The caller must reach the sandbox the watcher is on.
    ctx.front.status(&ctx.caller, &ctx.sandbox_id).await?;
    let w = watcher(&ctx, &req.watcher_id)?;
    let mut kept = w.events.lock().expect("watcher");
    match &mut *kept {
        Ok(list) => Ok(ef::GetWatcherEventsResponse { events: std::mem::take(list) }),
        Err(e) => Err(e.clone()),
    }
}

async fn remove_watcher(
    ctx: Ctx,
    req: ef::RemoveWatcherRequest,
) -> Result<ef::RemoveWatcherResponse, Status> {
    ctx.front.status(&ctx.caller, &ctx.sandbox_id).await?;
    watcher(&ctx, &req.watcher_id)?;
    ctx.front.inner.watchers.by_id.lock().expect("watchers").remove(&req.watcher_id);
    Ok(ef::RemoveWatcherResponse {})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_read_as_e2b_describes_them() {
        let e = entry_info(pb::FileEntry {
            name: b"a.txt".to_vec(),
            path: b"/tmp/a.txt".to_vec(),
            r#type: pb::FileType::File as i32,
            size: 3,
            mode: 0o644,
            uid: 0,
            gid: 0,
            mtime: 1_500,
            link_target: vec![],
            xattrs: [
                ("user.e2b.author".to_string(), b"mish".to_vec()),
                ("user.other.tool".to_string(), b"x".to_vec()),
            ]
            .into(),
        });
        assert_eq!(e.metadata, [("author".to_string(), "mish".to_string())].into(), "only user.e2b.*");
        assert_eq!(e.r#type, ef::FileType::File as i32);
        assert_eq!(e.permissions, "-rw-r--r--");
        assert_eq!(e.modified_time.unwrap().nanos, 500_000_000);
        assert_eq!(e.symlink_target, None);
        assert_eq!(permissions(pb::FileType::Dir, 0o755), "drwxr-xr-x");
        assert_eq!(link_destination("/home/user/d/link", "test.txt"), "/home/user/d/test.txt");
        assert_eq!(link_destination("/home/user/d/link", "../x/./y"), "/home/user/x/y");
        assert_eq!(link_destination("/a/link", "/etc/../etc/passwd"), "/etc/passwd");
        assert!(is_upload_temp(b"/tmp/w/.f.txt.sandboxd-upload-9-7"));
        assert!(!is_upload_temp(b"/tmp/w/f.txt"));
    }
}
