//! The seam between the gRPC service and whatever runs sandboxes.
//!
//! The service and the lifecycle layer hold an `Arc<dyn SandboxBackend>`; `backends::docker`'s
//! `DockerProvider` and `backends::swarm`'s `SwarmBackend` implement it (and `testkit::fake` in
//! memory). A new backend implements this trait under `backends/` and is picked in `wiring.rs`.
//! Types crossing the seam are neutral (`crate::core::spec`); Docker's words (container states,
//! CLI errors, argv) stay below `backends/docker/`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncBufRead;

use crate::core::branching::{DiffEntry, Forked, SnapshotInfo, FORK_PARALLELISM};
use crate::core::capabilities::{Capabilities, Capability};
use crate::core::expiry::{Owned, OwnedListing};
use crate::core::fs::{EntryStream, FileEntry, FileOp, ListDirQuery, WatchStream, Xattr};
use crate::core::inventory::{ListPage, ListQuery};
use crate::core::lease::LeasePolicy;
use crate::core::processes::{
    ForwardConnection, ForwardTarget, ProcessInfo, ProcessStart, ProcessStream, Started,
};
use crate::core::spec::{
    ExecParams, ExecResult, PtySpec, SandboxDescriptor, SandboxEndpoint, SandboxHandle, SandboxId,
    SandboxSpec, SandboxStatus, User,
};
use crate::core::terminal::{AttachSpec, PtyError, TerminalInfo, TerminalMode};
use crate::error::{ProviderError, Result};

/// A byte source for an upload: the gRPC stream or a spool file, boxed so the trait stays
/// object-safe.
pub type UploadSource<'a> = Box<dyn AsyncBufRead + Send + Unpin + 'a>;

/// How one create runs: the id it will have, its lease (already under the operator's policy,
/// [`CreatePolicy`]), and the bound on the whole create (run, readiness, files).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatePlan {
    pub id: SandboxId,
    pub ttl: Option<Duration>,
    pub timeout: Duration,
}

impl CreatePlan {
    /// A fresh id, the lease `spec.ttl_s` asks for, the default create bound.
    pub fn for_spec(spec: &SandboxSpec) -> Self {
        use crate::config::{DEFAULT_CREATE_TIMEOUT, MAX_CLIENT_SECONDS};
        Self {
            id: SandboxId::generate(),
            ttl: spec.ttl_s.filter(|t| *t > 0.0 && *t <= MAX_CLIENT_SECONDS).map(Duration::from_secs_f64),
            timeout: DEFAULT_CREATE_TIMEOUT,
        }
    }
}

/// The one policy every path that makes a sandbox is planned by (create, create from a
/// snapshot, a fork's children; a pool member's lease when it is claimed): the operator's lease
/// cap and default, and the bound on one create. Decided above the seam; a backend that makes
/// sandboxes of its own accord (a fork's children) plans each with it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CreatePolicy {
    pub lease: LeasePolicy,
    /// The operator's bound on one create (`server.create_timeout_s`).
    pub timeout: Duration,
}

impl Default for CreatePolicy {
    /// No lease cap or default, the default create bound.
    fn default() -> Self {
        Self { lease: LeasePolicy::default(), timeout: crate::config::DEFAULT_CREATE_TIMEOUT }
    }
}

