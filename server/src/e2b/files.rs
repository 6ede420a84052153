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
use serde::Deserialize;
use serde_json::json;
use tonic::Status;

use super::inproc::{request, streaming, Caller};
use super::{errors, gzip, owners, signed, E2bFront};

#[derive(Debug, Default, Deserialize)]
pub struct FileQuery {
    path: Option<String>,
    /// Whose home a relative `path` is below (sandboxd's transfers run as the sandbox's user).
    username: Option<String>,
    /// A signed URL's signature (`signed.rs`): it stands for the access token.
    signature: Option<String>,
    signature_expiration: Option<i64>,
}

/// The caller and sandbox of a `/files` call: by its signature when the URL is signed (the
/// token that signed it names both), else by its headers.
fn caller_of(
    front: &E2bFront,
    headers: &HeaderMap,
    query: &FileQuery,
    operation: &str,
) -> Result<(Caller, String), Status> {
    let Some(signature) = query.signature.as_deref() else {
        return Ok((front.envd_caller(headers)?, front.envd_sandbox(headers)?));
    };
    let url = signed::SignedUrl {
        path: query.path.as_deref().unwrap_or(""),
        operation,
        user: query.username.as_deref().unwrap_or(""),
        signature,
        expiration: query.signature_expiration,
    };
    let (sandbox_id, token) = front.inner.signed_tokens.verify(&url)?;
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs() as i64;
    signed::check_expiration(query.signature_expiration, now_s)?;
    if let Ok(named) = front.envd_sandbox(headers) {
        if named != sandbox_id {
            return Err(Status::unauthenticated("the signature is for another sandbox"));
        }
    }
    Ok((Caller::new(Some(&token))?.traced(headers), sandbox_id))
}

/// The file's absolute path: a relative one below the home of `username` (or the sandbox's
/// user), as E2B resolves it.
async fn absolute(
    front: &E2bFront,
    caller: &Caller,
    sandbox_id: &str,
    username: Option<&str>,
    path: Option<&str>,
) -> Result<String, Status> {
    let path = path
        .filter(|p| !p.is_empty())
        .ok_or_else(|| Status::invalid_argument("query parameter `path` is required"))?;
    front.resolve(caller, sandbox_id, username.unwrap_or(""), path).await
}

/// `GET /health`. A sandbox that does not run (closed, stopped, paused, never there) is a 502
/// saying it "was not found", as E2B's proxy words it: the SDK probes this after a stream ended
/// under it and reads exactly those words as "killed or at its end of life".
pub async fn health(State(front): State<E2bFront>, headers: HeaderMap) -> Response {
    let target = front.envd_caller(&headers).and_then(|caller| Ok((caller, front.envd_sandbox(&headers)?)));
    let (caller, sandbox_id) = match target {
        Ok(target) => target,
        Err(e) => return errors::rest(e),
    };
    let gone = |why: &str| {
        errors::body(StatusCode::BAD_GATEWAY, &format!("The sandbox {sandbox_id} was not found ({why})"))
    };
    match front.status(&caller, &sandbox_id).await {
        Ok(s) if s.status == pb::SandboxStatus::Running as i32 => StatusCode::NO_CONTENT.into_response(),
        Ok(_) => gone("it is not running"),
        Err(e) if e.code() == tonic::Code::NotFound => gone(e.message()),
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
        let (caller, sandbox_id) = caller_of(&front, &headers, &query, "read")?;
        let path =
            absolute(&front, &caller, &sandbox_id, query.username.as_deref(), query.path.as_deref()).await?;
        let mut chunks = front
            .calls()
            .download(request(&caller, pb::DownloadRequest { sandbox_id, path }))
            .await?
            .into_inner();
        // The first chunk (or the error) before the 200: a missing file is a 404, not a
        // broken body.
        let first = chunks.next().await.transpose()?;
        let rest = chunks.map(|c| {
            c.map(|c| Bytes::from(c.chunk)).map_err(|s| std::io::Error::other(s.message().to_string()))
        });
        let head = futures_util::stream::iter(first.map(|c| Ok(Bytes::from(c.chunk))));
        let chunks: Chunks = Box::pin(head.chain(rest));
        Ok::<_, Status>(chunks)
    };
    let accept = headers.get(header::ACCEPT_ENCODING).and_then(|v| v.to_str().ok());
    match run.await {
        Ok(chunks) if gzip::accepts_gzip(accept) => (
            [(header::CONTENT_TYPE, "application/octet-stream"), (header::CONTENT_ENCODING, "gzip")],
            axum::body::Body::from_stream(gzip::compress(chunks)),
        )
            .into_response(),
        Ok(chunks) => {
            ([(header::CONTENT_TYPE, "application/octet-stream")], axum::body::Body::from_stream(chunks))
                .into_response()
        }
        Err(e) => errors::rest(e),
    }
}

