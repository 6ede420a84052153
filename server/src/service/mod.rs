//! `sandbox.v1.SandboxService` over a `SandboxBackend`: wire types in, neutral types to the
//! backend, errors out as statuses by `From`. Stateless across restarts: every RPC names its
//! sandbox by id and the backend rebuilds what it needs from the sandbox.

mod access;
mod batch;
mod branching;
pub mod calls;
mod capable;
mod convert;
mod deadline;
mod exec;
mod exec_stream;
mod files;
pub mod forward;
mod fs;
pub mod images;
mod inventory;
mod lifecycle;
mod limits;
mod logs;
mod network_policy;
mod oci_runtime;
mod pools;
mod port_forward;
mod processes;
mod pty;
mod pty_sessions;
mod pump;
mod quota;
pub mod rpc_table;
mod runtime;
mod server;
mod stats;
mod status;
mod stream_limit;
pub mod template_build;
mod usage;
mod watch;

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use sandboxd_proto::v1 as pb;
use sandboxd_proto::v1::sandbox_service_server::SandboxService;
use tonic::{Request, Response, Status, Streaming};

pub use access::Access;
pub use server::{serve, ServeError, ServeOptions, ServeSettings, Services, TlsFiles};

use crate::auth::Principal;
use crate::config::ServerSection;
use crate::core::backend::SandboxBackend;
use crate::core::lifecycle::Lifecycle;
use crate::core::spec::{SandboxHandle, SandboxId};

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
    egress: Arc<crate::egress::Egress>,
    pools: Arc<crate::core::pools::Pools>,
}

