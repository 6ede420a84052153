//! `Upload` and `Download`: one file each way, streamed. An upload without a size is spooled to
//! an anonymous temp file (bounded by `server.limits.max_upload_spool_bytes`); a transfer whose
//! other side goes quiet for `server.limits.transfer_idle_timeout_s` is ended.

use crate::service::rpc_table::name as rpc;
use bytes::Bytes;
use futures_util::StreamExt;
use sandboxd_proto::v1 as pb;
use tokio::io::{AsyncSeekExt, AsyncWriteExt};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

use super::status::invalid;
use super::{span, BoxStream, SandboxApi};
use crate::auth::Principal;
use crate::error::ProviderError;

pub(super) async fn upload(
    api: &SandboxApi,
    request: Request<Streaming<pb::UploadRequest>>,
) -> Result<Response<pb::UploadResponse>, Status> {
    let principal = Principal::of(&request);
    let mut stream = request.into_inner();
    let first = tokio::time::timeout(api.first_message_timeout(), stream.message()).await.map_err(|_| {
        Status::deadline_exceeded(format!(
            "no UploadHeader within {:?} (server.limits.first_message_timeout_s)",
            api.first_message_timeout()
        ))
    })?;
    let header = match first?.and_then(|m| m.request) {
        Some(pb::upload_request::Request::Header(h)) => h,
        _ => return Err(invalid("header", "the first UploadRequest must carry an UploadHeader")),
    };
    let span = span(rpc::UPLOAD, &header.sandbox_id);
    async move {
        // A client that stops sending fails the upload after the idle timeout (the transfer
        // permit is given back) instead of holding it forever.
        let idle = api.transfer_idle_timeout();
        let stream = Box::pin(tokio_stream::StreamExt::timeout(stream, idle)).map(move |m| {
            m.unwrap_or_else(|_| {
                Err(Status::deadline_exceeded(format!(
                    "no upload data for {idle:?} (server.limits.transfer_idle_timeout_s)"
                )))
            })
        });
        let chunks = stream.map(|m| match m.map(|m| m.request) {
            Ok(Some(pb::upload_request::Request::Chunk(bytes))) => Ok(Bytes::from(bytes)),
            Ok(_) => Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "only chunks may follow the UploadHeader",
            )),
            Err(status) if status.code() == tonic::Code::DeadlineExceeded => {
                Err(std::io::Error::new(std::io::ErrorKind::TimedOut, status.message().to_string()))
            }
            Err(status) => Err(std::io::Error::other(status.message().to_string())),
        });
        Ok(Response::new(api.upload_from(&principal, header, chunks).await?))
    }
    .instrument(span)
    .await
}

impl SandboxApi {
    /// An upload's work once its header is read, for any front-end: authorization (operate),
    /// then the file streamed (`header.size` known) or spooled, from `chunks`.
    pub async fn upload_from(
        &self,
        principal: &Principal,
        header: pb::UploadHeader,
        chunks: impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send + Unpin + 'static,
    ) -> Result<pb::UploadResponse, Status> {
        let api = self;
        let handle = api
            .authorize_handle(principal, &header.sandbox_id, const { super::rpc_table::scope(rpc::UPLOAD) })
            .await?;
        // Checked before a byte is read: a refused upload writes nothing.
        let xattrs = crate::core::fs::check_xattrs("xattrs", &header.xattrs)?;
        let mut reader = tokio_util::io::StreamReader::new(chunks);
        let backend = api.backend();
        let written = match header.size {
            Some(size) => {
                backend.upload(&handle, Box::new(reader), size, &header.path, header.mode, &xattrs).await
            }
            None => {
                // No size: spool to an anonymous temp file (bounded memory), then stream it.
                let limit = api.policy.limits.max_upload_spool_bytes;
                let spooled = async {
                    let mut file = tokio::fs::File::from_std(tempfile::tempfile()?);
                    let mut bounded = tokio::io::AsyncReadExt::take(&mut reader, limit.saturating_add(1));
                    let size = tokio::io::copy(&mut bounded, &mut file).await?;
                    if size > limit {
                        return Err(std::io::Error::new(std::io::ErrorKind::FileTooLarge, ""));
                    }
                    file.flush().await?;
                    file.rewind().await?;
                    Ok::<_, std::io::Error>((file, size))
                }
                .await;
                match spooled {
                    Ok((file, size)) => {
                        let file = Box::new(tokio::io::BufReader::with_capacity(256 * 1024, file));
                        backend.upload(&handle, file, size, &header.path, header.mode, &xattrs).await
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                        return Err(invalid("chunk", e));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::FileTooLarge => {
                        return Err(Status::resource_exhausted(format!(
                            "an upload without size may hold at most {limit} bytes \
                             (server.limits.max_upload_spool_bytes); send UploadHeader.size to stream it"
                        )));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                        return Err(Status::deadline_exceeded(e.to_string()));
                    }
                    Err(e) => Err(ProviderError::Io(e)),
                }
            }
        }?;
        crate::metrics::global().transferred("upload", written);
        crate::otel::attribute("bytes", written as i64);
        Ok(pb::UploadResponse { bytes_written: written })
    }
}

pub(super) async fn download(
    api: &SandboxApi,
    request: Request<pb::DownloadRequest>,
) -> Result<Response<BoxStream<pb::DownloadResponse>>, Status> {
    let principal = Principal::of(&request);
    let req = request.into_inner();
    let span = span(rpc::DOWNLOAD, &req.sandbox_id);
    let mut download = async {
        let handle = api
            .authorize_handle(&principal, &req.sandbox_id, const { super::rpc_table::scope(rpc::DOWNLOAD) })
            .await?;
        Ok::<_, Status>(api.backend().download(&handle, &req.path).await?)
    }
    .instrument(span.clone())
    .await?;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let idle = api.transfer_idle_timeout();
    tokio::spawn(
        async move {
            let mut sent = 0u64;
            loop {
                let item = match download.next_chunk().await {
                    Ok(Some(chunk)) => {
                        crate::metrics::global().transferred("download", chunk.len() as u64);
                        sent += chunk.len() as u64;
                        Ok(pb::DownloadResponse { chunk })
                    }
                    Ok(None) => break,
                    Err(e) => Err(Status::from(e)),
                };
                let failed = item.is_err();
                match tokio::time::timeout(idle, tx.send(item)).await {
                    Ok(Ok(())) if !failed => {}
                    Ok(_) => break, // the caller went away (the transfer is stopped on drop)
                    Err(_) => {
                        // The caller stopped reading: give the transfer permit back.
                        tracing::warn!(?idle, "download abandoned: the caller read nothing (server.limits.transfer_idle_timeout_s)");
                        let _ = tx.try_send(Err(Status::deadline_exceeded("the download's reader stalled")));
                        break;
                    }
                }
            }
            crate::otel::attribute("bytes", sent as i64);
        }
        .instrument(span),
    );
    Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
}
