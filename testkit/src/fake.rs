//! A `SandboxBackend` in memory, for fast in-process tests of everything above the seam (the
//! service, the lifecycle, the sweep, pools, the access rules) without a Docker daemon.
//!
//! What it models: sandboxes (create with `spec.files` or from a snapshot, lookup, connect,
//! status, pause, resume, reset (files back to the spec's), close, list with labels, states,
//! tenants, pools and paging as `core::inventory::page` does), their files (upload, download),
//! snapshots and forks of their files (listed, deleted, kept while a sandbox runs from one),
//! diffs against what they started from, streamed execs, logs (the main process writes
//! nothing), leases as `list_owned` reports them, and a tiny shell: `echo WORDS…` prints the
//! words, `exit N` returns N, `cat FILE` prints an uploaded file; any other command returns 127
//! with a message. Its declared capabilities ([`SandboxBackend::capabilities`]) are snapshots,
//! reset and usage; the rest the call path refuses before they reach it. Terminals and
//! endpoints it refuses with UNIMPLEMENTED, naming the call.
//! Usage is modelled as wall time since the create and a tenth of it as CPU time.
//! Every call is recorded ([`FakeBackend::calls`]) so a test can tell what reached the seam.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use sandboxd::core::backend::{
    CreatePlan, CreatePolicy, ExecStream, FileDownload, SandboxBackend, StreamEvent, TerminalSession,
    UploadSource,
};
use sandboxd::core::branching::{DiffEntry, DiffKind, Forked, SnapshotInfo};
use sandboxd::core::capabilities::{Capabilities, Capability};
use sandboxd::core::expiry::{Owned, OwnedListing};
use sandboxd::core::fs::Xattr;
use sandboxd::core::inventory::{ListPage, ListQuery, SandboxSummary};
use sandboxd::core::logs::{LogOptions, LogStream};
use sandboxd::core::spec::{
    ExecParams, ExecResult, PtySpec, SandboxDescriptor, SandboxEndpoint, SandboxHandle, SandboxId,
    SandboxSpec, SandboxStatus,
};
use sandboxd::ProviderError;
use tokio::io::AsyncReadExt;

type Result<T> = std::result::Result<T, ProviderError>;

/// One sandbox as the fake keeps it.
#[derive(Debug, Clone)]
pub struct FakeSandbox {
    pub handle: SandboxHandle,
    pub status: SandboxStatus,
    pub created_ns: i128,
    pub expires_ms: Option<i64>,
    pub pool: Option<String>,
    pub files: BTreeMap<String, Vec<u8>>,
    /// What it started from (the spec's files, or its snapshot's): what `reset` puts back and
    /// `diff` compares with.
    pub baseline: BTreeMap<String, Vec<u8>>,
    /// The snapshot it started from, which cannot be deleted while it runs.
    pub snapshot_id: Option<String>,
}

impl FakeSandbox {
    /// A sandbox running from `files`, leased for `ttl`.
    fn started(
        handle: SandboxHandle,
        files: BTreeMap<String, Vec<u8>>,
        ttl: Option<Duration>,
        pool: Option<String>,
        snapshot_id: Option<String>,
    ) -> Self {
        FakeSandbox {
            handle,
            status: SandboxStatus::Running,
            created_ns: now_ns(),
            expires_ms: ttl.map(|ttl| sandboxd::core::lease::now_ms() + ttl.as_millis() as i64),
            pool,
            baseline: files.clone(),
            files,
            snapshot_id,
        }
    }
}

/// One snapshot as the fake keeps it: its facts and the files it holds.
#[derive(Debug, Clone)]
struct FakeSnapshot {
    info: SnapshotInfo,
    files: BTreeMap<String, Vec<u8>>,
}

