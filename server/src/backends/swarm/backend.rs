//! `SwarmBackend`: the backend of `cluster.mode: swarm`. It wraps this node's Docker backend:
//! creates, `List`, `Close` and the sweep go through Swarm (any manager answers them for the
//! whole cluster); every call about one sandbox that reaches this backend is about a sandbox
//! on this node (the forwarding layer sent the others away), and is the docker backend's, on
//! the task's container (its sandbox id is made an alias of that container for the docker CLI).
//! A claimed pool member's claim (its env, metadata, tenant) is read from Swarm the first time
//! a call about it reaches a node, into the node's claim store that every call reads.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use super::argv;
use super::engine::Engine;
use super::placement::Swarm;
use super::records;
use super::watch::Peers;
use crate::backends::docker::cli::{DockerCli, Pool};
use crate::backends::docker::failure::CliError;
use crate::backends::docker::DockerProvider;
use crate::config::{ClusterSection, DockerConfig};
use crate::core::backend::{
    CreatePlan, CreatePolicy, ExecStream, FileDownload, SandboxBackend, TerminalSession, UploadSource,
};
use crate::core::branching::{DiffEntry, Forked, SnapshotInfo};
use crate::core::capabilities::{Capabilities, Capability};
use crate::core::claims::ClaimStore;
use crate::core::expiry::{Owned, OwnedListing};
use crate::core::fs::Xattr;
use crate::core::inventory::{ListPage, ListQuery};
use crate::core::spec::{
    ExecParams, ExecResult, PtySpec, SandboxDescriptor, SandboxEndpoint, SandboxHandle, SandboxId,
    SandboxSpec, SandboxStatus,
};
use crate::error::{ProviderError, Result};

/// The cluster backend over this node's Docker backend.
pub struct SwarmBackend {
    pub(super) local: Arc<DockerProvider>,
    pub(super) swarm: Arc<Swarm>,
    pub(super) cli: DockerCli,
    pub(super) engine: Engine,
    pub(super) docker_config: DockerConfig,
    pub(super) cluster: ClusterSection,
    pub(super) peers: Arc<Peers>,
    /// The node's claim store (the lifecycle's), once the wiring handed it over.
    claims: OnceLock<ClaimStore>,
    /// The sandboxes of this node that got an alias, and whether each is a pool's member.
    here: Mutex<HashMap<String, bool>>,
    /// Which node has which image, as last asked (`images.rs`).
    pub(super) images: super::node_images::ImageCache,
}

impl SwarmBackend {
    /// This node's docker backend on the `docker` exec engine (a Swarm task has no agent
    /// socket: its host directory would have to exist on whichever node Swarm picks), and the
    /// swarm it is a manager of; `token` is the cluster token (the operator key).
    pub async fn new(mut docker: DockerConfig, cluster: ClusterSection, token: String) -> Result<Self> {
        argv::check_config(&docker.create)
            .map_err(|e| ProviderError::invalid(format!("docker.{}", e.field), e.message))?;
        for key in argv::not_on_swarm(&docker.create) {
            tracing::warn!(key, "not enforced in cluster mode: a Swarm service cannot carry it");
        }
        let engine = Engine::local().map_err(ProviderError::Unavailable)?;
        docker.exec.engine = crate::config::ExecEngineKind::Docker;
        let local = Arc::new(DockerProvider::new(docker.clone())?);
        let cli = local.cli().in_pool(Pool::Control);
        let swarm = Arc::new(Swarm::join(cli.clone(), &cluster, token).await?);
        let peers = Peers::new(swarm.clone(), engine.clone(), cluster.peer_port);
        // This node's events from the start: another node merging them must not wait for the
        // `docker events` stream to come up (see `watch.rs`).
        if let Some(hub) = SandboxBackend::event_hub(&*local) {
            forget_gone(hub, local.clone());
        }
        let backend = Self {
            local,
            swarm,
            cli,
            engine,
            docker_config: docker,
            cluster,
            peers,
            claims: OnceLock::new(),
            here: Mutex::default(),
            images: Default::default(),
        };
        // What this node's tasks run on, for every manager's placement (`runtimes.rs`).
        backend.advertise_runtime().await;
        Ok(backend)
    }

    pub fn swarm(&self) -> &Arc<Swarm> {
        &self.swarm
    }

    /// Keep pool claims read from Swarm in `claims` (the lifecycle's store, which every call
    /// reads); set once by the wiring.
    pub fn use_claims(&self, claims: ClaimStore) {
        let _ = self.claims.set(claims);
    }

    pub(super) fn claims(&self) -> Option<&ClaimStore> {
        self.claims.get()
    }

