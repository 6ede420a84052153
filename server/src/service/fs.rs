//! ListDir, Stat, MakeDir, Remove, Rename and WatchDir: paths (bytes) and the user checked
//! here, the work behind the backend (on Docker, the sandbox's agent as that user). ListDir,
//! Stat and WatchDir need `read`; the three that change files need `operate`.

use crate::service::rpc_table::name as rpc;
use futures_util::StreamExt;
use sandboxd_proto::v1 as pb;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use super::{span, BoxStream, SandboxApi};
use crate::auth::Principal;
use crate::core::fs::{
    check_path, FileEntry, FileEvent, FileEventKind, FileKind, FileOp, ListDirQuery, MAX_DEPTH,
};
use crate::core::spec::User;
use crate::error::ProviderError;

/// `user` as the request sends it: empty means the sandbox's own.
fn user_of(user: &str) -> Result<Option<User>, ProviderError> {
    (!user.is_empty()).then(|| User::parse("user", user)).transpose()
}

fn entry_to_wire(e: FileEntry) -> pb::FileEntry {
    let kind = match e.kind {
        FileKind::File => pb::FileType::File,
        FileKind::Dir => pb::FileType::Dir,
        FileKind::Symlink => pb::FileType::Symlink,
        FileKind::Other => pb::FileType::Other,
    };
    pb::FileEntry {
        name: e.name,
        path: e.path,
        r#type: kind as i32,
        size: e.size,
        mode: e.mode,
        uid: e.uid,
        gid: e.gid,
        mtime: e.mtime_ms,
        link_target: e.link_target,
        // Names the agent read from the sandbox: untrusted bytes, shown lossily as UTF-8.
        xattrs: e
            .xattrs
            .into_iter()
            .map(|x| (String::from_utf8_lossy(&x.name).into_owned(), x.value))
            .collect(),
    }
}