/// The in-memory backend.
#[derive(Default)]
pub struct FakeBackend {
    sandboxes: Mutex<BTreeMap<String, FakeSandbox>>,
    snapshots: Mutex<BTreeMap<String, FakeSnapshot>>,
    calls: Mutex<Vec<String>>,
    gone: Mutex<Vec<String>>,
    /// Creates fail with this error's message (as a `Create` error) while set.
    fail_creates: Mutex<Option<String>>,
    /// How long each create takes (a slow daemon under a burst).
    create_delay: Mutex<Duration>,
    /// Every n-th create takes this long instead (a loaded host's slow tail), when set.
    slow_tail: Mutex<Option<(u64, Duration)>>,
    /// Creates begun so far (for `slow_tail`).
    begun: std::sync::atomic::AtomicU64,
    /// Creates under way now, and the most there ever were at once.
    creating: std::sync::atomic::AtomicUsize,
    most_creating: std::sync::atomic::AtomicUsize,
}

impl FakeBackend {
    pub fn new() -> Self {
        Self::default()
    }

    /// The backend methods called so far, in order (`"create_planned"`, `"exec"`, …).
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    /// The sandboxes it holds now, by id.
    pub fn sandboxes(&self) -> BTreeMap<String, FakeSandbox> {
        self.sandboxes.lock().unwrap().clone()
    }

    /// Creates fail (`Create` error, FAILED_PRECONDITION) with `reason` until called with `None`.
    pub fn fail_creates(&self, reason: Option<&str>) {
        *self.fail_creates.lock().unwrap() = reason.map(String::from);
    }

    /// Each create takes `delay` from now on (a loaded daemon).
    pub fn slow_creates(&self, delay: Duration) {
        *self.create_delay.lock().unwrap() = delay;
    }

    /// Every `every`-th create takes `delay` instead of `slow_creates`' (the slow tail of a
    /// loaded host, far above the average).
    pub fn slow_tail(&self, every: u64, delay: Duration) {
        *self.slow_tail.lock().unwrap() = Some((every.max(1), delay));
    }

    /// The most creates that were ever under way at once.
    pub fn most_creates_at_once(&self) -> usize {
        self.most_creating.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The sandbox stops, as its main process ending would.
    pub fn stop(&self, id: &str) {
        if let Some(s) = self.sandboxes.lock().unwrap().get_mut(id) {
            s.status = SandboxStatus::Stopped;
        }
    }

    fn note(&self, call: &str) {
        self.calls.lock().unwrap().push(call.to_string());
    }

    fn with<T>(&self, id: &str, f: impl FnOnce(&mut FakeSandbox) -> Result<T>) -> Result<T> {
        match self.sandboxes.lock().unwrap().get_mut(id) {
            Some(s) => f(s),
            None => Err(ProviderError::SandboxNotFound(id.to_string())),
        }
    }

    fn running(&self, id: &str) -> Result<()> {
        self.with(id, |s| match s.status {
            SandboxStatus::Running => Ok(()),
            SandboxStatus::Paused => Err(ProviderError::Paused(format!("sandbox {id} is paused"))),
            _ => Err(ProviderError::Stopped(format!("sandbox {id} is not running"))),
        })
    }

    fn unmodelled<T>(&self, call: &str) -> Result<T> {
        self.note(call);
        Err(ProviderError::Unimplemented(format!("the fake backend does not model {call}")))
    }
}

fn now_ns() -> i128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i128
}

/// The fake's shell: `echo`, `exit`, `cat`; 127 for anything else.
fn run(command: &str, files: &BTreeMap<String, Vec<u8>>) -> ExecResult {
    let words: Vec<&str> = command.split_whitespace().collect();
    let done = |stdout: Vec<u8>, stderr: Vec<u8>, return_code: i32| ExecResult {
        stdout,
        stderr,
        return_code,
        error_type: None,
        failure_kind: None,
        usage: None,
    };
    match words.split_first() {
        Some((&"echo", rest)) => done(format!("{}\n", rest.join(" ")).into_bytes(), vec![], 0),
        Some((&"exit", [code])) => done(vec![], vec![], code.parse().unwrap_or(2)),
        Some((&"cat", [path])) => match files.get(*path) {
            Some(content) => done(content.clone(), vec![], 0),
            None => done(vec![], format!("cat: {path}: No such file or directory\n").into_bytes(), 1),
        },
        _ => done(vec![], format!("fake backend: {command:?} is not modelled\n").into_bytes(), 127),
    }
}