    /// Makes `id` name its task's container on this daemon; `SandboxNotFound` when it has none
    /// here.
    pub(super) async fn alias(&self, id: &str) -> Result<()> {
        if !SandboxId::has_valid_shape(id) {
            return Err(ProviderError::SandboxNotFound(id.into()));
        }
        let aliases = self.cli.aliases();
        if aliases.get(id).is_some() {
            return Ok(());
        }
        let out = self.swarm.docker(argv::local_task_container_args(id)).await?;
        let text = out.stdout_text();
        let Some(line) = text.lines().map(str::trim).find(|l| !l.is_empty()) else {
            return Err(ProviderError::SandboxNotFound(id.into()));
        };
        let (container, pool_key) = line.split_once('\t').unwrap_or((line, ""));
        aliases.insert(id, container);
        if let Ok(mut here) = self.here.lock() {
            here.insert(id.to_string(), !pool_key.trim().is_empty());
        }
        Ok(())
    }

    /// A sandbox is its service: a stopped task container whose service is gone (closed, or
    /// its node lost and back) is a sandbox that no longer exists, NOT_FOUND as `List` has it,
    /// whatever the node has not cleaned up yet.
    async fn gone_or_stopped(&self, id: String) -> ProviderError {
        match self.engine.service(&id).await {
            Ok(None) => {
                self.forget(&id);
                ProviderError::SandboxNotFound(id)
            }
            _ => ProviderError::Stopped(id),
        }
    }

    /// Whether sandbox `id` (aliased on this node) is a pool's member.
    fn is_local_member(&self, id: &str) -> bool {
        self.here.lock().ok().and_then(|h| h.get(id).copied()).unwrap_or(false)
    }

    /// A pool member's claim, read from Swarm into the node's claim store when the store does
    /// not have it yet (claims never change; an unclaimed member is asked again next time).
    pub(super) async fn learn_claim(&self, id: &str) {
        let Some(claims) = self.claims() else { return };
        if claims.get(id).is_some() {
            return;
        }
        match self.engine.config(&records::claim_config_name(id)).await {
            Ok(Some(config)) => match records::read_claim(&config.data()) {
                Some(claim) => {
                    if let Err(e) = claims.set(id, claim) {
                        tracing::warn!(sandbox_id = %id, error = %e, "cannot keep a pool claim read from Swarm");
                    }
                }
                None => tracing::warn!(sandbox_id = %id, "unreadable pool claim in Swarm"),
            },
            Ok(None) => {}
            Err(e) => tracing::warn!(sandbox_id = %id, error = %e, "cannot read a pool claim from Swarm"),
        }
    }

    /// `docker service rm`; already gone is success. Forgets what this node kept about it, and
    /// removes its claim's config when it had one.
    pub(super) async fn remove_service(&self, id: &str) -> bool {
        let removed = match self.swarm.docker(argv::service_rm_args(&[id.to_string()])).await {
            Ok(_) => true,
            Err(CliError::Failed(f)) if f.stderr.to_ascii_lowercase().contains("not found") => true,
            Err(e) => {
                tracing::warn!(sandbox_id = %id, error = %e, "docker service rm failed");
                false
            }
        };
        if removed {
            let claimed = self.claims().is_some_and(|c| c.get(id).is_some()) || self.is_local_member(id);
            if claimed {
                if let Err(e) = self.engine.remove_config(&records::claim_config_name(id)).await {
                    tracing::warn!(sandbox_id = %id, error = %e, "cannot remove a pool claim; the leader's clean-up will");
                }
            }
            self.forget(id);
        }
        removed
    }

    /// Forget what this node keeps about sandbox `id` (it is gone): its alias, node, claim.
    pub(super) fn forget(&self, id: &str) {
        self.cli.aliases().remove(id);
        self.swarm.forget(id);
        if let Ok(mut here) = self.here.lock() {
            here.remove(id);
        }
        if let Some(claims) = self.claims() {
            claims.remove(id);
        }
    }

    /// The sandboxes this node keeps something about (aliases, nodes).
    pub(super) fn known(&self) -> Vec<String> {
        let mut ids = self.swarm.known();
        if let Ok(here) = self.here.lock() {
            ids.extend(here.keys().cloned());
        }
        ids.sort();
        ids.dedup();
        ids
    }