/// One uploaded file as E2B's write answer lists it (with the metadata it was given).
fn written(path: &str, metadata: &Metadata) -> serde_json::Value {
    let name = path.rsplit('/').next().unwrap_or(path);
    let mut info = json!({ "name": name, "type": "file", "path": path });
    if !metadata.is_empty() {
        info["metadata"] = json!(metadata_shown(metadata));
    }
    info
}

/// A file's metadata as envd shows it: its `user.e2b.*` attributes, the prefix taken off
/// (other `user.` ones, another tool's, are not metadata); values as text.
pub(super) fn metadata_shown(xattrs: &Metadata) -> std::collections::HashMap<String, String> {
    xattrs
        .iter()
        .filter_map(|(name, value)| {
            let key = name.strip_prefix(METADATA_XATTR_PREFIX)?;
            Some((key.to_string(), String::from_utf8_lossy(value).into_owned()))
        })
        .collect()
}

/// An upload's files' extended attributes, by full name.
type Metadata = std::collections::HashMap<String, Vec<u8>>;

/// envd's `X-Metadata-<key>: <value>` headers as the `user.e2b.<key>` attributes envd keeps
/// them in (keys lower-cased, as `HeaderMap` holds them and envd stores them). The SDK checks
/// keys and values before sending; a request that did not is refused naming the header.
fn metadata_of(headers: &HeaderMap) -> Result<Metadata, Status> {
    let mut out = Metadata::new();
    for (name, value) in headers {
        let Some(key) = name.as_str().strip_prefix(METADATA_HEADER) else { continue };
        if key.is_empty() {
            return Err(Status::invalid_argument(format!("header {name}: the metadata key is empty")));
        }
        let printable = value.as_bytes().iter().all(|b| (0x20..0x7f).contains(b));
        if !printable {
            return Err(Status::invalid_argument(format!(
                "header {name}: a metadata value must be printable US-ASCII"
            )));
        }
        out.insert(format!("{METADATA_XATTR_PREFIX}{key}"), value.as_bytes().to_vec());
    }
    Ok(out)
}

/// `POST /files`: one file from an octet-stream body at `?path=`, or each multipart part at
/// its file name (or `?path=` for a single part).
pub async fn write(State(front): State<E2bFront>, Query(query): Query<FileQuery>, req: Request) -> Response {
    let headers = req.headers().clone();
    let run = async {
        let (caller, sandbox_id) = caller_of(&front, &headers, &query, "write")?;
        let content_type =
            headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        // envd 0.6.2 keeps `X-Metadata-*` as every uploaded file's `user.e2b.*` attributes.
        let metadata = metadata_of(&headers)?;
        let encoding = headers.get(header::CONTENT_ENCODING).and_then(|v| v.to_str().ok());
        let gzipped = gzip::is_gzip(encoding).map_err(Status::invalid_argument)?;
        // A gzip body (octet-stream or multipart alike) is decompressed as it streams in; its
        // Content-Length is the compressed size, so the upload's size is then unknown.
        let req = if gzipped {
            let (parts, body) = req.into_parts();
            let chunks = body.into_data_stream().map_err(|e| std::io::Error::other(e.to_string()));
            let plain = gzip::decompress(Box::pin(chunks));
            Request::from_parts(parts, axum::body::Body::from_stream(plain))
        } else {
            req
        };
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
                        absolute(&front, &caller, &sandbox_id, query.username.as_deref(), Some(p)).await?
                    }
                    (_, Some(name)) => {
                        absolute(&front, &caller, &sandbox_id, query.username.as_deref(), Some(&name)).await?
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
                upload_sized(&front, &caller, &sandbox_id, &path, size, &metadata, Box::pin(chunks)).await?;
                out.push(written(&path, &metadata));
            }
        } else {
            let path =
                absolute(&front, &caller, &sandbox_id, query.username.as_deref(), query.path.as_deref())
                    .await?;
            let size = headers
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok())
                .filter(|_| !gzipped);
            let chunks = req.into_body().into_data_stream().map_err(|e| std::io::Error::other(e.to_string()));
            upload_sized(&front, &caller, &sandbox_id, &path, size, &metadata, Box::pin(chunks)).await?;
            out.push(written(&path, &metadata));
        }
        let paths: Vec<String> = out.iter().filter_map(|f| f["path"].as_str().map(str::to_string)).collect();
        let user = query.username.as_deref().unwrap_or("");
        owners::give_to_user(&front, &caller, &sandbox_id, user, &paths).await?;
        Ok::<_, Status>(out)
    };
    match run.await {
        Ok(files) => Json(files).into_response(),
        Err(e) => errors::rest(e),
    }
}

