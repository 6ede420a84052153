//! envd's HTTP half: `GET /files` (`Download`), `POST /files` (`Upload`, from an
//! `application/octet-stream` body or `multipart/form-data` parts) and `GET /health`
//! (`Status`: 204 while the sandbox runs, 502 otherwise, as E2B's proxy answers).

use axum::extract::{FromRequest, Multipart, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use sandboxd_proto::v1 as pb;
use sandboxd_proto::v1::sandbox_service_server::SandboxService;
use serde::Deserialize;
use serde_json::json;
use tonic::Status;

use super::inproc::request;
use super::{errors, E2bFront};

#[derive(Debug, Default, Deserialize)]
pub struct FileQuery {
    path: Option<String>,
    /// Whose home a relative `path` is below (sandboxd's transfers run as the sandbox's user).
    username: Option<String>,
}

/// The file's absolute path: a relative one below the home of `username` (or the sandbox's
/// user), as E2B resolves it.
async fn absolute(
    front: &E2bFront,
    principal: &crate::auth::Principal,
    sandbox_id: &str,
    username: Option<&str>,
    path: Option<&str>,
) -> Result<String, Status> {
    let path = path
        .filter(|p| !p.is_empty())
        .ok_or_else(|| Status::invalid_argument("query parameter `path` is required"))?;
    front.resolve(principal, sandbox_id, username.unwrap_or(""), path).await
}

/// `GET /health`.
pub async fn health(State(front): State<E2bFront>, headers: HeaderMap) -> Response {
    let run = async {
        let principal = front.envd_caller(&headers)?;
        let sandbox_id = front.envd_sandbox(&headers)?;
        let status = front.status(&principal, &sandbox_id).await?;
        Ok::<_, Status>(status.status)
    };
    match run.await {
        Ok(s) if s == pb::SandboxStatus::Running as i32 => StatusCode::NO_CONTENT.into_response(),
        Ok(_) => errors::body(StatusCode::BAD_GATEWAY, "the sandbox is not running"),
        Err(e) if e.code() == tonic::Code::NotFound => errors::body(StatusCode::BAD_GATEWAY, e.message()),
        Err(e) => errors::rest(e),
    }
}

/// `GET /files?path=`: the file's bytes, streamed.
pub async fn read(
    State(front): State<E2bFront>,
    headers: HeaderMap,
    Query(query): Query<FileQuery>,
) -> Response {
    let run = async {
        let principal = front.envd_caller(&headers)?;
        let sandbox_id = front.envd_sandbox(&headers)?;
        let path =
            absolute(&front, &principal, &sandbox_id, query.username.as_deref(), query.path.as_deref())
                .await?;
        let mut chunks = front
            .api()
            .download(request(&principal, pb::DownloadRequest { sandbox_id, path }))
            .await?
            .into_inner();
        // The first chunk (or the error) before the 200: a missing file is a 404, not a
        // broken body.
        let first = chunks.next().await.transpose()?;
        let rest = chunks.map(|c| {
            c.map(|c| Bytes::from(c.chunk)).map_err(|s| std::io::Error::other(s.message().to_string()))
        });
        let head = futures_util::stream::iter(first.map(|c| Ok(Bytes::from(c.chunk))));
        Ok::<_, Status>(axum::body::Body::from_stream(head.chain(rest)))
    };
    match run.await {
        Ok(body) => ([(header::CONTENT_TYPE, "application/octet-stream")], body).into_response(),
        Err(e) => errors::rest(e),
    }
}

/// One uploaded file as E2B's write answer lists it.
fn written(path: &str) -> serde_json::Value {
    let name = path.rsplit('/').next().unwrap_or(path);
    json!({ "name": name, "type": "file", "path": path })
}

/// `POST /files`: one file from an octet-stream body at `?path=`, or each multipart part at
/// its file name (or `?path=` for a single part).
pub async fn write(State(front): State<E2bFront>, Query(query): Query<FileQuery>, req: Request) -> Response {
    let headers = req.headers().clone();
    let run = async {
        let principal = front.envd_caller(&headers)?;
        let sandbox_id = front.envd_sandbox(&headers)?;
        let content_type =
            headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        if headers.get(header::CONTENT_ENCODING).is_some() {
            return Err(Status::unimplemented(
                "Content-Encoding (gzip uploads) is not accepted; send the file as is",
            ));
        }
        let mut out = Vec::new();
        if content_type.starts_with("multipart/form-data") {
            let mut multipart = Multipart::from_request(req, &())
                .await
                .map_err(|e| Status::invalid_argument(format!("multipart body: {e}")))?;
            let mut parts = 0usize;
            while let Some(field) = multipart
                .next_field()
                .await
                .map_err(|e| Status::invalid_argument(format!("multipart body: {e}")))?
            {
                parts += 1;
                let named = field.file_name().map(str::to_string);
                let path = match (&query.path, named) {
                    (Some(p), _) if parts == 1 => {
                        absolute(&front, &principal, &sandbox_id, query.username.as_deref(), Some(p)).await?
                    }
                    (_, Some(name)) => {
                        absolute(&front, &principal, &sandbox_id, query.username.as_deref(), Some(&name))
                            .await?
                    }
                    (_, None) => {
                        return Err(Status::invalid_argument("a multipart part has no file name (its path)"))
                    }
                };
                // A part borrows the body: it is read whole (bounded by MULTIPART_LIMIT); large
                // files go as octet-stream, which is streamed.
                let data = field
                    .bytes()
                    .await
                    .map_err(|e| Status::invalid_argument(format!("multipart part {path:?}: {e}")))?;
                let size = Some(data.len() as u64);
                let chunks = futures_util::stream::iter([Ok::<_, std::io::Error>(data)]);
                upload_sized(&front, &principal, &sandbox_id, &path, size, Box::pin(chunks)).await?;
                out.push(written(&path));
            }
        } else {
            let path =
                absolute(&front, &principal, &sandbox_id, query.username.as_deref(), query.path.as_deref())
                    .await?;
            let size = headers
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            let chunks = req.into_body().into_data_stream().map_err(|e| std::io::Error::other(e.to_string()));
            upload_sized(&front, &principal, &sandbox_id, &path, size, Box::pin(chunks)).await?;
            out.push(written(&path));
        }
        Ok::<_, Status>(out)
    };
    match run.await {
        Ok(files) => Json(files).into_response(),
        Err(e) => errors::rest(e),
    }
}

type Chunks = std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send>>;

/// Largest multipart body (its parts are held in memory); octet-stream uploads are streamed.
pub const MULTIPART_LIMIT: usize = 256 << 20;

/// The gRPC `Upload`'s own work (`SandboxApi::upload_from`).
async fn upload_sized(
    front: &E2bFront,
    principal: &crate::auth::Principal,
    sandbox_id: &str,
    path: &str,
    size: Option<u64>,
    chunks: Chunks,
) -> Result<(), Status> {
    let header =
        pb::UploadHeader { sandbox_id: sandbox_id.to_string(), path: path.to_string(), mode: None, size };
    front.audited(principal, "Upload", front.api().upload_from(principal, header, chunks)).await?;
    Ok(())
}