    /// A handle from the service's labels, for a sandbox on another node (the entry node's
    /// authorization reads its tenant).
    async fn remote_handle(&self, id: &str) -> Result<SandboxHandle> {
        let services = self.inspect_services(&[id.to_string()]).await?;
        let Some(s) = services.into_iter().find(|s| s.id == id) else {
            return Err(ProviderError::SandboxNotFound(id.into()));
        };
        if s.labels.contains_key(records::POOL_KEY_LABEL) {
            self.learn_claim(id).await;
        }
        Ok(SandboxHandle {
            sandbox_id: id.to_string(),
            image: s.image,
            shell: "sh".into(),
            ports: s.ports,
            workdir: s.workdir,
            metadata: s.metadata,
            tenant: s.tenant,
            runtime: None,
        })
    }
}

impl SwarmBackend {
    /// A call on sandbox `id` made on this node's Docker backend, once its task container is
    /// known here (`alias`; an id this node does not run is NOT_FOUND): the one way Swarm
    /// forwards a call, since the relay (`service/forward.rs`) already brought it to the
    /// owning node.
    async fn on_owner<'a, T, F>(
        &'a self,
        id: &str,
        call: impl FnOnce(&'a dyn SandboxBackend) -> F,
    ) -> Result<T>
    where
        F: std::future::Future<Output = Result<T>>,
    {
        self.alias(id).await?;
        call(&*self.local).await
    }
}

#[async_trait::async_trait]
impl SandboxBackend for SwarmBackend {
    /// What a node's Docker backend offers, less what cannot cross nodes yet: live checkpoints
    /// would restore a sandbox, which a Swarm task cannot be (Swarm starts its containers
    /// itself); volumes, templates, egress and network addresses are per node; kept terminal
    /// sessions and port forwards are not relayed to the owning node's backend yet. Snapshots
    /// stay on their node and what starts from one is placed there (`snapshots.rs`).
    fn capabilities(&self) -> Capabilities {
        Capabilities::all("swarm")
            .without(Capability::LiveCheckpoints)
            .without(Capability::TerminalSessions)
            .without(Capability::PortForward)
            .without(Capability::Egress)
            .without(Capability::NetworkAddress)
            .without(Capability::Volumes)
            .without(Capability::Templates)
    }

    async fn create_planned(&self, spec: &SandboxSpec, plan: &CreatePlan) -> Result<SandboxHandle> {
        // Refused before anything is made rather than skipped: a create that returned without
        // its setup having run would hand out a sandbox its caller thinks is set up.
        if spec.setup.is_some() {
            return Err(ProviderError::Unimplemented(
                "spec.setup is not offered in cluster mode yet: run the command with Exec after the create"
                    .into(),
            ));
        }
        self.create_in_swarm(spec, plan).await
    }

    async fn list_owned(&self) -> Result<OwnedListing> {
        self.list_owned_services().await
    }

    async fn remove_owned(&self, owned: &Owned) -> Result<()> {
        match self.remove_service(&owned.name).await {
            true => Ok(()),
            false => Err(ProviderError::Unavailable(format!("docker service rm {} failed", owned.name))),
        }
    }

    async fn ping(&self) -> Result<()> {
        SandboxBackend::ping(&*self.local).await
    }

    async fn prefetch_images(
        &self,
        images: &[String],
        nodes: &[String],
        sink: crate::core::images::ImageSink,
    ) -> Result<()> {
        self.prefetch(images, nodes, sink).await
    }

    async fn lookup(&self, id: &SandboxId) -> Result<SandboxHandle> {
        match self.alias(id.as_str()).await {
            Ok(()) => {
                let handle = SandboxBackend::lookup(&*self.local, id).await?;
                if self.is_local_member(id.as_str()) {
                    self.learn_claim(id.as_str()).await;
                }
                Ok(handle)
            }
            Err(ProviderError::SandboxNotFound(_)) => self.remote_handle(id.as_str()).await,
            Err(e) => Err(e),
        }
    }

    async fn connect(&self, descriptor: &SandboxDescriptor) -> Result<SandboxHandle> {
        self.alias(&descriptor.sandbox_id).await?;
        let handle = match SandboxBackend::connect(&*self.local, descriptor).await {
            Err(ProviderError::Stopped(id)) => return Err(self.gone_or_stopped(id).await),
            connected => connected?,
        };
        if self.is_local_member(&descriptor.sandbox_id) {
            self.learn_claim(&descriptor.sandbox_id).await;
        }
        Ok(handle)
    }

    async fn exec(&self, handle: &SandboxHandle, command: &str, params: &ExecParams) -> Result<ExecResult> {
        self.on_owner(&handle.sandbox_id, |local| local.exec(handle, command, params)).await
    }