type Chunks = std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send>>;

/// envd's per-file metadata headers (`X-Metadata-<key>`), lower-cased as `HeaderMap` keeps them.
const METADATA_HEADER: &str = "x-metadata-";

/// Where envd keeps a file's metadata: its extended attributes of this prefix.
const METADATA_XATTR_PREFIX: &str = "user.e2b.";

/// Largest multipart body (its parts are held in memory); octet-stream uploads are streamed.
pub const MULTIPART_LIMIT: usize = 256 << 20;

/// Upload messages carry at most this much of a file (a multipart part is read whole).
const UPLOAD_CHUNK: usize = 1 << 20;

/// `chunks` to `path` by the `Upload` call. A body that fails stops feeding the call, which is
/// then abandoned with the body's error (never a short file written as if whole).
async fn upload_sized(
    front: &E2bFront,
    caller: &Caller,
    sandbox_id: &str,
    path: &str,
    size: Option<u64>,
    metadata: &Metadata,
    chunks: Chunks,
) -> Result<(), Status> {
    use pb::upload_request::Request as Part;
    let header = pb::UploadHeader {
        sandbox_id: sandbox_id.to_string(),
        path: path.to_string(),
        mode: None,
        size,
        xattrs: metadata.clone(),
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<pb::UploadRequest>(4);
    let _ = tx.send(pb::UploadRequest { request: Some(Part::Header(header)) }).await;
    // The body's bytes as `Upload`'s messages; a body that fails hands back its error with the
    // sender (the stream stays open, so the call cannot end as if the file were whole).
    let mut feeder = tokio::spawn(async move {
        let mut chunks = chunks;
        while let Some(item) = chunks.next().await {
            let bytes = match item {
                Ok(bytes) => bytes,
                Err(e) => return Err((e, tx)),
            };
            for at in (0..bytes.len()).step_by(UPLOAD_CHUNK) {
                let piece = bytes.slice(at..bytes.len().min(at + UPLOAD_CHUNK));
                if tx.send(pb::UploadRequest { request: Some(Part::Chunk(piece.to_vec())) }).await.is_err() {
                    return Ok(());
                }
            }
        }
        Ok(())
    });
    let mut calls = front.calls();
    let messages = tokio_stream::wrappers::ReceiverStream::new(rx);
    let result = tokio::select! {
        biased;
        Ok(Err((e, _open))) = &mut feeder => Err(Status::invalid_argument(format!("the upload's body: {e}"))),
        done = calls.upload(streaming(caller, messages)) => done.map(|_| ()),
    };
    feeder.abort();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_headers_become_user_e2b_attributes_and_bad_ones_are_refused() {
        let mut headers = HeaderMap::new();
        headers.insert("X-Metadata-Author", "mish".parse().unwrap());
        headers.insert("content-type", "application/octet-stream".parse().unwrap());
        let metadata = metadata_of(&headers).unwrap();
        assert_eq!(metadata, [("user.e2b.author".to_string(), b"mish".to_vec())].into());
        let info = written("/home/user/a.txt", &metadata);
        assert_eq!(info["metadata"], json!({"author": "mish"}));
        assert_eq!(written("/a", &Metadata::new()).get("metadata"), None, "none when none was sent");

        let mut tab = HeaderMap::new();
        tab.insert("x-metadata-k", axum::http::HeaderValue::from_bytes(b"a\tb").unwrap());
        assert_eq!(metadata_of(&tab).unwrap_err().code(), tonic::Code::InvalidArgument);
        let mut empty_key = HeaderMap::new();
        empty_key.insert("x-metadata-", "v".parse().unwrap());
        assert_eq!(metadata_of(&empty_key).unwrap_err().code(), tonic::Code::InvalidArgument);
    }
}
