//! `DockerProvider` behind the `SandboxBackend` seam: each method delegates to the inherent
//! method of the same name in the operation's own file (a grep for an RPC's name finds it).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::provider::DockerProvider;
use crate::backends::docker::pty::{PtyError, TerminalMode, TerminalProcess};
use crate::core::backend::{
    CreatePlan, CreatePolicy, ExecStream, FileDownload, SandboxBackend, TerminalSession, UploadSource,
};
use crate::core::branching::{DiffEntry, Forked, SnapshotInfo};
use crate::core::capabilities::{Capabilities, Capability};
use crate::core::expiry::{Owned, OwnedListing};
use crate::core::fs::{EntryStream, FileEntry, FileOp, ListDirQuery, WatchStream, Xattr};
use crate::core::inventory::{ListPage, ListQuery};
use crate::core::processes::{
    ForwardConnection, ForwardTarget, ProcessInfo, ProcessStart, ProcessStream, Started,
};
use crate::core::spec::{
    ExecParams, ExecResult, PtySpec, SandboxDescriptor, SandboxEndpoint, SandboxHandle, SandboxId,
    SandboxSpec, SandboxStatus, Signal, User,
};
use crate::error::Result;

#[async_trait::async_trait]
impl SandboxBackend for DockerProvider {
    /// Every capability but, on the docker exec engine (`exec.engine: docker`), kept terminal
    /// sessions: only the agent keeps a session across callers. (A runtime that cannot
    /// checkpoint refuses live checkpoints per sandbox, naming the runtime it needs; processes
    /// and file calls on the docker engine are FAILED_PRECONDITION, saying the agent is needed.)
    fn capabilities(&self) -> Capabilities {
        let all = Capabilities::all("docker");
        if self.keeps_terminal_sessions() {
            all
        } else {
            all.without(Capability::TerminalSessions)
        }
    }

    async fn create_planned(&self, spec: &SandboxSpec, plan: &CreatePlan) -> Result<SandboxHandle> {
        DockerProvider::create_planned(self, spec, plan).await
    }

    async fn list_owned(&self) -> Result<OwnedListing> {
        DockerProvider::list_owned(self).await
    }

    async fn remove_owned(&self, owned: &Owned) -> Result<()> {
        DockerProvider::remove_owned(self, owned).await
    }

    async fn ping(&self) -> Result<()> {
        self.ping_daemon().await
    }

    async fn lookup(&self, id: &SandboxId) -> Result<SandboxHandle> {
        self.handle(id.as_str()).await
    }

    async fn connect(&self, descriptor: &SandboxDescriptor) -> Result<SandboxHandle> {
        DockerProvider::connect(self, descriptor).await
    }

    async fn exec(&self, handle: &SandboxHandle, command: &str, params: &ExecParams) -> Result<ExecResult> {
        DockerProvider::exec(self, handle, command, params).await
    }

    async fn exec_stream(
        &self,
        handle: &SandboxHandle,
        command: &str,
        params: &ExecParams,
    ) -> Result<ExecStream> {
        DockerProvider::exec_stream(self, handle, command, params).await
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
        self.upload_reader(handle, source, size, path, mode, xattrs).await
    }

    async fn download(&self, handle: &SandboxHandle, path: &str) -> Result<Box<dyn FileDownload>> {
        self.download_stream(handle, path).await
    }

    async fn status(&self, id: &SandboxId) -> Result<SandboxStatus> {
        DockerProvider::status(self, id).await
    }

    async fn endpoint(&self, handle: &SandboxHandle, port: u16) -> Result<SandboxEndpoint> {
        DockerProvider::endpoint(self, handle, port).await
    }

    async fn close(&self, id: &SandboxId) -> Result<()> {
        DockerProvider::close(self, id).await
    }

    async fn open_terminal(
        &self,
        handle: &SandboxHandle,
        spec: &PtySpec,
    ) -> Result<Arc<dyn TerminalSession>> {
        self.open_engine_terminal(handle, spec).await
    }

    async fn attach_terminal(
        &self,
        handle: &SandboxHandle,
        attach: &crate::core::terminal::AttachSpec,
    ) -> Result<Arc<dyn TerminalSession>> {
        self.attach_engine_terminal(handle, attach).await
    }

    async fn list_terminals(
        &self,
        handle: &SandboxHandle,
    ) -> Result<Vec<crate::core::terminal::TerminalInfo>> {
        self.list_engine_terminals(handle).await
    }