struct Download(Option<Vec<u8>>, u64);

#[async_trait::async_trait]
impl FileDownload for Download {
    fn size(&self) -> u64 {
        self.1
    }

    async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>> {
        Ok(self.0.take().filter(|c| !c.is_empty()))
    }
}

#[async_trait::async_trait]
impl SandboxBackend for FakeBackend {
    async fn create_planned(&self, spec: &SandboxSpec, plan: &CreatePlan) -> Result<SandboxHandle> {
        self.note("create_planned");
        if let Some(reason) = self.fail_creates.lock().unwrap().clone() {
            return Err(ProviderError::Create(reason));
        }
        let mut delay = *self.create_delay.lock().unwrap();
        let nth = self.begun.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        if let Some((every, slow)) = *self.slow_tail.lock().unwrap() {
            if nth.is_multiple_of(every) {
                delay = slow;
            }
        }
        if !delay.is_zero() {
            use std::sync::atomic::Ordering::SeqCst;
            let now = self.creating.fetch_add(1, SeqCst) + 1;
            self.most_creating.fetch_max(now, SeqCst);
            tokio::time::sleep(delay).await;
            self.creating.fetch_sub(1, SeqCst);
        }
        let handle = SandboxHandle {
            sandbox_id: plan.id.as_str().to_string(),
            image: spec.image.clone(),
            shell: "sh".into(),
            ports: spec.ports.clone(),
            workdir: spec.workdir.clone(),
            runtime: spec.runtime.clone(),
            metadata: spec.metadata.clone(),
            tenant: spec.tenant.clone(),
        };
        let mut files = match &spec.snapshot_id {
            Some(snapshot) => match self.snapshots.lock().unwrap().get(snapshot) {
                Some(taken) => taken.files.clone(),
                None => return Err(ProviderError::SnapshotNotFound(snapshot.clone())),
            },
            None => BTreeMap::new(),
        };
        files.extend(spec.files.clone());
        let pool = spec.pool_member.as_ref().map(|m| m.pool.clone());
        let sandbox = FakeSandbox::started(handle.clone(), files, plan.ttl, pool, spec.snapshot_id.clone());
        self.sandboxes.lock().unwrap().insert(handle.sandbox_id.clone(), sandbox);
        Ok(handle)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::none("fake").with(Capability::Snapshots).with(Capability::Reset).with(Capability::Usage)
    }

    async fn list_owned(&self) -> Result<OwnedListing> {
        self.note("list_owned");
        let owned = self
            .sandboxes
            .lock()
            .unwrap()
            .values()
            .map(|s| Owned::made(&s.handle.sandbox_id, s.expires_ms))
            .collect();
        Ok(OwnedListing { owned, gone: std::mem::take(&mut *self.gone.lock().unwrap()) })
    }

    async fn remove_owned(&self, owned: &Owned) -> Result<()> {
        self.note("remove_owned");
        self.sandboxes.lock().unwrap().remove(&owned.name);
        Ok(())
    }

    async fn lookup(&self, id: &SandboxId) -> Result<SandboxHandle> {
        self.note("lookup");
        self.with(id.as_str(), |s| Ok(s.handle.clone()))
    }

    async fn connect(&self, descriptor: &SandboxDescriptor) -> Result<SandboxHandle> {
        self.note("connect");
        self.with(&descriptor.sandbox_id, |s| Ok(s.handle.clone()))
    }

    async fn exec(&self, handle: &SandboxHandle, command: &str, _params: &ExecParams) -> Result<ExecResult> {
        self.note("exec");
        self.running(&handle.sandbox_id)?;
        self.with(&handle.sandbox_id, |s| Ok(run(command, &s.files)))
    }

