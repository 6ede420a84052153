//! `sandbox.v1.SandboxService` over the Docker provider. Stateless across restarts: every RPC
//! names its sandbox by id and the provider rebuilds what it needs from the container.

mod auth;
mod branching;
mod convert;
mod deadline;
mod exec_stream;
mod inventory;
mod pty;
mod server;
mod status;

use std::collections::HashSet;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use sandboxd_proto::v1 as pb;
use sandboxd_proto::v1::sandbox_service_server::SandboxService;
use tokio::io::{AsyncSeekExt, AsyncWriteExt};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

pub use auth::BearerAuth;
pub use server::{serve, ServeOptions};
use status::{invalid, to_status};

use crate::config::ServerSection;
use crate::docker::{DockerProvider, ExecParams, SandboxHandle};
use crate::error::ProviderError;
use crate::spec::ExecErrorType;

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// The service: the provider, the operator's policy, and what this process created.
#[derive(Clone)]
pub struct SandboxApi {
    provider: Arc<DockerProvider>,
    policy: ServerSection,
    created: Arc<Mutex<HashSet<String>>>,
    shutdown: tokio::sync::watch::Receiver<bool>,
}

impl SandboxApi {
    pub fn new(
        provider: Arc<DockerProvider>,
        policy: ServerSection,
        shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> Self {
        Self { provider, policy, created: Arc::default(), shutdown }
    }

    pub fn provider(&self) -> &Arc<DockerProvider> {
        &self.provider
    }

    async fn handle(&self, sandbox_id: &str) -> Result<SandboxHandle, Status> {
        self.provider.handle(sandbox_id).await.map_err(to_status)
    }

    /// Client-supplied host mounts and raw run flags need the operator's consent.
    fn check_policy(&self, spec: &pb::SandboxSpec) -> Result<(), Status> {
        if let Some(options) = &spec.provider_options {
            if !options.volumes.is_empty() && !self.policy.allow_client_volumes {
                return Err(Status::permission_denied(
                    "spec.provider_options.volumes is disabled on this server (server.allow_client_volumes)",
                ));
            }
            if !options.run_args.is_empty() && !self.policy.allow_client_run_args {
                return Err(Status::permission_denied(
                    "spec.provider_options.run_args is disabled on this server (server.allow_client_run_args)",
                ));
            }
        }
        Ok(())
    }

    /// Write `spec.files` into a fresh sandbox.
    async fn seed_files(
        &self,
        handle: &SandboxHandle,
        files: &std::collections::BTreeMap<String, Vec<u8>>,
    ) -> Result<(), ProviderError> {
        for (path, content) in files {
            self.provider.upload_reader(handle, content.as_slice(), content.len() as u64, path, None).await?;
        }
        Ok(())
    }

    /// Count sandboxes as created by this process (for `--remove-on-shutdown`).
    fn remember_created(&self, ids: impl IntoIterator<Item = String>) {
        if let Ok(mut created) = self.created.lock() {
            created.extend(ids);
        }
    }

    /// End PTY sessions and, when asked, remove the sandboxes this process created.
    pub async fn shutdown(&self, remove_created: bool) {
        self.provider.aclose().await;
        if remove_created {
            let ids: Vec<String> =
                self.created.lock().map(|s| s.iter().cloned().collect()).unwrap_or_default();
            for id in ids {
                if let Err(e) = self.provider.close_id(&id).await {
                    tracing::warn!(sandbox_id = %id, error = %e, "could not remove sandbox at shutdown");
                }
            }
        }
    }
}

fn span(rpc: &'static str, sandbox_id: &str) -> tracing::Span {
    tracing::info_span!("rpc", rpc, sandbox_id = %sandbox_id)
}

#[tonic::async_trait]
impl SandboxService for SandboxApi {
    async fn create(
        &self,
        request: Request<pb::CreateRequest>,
    ) -> Result<Response<pb::CreateResponse>, Status> {
        let spec = request.into_inner().spec.ok_or_else(|| invalid("spec", "is required"))?;
        let span = tracing::info_span!("rpc", rpc = "Create", image = %spec.image, sandbox_id = tracing::field::Empty);
        async move {
            self.check_policy(&spec)?;
            let spec = convert::spec_from_proto(spec)?;
            let handle = self.provider.create(&spec).await.map_err(to_status)?;
            tracing::Span::current().record("sandbox_id", handle.sandbox_id.as_str());
            if let Err(e) = self.seed_files(&handle, &spec.files).await {
                let _ = self.provider.close(&handle).await;
                return Err(to_status(e));
            }
            if let Ok(mut created) = self.created.lock() {
                created.insert(handle.sandbox_id.clone());
            }
            Ok(Response::new(pb::CreateResponse { sandbox: Some(convert::sandbox_ref(&handle)) }))
        }
        .instrument(span)
        .await
    }