    async fn exec_stream(
        &self,
        handle: &SandboxHandle,
        command: &str,
        params: &ExecParams,
    ) -> Result<ExecStream> {
        self.on_owner(&handle.sandbox_id, |local| local.exec_stream(handle, command, params)).await
    }

    async fn upload(
        &self,
        handle: &SandboxHandle,
        source: UploadSource<'_>,
        size: u64,
        path: &str,
        mode: Option<u32>,
        xattrs: &[Xattr],
    ) -> Result<u64> {
        self.on_owner(&handle.sandbox_id, |local| local.upload(handle, source, size, path, mode, xattrs))
            .await
    }

    async fn download(&self, handle: &SandboxHandle, path: &str) -> Result<Box<dyn FileDownload>> {
        self.on_owner(&handle.sandbox_id, |local| local.download(handle, path)).await
    }

    async fn status(&self, id: &SandboxId) -> Result<SandboxStatus> {
        match self.alias(id.as_str()).await {
            Ok(()) => SandboxBackend::status(&*self.local, id).await,
            Err(ProviderError::SandboxNotFound(_)) => self.service_status(id.as_str()).await,
            Err(e) => Err(e),
        }
    }

    async fn endpoint(&self, handle: &SandboxHandle, port: u16) -> Result<SandboxEndpoint> {
        self.on_owner(&handle.sandbox_id, |local| local.endpoint(handle, port)).await
    }

    async fn close(&self, id: &SandboxId) -> Result<()> {
        // Close runs on the owning node (`rpc_table`): its task container ends here before the
        // answer, as on one host; Swarm's `service rm` stops it only in its own time, and until
        // then Status read it running.
        if self.alias(id.as_str()).await.is_ok() {
            if let Err(e) = self.local.end_for_close(id.as_str()).await {
                tracing::warn!(sandbox_id = %id, error = %e, "cannot end the task container before its service's removal");
            }
        }
        self.local.forget_gone(id.as_str());
        if !self.remove_service(id.as_str()).await {
            return Err(ProviderError::Unavailable(format!("Swarm did not remove the service of {id}")));
        }
        Ok(())
    }

    async fn open_terminal(
        &self,
        handle: &SandboxHandle,
        spec: &PtySpec,
    ) -> Result<Arc<dyn TerminalSession>> {
        self.on_owner(&handle.sandbox_id, |local| local.open_terminal(handle, spec)).await
    }

    async fn close_terminals(&self) {
        SandboxBackend::close_terminals(&*self.local).await
    }

    async fn list(&self, query: &ListQuery) -> Result<ListPage> {
        self.list_services(query).await
    }

    fn default_exec_timeout(&self) -> Option<Duration> {
        SandboxBackend::default_exec_timeout(&*self.local)
    }

    fn shutdown(&self) {
        SandboxBackend::shutdown(&*self.local)
    }

    /// Committed on this node (the relay brought the call to the sandbox's node).
    async fn snapshot(
        &self,
        id: &SandboxId,
        labels: &BTreeMap<String, String>,
        max_snapshots: usize,
    ) -> Result<SnapshotInfo> {
        self.on_owner(id.as_str(), |local| local.snapshot(id, labels, max_snapshots)).await
    }

    async fn list_snapshots(&self, filter: &BTreeMap<String, String>) -> Result<Vec<SnapshotInfo>> {
        self.list_cluster_snapshots(filter).await
    }

    async fn delete_snapshot(&self, snapshot_id: &str) -> Result<()> {
        self.delete_cluster_snapshot(snapshot_id).await
    }

    /// This node's (every node sweeps its own).
    async fn remove_expired_snapshots(&self, ttl: Duration) -> Result<Vec<String>> {
        SandboxBackend::remove_expired_snapshots(&*self.local, ttl).await
    }

    async fn fork(
        &self,
        id: &SandboxId,
        count: u32,
        labels: &BTreeMap<String, String>,
        max_snapshots: usize,
        policy: &CreatePolicy,
    ) -> Result<Forked> {
        self.fork_in_swarm(id, count, labels, max_snapshots, policy).await
    }

    async fn diff(&self, id: &SandboxId, path_prefix: Option<&str>) -> Result<Vec<DiffEntry>> {
        self.on_owner(id.as_str(), |local| local.diff(id, path_prefix)).await
    }

    async fn pause(&self, id: &SandboxId) -> Result<()> {
        self.on_owner(id.as_str(), |local| local.pause(id)).await
    }

    async fn resume(&self, id: &SandboxId) -> Result<()> {
        self.on_owner(id.as_str(), |local| local.resume(id)).await
    }

