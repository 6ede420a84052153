//! `sandbox.v1.SandboxService` over a `SandboxBackend`: wire types in, neutral types to the
//! backend, errors out as statuses by `From`. Stateless across restarts: every RPC names its
//! sandbox by id and the backend rebuilds what it needs from the sandbox.

mod access;
mod branching;
mod convert;
mod deadline;
mod exec_stream;
mod files;
mod inventory;
mod limits;
mod logs;
mod pty;
mod quota;
mod server;
mod status;
mod stream_limit;

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use sandboxd_proto::v1 as pb;
use sandboxd_proto::v1::sandbox_service_server::SandboxService;
use tokio::io::{AsyncSeekExt, AsyncWriteExt};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

pub use access::Access;
pub use server::{serve, ServeError, ServeOptions, ServeSettings, Services, TlsFiles};
use status::invalid;

use crate::auth::{Principal, Scope};
use crate::backend::SandboxBackend;
use crate::config::ServerSection;
use crate::error::ProviderError;
use crate::lifecycle::Lifecycle;
use crate::spec::{ExecErrorType, ExecParams, ExecResult, SandboxHandle, SandboxId};

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// The service: the backend with this process's bookkeeping, the operator's policy, and the
/// shutdown signal long-lived streams watch.
#[derive(Clone)]
pub struct SandboxApi {
    lifecycle: Arc<Lifecycle>,
    policy: ServerSection,
    shutdown: tokio::sync::watch::Receiver<bool>,
    pty_slots: Arc<limits::PtySlots>,
    access: Arc<Access>,
    quotas: Arc<quota::QuotaBook>,
}