    async fn connect(
        &self,
        request: Request<pb::ConnectRequest>,
    ) -> Result<Response<pb::ConnectResponse>, Status> {
        let sandbox = request.into_inner().sandbox.ok_or_else(|| invalid("sandbox", "is required"))?;
        let span = span("Connect", &sandbox.sandbox_id);
        async move {
            let descriptor = convert::descriptor(sandbox)?;
            let handle = self.provider.connect(&descriptor).await.map_err(to_status)?;
            Ok(Response::new(pb::ConnectResponse {
                sandbox: Some(convert::sandbox_ref(&handle)),
                image: handle.image.clone(),
                shell: handle.shell.clone(),
            }))
        }
        .instrument(span)
        .await
    }

    async fn exec(&self, request: Request<pb::ExecRequest>) -> Result<Response<pb::ExecResponse>, Status> {
        let deadline = deadline::grpc_timeout(request.metadata());
        let req = request.into_inner();
        let span = span("Exec", &req.sandbox_id);
        async move {
            let requested = req.timeout_s.map(|t| convert::seconds("timeout_s", t)).transpose()?;
            let default =
                self.provider.config().exec.default_timeout_s.map(std::time::Duration::from_secs_f64);
            let (timeout, capped) = deadline::cap(requested.or(default), deadline);
            let handle = self.handle(&req.sandbox_id).await?;
            let params = ExecParams {
                cwd: req.cwd,
                env: convert::sorted(req.env),
                timeout,
                user: req.user,
                stdin: req.stdin,
            };
            let result = self.provider.exec(&handle, &req.command, &params).await.map_err(to_status)?;
            if capped && result.error_type == Some(ExecErrorType::Timeout) {
                return Err(Status::deadline_exceeded(
                    "the call's deadline passed before the command finished",
                ));
            }
            Ok(Response::new(convert::exec_response(result)))
        }
        .instrument(span)
        .await
    }