    async fn logs(
        &self,
        id: &SandboxId,
        options: crate::core::logs::LogOptions,
    ) -> Result<crate::core::logs::LogStream> {
        self.on_owner(id.as_str(), |local| local.logs(id, options)).await
    }

    async fn stats(&self, id: &SandboxId) -> Result<crate::core::stats::SandboxStats> {
        self.on_owner(id.as_str(), |local| local.stats(id)).await
    }

    async fn usage(&self, id: &SandboxId) -> Result<crate::core::usage::SandboxUsage> {
        self.on_owner(id.as_str(), |local| local.usage(id)).await
    }

    /// On this node's docker backend (the relay sent a reset of another node's sandbox there),
    /// with the spec's files the node that completed the create handed over (`create.rs`).
    async fn reset(&self, id: &SandboxId) -> Result<crate::core::reset::ResetReport> {
        self.on_owner(id.as_str(), |local| local.reset(id)).await
    }

    async fn settle_exec(&self, handle: &SandboxHandle, result: ExecResult) -> Result<ExecResult> {
        SandboxBackend::settle_exec(&*self.local, handle, result).await
    }

    fn event_hub(&self) -> Option<Arc<crate::core::watch::EventHub>> {
        SandboxBackend::event_hub(&*self.local)
    }

    // Processes and file calls run where the sandbox runs (the relay brings them here), on this
    // node's Docker backend: the E2B endpoint's commands and filesystem calls need them.
    async fn start_process(
        &self,
        handle: &SandboxHandle,
        start: &crate::core::processes::ProcessStart,
    ) -> Result<crate::core::processes::Started> {
        self.on_owner(&handle.sandbox_id, |local| local.start_process(handle, start)).await
    }

    async fn list_processes(
        &self,
        handle: &SandboxHandle,
    ) -> Result<Vec<crate::core::processes::ProcessInfo>> {
        self.on_owner(&handle.sandbox_id, |local| local.list_processes(handle)).await
    }

    async fn attach_process(
        &self,
        handle: &SandboxHandle,
        process_id: &str,
        since: Option<u64>,
    ) -> Result<crate::core::processes::ProcessStream> {
        self.on_owner(&handle.sandbox_id, |local| local.attach_process(handle, process_id, since)).await
    }

    async fn signal_process(&self, handle: &SandboxHandle, process_id: &str, signal: i32) -> Result<()> {
        self.on_owner(&handle.sandbox_id, |local| local.signal_process(handle, process_id, signal)).await
    }

    async fn list_dir(
        &self,
        handle: &SandboxHandle,
        query: &crate::core::fs::ListDirQuery,
        user: Option<&crate::core::spec::User>,
    ) -> Result<crate::core::fs::EntryStream> {
        self.on_owner(&handle.sandbox_id, |local| local.list_dir(handle, query, user)).await
    }

    async fn stat(
        &self,
        handle: &SandboxHandle,
        path: &[u8],
        follow_links: bool,
        user: Option<&crate::core::spec::User>,
    ) -> Result<crate::core::fs::FileEntry> {
        self.on_owner(&handle.sandbox_id, |local| local.stat(handle, path, follow_links, user)).await
    }

    async fn file_op(
        &self,
        handle: &SandboxHandle,
        op: &crate::core::fs::FileOp,
        user: Option<&crate::core::spec::User>,
    ) -> Result<()> {
        self.on_owner(&handle.sandbox_id, |local| local.file_op(handle, op, user)).await
    }

    async fn watch_dir(
        &self,
        handle: &SandboxHandle,
        path: &[u8],
        recursive: bool,
        user: Option<&crate::core::spec::User>,
    ) -> Result<crate::core::fs::WatchStream> {
        self.on_owner(&handle.sandbox_id, |local| local.watch_dir(handle, path, recursive, user)).await
    }

    async fn peer_events(
        &self,
        filter: &crate::core::watch::WatchFilter,
    ) -> Option<crate::core::watch::PeerEvents> {
        Some(self.peers.merge(filter.clone()).await)
    }
}

/// Forgets every sandbox of this node whose container is removed (`DockerProvider::forget_gone`),
/// whoever removed it (a `Close` answered here, another node's sweep, Swarm giving the task up).
fn forget_gone(hub: Arc<crate::core::watch::EventHub>, local: Arc<DockerProvider>) {
    use tokio::sync::broadcast::error::RecvError;
    let mut events = hub.subscribe();
    tokio::spawn(async move {
        loop {
            match events.recv().await {
                Ok(event) if event.kind == crate::core::watch::EventKind::Removed => {
                    local.forget_gone(&event.sandbox.sandbox_id)
                }
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return,
            }
        }
    });
}