impl CreatePolicy {
    /// `count` children of a fork, each `spec` (its snapshot set) planned by this policy with
    /// `spec`'s lease and made by `create`, at most `FORK_PARALLELISM` at once: all of them, or
    /// the first failure with the children that did start, for the caller to remove with its
    /// snapshot. Every backend's fork starts its children this way.
    pub async fn start_children<F, Fut>(
        &self,
        spec: &SandboxSpec,
        count: u32,
        create: F,
    ) -> std::result::Result<Vec<SandboxHandle>, (ProviderError, Vec<SandboxHandle>)>
    where
        F: Fn(CreatePlan) -> Fut,
        Fut: std::future::Future<Output = Result<SandboxHandle>>,
    {
        use futures_util::StreamExt;
        let requested = requested_lease(spec);
        let children = (0..count).map(|_| create(self.plan(requested, None)));
        let results: Vec<Result<SandboxHandle>> =
            futures_util::stream::iter(children).buffer_unordered(FORK_PARALLELISM).collect().await;
        let mut started = Vec::new();
        let mut first = None;
        for result in results {
            match result {
                Ok(handle) => started.push(handle),
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        match first {
            None => Ok(started),
            Some(e) => Err((e, started)),
        }
    }

    /// The lease of a fork's children made from `spec`, under this policy.
    pub fn children_ttl(&self, spec: &SandboxSpec) -> Option<Duration> {
        self.lease.ttl(requested_lease(spec))
    }

    /// A fresh id, the lease `requested` under the policy, the create bound (the caller's
    /// `deadline` when that is shorter).
    pub fn plan(&self, requested: Option<Duration>, deadline: Option<Duration>) -> CreatePlan {
        CreatePlan {
            id: SandboxId::generate(),
            ttl: self.lease.ttl(requested),
            timeout: deadline.map_or(self.timeout, |d| d.min(self.timeout)),
        }
    }
}

/// The lease `spec` asks for (`ttl_s`), if it is one a `Duration` can hold.
fn requested_lease(spec: &SandboxSpec) -> Option<Duration> {
    spec.ttl_s.and_then(|s| Duration::try_from_secs_f64(s).ok())
}

/// Creates, finds, drives and removes sandboxes. Every method takes ids already validated at
/// the boundary and returns neutral types; failures are `ProviderError`s the service maps to
/// status codes.
#[async_trait::async_trait]
pub trait SandboxBackend: Send + Sync + 'static {
    /// What this backend offers beyond the calls every backend answers, declared (no default,
    /// so a new backend says it): the call path refuses the RPCs of a capability it lacks
    /// before they reach it, and the conformance suite holds it to what it declares.
    fn capabilities(&self) -> Capabilities;

    /// What the trait's methods of `capability` answer unless the backend implements them:
    /// the refusal naming it when the backend does not offer it, else UNIMPLEMENTED saying the
    /// backend declares it and forgot this call (the conformance suite fails on it).
    fn refuse(&self, capability: Capability) -> ProviderError {
        let capabilities = self.capabilities();
        if capabilities.has(capability) {
            ProviderError::Unimplemented(format!(
                "a defect: the {} backend declares {capability} but does not implement this call of it",
                capabilities.backend()
            ))
        } else {
            capability.lacking(capabilities.backend())
        }
    }

    /// Create sandbox `plan.id` with `spec.files` written, leased for `plan.ttl`, within
    /// `plan.timeout`: complete, or failed with nothing left behind. A create whose process
    /// dies halfway must be listed as unfinished by `list_owned`.
    async fn create_planned(&self, spec: &SandboxSpec, plan: &CreatePlan) -> Result<SandboxHandle>;

    /// Everything this service owns, sandboxes and unfinished creates, with the facts the
    /// expiry rule needs (`crate::core::expiry`), and what was destroyed since the last listing. The
    /// backend lists; it does not decide what expires.
    async fn list_owned(&self) -> Result<OwnedListing>;

    /// Remove one thing `list_owned` listed, as the sweep decided (already gone is success).
    async fn remove_owned(&self, owned: &Owned) -> Result<()>;

    /// Whether the backend's daemon answers now (the health probe); `Unavailable` when not.
    async fn ping(&self) -> Result<()> {
        Ok(())
    }

    /// The handle of a sandbox this service owns (`SandboxNotFound` for any other id).
    async fn lookup(&self, id: &SandboxId) -> Result<SandboxHandle>;

    /// Re-attach from a serialized descriptor; refuses sandboxes this service does not own.
    async fn connect(&self, descriptor: &SandboxDescriptor) -> Result<SandboxHandle>;

    /// Run one command; its failure is a result, only bad arguments are errors.
    async fn exec(&self, handle: &SandboxHandle, command: &str, params: &ExecParams) -> Result<ExecResult>;

    /// As `exec`, with stdout and stderr delivered as they are produced and the exit (code,
    /// error type, accounting) last. Dropping the stream stops the command and, where the
    /// backend can, everything it started.
    async fn exec_stream(
        &self,
        handle: &SandboxHandle,
        command: &str,
        params: &ExecParams,
    ) -> Result<ExecStream>;

    /// Write `size` bytes from `source` to `path` (parents created, root-owned, `mode`, with
    /// the `user.` extended attributes `xattrs`, already checked by `core::fs::check_xattrs`).
    async fn upload(
        &self,
        handle: &SandboxHandle,
        source: UploadSource<'_>,
        size: u64,
        path: &str,
        mode: Option<u32>,
        xattrs: &[Xattr],
    ) -> Result<u64>;

    /// Open a streaming read of one regular file. Path errors come here, before any byte.
    async fn download(&self, handle: &SandboxHandle, path: &str) -> Result<Box<dyn FileDownload>>;

    /// The lifecycle state of a sandbox by id (`Stopped` for one this process closed).
    async fn status(&self, id: &SandboxId) -> Result<SandboxStatus>;

    /// The host URL of a port the sandbox was created with.
    async fn endpoint(&self, handle: &SandboxHandle, port: u16) -> Result<SandboxEndpoint>;

    /// Remove a sandbox and end its terminal sessions; already gone is success.
    async fn close(&self, id: &SandboxId) -> Result<()>;

    /// Open an interactive terminal (or a pipe-mode process) in the sandbox.
    async fn open_terminal(&self, handle: &SandboxHandle, spec: &PtySpec)
        -> Result<Arc<dyn TerminalSession>>;

    /// Hold a session the sandbox keeps (`PtyAttach`): replay from `attach.since`, then live.
    /// Unknown id: `SessionNotFound`; held without takeover: `SessionHeld`; `since` older than
    /// what is retained: `OutOfRange`.
    async fn attach_terminal(
        &self,
        _handle: &SandboxHandle,
        _attach: &AttachSpec,
    ) -> Result<Arc<dyn TerminalSession>> {
        Err(self.refuse(Capability::TerminalSessions))
    }

    /// The sessions the sandbox keeps, oldest first (`ListPtySessions`).
    async fn list_terminals(&self, _handle: &SandboxHandle) -> Result<Vec<TerminalInfo>> {
        Err(self.refuse(Capability::TerminalSessions))
    }

    /// Let go of every terminal session this backend holds, as a dropped stream would (the
    /// sandboxes stay; a session with a detach timeout outlives the server).
    async fn close_terminals(&self);

    /// One page of the sandboxes this service owns, filtered by metadata labels (all must
    /// match) and states, oldest first. Only sandboxes this service created are ever listed.
    async fn list(&self, query: &ListQuery) -> Result<ListPage>;

    /// The default exec timeout when a call names none.
    fn default_exec_timeout(&self) -> Option<Duration>;

    /// The server is exiting: end at once every host process this backend runs for its
    /// sandboxes (the sandboxes themselves stay). Synchronous, so a second signal can call it
    /// just before the process exits.
    fn shutdown(&self);

    /// Commit the sandbox's filesystem to a snapshot this service owns, consistently (the
    /// sandbox is frozen for it; a paused one stays paused). At most `max_snapshots` snapshots
    /// exist at once (`ResourceExhausted`).
    async fn snapshot(
        &self,
        id: &SandboxId,
        labels: &BTreeMap<String, String>,
        max_snapshots: usize,
    ) -> Result<SnapshotInfo> {
        let _ = (id, labels, max_snapshots);
        Err(self.refuse(Capability::Snapshots))
    }

    /// The snapshots this service owns carrying every label of `filter`, oldest first.
    async fn list_snapshots(&self, filter: &BTreeMap<String, String>) -> Result<Vec<SnapshotInfo>> {
        let _ = filter;
        Err(self.refuse(Capability::Snapshots))
    }

    /// Remove a snapshot this service owns (`SnapshotNotFound` otherwise); one a sandbox still
    /// runs from is kept (`SnapshotInUse`).
    async fn delete_snapshot(&self, snapshot_id: &str) -> Result<()> {
        let _ = snapshot_id;
        Err(self.refuse(Capability::Snapshots))
    }

    /// Remove the snapshots older than `ttl` that no sandbox uses; returns their ids. (Never
    /// called on a backend without [`Capability::Snapshots`].)
    async fn remove_expired_snapshots(&self, ttl: Duration) -> Result<Vec<String>> {
        let _ = ttl;
        Err(self.refuse(Capability::Snapshots))
    }

    /// `count` new sandboxes from one fresh snapshot of `id`, with its env, workdir, ports (new
    /// host ports), limits and lease length, all or nothing, each planned by `policy` (its lease
    /// the source's length under the operator's cap). The source keeps running.
    async fn fork(
        &self,
        id: &SandboxId,
        count: u32,
        labels: &BTreeMap<String, String>,
        max_snapshots: usize,
        policy: &CreatePolicy,
    ) -> Result<Forked> {
        let _ = (id, count, labels, max_snapshots, policy);
        Err(self.refuse(Capability::Snapshots))
    }

    /// A live snapshot of a running sandbox (processes, memory and files of one moment) the
    /// snapshot calls list, delete and expire; with `leave_running` the sandbox goes on, else it
    /// stays stopped. A runtime that cannot checkpoint is `FailedPrecondition` naming the one
    /// needed.
    async fn checkpoint(
        &self,
        id: &SandboxId,
        labels: &BTreeMap<String, String>,
        leave_running: bool,
        max_snapshots: usize,
    ) -> Result<SnapshotInfo> {
        let _ = (labels, leave_running, max_snapshots);
        let _ = id;
        Err(self.refuse(Capability::LiveCheckpoints))
    }

    /// `count` sandboxes restored from a live snapshot (`snapshot_id`'s, else a fresh one of
    /// `id`, which goes on), their processes continuing from it; all or nothing, planned by
    /// `policy` as `fork`'s children are.
    async fn fork_live(
        &self,
        id: Option<&SandboxId>,
        snapshot_id: Option<&str>,
        count: u32,
        labels: &BTreeMap<String, String>,
        max_snapshots: usize,
        policy: &CreatePolicy,
    ) -> Result<Forked> {
        let _ = (id, snapshot_id, count, labels, max_snapshots, policy);
        Err(self.refuse(Capability::LiveCheckpoints))
    }

    /// Checkpoint the sandbox to disk and stop it (its memory freed) until `resume`.
    async fn hibernate(&self, id: &SandboxId) -> Result<crate::core::branching::Hibernated> {
        let _ = id;
        Err(self.refuse(Capability::LiveCheckpoints))
    }

    /// The paths added, changed and deleted since the sandbox started (or since its
    /// snapshot), at or below `path_prefix` when given, the service's own files left out.
    async fn diff(&self, id: &SandboxId, path_prefix: Option<&str>) -> Result<Vec<DiffEntry>>;

    /// Freeze every process of the sandbox; pausing a paused sandbox succeeds.
    async fn pause(&self, id: &SandboxId) -> Result<()>;

    /// Thaw a paused sandbox (or wake a hibernated one); resuming a running sandbox succeeds.
    async fn resume(&self, id: &SandboxId) -> Result<()>;

    /// What the sandbox's main process wrote to stdout and stderr (and, with
    /// `options.follow`, writes next); running or stopped sandboxes alike.
    async fn logs(
        &self,
        id: &SandboxId,
        options: crate::core::logs::LogOptions,
    ) -> Result<crate::core::logs::LogStream>;

    /// The sandbox's address on its `spec.network` (or on the network it runs on).
    async fn network_address(&self, id: &SandboxId) -> Result<crate::core::runtime::NetworkAddress> {
        let _ = id;
        Err(self.refuse(Capability::NetworkAddress))
    }

    /// `PrefetchImages`: make `images` (checked) present on `nodes` (empty: every node),
    /// sending each step to `sink`; an image a node cannot get is a `Failed` step, not an error.
    async fn prefetch_images(
        &self,
        images: &[String],
        nodes: &[String],
        sink: crate::core::images::ImageSink,
    ) -> Result<()> {
        let _ = (images, nodes, sink);
        Err(self.refuse(Capability::ImagePrefetch))
    }

    /// The id of image `image` on this backend (`None`: it does not have it): what a
    /// template's key is computed from.
    async fn image_id(&self, image: &str) -> Result<Option<String>> {
        let _ = image;
        Err(self.refuse(Capability::Templates))
    }

    /// Commit sandbox `id`'s filesystem as template image `image` with `config`; a commit cut
    /// off leaves no image.
    async fn commit_template(
        &self,
        id: &SandboxId,
        image: &str,
        config: &crate::core::templates::TemplateImageConfig,
    ) -> Result<()> {
        let _ = (id, image, config);
        Err(self.refuse(Capability::Templates))
    }

    /// The named volumes this service owns for `tenant` (`None`: the tenant-less ones).
    async fn list_volumes(&self, tenant: Option<&str>) -> Result<Vec<crate::core::runtime::VolumeInfo>> {
        let _ = tenant;
        Err(self.refuse(Capability::Volumes))
    }

    /// Remove `tenant`'s volume `name`; gone is success, one a sandbox mounts is `InUse`.
    async fn delete_volume(&self, tenant: Option<&str>, name: &str) -> Result<()> {
        let _ = (tenant, name);
        Err(self.refuse(Capability::Volumes))
    }
    // --- events and usage ---

    /// Where the lifecycle events of the sandboxes this service owns are published (`Watch`),
    /// its source started; `None`: this backend cannot tell them.
    fn event_hub(&self) -> Option<Arc<crate::core::watch::EventHub>> {
        None
    }

    /// A cluster's other nodes' events for one watcher, merged into its stream beside
    /// [`Self::event_hub`]'s (which tells this node's own); resolves once each node answering
    /// now is subscribed (or a few seconds passed), so a listing made after it misses little.
    /// `None`: this backend is all there is (one host).
    async fn peer_events(
        &self,
        filter: &crate::core::watch::WatchFilter,
    ) -> Option<crate::core::watch::PeerEvents> {
        let _ = filter;
        None
    }

    /// The sandbox's resource usage now (running or paused; `Stopped` otherwise).
    async fn stats(&self, id: &SandboxId) -> Result<crate::core::stats::SandboxStats> {
        let _ = id;
        Err(self.refuse(Capability::Stats))
    }

    /// How a streamed exec's end reads once the backend has looked (its failure kind: an OOM
    /// kill, a sandbox gone, a lost agent); a paused sandbox may be the `Paused` error. The
    /// unary `exec` does this itself.
    async fn settle_exec(&self, handle: &SandboxHandle, result: ExecResult) -> Result<ExecResult> {
        let _ = handle;
        Ok(result)
    }

    /// Wait for removals `close` left to finish in the background (a shutdown).
    async fn settle_removals(&self) {}

    /// `Reset`: the sandbox back to the state it was created in (files, processes), its id,
    /// lease, labels and tokens kept, no container created or removed.
    async fn reset(&self, _id: &SandboxId) -> Result<crate::core::reset::ResetReport> {
        Err(self.refuse(Capability::Reset))
    }

    /// What the sandbox used since it started (running or paused; `Stopped` otherwise).
    async fn usage(&self, id: &SandboxId) -> Result<crate::core::usage::SandboxUsage> {
        let _ = id;
        Err(self.refuse(Capability::Usage))
    }

    /// Enforce `plan` on the running sandbox `id`, replacing what was enforced before, from
    /// outside the sandbox so nothing in it can undo it. A backend that cannot refuses.
    async fn apply_egress(&self, id: &SandboxId, plan: &crate::egress::EgressPlan) -> Result<()> {
        let _ = (id, plan);
        Err(self.refuse(Capability::Egress))
    }
    // --- processes and ports (crate::core::processes) ---
    /// Start a background process (checked already); it outlives every caller.
    async fn start_process(&self, _handle: &SandboxHandle, _start: &ProcessStart) -> Result<Started> {
        Err(self.refuse(Capability::Processes))
    }

    /// Every process and terminal session of the sandbox, oldest first.
    async fn list_processes(&self, _handle: &SandboxHandle) -> Result<Vec<ProcessInfo>> {
        Err(self.refuse(Capability::Processes))
    }

    /// Stream a process's output from `since` (`None`: the oldest retained byte), then its exit.
    async fn attach_process(
        &self,
        _handle: &SandboxHandle,
        _process_id: &str,
        _since: Option<u64>,
    ) -> Result<ProcessStream> {
        Err(self.refuse(Capability::Processes))
    }

    /// Signal a process's group.
    async fn signal_process(&self, _handle: &SandboxHandle, _process_id: &str, _signal: i32) -> Result<()> {
        Err(self.refuse(Capability::Processes))
    }

    /// One TCP connection from inside the sandbox to `target`.
    async fn port_forward(
        &self,
        _handle: &SandboxHandle,
        _target: &ForwardTarget,
    ) -> Result<ForwardConnection> {
        Err(self.refuse(Capability::PortForward))
    }

    // --- files --- (acted on as `user`, else the sandbox's user; paths checked at the boundary)

    /// A directory's entries to `query.depth` levels, in batches.
    async fn list_dir(
        &self,
        _handle: &SandboxHandle,
        _query: &ListDirQuery,
        _user: Option<&User>,
    ) -> Result<EntryStream> {
        Err(self.refuse(Capability::FileCalls))
    }

    /// One path's entry.
    async fn stat(
        &self,
        _handle: &SandboxHandle,
        _path: &[u8],
        _follow_links: bool,
        _user: Option<&User>,
    ) -> Result<FileEntry> {
        Err(self.refuse(Capability::FileCalls))
    }

    /// MakeDir, Remove or Rename.
    async fn file_op(&self, _handle: &SandboxHandle, _op: &FileOp, _user: Option<&User>) -> Result<()> {
        Err(self.refuse(Capability::FileCalls))
    }

    /// Changes below a directory from the moment this returns.
    async fn watch_dir(
        &self,
        _handle: &SandboxHandle,
        _path: &[u8],
        _recursive: bool,
        _user: Option<&User>,
    ) -> Result<WatchStream> {
        Err(self.refuse(Capability::FileCalls))
    }
}

/// One step of a streamed command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    /// The last event: exit code, error type and accounting; no stdout, and stderr only the
    /// reason a command did not run to its exit (it becomes `ExecExit.message`).
    Exit(ExecResult),
}