    /// The command as `exec` runs it, its stdout and stderr as one event each, then its exit.
    async fn exec_stream(
        &self,
        handle: &SandboxHandle,
        command: &str,
        params: &ExecParams,
    ) -> Result<ExecStream> {
        let mut result = self.exec(handle, command, params).await?;
        let (events, receiver) = tokio::sync::mpsc::channel(3);
        for event in [
            StreamEvent::Stdout(std::mem::take(&mut result.stdout)),
            StreamEvent::Stderr(std::mem::take(&mut result.stderr)),
        ] {
            let empty = matches!(&event, StreamEvent::Stdout(b) | StreamEvent::Stderr(b) if b.is_empty());
            if !empty {
                let _ = events.try_send(event);
            }
        }
        let _ = events.try_send(StreamEvent::Exit(result));
        Ok(ExecStream::new(receiver, Box::new(|| {})))
    }

    async fn upload(
        &self,
        handle: &SandboxHandle,
        mut source: UploadSource<'_>,
        size: u64,
        path: &str,
        _mode: Option<u32>,
        _xattrs: &[Xattr],
    ) -> Result<u64> {
        self.note("upload");
        self.running(&handle.sandbox_id)?;
        let mut content = Vec::new();
        source.read_to_end(&mut content).await?;
        if content.len() as u64 != size {
            return Err(ProviderError::invalid(
                "size",
                format!("said {size}, the stream had {}", content.len()),
            ));
        }
        self.with(&handle.sandbox_id, |s| {
            s.files.insert(path.to_string(), content);
            Ok(size)
        })
    }

    async fn download(&self, handle: &SandboxHandle, path: &str) -> Result<Box<dyn FileDownload>> {
        self.note("download");
        self.with(&handle.sandbox_id, |s| match s.files.get(path) {
            Some(content) => {
                Ok(Box::new(Download(Some(content.clone()), content.len() as u64)) as Box<dyn FileDownload>)
            }
            None => Err(ProviderError::FileNotFound(path.to_string())),
        })
    }

    async fn status(&self, id: &SandboxId) -> Result<SandboxStatus> {
        self.note("status");
        // As Docker's: a sandbox that is not there (closed, never made) reads stopped.
        Ok(self.sandboxes.lock().unwrap().get(id.as_str()).map_or(SandboxStatus::Stopped, |s| s.status))
    }

    async fn endpoint(&self, _: &SandboxHandle, _: u16) -> Result<SandboxEndpoint> {
        self.unmodelled("endpoint")
    }

    async fn reset(&self, id: &SandboxId) -> Result<sandboxd::core::reset::ResetReport> {
        self.note("reset");
        self.running(id.as_str())?;
        self.with(id.as_str(), |s| {
            let changed = s.files.iter().filter(|(k, v)| s.baseline.get(*k) != Some(*v)).count()
                + s.baseline.keys().filter(|k| !s.files.contains_key(*k)).count();
            s.files = s.baseline.clone();
            Ok(sandboxd::core::reset::ResetReport { paths_restored: changed as u32, processes_killed: 0 })
        })
    }

    async fn close(&self, id: &SandboxId) -> Result<()> {
        self.note("close");
        if self.sandboxes.lock().unwrap().remove(id.as_str()).is_some() {
            self.gone.lock().unwrap().push(id.as_str().to_string());
        }
        Ok(())
    }

    async fn open_terminal(
        &self,
        _: &SandboxHandle,
        _: &PtySpec,
    ) -> Result<std::sync::Arc<dyn TerminalSession>> {
        self.unmodelled("open_terminal")
    }

    async fn close_terminals(&self) {}

    async fn list(&self, query: &ListQuery) -> Result<ListPage> {
        self.note("list");
        let found = self
            .sandboxes
            .lock()
            .unwrap()
            .values()
            .filter(|s| query.labels.iter().all(|(k, v)| s.handle.metadata.get(k) == Some(v)))
            .filter(|s| query.tenant.is_none() || s.handle.tenant == query.tenant)
            .map(|s| SandboxSummary {
                sandbox_id: s.handle.sandbox_id.clone(),
                image: s.handle.image.clone(),
                status: s.status,
                created_ns: s.created_ns,
                ports: s.handle.ports.clone(),
                runtime: s.handle.runtime.clone(),
                workdir: s.handle.workdir.clone(),
                metadata: s.handle.metadata.clone(),
                expires_at_unix_ms: s.expires_ms,
                reserved_millicpus: 0,
                reserved_memory_mib: 0,
                pool: s.pool.clone(),
                tenant: s.handle.tenant.clone(),
            })
            .collect();
        Ok(sandboxd::core::inventory::page(found, query))
    }