    async fn close_terminals(&self) {
        DockerProvider::close_terminals(self).await
    }

    async fn list(&self, query: &ListQuery) -> Result<ListPage> {
        DockerProvider::list(self, query).await
    }

    fn default_exec_timeout(&self) -> Option<Duration> {
        self.config.exec.default_timeout
    }

    fn shutdown(&self) {
        super::cli::kill_all_clients();
    }

    async fn snapshot(
        &self,
        id: &SandboxId,
        labels: &BTreeMap<String, String>,
        max_snapshots: usize,
    ) -> Result<SnapshotInfo> {
        DockerProvider::snapshot(self, id, labels, max_snapshots).await
    }

    async fn list_snapshots(&self, filter: &BTreeMap<String, String>) -> Result<Vec<SnapshotInfo>> {
        DockerProvider::list_snapshots(self, filter).await
    }

    async fn delete_snapshot(&self, snapshot_id: &str) -> Result<()> {
        DockerProvider::delete_snapshot(self, snapshot_id).await
    }

    async fn remove_expired_snapshots(&self, ttl: Duration) -> Result<Vec<String>> {
        DockerProvider::remove_expired_snapshots(self, ttl).await
    }

    async fn fork(
        &self,
        id: &SandboxId,
        count: u32,
        labels: &BTreeMap<String, String>,
        max_snapshots: usize,
        policy: &CreatePolicy,
    ) -> Result<Forked> {
        DockerProvider::fork(self, id, count, labels, max_snapshots, policy).await
    }

    async fn checkpoint(
        &self,
        id: &SandboxId,
        labels: &BTreeMap<String, String>,
        leave_running: bool,
        max_snapshots: usize,
    ) -> Result<SnapshotInfo> {
        DockerProvider::checkpoint(self, id, labels, leave_running, max_snapshots).await
    }

    async fn fork_live(
        &self,
        id: Option<&SandboxId>,
        snapshot_id: Option<&str>,
        count: u32,
        labels: &BTreeMap<String, String>,
        max_snapshots: usize,
        policy: &CreatePolicy,
    ) -> Result<Forked> {
        DockerProvider::fork_live(self, id, snapshot_id, count, labels, max_snapshots, policy).await
    }

    async fn hibernate(&self, id: &SandboxId) -> Result<crate::core::branching::Hibernated> {
        DockerProvider::hibernate(self, id).await
    }

    async fn diff(&self, id: &SandboxId, path_prefix: Option<&str>) -> Result<Vec<DiffEntry>> {
        DockerProvider::diff(self, id, path_prefix).await
    }

    async fn pause(&self, id: &SandboxId) -> Result<()> {
        DockerProvider::pause(self, id).await
    }

    async fn resume(&self, id: &SandboxId) -> Result<()> {
        DockerProvider::resume(self, id).await
    }

    async fn logs(
        &self,
        id: &SandboxId,
        options: crate::core::logs::LogOptions,
    ) -> Result<crate::core::logs::LogStream> {
        self.container_logs(id.as_str(), options).await
    }

    async fn network_address(&self, id: &SandboxId) -> Result<crate::core::runtime::NetworkAddress> {
        DockerProvider::network_address(self, id).await
    }

    async fn prefetch_images(
        &self,
        images: &[String],
        nodes: &[String],
        sink: crate::core::images::ImageSink,
    ) -> Result<()> {
        if let Some(node) = nodes.iter().find(|n| n.as_str() != crate::core::images::ONE_HOST) {
            return Err(crate::error::ProviderError::invalid(
                "nodes",
                format!(
                    "this server is one host, not a cluster: leave nodes empty (or name {:?}); got {node:?}",
                    crate::core::images::ONE_HOST
                ),
            ));
        }
        self.prefetch_here(images, crate::core::images::ONE_HOST, &sink).await
    }

    async fn list_volumes(&self, tenant: Option<&str>) -> Result<Vec<crate::core::runtime::VolumeInfo>> {
        DockerProvider::list_volumes(self, tenant).await
    }

    async fn delete_volume(&self, tenant: Option<&str>, name: &str) -> Result<()> {
        DockerProvider::delete_volume(self, tenant, name).await
    }

    async fn image_id(&self, image: &str) -> Result<Option<String>> {
        DockerProvider::image_id(self, image).await
    }

    async fn commit_template(
        &self,
        id: &SandboxId,
        image: &str,
        config: &crate::core::templates::TemplateImageConfig,
    ) -> Result<()> {
        DockerProvider::commit_template(self, id, image, config).await
    }