/// A command whose output arrives as it is produced. Dropping it stops the command.
pub struct ExecStream {
    events: tokio::sync::mpsc::Receiver<StreamEvent>,
    stop: Option<Box<dyn FnOnce() + Send>>,
}

impl ExecStream {
    /// Events from `events`; `stop` runs when the stream is dropped before its exit.
    pub fn new(events: tokio::sync::mpsc::Receiver<StreamEvent>, stop: Box<dyn FnOnce() + Send>) -> Self {
        Self { events, stop: Some(stop) }
    }

    /// A stream that only reports how the command ended (it never started).
    pub fn finished(result: ExecResult) -> Self {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let _ = tx.try_send(StreamEvent::Exit(result));
        Self { events: rx, stop: None }
    }

    /// The next event; `None` after `Exit`.
    pub async fn next(&mut self) -> Option<StreamEvent> {
        let event = self.events.recv().await;
        if matches!(event, Some(StreamEvent::Exit(_))) {
            self.stop = None;
        }
        event
    }
}

impl Drop for ExecStream {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            stop();
        }
    }
}

/// A file coming out of a sandbox, chunk by chunk.
#[async_trait::async_trait]
pub trait FileDownload: Send {
    /// The file's size in bytes.
    fn size(&self) -> u64;
    /// The next chunk, `None` at the end.
    async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>>;
}