    /// Wall time since the create; CPU time a tenth of it (a sandbox that idles mostly).
    async fn usage(&self, id: &SandboxId) -> Result<sandboxd::core::usage::SandboxUsage> {
        self.note("usage");
        let created_ns = self.with(id.as_str(), |s| Ok(s.created_ns))?;
        let wall = Duration::from_nanos((now_ns() - created_ns).max(0) as u64);
        Ok(sandboxd::core::usage::SandboxUsage { wall_time: wall, cpu_time: wall / 10, ..Default::default() })
    }

    fn default_exec_timeout(&self) -> Option<Duration> {
        Some(Duration::from_secs(60))
    }

    fn shutdown(&self) {}

    /// The sandbox's files now, as a snapshot; at most `max_snapshots` at once.
    async fn snapshot(
        &self,
        id: &SandboxId,
        labels: &BTreeMap<String, String>,
        max_snapshots: usize,
    ) -> Result<SnapshotInfo> {
        self.note("snapshot");
        let (files, runtime) = self.with(id.as_str(), |s| Ok((s.files.clone(), s.handle.runtime.clone())))?;
        let mut snapshots = self.snapshots.lock().unwrap();
        if snapshots.len() >= max_snapshots {
            return Err(ProviderError::ResourceExhausted(format!(
                "{} snapshots exist, the most server.max_snapshots allows",
                snapshots.len()
            )));
        }
        let info = SnapshotInfo {
            snapshot_id: format!("fake-snapshot-{}", SandboxId::generate().as_str()),
            source_sandbox_id: id.as_str().to_string(),
            labels: labels.clone(),
            created_at_unix_ms: sandboxd::core::lease::now_ms(),
            size_bytes: files.values().map(|f| f.len() as u64).sum(),
            runtime: runtime.unwrap_or_default(),
            live: false,
        };
        snapshots.insert(info.snapshot_id.clone(), FakeSnapshot { info: info.clone(), files });
        Ok(info)
    }

    async fn list_snapshots(&self, filter: &BTreeMap<String, String>) -> Result<Vec<SnapshotInfo>> {
        self.note("list_snapshots");
        let mut found: Vec<SnapshotInfo> = self
            .snapshots
            .lock()
            .unwrap()
            .values()
            .filter(|s| s.info.carries(filter))
            .map(|s| s.info.clone())
            .collect();
        found.sort_by_key(|s| s.created_at_unix_ms);
        Ok(found)
    }

    async fn delete_snapshot(&self, snapshot_id: &str) -> Result<()> {
        self.note("delete_snapshot");
        let in_use =
            self.sandboxes.lock().unwrap().values().any(|s| s.snapshot_id.as_deref() == Some(snapshot_id));
        if in_use {
            return Err(ProviderError::SnapshotInUse(snapshot_id.to_string()));
        }
        match self.snapshots.lock().unwrap().remove(snapshot_id) {
            Some(_) => Ok(()),
            None => Err(ProviderError::SnapshotNotFound(snapshot_id.to_string())),
        }
    }

    async fn remove_expired_snapshots(&self, ttl: Duration) -> Result<Vec<String>> {
        let in_use: Vec<String> =
            self.sandboxes.lock().unwrap().values().filter_map(|s| s.snapshot_id.clone()).collect();
        let oldest = sandboxd::core::lease::now_ms() - ttl.as_millis() as i64;
        let mut snapshots = self.snapshots.lock().unwrap();
        let expired: Vec<String> = snapshots
            .values()
            .filter(|s| s.info.created_at_unix_ms < oldest && !in_use.contains(&s.info.snapshot_id))
            .map(|s| s.info.snapshot_id.clone())
            .collect();
        for id in &expired {
            snapshots.remove(id);
        }
        Ok(expired)
    }