    fn event_hub(&self) -> Option<Arc<crate::core::watch::EventHub>> {
        Some(self.states.hub())
    }

    async fn stats(&self, id: &SandboxId) -> Result<crate::core::stats::SandboxStats> {
        DockerProvider::stats(self, id).await
    }

    async fn settle_removals(&self) {
        DockerProvider::settle_removals(self).await
    }

    async fn reset(&self, id: &SandboxId) -> Result<crate::core::reset::ResetReport> {
        DockerProvider::reset(self, id).await
    }

    async fn usage(&self, id: &SandboxId) -> Result<crate::core::usage::SandboxUsage> {
        DockerProvider::usage(self, id).await
    }

    async fn settle_exec(&self, handle: &SandboxHandle, result: ExecResult) -> Result<ExecResult> {
        DockerProvider::settle_exec(self, &handle.sandbox_id, result).await
    }

    async fn apply_egress(&self, id: &SandboxId, plan: &crate::egress::EgressPlan) -> Result<()> {
        DockerProvider::apply_egress(self, id.as_str(), plan).await
    }

    async fn start_process(&self, handle: &SandboxHandle, start: &ProcessStart) -> Result<Started> {
        DockerProvider::start_process(self, handle, start).await
    }

    async fn list_processes(&self, handle: &SandboxHandle) -> Result<Vec<ProcessInfo>> {
        DockerProvider::list_processes(self, handle).await
    }

    async fn attach_process(
        &self,
        handle: &SandboxHandle,
        process_id: &str,
        since: Option<u64>,
    ) -> Result<ProcessStream> {
        DockerProvider::attach_process(self, handle, process_id, since).await
    }

    async fn signal_process(&self, handle: &SandboxHandle, process_id: &str, signal: i32) -> Result<()> {
        DockerProvider::signal_process(self, handle, process_id, signal).await
    }

    async fn port_forward(
        &self,
        handle: &SandboxHandle,
        target: &ForwardTarget,
    ) -> Result<ForwardConnection> {
        DockerProvider::port_forward(self, handle, target).await
    }

    async fn list_dir(
        &self,
        handle: &SandboxHandle,
        query: &ListDirQuery,
        user: Option<&User>,
    ) -> Result<EntryStream> {
        DockerProvider::list_dir(self, handle, query, user).await
    }

    async fn stat(
        &self,
        handle: &SandboxHandle,
        path: &[u8],
        follow_links: bool,
        user: Option<&User>,
    ) -> Result<FileEntry> {
        DockerProvider::stat(self, handle, path, follow_links, user).await
    }

    async fn file_op(&self, handle: &SandboxHandle, op: &FileOp, user: Option<&User>) -> Result<()> {
        DockerProvider::file_op(self, handle, op, user).await
    }

    async fn watch_dir(
        &self,
        handle: &SandboxHandle,
        path: &[u8],
        recursive: bool,
        user: Option<&User>,
    ) -> Result<WatchStream> {
        DockerProvider::watch_dir(self, handle, path, recursive, user).await
    }
}

#[async_trait::async_trait]
impl TerminalSession for TerminalProcess {
    fn id(&self) -> &str {
        TerminalProcess::id(self)
    }

    fn mode(&self) -> TerminalMode {
        TerminalProcess::mode(self)
    }

    fn closed(&self) -> bool {
        TerminalProcess::closed(self)
    }

    async fn read(&self, timeout: Option<Duration>) -> Result<Vec<u8>, PtyError> {
        TerminalProcess::read(self, timeout).await
    }

    async fn read_stderr(&self, timeout: Option<Duration>) -> Result<Vec<u8>, PtyError> {
        TerminalProcess::read_stderr(self, timeout).await
    }

    async fn write(&self, data: &[u8]) -> Result<(), PtyError> {
        TerminalProcess::write(self, data).await
    }

    async fn resize(&self, rows: u16, cols: u16) -> Result<(), PtyError> {
        TerminalProcess::resize(self, rows, cols).await
    }

    async fn send_signal(&self, signal: Signal) -> Result<(), PtyError> {
        TerminalProcess::deliver(self, signal).await
    }

    async fn wait_exit(&self, timeout: Option<Duration>) -> Result<i32, PtyError> {
        TerminalProcess::wait_exit(self, timeout).await
    }

    async fn close(&self) -> Result<(), PtyError> {
        TerminalProcess::close(self).await
    }

    async fn abandon(&self) {
        TerminalProcess::abandon(self).await
    }
}