    async fn upload(
        &self,
        request: Request<Streaming<pb::UploadRequest>>,
    ) -> Result<Response<pb::UploadResponse>, Status> {
        let mut stream = request.into_inner();
        let header = match stream.message().await?.and_then(|m| m.request) {
            Some(pb::upload_request::Request::Header(h)) => h,
            _ => return Err(invalid("header", "the first UploadRequest must carry an UploadHeader")),
        };
        let span = span("Upload", &header.sandbox_id);
        async move {
            let handle = self.handle(&header.sandbox_id).await?;
            let chunks = stream.map(|m| match m.map(|m| m.request) {
                Ok(Some(pb::upload_request::Request::Chunk(bytes))) => Ok(Bytes::from(bytes)),
                Ok(_) => Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "only chunks may follow the UploadHeader",
                )),
                Err(status) => Err(std::io::Error::other(status.message().to_string())),
            });
            let mut reader = tokio_util::io::StreamReader::new(chunks);
            let written = match header.size {
                Some(size) => {
                    self.provider.upload_reader(&handle, reader, size, &header.path, header.mode).await
                }
                None => {
                    // No size: spool to an anonymous temp file (bounded memory), then stream it.
                    let spooled = async {
                        let mut file = tokio::fs::File::from_std(tempfile::tempfile()?);
                        let size = tokio::io::copy(&mut reader, &mut file).await?;
                        file.flush().await?;
                        file.rewind().await?;
                        Ok::<_, std::io::Error>((file, size))
                    }
                    .await;
                    match spooled {
                        Ok((file, size)) => {
                            let file = tokio::io::BufReader::with_capacity(256 * 1024, file);
                            self.provider.upload_reader(&handle, file, size, &header.path, header.mode).await
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                            return Err(invalid("chunk", e));
                        }
                        Err(e) => Err(ProviderError::Io(e)),
                    }
                }
            }
            .map_err(to_status)?;
            Ok(Response::new(pb::UploadResponse { bytes_written: written }))
        }
        .instrument(span)
        .await
    }

    type DownloadStream = BoxStream<pb::DownloadResponse>;

    async fn download(
        &self,
        request: Request<pb::DownloadRequest>,
    ) -> Result<Response<Self::DownloadStream>, Status> {
        let req = request.into_inner();
        let span = span("Download", &req.sandbox_id);
        let mut download = async {
            let handle = self.handle(&req.sandbox_id).await?;
            self.provider.download(&handle, &req.path).await.map_err(to_status)
        }
        .instrument(span.clone())
        .await?;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(
            async move {
                loop {
                    let item = match download.next_chunk().await {
                        Ok(Some(chunk)) => Ok(pb::DownloadResponse { chunk }),
                        Ok(None) => break,
                        Err(e) => Err(to_status(e)),
                    };
                    let failed = item.is_err();
                    if tx.send(item).await.is_err() || failed {
                        break; // the caller went away (the docker client is killed on drop)
                    }
                }
            }
            .instrument(span),
        );
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn status(
        &self,
        request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        let req = request.into_inner();
        let span = span("Status", &req.sandbox_id);
        async move {
            let status = self.provider.status_by_id(&req.sandbox_id).await.map_err(to_status)?;
            Ok(Response::new(pb::StatusResponse { status: convert::status(status) as i32 }))
        }
        .instrument(span)
        .await
    }

    async fn endpoint(
        &self,
        request: Request<pb::EndpointRequest>,
    ) -> Result<Response<pb::EndpointResponse>, Status> {
        let req = request.into_inner();
        let span = span("Endpoint", &req.sandbox_id);
        async move {
            let port = convert::port("port", req.port)?;
            let handle = self.handle(&req.sandbox_id).await?;
            let ep = self.provider.endpoint(&handle, port).await.map_err(to_status)?;
            Ok(Response::new(pb::EndpointResponse {
                endpoint: ep.endpoint,
                headers: ep.headers.into_iter().collect(),
            }))
        }
        .instrument(span)
        .await
    }

    async fn close(&self, request: Request<pb::CloseRequest>) -> Result<Response<pb::CloseResponse>, Status> {
        let req = request.into_inner();
        let span = span("Close", &req.sandbox_id);
        async move {
            self.provider.close_id(&req.sandbox_id).await.map_err(to_status)?;
            if let Ok(mut created) = self.created.lock() {
                created.remove(&req.sandbox_id);
            }
            Ok(Response::new(pb::CloseResponse {}))
        }
        .instrument(span)
        .await
    }

    type PtyStream = BoxStream<pb::PtyResponse>;

    async fn pty(
        &self,
        request: Request<Streaming<pb::PtyRequest>>,
    ) -> Result<Response<Self::PtyStream>, Status> {
        pty::serve_pty(self.clone(), request.into_inner()).await
    }

    type ExecStreamStream = BoxStream<pb::ExecStreamResponse>;

    async fn exec_stream(
        &self,
        request: Request<pb::ExecRequest>,
    ) -> Result<Response<Self::ExecStreamStream>, Status> {
        exec_stream::exec_stream(self, request).await
    }

    async fn list(&self, request: Request<pb::ListRequest>) -> Result<Response<pb::ListResponse>, Status> {
        inventory::list(self, request).await
    }

    async fn set_timeout(
        &self,
        request: Request<pb::SetTimeoutRequest>,
    ) -> Result<Response<pb::SetTimeoutResponse>, Status> {
        inventory::set_timeout(self, request).await
    }

    async fn snapshot(
        &self,
        request: Request<pb::SnapshotRequest>,
    ) -> Result<Response<pb::SnapshotResponse>, Status> {
        branching::snapshot(self, request).await
    }

    async fn list_snapshots(
        &self,
        request: Request<pb::ListSnapshotsRequest>,
    ) -> Result<Response<pb::ListSnapshotsResponse>, Status> {
        branching::list_snapshots(self, request).await
    }

    async fn delete_snapshot(
        &self,
        request: Request<pb::DeleteSnapshotRequest>,
    ) -> Result<Response<pb::DeleteSnapshotResponse>, Status> {
        branching::delete_snapshot(self, request).await
    }

    async fn fork(&self, request: Request<pb::ForkRequest>) -> Result<Response<pb::ForkResponse>, Status> {
        branching::fork(self, request).await
    }

    type DiffStream = BoxStream<pb::DiffResponse>;

    async fn diff(&self, request: Request<pb::DiffRequest>) -> Result<Response<Self::DiffStream>, Status> {
        branching::diff(self, request).await
    }

    async fn pause(&self, request: Request<pb::PauseRequest>) -> Result<Response<pb::PauseResponse>, Status> {
        branching::pause(self, request).await
    }

    async fn resume(
        &self,
        request: Request<pb::ResumeRequest>,
    ) -> Result<Response<pb::ResumeResponse>, Status> {
        branching::resume(self, request).await
    }
}