    /// `count` children from one fresh snapshot of `id`'s files, with its handle's facts, all
    /// or nothing; the source goes on.
    async fn fork(
        &self,
        id: &SandboxId,
        count: u32,
        labels: &BTreeMap<String, String>,
        max_snapshots: usize,
        policy: &CreatePolicy,
    ) -> Result<Forked> {
        self.note("fork");
        self.running(id.as_str())?;
        let snapshot = self.snapshot(id, labels, max_snapshots).await?;
        let source = self.with(id.as_str(), |s| Ok(s.clone()))?;
        let length = source.expires_ms.map(|at| {
            let created_ms = (source.created_ns / 1_000_000) as i64;
            Duration::from_millis((at - created_ms).max(0) as u64)
        });
        let files = self.snapshots.lock().unwrap()[&snapshot.snapshot_id].files.clone();
        let ttl = policy.lease.ttl(length);
        let mut children = Vec::new();
        let mut sandboxes = self.sandboxes.lock().unwrap();
        for _ in 0..count {
            let plan = policy.plan(length, None);
            let mut handle = source.handle.clone();
            handle.sandbox_id = plan.id.as_str().to_string();
            handle.metadata.extend(labels.clone());
            let child = FakeSandbox::started(
                handle.clone(),
                files.clone(),
                plan.ttl,
                None,
                Some(snapshot.snapshot_id.clone()),
            );
            sandboxes.insert(handle.sandbox_id.clone(), child);
            children.push(handle);
        }
        Ok(Forked { snapshot, sandboxes: children, ttl })
    }

    /// The files added, changed and deleted since the sandbox started, under `path_prefix`.
    async fn diff(&self, id: &SandboxId, path_prefix: Option<&str>) -> Result<Vec<DiffEntry>> {
        self.note("diff");
        self.with(id.as_str(), |s| {
            let under = |path: &str| path_prefix.is_none_or(|p| path.starts_with(p));
            let mut entries: Vec<DiffEntry> = s
                .files
                .iter()
                .filter(|(path, content)| under(path) && s.baseline.get(*path) != Some(*content))
                .map(|(path, _)| DiffEntry {
                    path: path.clone(),
                    kind: if s.baseline.contains_key(path) { DiffKind::Changed } else { DiffKind::Added },
                })
                .collect();
            entries.extend(
                s.baseline
                    .keys()
                    .filter(|path| under(path) && !s.files.contains_key(*path))
                    .map(|path| DiffEntry { path: path.clone(), kind: DiffKind::Deleted }),
            );
            entries.sort_by(|a, b| a.path.cmp(&b.path));
            Ok(entries)
        })
    }

    async fn pause(&self, id: &SandboxId) -> Result<()> {
        self.note("pause");
        self.with(id.as_str(), |s| match s.status {
            SandboxStatus::Running | SandboxStatus::Paused => {
                s.status = SandboxStatus::Paused;
                Ok(())
            }
            _ => Err(ProviderError::Stopped(format!("sandbox {id} is not running"))),
        })
    }

    async fn resume(&self, id: &SandboxId) -> Result<()> {
        self.note("resume");
        self.with(id.as_str(), |s| match s.status {
            SandboxStatus::Running | SandboxStatus::Paused => {
                s.status = SandboxStatus::Running;
                Ok(())
            }
            _ => Err(ProviderError::Stopped(format!("sandbox {id} is not running"))),
        })
    }

    /// The fake's main process writes nothing: a stream that ends at once (the sandbox must
    /// be known).
    async fn logs(&self, id: &SandboxId, _: LogOptions) -> Result<LogStream> {
        self.note("logs");
        self.with(id.as_str(), |_| Ok(()))?;
        let (_, chunks) = tokio::sync::mpsc::channel(1);
        Ok(LogStream::new(chunks))
    }
}