fn event_to_wire(e: FileEvent) -> pb::FileEvent {
    let kind = match e.kind {
        FileEventKind::Create => pb::FileEventType::Create,
        FileEventKind::Modify => pb::FileEventType::Modify,
        FileEventKind::Remove => pb::FileEventType::Remove,
        FileEventKind::Rename => pb::FileEventType::Rename,
    };
    pb::FileEvent { r#type: kind as i32, path: e.path, old_path: e.old_path, is_dir: e.is_dir }
}

pub(super) async fn list_dir(
    api: &SandboxApi,
    request: Request<pb::ListDirRequest>,
) -> Result<Response<BoxStream<pb::ListDirResponse>>, Status> {
    let principal = Principal::of(&request);
    let req = request.into_inner();
    let span = span(rpc::LIST_DIR, &req.sandbox_id);
    let batches = async {
        let handle = api
            .authorize_handle(&principal, &req.sandbox_id, const { super::rpc_table::scope(rpc::LIST_DIR) })
            .await?;
        check_path("path", &req.path)?;
        if req.depth > MAX_DEPTH {
            return Err(super::status::invalid(
                "depth",
                format!("must be at most {MAX_DEPTH} (got {})", req.depth),
            ));
        }
        let user = user_of(&req.user)?;
        let query =
            ListDirQuery { path: req.path, depth: req.depth.max(1), include_hidden: req.include_hidden };
        Ok::<_, Status>(api.backend().list_dir(&handle, &query, user.as_ref()).await?)
    }
    .instrument(span)
    .await?;
    let stream = ReceiverStream::new(batches).map(|batch| {
        batch
            .map(|entries| pb::ListDirResponse { entries: entries.into_iter().map(entry_to_wire).collect() })
            .map_err(Status::from)
    });
    Ok(Response::new(Box::pin(stream)))
}

pub(super) async fn stat(
    api: &SandboxApi,
    request: Request<pb::StatRequest>,
) -> Result<Response<pb::StatResponse>, Status> {
    let principal = Principal::of(&request);
    let req = request.into_inner();
    async {
        let handle = api
            .authorize_handle(&principal, &req.sandbox_id, const { super::rpc_table::scope(rpc::STAT) })
            .await?;
        check_path("path", &req.path)?;
        let user = user_of(&req.user)?;
        let entry = api.backend().stat(&handle, &req.path, req.follow_links, user.as_ref()).await?;
        Ok(Response::new(pb::StatResponse { entry: Some(entry_to_wire(entry)) }))
    }
    .instrument(span(rpc::STAT, &req.sandbox_id))
    .await
}

/// MakeDir, Remove and Rename: one change, at the scope the RPC table gives each.
async fn file_op(
    api: &SandboxApi,
    rpc: &'static str,
    principal: Principal,
    sandbox_id: &str,
    user: &str,
    op: FileOp,
) -> Result<(), Status> {
    async {
        let needed = match &op {
            FileOp::MakeDir { .. } => const { super::rpc_table::scope(rpc::MAKE_DIR) },
            FileOp::Remove { .. } => const { super::rpc_table::scope(rpc::REMOVE) },
            FileOp::Rename { .. } => const { super::rpc_table::scope(rpc::RENAME) },
        };
        let handle = api.authorize_handle(&principal, sandbox_id, needed).await?;
        match &op {
            FileOp::MakeDir { path, mode, .. } => {
                check_path("path", path)?;
                if *mode > 0o7777 {
                    return Err(super::status::invalid(
                        "mode",
                        format!("must be permission bits, at most 07777 (got {mode:o})"),
                    ));
                }
            }
            FileOp::Remove { path, .. } => {
                check_path("path", path)?;
                if path.iter().all(|b| *b == b'/') {
                    return Err(super::status::invalid("path", "refusing to remove \"/\""));
                }
            }
            FileOp::Rename { source, destination, .. } => {
                check_path("source", source)?;
                check_path("destination", destination)?;
            }
        }
        let user = user_of(user)?;
        Ok(api.backend().file_op(&handle, &op, user.as_ref()).await?)
    }
    .instrument(span(rpc, sandbox_id))
    .await
}

pub(super) async fn make_dir(
    api: &SandboxApi,
    request: Request<pb::MakeDirRequest>,
) -> Result<Response<pb::MakeDirResponse>, Status> {
    let principal = Principal::of(&request);
    let req = request.into_inner();
    let op = FileOp::MakeDir { path: req.path, parents: req.parents, mode: req.mode };
    file_op(api, rpc::MAKE_DIR, principal, &req.sandbox_id, &req.user, op).await?;
    Ok(Response::new(pb::MakeDirResponse {}))
}

pub(super) async fn remove(
    api: &SandboxApi,
    request: Request<pb::RemoveRequest>,
) -> Result<Response<pb::RemoveResponse>, Status> {
    let principal = Principal::of(&request);
    let req = request.into_inner();
    let op = FileOp::Remove { path: req.path, recursive: req.recursive };
    file_op(api, rpc::REMOVE, principal, &req.sandbox_id, &req.user, op).await?;
    Ok(Response::new(pb::RemoveResponse {}))
}

pub(super) async fn rename(
    api: &SandboxApi,
    request: Request<pb::RenameRequest>,
) -> Result<Response<pb::RenameResponse>, Status> {
    let principal = Principal::of(&request);
    let req = request.into_inner();
    let op = FileOp::Rename { source: req.source, destination: req.destination, overwrite: req.overwrite };
    file_op(api, rpc::RENAME, principal, &req.sandbox_id, &req.user, op).await?;
    Ok(Response::new(pb::RenameResponse {}))
}

pub(super) async fn watch_dir(
    api: &SandboxApi,
    request: Request<pb::WatchDirRequest>,
) -> Result<Response<BoxStream<pb::WatchDirResponse>>, Status> {
    let principal = Principal::of(&request);
    let req = request.into_inner();
    let span = span(rpc::WATCH_DIR, &req.sandbox_id);
    let mut changes = async {
        let handle = api
            .authorize_handle(&principal, &req.sandbox_id, const { super::rpc_table::scope(rpc::WATCH_DIR) })
            .await?;
        check_path("path", &req.path)?;
        let user = user_of(&req.user)?;
        Ok::<_, Status>(api.backend().watch_dir(&handle, &req.path, req.recursive, user.as_ref()).await?)
    }
    .instrument(span.clone())
    .await?;
    // The first response says the watch is in place; the stream ends at shutdown too.
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let _ = tx.try_send(Ok(pb::WatchDirResponse { event: None }));
    let mut shutdown = api.shutdown.clone();
    tokio::spawn(
        async move {
            loop {
                let change = tokio::select! {
                    change = changes.recv() => Some(change),
                    _ = tx.closed() => break,
                    _ = shutdown.wait_for(|down| *down) => None,
                };
                let Some(change) = change else {
                    let _ = tx.send(Err(Status::unavailable("the server is shutting down"))).await;
                    break;
                };
                let Some(change) = change else { break };
                let item = change
                    .map(|e| pb::WatchDirResponse { event: Some(event_to_wire(e)) })
                    .map_err(Status::from);
                if tx.send(item).await.is_err() {
                    break;
                }
            }
        }
        .instrument(span),
    );
    Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
}