impl SandboxApi {
    pub fn new(
        lifecycle: Arc<Lifecycle>,
        policy: ServerSection,
        shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> Self {
        let pty_slots = limits::PtySlots::new(&policy.limits);
        Self { lifecycle, policy, shutdown, pty_slots, access: Access::ephemeral(), quotas: Arc::default() }
    }

    /// The same service with the server's signing keys and tenants.
    pub fn with_access(self, access: Arc<Access>) -> Self {
        Self { access, ..self }
    }

    pub fn lifecycle(&self) -> &Arc<Lifecycle> {
        &self.lifecycle
    }

    fn backend(&self) -> &Arc<dyn SandboxBackend> {
        self.lifecycle.backend()
    }

    /// The handle of the sandbox a request names in `sandbox_id`.
    async fn handle(&self, sandbox_id: &str) -> Result<SandboxHandle, Status> {
        let id = SandboxId::parse("sandbox_id", sandbox_id)?;
        Ok(self.backend().lookup(&id).await?)
    }

    /// An exec request as the backend takes it: the sandbox, the command, its parameters with
    /// the timeout capped by the call's deadline, and whether that cap applied.
    async fn exec_request(
        &self,
        request: Request<pb::ExecRequest>,
    ) -> Result<(SandboxHandle, String, ExecParams, bool), Status> {
        let deadline = deadline::grpc_timeout(request.metadata());
        let principal = Principal::of(&request);
        self.authorize(&principal, &request.get_ref().sandbox_id, Scope::Operate).await?;
        let req = request.into_inner();
        let requested = req.timeout_s.map(|t| convert::seconds("timeout_s", t)).transpose()?;
        let (timeout, capped) = deadline::cap(requested.or(self.backend().default_exec_timeout()), deadline);
        let handle = self.handle(&req.sandbox_id).await?;
        let params = ExecParams {
            cwd: req.cwd,
            env: convert::sorted(req.env),
            timeout,
            user: req.user,
            stdin: req.stdin,
        };
        Ok((handle, req.command, params, capped))
    }

    fn first_message_timeout(&self) -> Duration {
        self.policy.limits.first_message_timeout
    }

    fn transfer_idle_timeout(&self) -> Duration {
        self.policy.limits.transfer_idle_timeout
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
}

/// How an exec ended, for `Exec` and `ExecStream` alike: counted once in the exec-results
/// metric; a timeout that was the call's deadline (not the command's own) is DEADLINE_EXCEEDED.
fn exec_outcome(result: ExecResult, capped: bool) -> Result<ExecResult, Status> {
    crate::metrics::global().exec_result(result.error_type.map(|e| e.as_str()).unwrap_or(""));
    if capped && result.error_type == Some(ExecErrorType::Timeout) {
        return Err(Status::deadline_exceeded("the call's deadline passed before the command finished"));
    }
    Ok(result)
}

/// The span of a streaming RPC (unary handlers use `#[instrument]`).
fn span(rpc: &'static str, sandbox_id: &str) -> tracing::Span {
    tracing::info_span!("rpc", rpc, sandbox_id = %sandbox_id)
}

#[tonic::async_trait]
impl SandboxService for SandboxApi {
    #[tracing::instrument(name = "rpc", skip_all, fields(rpc = "Create", image = tracing::field::Empty, sandbox_id = tracing::field::Empty))]
    async fn create(
        &self,
        request: Request<pb::CreateRequest>,
    ) -> Result<Response<pb::CreateResponse>, Status> {
        let deadline = deadline::grpc_timeout(request.metadata());
        let principal = Principal::of(&request);
        Self::require_key(&principal, "Create")?;
        let spec = request.into_inner().spec.ok_or_else(|| invalid("spec", "is required"))?;
        tracing::Span::current().record("image", spec.image.as_str());
        self.check_policy(&spec)?;
        let mut spec = convert::spec_from_proto(spec)?;
        spec.tenant = principal.tenant().map(String::from);
        if let Some(snapshot_id) = &spec.snapshot_id {
            self.check_snapshot(&principal, snapshot_id).await?;
        }
        spec.validate()?;
        let _permit = self.quotas.create_spec_allowed(self, &principal, &spec).await?;
        let handle = self.lifecycle.create(spec, deadline).await?;
        crate::audit::note_sandbox(&handle.sandbox_id);
        let mut sandbox = convert::sandbox_ref(&handle);
        sandbox.token = self.owner_token(&handle.sandbox_id, handle.tenant.clone());
        Ok(Response::new(pb::CreateResponse { sandbox: Some(sandbox) }))
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc = "Connect", sandbox_id = tracing::field::Empty))]
    async fn connect(
        &self,
        request: Request<pb::ConnectRequest>,
    ) -> Result<Response<pb::ConnectResponse>, Status> {
        let principal = Principal::of(&request);
        let sandbox = request.into_inner().sandbox.ok_or_else(|| invalid("sandbox", "is required"))?;
        tracing::Span::current().record("sandbox_id", sandbox.sandbox_id.as_str());
        SandboxId::parse("sandbox.sandbox_id", &sandbox.sandbox_id)?;
        self.authorize(&principal, &sandbox.sandbox_id, Scope::Read).await?;
        // The descriptor keeps the token it came with (serialize() carries it).
        let token = sandbox.token.clone();
        let descriptor = convert::descriptor(sandbox)?;
        let handle = self.backend().connect(&descriptor).await?;
        let mut sandbox = convert::sandbox_ref(&handle);
        sandbox.token = token;
        Ok(Response::new(pb::ConnectResponse {
            sandbox: Some(sandbox),
            image: handle.image.clone(),
            shell: handle.shell.clone(),
        }))
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc = "Exec", sandbox_id = %request.get_ref().sandbox_id))]
    async fn exec(&self, request: Request<pb::ExecRequest>) -> Result<Response<pb::ExecResponse>, Status> {
        let _slot = self.quotas.exec_slot(self, &Principal::of(&request))?;
        let (handle, command, params, capped) = self.exec_request(request).await?;
        let result = self.backend().exec(&handle, &command, &params).await?;
        Ok(Response::new(pb::ExecResponse::from(exec_outcome(result, capped)?)))
    }

    async fn upload(
        &self,
        request: Request<Streaming<pb::UploadRequest>>,
    ) -> Result<Response<pb::UploadResponse>, Status> {
        let principal = Principal::of(&request);
        let mut stream = request.into_inner();
        let first =
            tokio::time::timeout(self.first_message_timeout(), stream.message()).await.map_err(|_| {
                Status::deadline_exceeded(format!(
                    "no UploadHeader within {:?} (server.limits.first_message_timeout_s)",
                    self.first_message_timeout()
                ))
            })?;
        let header = match first?.and_then(|m| m.request) {
            Some(pb::upload_request::Request::Header(h)) => h,
            _ => return Err(invalid("header", "the first UploadRequest must carry an UploadHeader")),
        };
        let span = span("Upload", &header.sandbox_id);
        async move {
            self.authorize(&principal, &header.sandbox_id, Scope::Operate).await?;
            let handle = self.handle(&header.sandbox_id).await?;
            // A client that stops sending fails the upload after the idle timeout (the transfer
            // permit is given back) instead of holding it forever.
            let idle = self.transfer_idle_timeout();
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
            let mut reader = tokio_util::io::StreamReader::new(chunks);
            let backend = self.backend();
            let written = match header.size {
                Some(size) => {
                    backend.upload(&handle, Box::new(reader), size, &header.path, header.mode).await
                }
                None => {
                    // No size: spool to an anonymous temp file (bounded memory), then stream it.
                    let limit = self.policy.limits.max_upload_spool_bytes;
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
                            backend.upload(&handle, file, size, &header.path, header.mode).await
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
        let principal = Principal::of(&request);
        let req = request.into_inner();
        let span = span("Download", &req.sandbox_id);
        let mut download = async {
            self.authorize(&principal, &req.sandbox_id, Scope::Read).await?;
            let handle = self.handle(&req.sandbox_id).await?;
            Ok::<_, Status>(self.backend().download(&handle, &req.path).await?)
        }
        .instrument(span.clone())
        .await?;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let idle = self.transfer_idle_timeout();
        tokio::spawn(
            async move {
                loop {
                    let item = match download.next_chunk().await {
                        Ok(Some(chunk)) => {
                            crate::metrics::global().transferred("download", chunk.len() as u64);
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
            }
            .instrument(span),
        );
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc = "Status", sandbox_id = %request.get_ref().sandbox_id))]
    async fn status(
        &self,
        request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        let id = SandboxId::parse("sandbox_id", &request.get_ref().sandbox_id)?;
        self.authorize(&Principal::of(&request), id.as_str(), Scope::Read).await?;
        let status = self.backend().status(&id).await?;
        Ok(Response::new(pb::StatusResponse { status: status.to_wire() as i32 }))
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc = "Endpoint", sandbox_id = %request.get_ref().sandbox_id))]
    async fn endpoint(
        &self,
        request: Request<pb::EndpointRequest>,
    ) -> Result<Response<pb::EndpointResponse>, Status> {
        let principal = Principal::of(&request);
        let req = request.into_inner();
        let port = convert::port("port", req.port)?;
        self.authorize(&principal, &req.sandbox_id, Scope::Operate).await?;
        let handle = self.handle(&req.sandbox_id).await?;
        let ep = self.backend().endpoint(&handle, port).await?;
        Ok(Response::new(pb::EndpointResponse {
            endpoint: ep.endpoint,
            headers: ep.headers.into_iter().collect(),
        }))
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(rpc = "Close", sandbox_id = %request.get_ref().sandbox_id))]
    async fn close(&self, request: Request<pb::CloseRequest>) -> Result<Response<pb::CloseResponse>, Status> {
        let id = SandboxId::parse("sandbox_id", &request.get_ref().sandbox_id)?;
        self.authorize(&Principal::of(&request), id.as_str(), Scope::Owner).await?;
        self.lifecycle.close(&id).await?;
        Ok(Response::new(pb::CloseResponse {}))
    }

    type PtyStream = BoxStream<pb::PtyResponse>;

    async fn pty(
        &self,
        request: Request<Streaming<pb::PtyRequest>>,
    ) -> Result<Response<Self::PtyStream>, Status> {
        let principal = Principal::of(&request);
        pty::serve_pty(self.clone(), principal, request.into_inner()).await
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

    async fn grant(&self, request: Request<pb::GrantRequest>) -> Result<Response<pb::GrantResponse>, Status> {
        access::grant(self, request).await
    }

    async fn revoke(
        &self,
        request: Request<pb::RevokeRequest>,
    ) -> Result<Response<pb::RevokeResponse>, Status> {
        access::revoke(self, request).await
    }

    type LogsStream = BoxStream<pb::LogsResponse>;

    async fn logs(&self, request: Request<pb::LogsRequest>) -> Result<Response<Self::LogsStream>, Status> {
        logs::logs(self, request).await
    }

    // --- files ---

    type ListDirStream = BoxStream<pb::ListDirResponse>;

    async fn list_dir(
        &self,
        request: Request<pb::ListDirRequest>,
    ) -> Result<Response<Self::ListDirStream>, Status> {
        files::list_dir(self, request).await
    }

    async fn stat(&self, request: Request<pb::StatRequest>) -> Result<Response<pb::StatResponse>, Status> {
        files::stat(self, request).await
    }

    async fn make_dir(
        &self,
        request: Request<pb::MakeDirRequest>,
    ) -> Result<Response<pb::MakeDirResponse>, Status> {
        files::make_dir(self, request).await
    }

    async fn remove(
        &self,
        request: Request<pb::RemoveRequest>,
    ) -> Result<Response<pb::RemoveResponse>, Status> {
        files::remove(self, request).await
    }

    async fn rename(
        &self,
        request: Request<pb::RenameRequest>,
    ) -> Result<Response<pb::RenameResponse>, Status> {
        files::rename(self, request).await
    }

    type WatchDirStream = BoxStream<pb::WatchDirResponse>;

    async fn watch_dir(
        &self,
        request: Request<pb::WatchDirRequest>,
    ) -> Result<Response<Self::WatchDirStream>, Status> {
        files::watch_dir(self, request).await
    }
}