/// A live terminal session, as the `Pty` RPC drives it.
#[async_trait::async_trait]
pub trait TerminalSession: Send + Sync {
    /// Its id (also the marker in its process's environment).
    fn id(&self) -> &str;
    /// Terminal or pipes.
    fn mode(&self) -> TerminalMode;
    /// Whether the session has ended.
    fn closed(&self) -> bool;
    /// Output (stdout in pipe mode); empty at the end. `Timeout` when nothing came in time.
    async fn read(&self, timeout: Option<Duration>) -> Result<Vec<u8>, PtyError>;
    /// Standard error (pipe mode only); empty at the end.
    async fn read_stderr(&self, timeout: Option<Duration>) -> Result<Vec<u8>, PtyError>;
    /// Bytes typed into the terminal (stdin in pipe mode).
    async fn write(&self, data: &[u8]) -> Result<(), PtyError>;
    /// Close the program's stdin (pipe mode); its output and exit still come.
    async fn end_input(&self) -> Result<(), PtyError> {
        Err(PtyError::Unsupported(
            "closing a session's stdin needs the sandbox's agent (this one runs through docker exec)".into(),
        ))
    }
    /// A new terminal size.
    async fn resize(&self, rows: u16, cols: u16) -> Result<(), PtyError>;
    /// Deliver a signal to the session's foreground group.
    async fn send_signal(&self, signal: crate::core::spec::Signal) -> Result<(), PtyError>;
    /// The program's exit code (128 + n for signal n).
    async fn wait_exit(&self, timeout: Option<Duration>) -> Result<i32, PtyError>;
    /// End the session's processes and release it.
    async fn close(&self) -> Result<(), PtyError>;
    /// Offset in the session's output of the first byte this stream carries.
    fn offset(&self) -> u64 {
        0
    }
    /// End this stream cleanly and leave the session running (`PtyDetach`).
    async fn detach(&self) -> Result<(), PtyError> {
        Err(PtyError::Unsupported(
            "this session cannot outlive its stream (the sandbox runs terminals through docker exec)".into(),
        ))
    }
    /// The stream went away (cancelled, half-closed, the server shutting down): a session
    /// without a detach timeout ends (HUP, then KILL), one with it waits that long for an attach.
    async fn release(&self) {
        if let Err(e) = self.close().await {
            tracing::warn!(error = %e, "closing pty session failed");
        }
    }
    /// Release the session without cleaning up in the sandbox (it is gone with its sandbox).
    async fn abandon(&self);
}

impl From<PtyError> for ProviderError {
    fn from(e: PtyError) -> Self {
        match e {
            PtyError::Invalid { field, message } => ProviderError::InvalidArgument { field, message },
            PtyError::Unsupported(message) => ProviderError::Unimplemented(message),
            other => ProviderError::Pty(other.to_string()),
        }
    }
}