impl SandboxApi {
    pub fn new(
        lifecycle: Arc<Lifecycle>,
        policy: ServerSection,
        shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> Self {
        let pty_slots = limits::PtySlots::new(&policy.limits);
        let egress = Arc::new(crate::egress::Egress::new(&Default::default(), &policy.state_dir()));
        let pools =
            crate::core::pools::Pools::new(lifecycle.clone(), uuid::Uuid::new_v4().simple().to_string());
        Self {
            lifecycle,
            policy,
            shutdown,
            pty_slots,
            access: Access::ephemeral(),
            quotas: Arc::default(),
            egress,
            pools,
        }
    }

    /// The same service enforcing egress policies through `egress` (its default and store).
    pub fn with_egress(self, egress: Arc<crate::egress::Egress>) -> Self {
        Self { egress, ..self }
    }

    /// The same service claiming from `pools`.
    pub fn with_pools(self, pools: Arc<crate::core::pools::Pools>) -> Self {
        Self { pools, ..self }
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

    /// The handle of the sandbox a request names in `sandbox_id` (a claimed pool sandbox's
    /// metadata and tenant are its claim's).
    async fn handle(&self, sandbox_id: &str) -> Result<SandboxHandle, Status> {
        let id = SandboxId::parse("sandbox_id", sandbox_id)?;
        Ok(self.claimed(self.backend().lookup(&id).await?))
    }

    /// `handle` as its pool claim (if any) says: metadata and tenant.
    fn claimed(&self, mut handle: SandboxHandle) -> SandboxHandle {
        if let Some(claim) = self.lifecycle.claims().get(&handle.sandbox_id) {
            handle.metadata = claim.metadata;
            handle.tenant = claim.tenant;
        }
        handle
    }

    /// The env of an exec or terminal in `handle`: its pool claim's env (if any) under the
    /// call's own.
    fn call_env(
        &self,
        handle: &SandboxHandle,
        env: std::collections::BTreeMap<String, String>,
    ) -> std::collections::BTreeMap<String, String> {
        match self.lifecycle.claims().get(&handle.sandbox_id) {
            Some(claim) if !claim.env.is_empty() => {
                let mut merged = claim.env;
                merged.extend(env);
                merged
            }
            _ => env,
        }
    }

    /// Client-supplied host mounts and raw run flags need the operator's consent.
    pub(super) fn check_policy(&self, spec: &pb::SandboxSpec) -> Result<(), Status> {
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

    fn first_message_timeout(&self) -> Duration {
        self.policy.limits.first_message_timeout
    }

    fn transfer_idle_timeout(&self) -> Duration {
        self.policy.limits.transfer_idle_timeout
    }
}

/// The metadata key a client may name itself by within its tenant (for the create queue's
/// fairness among a tenant's clients); without it, the connection's peer address.
pub const CLIENT_HEADER: &str = "x-sandboxd-client";

/// Who a create is for the admission queue: the caller's tenant and client.
fn origin<T>(principal: &crate::auth::Principal, request: &Request<T>) -> crate::core::admission::Origin {
    let named = request.metadata().get(CLIENT_HEADER).and_then(|v| v.to_str().ok()).map(String::from);
    let client = named.or_else(|| request.remote_addr().map(|a| a.to_string()));
    crate::core::admission::Origin::new(principal.tenant(), client)
}

/// The span every handler runs in: the RPC's name and the sandbox it names (empty for none).
fn span(rpc: &'static str, sandbox_id: &str) -> tracing::Span {
    tracing::info_span!("rpc", rpc, sandbox_id = %sandbox_id)
}

#[tonic::async_trait]
impl SandboxService for SandboxApi {
    async fn create(
        &self,
        request: Request<pb::CreateRequest>,
    ) -> Result<Response<pb::CreateResponse>, Status> {
        lifecycle::create(self, request).await
    }

    async fn connect(
        &self,
        request: Request<pb::ConnectRequest>,
    ) -> Result<Response<pb::ConnectResponse>, Status> {
        lifecycle::connect(self, request).await
    }

    async fn exec(&self, request: Request<pb::ExecRequest>) -> Result<Response<pb::ExecResponse>, Status> {
        exec::exec(self, request).await
    }

    async fn upload(
        &self,
        request: Request<Streaming<pb::UploadRequest>>,
    ) -> Result<Response<pb::UploadResponse>, Status> {
        files::upload(self, request).await
    }

    type DownloadStream = BoxStream<pb::DownloadResponse>;

    async fn download(
        &self,
        request: Request<pb::DownloadRequest>,
    ) -> Result<Response<Self::DownloadStream>, Status> {
        files::download(self, request).await
    }

    async fn status(
        &self,
        request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        lifecycle::status(self, request).await
    }

    async fn endpoint(
        &self,
        request: Request<pb::EndpointRequest>,
    ) -> Result<Response<pb::EndpointResponse>, Status> {
        lifecycle::endpoint(self, request).await
    }

    async fn close(&self, request: Request<pb::CloseRequest>) -> Result<Response<pb::CloseResponse>, Status> {
        lifecycle::close(self, request).await
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

    async fn checkpoint(
        &self,
        request: Request<pb::CheckpointRequest>,
    ) -> Result<Response<pb::CheckpointResponse>, Status> {
        branching::checkpoint(self, request).await
    }

    async fn hibernate(
        &self,
        request: Request<pb::HibernateRequest>,
    ) -> Result<Response<pb::HibernateResponse>, Status> {
        branching::hibernate(self, request).await
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

    async fn network_address(
        &self,
        request: Request<pb::NetworkAddressRequest>,
    ) -> Result<Response<pb::NetworkAddressResponse>, Status> {
        runtime::network_address(self, request).await
    }

    async fn list_volumes(
        &self,
        request: Request<pb::ListVolumesRequest>,
    ) -> Result<Response<pb::ListVolumesResponse>, Status> {
        runtime::list_volumes(self, request).await
    }

    async fn delete_volume(
        &self,
        request: Request<pb::DeleteVolumeRequest>,
    ) -> Result<Response<pb::DeleteVolumeResponse>, Status> {
        runtime::delete_volume(self, request).await
    }

    // --- events and usage ---

    type WatchStream = BoxStream<pb::WatchResponse>;

    async fn watch(&self, request: Request<pb::WatchRequest>) -> Result<Response<Self::WatchStream>, Status> {
        watch::watch(self, request).await
    }

    async fn stats(&self, request: Request<pb::StatsRequest>) -> Result<Response<pb::StatsResponse>, Status> {
        stats::stats(self, request).await
    }

    type StatsStreamStream = BoxStream<pb::StatsResponse>;

    async fn stats_stream(
        &self,
        request: Request<pb::StatsStreamRequest>,
    ) -> Result<Response<Self::StatsStreamStream>, Status> {
        stats::stats_stream(self, request).await
    }

    async fn set_network_policy(
        &self,
        request: Request<pb::SetNetworkPolicyRequest>,
    ) -> Result<Response<pb::SetNetworkPolicyResponse>, Status> {
        network_policy::set_network_policy(self, request).await
    }

    async fn create_pool(
        &self,
        request: Request<pb::CreatePoolRequest>,
    ) -> Result<Response<pb::CreatePoolResponse>, Status> {
        pools::create_pool(self, request).await
    }

    async fn list_pools(
        &self,
        request: Request<pb::ListPoolsRequest>,
    ) -> Result<Response<pb::ListPoolsResponse>, Status> {
        pools::list_pools(self, request).await
    }

    async fn delete_pool(
        &self,
        request: Request<pb::DeletePoolRequest>,
    ) -> Result<Response<pb::DeletePoolResponse>, Status> {
        pools::delete_pool(self, request).await
    }

    type PrefetchImagesStream = BoxStream<pb::PrefetchImagesResponse>;

    async fn prefetch_images(
        &self,
        request: Request<pb::PrefetchImagesRequest>,
    ) -> Result<Response<Self::PrefetchImagesStream>, Status> {
        images::prefetch_images(self, request).await
    }

    async fn set_pool_targets(
        &self,
        request: Request<pb::SetPoolTargetsRequest>,
    ) -> Result<Response<pb::SetPoolTargetsResponse>, Status> {
        images::set_pool_targets(self, request).await
    }

    async fn list_pty_sessions(
        &self,
        request: Request<pb::ListPtySessionsRequest>,
    ) -> Result<Response<pb::ListPtySessionsResponse>, Status> {
        pty_sessions::list_pty_sessions(self, request).await
    }

    // --- processes and ports ---
    async fn start_process(
        &self,
        request: Request<pb::StartProcessRequest>,
    ) -> Result<Response<pb::StartProcessResponse>, Status> {
        processes::start_process(self, request).await
    }

    async fn list_processes(
        &self,
        request: Request<pb::ListProcessesRequest>,
    ) -> Result<Response<pb::ListProcessesResponse>, Status> {
        processes::list_processes(self, request).await
    }

    type AttachProcessStream = BoxStream<pb::AttachProcessResponse>;

    async fn attach_process(
        &self,
        request: Request<pb::AttachProcessRequest>,
    ) -> Result<Response<Self::AttachProcessStream>, Status> {
        processes::attach_process(self, request).await
    }

    async fn signal_process(
        &self,
        request: Request<pb::SignalProcessRequest>,
    ) -> Result<Response<pb::SignalProcessResponse>, Status> {
        processes::signal_process(self, request).await
    }

    type PortForwardStream = BoxStream<pb::PortForwardResponse>;

    async fn port_forward(
        &self,
        request: Request<Streaming<pb::PortForwardRequest>>,
    ) -> Result<Response<Self::PortForwardStream>, Status> {
        port_forward::port_forward(self, request).await
    }

    // --- files ---

    type ListDirStream = BoxStream<pb::ListDirResponse>;

    async fn list_dir(
        &self,
        request: Request<pb::ListDirRequest>,
    ) -> Result<Response<Self::ListDirStream>, Status> {
        fs::list_dir(self, request).await
    }

    async fn stat(&self, request: Request<pb::StatRequest>) -> Result<Response<pb::StatResponse>, Status> {
        fs::stat(self, request).await
    }

    async fn make_dir(
        &self,
        request: Request<pb::MakeDirRequest>,
    ) -> Result<Response<pb::MakeDirResponse>, Status> {
        fs::make_dir(self, request).await
    }

    async fn remove(
        &self,
        request: Request<pb::RemoveRequest>,
    ) -> Result<Response<pb::RemoveResponse>, Status> {
        fs::remove(self, request).await
    }

    async fn rename(
        &self,
        request: Request<pb::RenameRequest>,
    ) -> Result<Response<pb::RenameResponse>, Status> {
        fs::rename(self, request).await
    }

    type WatchDirStream = BoxStream<pb::WatchDirResponse>;

    async fn watch_dir(
        &self,
        request: Request<pb::WatchDirRequest>,
    ) -> Result<Response<Self::WatchDirStream>, Status> {
        fs::watch_dir(self, request).await
    }

    async fn usage(&self, request: Request<pb::UsageRequest>) -> Result<Response<pb::UsageResponse>, Status> {
        usage::usage(self, request).await
    }

    type CreateBatchStream = BoxStream<pb::CreateBatchResponse>;

    async fn create_batch(
        &self,
        request: Request<pb::CreateBatchRequest>,
    ) -> Result<Response<Self::CreateBatchStream>, Status> {
        batch::create_batch(self, request).await
    }

    async fn reset(&self, request: Request<pb::ResetRequest>) -> Result<Response<pb::ResetResponse>, Status> {
        lifecycle::reset(self, request).await
    }

    async fn tenant_usage(
        &self,
        request: Request<pb::TenantUsageRequest>,
    ) -> Result<Response<pb::TenantUsageResponse>, Status> {
        usage::tenant_usage(self, request).await
    }
}
