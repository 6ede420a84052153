//! Live snapshots, live forks and hibernation of gVisor sandboxes (issue 28).
//!
//! A live snapshot is two things under one id: the snapshot image (`docker commit` of the
//! source, marked `sandboxd.snapshot.live=1`), which gives a restored sandbox the files of the
//! moment, and gVisor's checkpoint of its processes and memory, kept beside the daemon's
//! containers at `<data root>/sandboxd-checkpoints/<hex>/` (Engine 20.10 refuses
//! `--checkpoint-dir`, moby#37344, so a checkpoint can only be restored from a container's own
//! `checkpoints/` directory: it is hard-linked there, which costs nothing, before
//! `docker start --checkpoint`).
//!
//! The order makes files and memory one moment: `docker checkpoint create` stops every
//! process (the container exits), then the stopped container is committed, then (with
//! `leave_running`, the default) the source is restored from the same checkpoint. runsc's own
//! `--leave-running` panics in the release these machines have ("invalid state transition:
//! paused => stopped"). A restored sandbox's TCP connections are gone (reset) and every host
//! side of a stream (exec, terminal streams, the agent's connection) must re-attach: on such a
//! runtime the agent is the sandbox's `init` on a socket inside gVisor, reached through a
//! `docker exec -i … agent connect` relay that a checkpoint lets go (terminal streams are
//! detached first, `detach_pty_sessions`); the next call opens a new relay to the restored
//! `init`, and the terminal sessions it holds are attached by id with their retained output,
//! in the source and in every fork.
//!
//! Hibernate is a checkpoint kept in the container's own directory (`sandboxd-hibernate`) with
//! the container stopped: its memory is freed, its disk stays. `Resume` restores it.
//!
//! On a runtime registered through `scripts/sandboxd-runsc` (gVisor 2024) all of this skips
//! Docker's checkpoint path (`runsc_direct.rs`): the checkpoint is runsc's own, uncompressed,
//! into the same directories, with `--leave-running` (the source never stops, so it needs no
//! restore), and every restore is a plain `docker start` that the wrapper turns into
//! `runsc restore` of that directory. The snapshot's files are committed just after the
//! checkpoint, the source paused for the commit.

use crate::service::rpc_table::name as rpc;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::argv;
use super::failure::{CliError, DockerFailureKind};
use super::fork::{child_spec, ContainerJson};
use super::provider::DockerProvider;
use super::runsc_direct::{runsc_state_of, RestoreRequest};
use super::snapshot::validate_labels;
use super::state::ContainerState;
use crate::core::backend::CreatePolicy;
use crate::core::branching::{Forked, Hibernated, SnapshotInfo, MAX_FORK_COUNT};
use crate::core::spec::{SandboxId, SandboxSpec};
use crate::core::watch::EventKind;
use crate::error::{ProviderError, Result};

/// The checkpoint a hibernated sandbox sleeps in (in its container's `checkpoints/`).
pub const HIBERNATE_CHECKPOINT: &str = "sandboxd-hibernate";
/// Where live snapshots' checkpoints are kept, under the daemon's data root.
const STORE: &str = "sandboxd-checkpoints";
/// A file naming the container in each copy of a checkpoint (`place_checkpoint`).
const RESTORE_MARK: &str = "sandboxd-restore";
/// How a container starts from a live snapshot (`place_checkpoint`).
pub(in crate::backends::docker) enum LiveStart {
    /// `docker start --checkpoint <name>`: a copy in the container's own `checkpoints/`.
    Checkpoint(String),
    /// A plain `docker start` that the wrapper restores (`runsc_direct.rs`); the request is
    /// withdrawn when this is dropped.
    Restore { _request: RestoreRequest },
}

impl LiveStart {
    /// The `docker start` that restores container `name`.
    pub(in crate::backends::docker) fn start_args(&self, name: &str) -> Vec<String> {
        match self {
            Self::Checkpoint(checkpoint) => argv::start_from_checkpoint_args(name, checkpoint),
            Self::Restore { .. } => argv::start_args(name),
        }
    }
}

/// The hex of a snapshot id (`sandboxd-snapshot:<hex>`).
fn hex_of(snapshot_id: &str) -> &str {
    snapshot_id.rsplit(':').next().unwrap_or(snapshot_id)
}

/// A checkpoint's name in a container's `checkpoints/` (docker's names: letters, digits, `-`).
fn checkpoint_name(snapshot_id: &str) -> String {
    format!("sbx-{}", hex_of(snapshot_id))
}

/// Hard-link (copy where links fail) the tree `from` to `to`; the bytes it holds.
fn link_tree(from: &Path, to: &Path) -> std::io::Result<u64> {
    crate::agent_client::run_dirs::make_private_dir(to)?;
    let mut bytes = 0;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            bytes += link_tree(&entry.path(), &target)?;
        } else if kind.is_file() {
            bytes += entry.metadata()?.len();
            if std::fs::hard_link(entry.path(), &target).is_err() {
                std::fs::copy(entry.path(), &target)?;
            }
        }
    }
    Ok(bytes)
}

/// Make this copy of a checkpoint unlike any other: docker uploads the directory to
/// containerd's content store by digest, and a restore whose digest is there already (another
/// restore of the same checkpoint at once, or one a cut-off upload left) fails ("content
/// sha256:… already exists"). runsc reads only its image files.
fn mark_restore(dir: &Path, container_id: &str) -> std::io::Result<()> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    std::fs::write(dir.join(RESTORE_MARK), format!("{container_id} {nanos}"))
}

/// Bytes under `dir` (0 when it is gone).
fn tree_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => tree_bytes(&e.path()),
            Ok(_) => e.metadata().map(|m| m.len()).unwrap_or(0),
            Err(_) => 0,
        })
        .sum()
}

/// What a call that needs a running sandbox answers on a hibernated one: nothing wakes it but
/// `Resume` (a call never wakes it implicitly: a trainer decides when memory comes back).
pub(in crate::backends::docker) fn hibernated_error(sandbox_id: &str) -> ProviderError {
    ProviderError::FailedPrecondition(format!(
        "sandbox {sandbox_id:?} is hibernated (checkpointed to disk, stopped): Resume wakes it"
    ))
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ProviderError::Docker(format!("checkpoint file task failed: {e}")))?
        .map_err(|e| ProviderError::Docker(format!("checkpoint files: {e}")))
}

impl DockerProvider {
    /// The daemon's data root (asked once). The server must share the daemon's filesystem
    /// (as the agent's socket already needs).
    pub(in crate::backends::docker) async fn data_root(&self) -> Result<PathBuf> {
        self.data_root
            .get_or_try_init(|| async {
                let out = self.control(argv::data_root_args()).await?;
                let root = PathBuf::from(out.stdout_text().trim());
                if !root.is_absolute() || !root.is_dir() {
                    return Err(ProviderError::FailedPrecondition(format!(
                        "live snapshots need the Docker daemon's data root on this host; {} is not a directory here",
                        root.display()
                    )));
                }
                Ok(root)
            })
            .await
            .cloned()
    }

    fn store_dir(root: &Path, snapshot_id: &str) -> PathBuf {
        root.join(STORE).join(hex_of(snapshot_id))
    }

    fn container_checkpoint(root: &Path, container_id: &str, name: &str) -> PathBuf {
        root.join("containers").join(container_id).join("checkpoints").join(name)
    }

    /// `runtime` can checkpoint (`docker.runtimes[].checkpoint`), or the refusal naming what
    /// `call` needs.
    pub(in crate::backends::docker) fn refuse_unless_checkpointable(
        &self,
        what: &str,
        runtime: &str,
        call: &str,
    ) -> Result<()> {
        let runtimes = &self.config.runtimes;
        if runtimes.get(runtime).is_some_and(|o| o.checkpoint) {
            return Ok(());
        }
        let offered = runtimes.checkpoint_names();
        let needed = if offered.is_empty() {
            "runsc (gVisor, registered with --network=none and offered with checkpoint: true in \
             docker.runtimes; none is offered here)"
                .to_string()
        } else {
            format!("runsc (gVisor) that can checkpoint; offered here: {offered}")
        };
        Err(ProviderError::FailedPrecondition(format!(
            "{what} runs on runtime {runtime:?}, which cannot checkpoint: {call} needs runtime {needed}"
        )))
    }

    /// The inspected source of a live call, refused unless its runtime can checkpoint.
    async fn live_source(&self, id: &SandboxId, call: &str) -> Result<ContainerJson> {
        let source = self.inspect_source(id.as_str()).await?;
        let runtime = source
            .config
            .labels
            .as_ref()
            .and_then(|l| l.get(super::labels::OCI_RUNTIME_LABEL))
            .cloned()
            .unwrap_or_else(|| crate::config::DEFAULT_RUNTIME.to_string());
        self.refuse_unless_checkpointable(&format!("sandbox {id}"), &runtime, call)?;
        Ok(source)
    }

    /// `docker checkpoint create`: every process of the sandbox written to disk, the container
    /// stopped. A paused sandbox is refused (gVisor cannot checkpoint it).
    async fn checkpoint_container(&self, sandbox_id: &str, name: &str) -> Result<()> {
        if self.states.state(sandbox_id) == Some(ContainerState::Paused) {
            return Err(ProviderError::Paused(sandbox_id.into()));
        }
        self.no_execs_running(sandbox_id).await?;
        // Where runsc keeps this container's state, learnt while its sandbox runs.
        let full = self.container_id(sandbox_id).await.unwrap_or_default();
        let runsc = if full.is_empty() { None } else { runsc_state_of(&full) };
        match self
            .cli
            .run(&argv::checkpoint_create_args(sandbox_id, name), self.config.create.start_timeout, None)
            .await
        {
            Ok(_) => {
                if let Some(runsc) = runsc {
                    runsc.settle().await;
                }
                Ok(())
            }
            Err(e) => match e.kind() {
                Some(DockerFailureKind::MissingContainer) => {
                    Err(ProviderError::SandboxNotFound(sandbox_id.into()))
                }
                Some(DockerFailureKind::NotRunning) => Err(ProviderError::Stopped(sandbox_id.into())),
                _ => Err(match e {
                    CliError::Failed(f) => ProviderError::Docker(format!(
                        "docker checkpoint create of {sandbox_id} failed: {}",
                        f.error_line()
                    )),
                    e => e.into(),
                }),
            },
        }
    }

    /// A process `docker exec` started holds host descriptors (its stdio), and gVisor cannot
    /// restore those ("host.inode.afterLoad: failed to set host FD … non-blocking"): the
    /// terminal streams this process holds are detached (their sessions run on in the `init`
    /// agent, which the checkpoint saves), the agent's channel is let go (the relay to `init`
    /// ends at the end of its input) and every exec must have ended, within a few seconds, or
    /// the checkpoint is refused.
    async fn no_execs_running(&self, sandbox_id: &str) -> Result<()> {
        self.detach_pty_sessions(sandbox_id).await;
        if let Some(agent) = &self.agent {
            agent.disconnect(sandbox_id);
        }
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let out = self.control(argv::running_execs_args(sandbox_id)).await?;
            let running: usize = out.stdout_text().trim().parse().unwrap_or(usize::MAX);
            if running == 0 {
                return Ok(());
            }
            if std::time::Instant::now() >= give_up {
                return Err(ProviderError::FailedPrecondition(format!(
                    "sandbox {sandbox_id} has {running} command(s) running through docker exec (exec \
                     streams, terminals); gVisor cannot checkpoint them: end them first"
                )));
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Start `name` from checkpoint `checkpoint` in its own `checkpoints/`.
    async fn start_from_checkpoint(&self, name: &str, checkpoint: &str) -> Result<()> {
        // A restore reads the whole checkpoint (docker copies it to containerd first): bounded
        // as a create's start is, not as a control command.
        // runsc's state of the checkpointed container was settled by `checkpoint_container`
        // (`RunscState::settle`): a restore never meets "id already in use".
        let args = argv::start_from_checkpoint_args(name, checkpoint);
        match self.cli.run(&args, self.config.create.start_timeout, None).await {
            Ok(_) => Ok(()),
            Err(CliError::Failed(f)) => Err(ProviderError::Docker(format!(
                "docker start --checkpoint {checkpoint} {name} failed: {}",
                f.error_line()
            ))),
            Err(e) => Err(e.into()),
        }
    }

    /// `docker start` of `name`, which the wrapper restores (a `RestoreRequest` names it).
    async fn start_restored(&self, name: &str) -> Result<()> {
        // A restore reads the whole image: bounded as a create's start.
        match self.cli.run(&argv::start_args(name), self.config.create.start_timeout, None).await {
            Ok(_) => Ok(()),
            Err(CliError::Failed(f)) => Err(ProviderError::Docker(format!(
                "restoring {name} (docker start) failed: {}",
                f.error_line()
            ))),
            Err(e) => Err(e.into()),
        }
    }

    /// A live snapshot of a running gVisor sandbox: checkpoint (the processes stop), commit of
    /// the stopped container (its files of that moment), the checkpoint moved beside the
    /// snapshot; then, with `leave_running`, the sandbox restored from it. Nothing is left on a
    /// failure, and the sandbox goes on (or stays stopped without `leave_running`) either way.
    pub async fn checkpoint(
        &self,
        id: &SandboxId,
        labels: &BTreeMap<String, String>,
        leave_running: bool,
        max_snapshots: usize,
    ) -> Result<SnapshotInfo> {
        validate_labels("labels", labels)?;
        let source = self.live_source(id, rpc::CHECKPOINT).await?;
        let sandbox_id = id.as_str();
        let _place = self.reserve_snapshot_place(max_snapshots).await?;
        let root = self.data_root().await?;
        let snapshot_id = argv::new_snapshot_id();
        let making = self.making_snapshot(&snapshot_id);
        let name = checkpoint_name(&snapshot_id);
        let taken = Self::container_checkpoint(&root, &source.id, &name);
        let store = Self::store_dir(&root, &snapshot_id);
        if self.restore_dir(&source.host.runtime).await.is_some() {
            let taken = self
                .checkpoint_direct(sandbox_id, &source.id, &snapshot_id, &store, labels, leave_running)
                .await?;
            making.answered();
            return Ok(taken);
        }
        let hub = self.states.hub();
        hub.expect_event(sandbox_id, "die", None);
        let started = std::time::Instant::now();
        if let Err(e) = self.checkpoint_container(sandbox_id, &name).await {
            hub.take_expected(sandbox_id, "die");
            let _ = std::fs::remove_dir_all(&taken);
            return Err(e);
        }
        let checkpointed = started.elapsed();
        let kept = async {
            self.commit_as(sandbox_id, &snapshot_id, labels, true).await?;
            let (from, to) = (taken.clone(), store.clone());
            blocking(move || link_tree(&from, &to)).await
        }
        .await;
        if leave_running {
            let (dir, full) = (taken.clone(), source.id.clone());
            let _ = blocking(move || mark_restore(&dir, &full)).await;
            hub.expect_event(sandbox_id, "start", None);
            let restored = self.start_from_checkpoint(sandbox_id, &name).await;
            if let Err(e) = &restored {
                hub.take_expected(sandbox_id, "start");
                tracing::error!(sandbox_id, error = %e, "the sandbox could not be restored after its checkpoint");
            }
        }
        let _ = std::fs::remove_dir_all(&taken);
        if let Err(e) = kept {
            self.remove_snapshot_image(&snapshot_id).await;
            let _ = std::fs::remove_dir_all(&store);
            return Err(e);
        }
        tracing::info!(sandbox_id, snapshot_id = %snapshot_id, ?checkpointed, total = ?started.elapsed(), "live snapshot taken");
        let taken = self.snapshot_info(&snapshot_id).await?;
        making.answered();
        Ok(taken)
    }

    /// `checkpoint` on a runtime whose runsc the server calls (`runsc_direct.rs`): runsc's
    /// checkpoint straight into the snapshot's store (with `leave_running` the sandbox goes
    /// on), then the commit of its files.
    async fn checkpoint_direct(
        &self,
        sandbox_id: &str,
        container_id: &str,
        snapshot_id: &str,
        store: &Path,
        labels: &BTreeMap<String, String>,
        leave_running: bool,
    ) -> Result<SnapshotInfo> {
        if self.states.state(sandbox_id) == Some(ContainerState::Paused) {
            return Err(ProviderError::Paused(sandbox_id.into()));
        }
        self.no_execs_running(sandbox_id).await?;
        let hub = self.states.hub();
        if !leave_running {
            hub.expect_event(sandbox_id, "die", None);
        }
        let started = std::time::Instant::now();
        if let Err(e) = self.runsc_checkpoint(sandbox_id, container_id, store, leave_running).await {
            if !leave_running {
                hub.take_expected(sandbox_id, "die");
            }
            return Err(e);
        }
        let checkpointed = started.elapsed();
        if let Err(e) = self.commit_as(sandbox_id, snapshot_id, labels, true).await {
            let _ = std::fs::remove_dir_all(store);
            return Err(e);
        }
        tracing::info!(sandbox_id, snapshot_id, ?checkpointed, total = ?started.elapsed(), "live snapshot taken by runsc");
        self.snapshot_info(snapshot_id).await
    }

    /// `info` with a live snapshot's size counting its checkpoint (the memory image kept beside
    /// the committed files), which is most of what it holds on disk.
    pub(in crate::backends::docker) async fn counting_checkpoint(
        &self,
        mut info: SnapshotInfo,
    ) -> SnapshotInfo {
        if info.live {
            if let Ok(root) = self.data_root().await {
                let store = Self::store_dir(&root, &info.snapshot_id);
                info.size_bytes += blocking(move || Ok(tree_bytes(&store))).await.unwrap_or(0);
            }
        }
        info
    }

    /// Remove the checkpoint kept beside a live snapshot (none: nothing to do).
    pub(in crate::backends::docker) async fn drop_live_checkpoint(&self, snapshot_id: &str) {
        if !argv::is_valid_snapshot_id(snapshot_id) {
            return;
        }
        if let Ok(root) = self.data_root().await {
            let dir = Self::store_dir(&root, snapshot_id);
            if dir.exists() {
                if let Err(e) = std::fs::remove_dir_all(&dir) {
                    tracing::warn!(snapshot_id, error = %e, "could not remove a live snapshot's checkpoint");
                }
            }
        }
    }

    /// Remove kept checkpoints whose snapshot image is gone (removed outside this service, or
    /// by a test's clean-up), once they are a minute old (a checkpoint being taken has its
    /// image before its directory).
    pub(in crate::backends::docker) async fn prune_orphan_checkpoints(&self, snapshot_refs: &[String]) {
        let Ok(root) = self.data_root().await else { return };
        let Ok(entries) = std::fs::read_dir(root.join(STORE)) else { return };
        for entry in entries.flatten() {
            let hex = entry.file_name().to_string_lossy().to_string();
            let owned = snapshot_refs.iter().any(|r| hex_of(r) == hex);
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().unwrap_or_default() > std::time::Duration::from_secs(60));
            if !owned && old {
                tracing::info!(checkpoint = %hex, "removing a kept checkpoint whose snapshot is gone");
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }

    /// How the created container `name` starts from live snapshot `snapshot_id`: restored by
    /// the wrapper from the snapshot's store (`runsc_direct.rs`), or from a hard-linked copy in
    /// its own `checkpoints/` (the name `docker start --checkpoint` takes).
    pub(in crate::backends::docker) async fn place_checkpoint(
        &self,
        name: &str,
        snapshot_id: &str,
    ) -> Result<LiveStart> {
        let root = self.data_root().await?;
        let store = Self::store_dir(&root, snapshot_id);
        if !store.is_dir() {
            return Err(ProviderError::SnapshotNotFound(format!(
                "{snapshot_id} (its checkpoint is gone from {})",
                store.display()
            )));
        }
        let (container_id, runtime) = self.id_and_runtime(name).await?;
        if container_id.is_empty() {
            return Err(ProviderError::SandboxNotFound(name.into()));
        }
        if let Some(restore_dir) = self.restore_dir(&runtime).await {
            let request = RestoreRequest::write(&restore_dir, &container_id, &store).await?;
            return Ok(LiveStart::Restore { _request: request });
        }
        let checkpoint = checkpoint_name(snapshot_id);
        let target = Self::container_checkpoint(&root, &container_id, &checkpoint);
        blocking(move || {
            link_tree(&store, &target)?;
            // Docker uploads the directory to containerd's content store by digest: restores of
            // one checkpoint at once would collide ("content sha256:… already exists") unless
            // each copy differs. runsc reads only its image files.
            mark_restore(&target, &container_id)
        })
        .await?;
        Ok(LiveStart::Checkpoint(checkpoint))
    }

    /// `count` sandboxes restored from a live snapshot: `snapshot_id`'s, else a fresh one of
    /// `id` (which goes on). All or nothing: when one fails, the others (and a fresh snapshot)
    /// are removed and the first failure is returned.
    pub async fn fork_live(
        &self,
        id: Option<&SandboxId>,
        snapshot_id: Option<&str>,
        count: u32,
        labels: &BTreeMap<String, String>,
        max_snapshots: usize,
        policy: &CreatePolicy,
    ) -> Result<Forked> {
        if !(1..=MAX_FORK_COUNT).contains(&count) {
            return Err(ProviderError::invalid(
                "count",
                format!("must be in 1..={MAX_FORK_COUNT} (got {count})"),
            ));
        }
        validate_labels("labels", labels)?;
        let source = match id {
            Some(id) => Some(self.live_source(id, "Fork with live").await?),
            None => None,
        };
        let (snapshot, fresh) = match snapshot_id {
            Some(given) => {
                let info = self.snapshot_info(given).await?;
                if !info.live {
                    return Err(ProviderError::invalid(
                        "snapshot_id",
                        format!("{given:?} is not a live snapshot (Checkpoint makes one; Snapshot's hold files only)"),
                    ));
                }
                self.refuse_unless_checkpointable(
                    &format!("snapshot {given}"),
                    &info.runtime,
                    "Fork with live",
                )?;
                (info, false)
            }
            None => {
                let Some(id) = id else {
                    return Err(ProviderError::invalid(
                        "sandbox_id",
                        "is required unless snapshot_id names a live snapshot",
                    ));
                };
                (self.checkpoint(id, labels, true, max_snapshots).await?, true)
            }
        };
        let mut spec = match &source {
            Some(source) => child_spec(source, labels),
            None => SandboxSpec { metadata: labels.clone(), ..Default::default() },
        };
        spec.snapshot_id = Some(snapshot.snapshot_id.clone());
        spec.runtime = Some(snapshot.runtime.clone()).filter(|r| !r.is_empty());
        let spec = &spec;
        let started =
            policy.start_children(spec, count, |plan| async move { self.create_planned(spec, &plan).await });
        let sandboxes = match started.await {
            Ok(sandboxes) => sandboxes,
            Err((first, started)) => {
                let made: Vec<String> = started.iter().map(|h| h.sandbox_id.clone()).collect();
                tracing::warn!(snapshot_id = %snapshot.snapshot_id, ?made, error = %first, "a live fork child failed; removing the others");
                futures_util::future::join_all(started.iter().map(|h| self.remove(h))).await;
                if fresh {
                    self.remove_snapshot_image(&snapshot.snapshot_id).await;
                }
                return Err(first);
            }
        };
        tracing::info!(count, snapshot_id = %snapshot.snapshot_id, "sandbox forked live");
        Ok(Forked { snapshot, sandboxes, ttl: policy.children_ttl(spec) })
    }

    /// Checkpoint the sandbox to disk and stop it: its memory is freed. Hibernating a
    /// hibernated sandbox succeeds.
    pub async fn hibernate(&self, id: &SandboxId) -> Result<Hibernated> {
        let source = self.live_source(id, rpc::HIBERNATE).await?;
        let sandbox_id = id.as_str();
        let root = self.data_root().await?;
        let dir = Self::container_checkpoint(&root, &source.id, HIBERNATE_CHECKPOINT);
        if self.is_hibernated(id).await {
            return Ok(Hibernated { checkpoint_bytes: tree_bytes(&dir), memory_freed_bytes: 0 });
        }
        let memory = self.stats(id).await.map(|s| s.memory_usage_bytes).unwrap_or(0);
        let direct = self.restore_dir(&source.host.runtime).await.is_some();
        let hub = self.states.hub();
        hub.expect_event(sandbox_id, "die", Some(EventKind::Hibernated));
        let checkpointed = if direct {
            match self.states.state(sandbox_id) {
                Some(ContainerState::Paused) => Err(ProviderError::Paused(sandbox_id.into())),
                _ => match self.no_execs_running(sandbox_id).await {
                    Ok(()) => self.runsc_checkpoint(sandbox_id, &source.id, &dir, false).await,
                    Err(e) => Err(e),
                },
            }
        } else {
            self.checkpoint_container(sandbox_id, HIBERNATE_CHECKPOINT).await
        };
        if let Err(e) = checkpointed {
            hub.take_expected(sandbox_id, "die");
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
        self.records.update(sandbox_id, |r| r.hibernated = true);
        self.states.record(sandbox_id, Some(ContainerState::Exited));
        let bytes = tree_bytes(&dir);
        tracing::info!(
            sandbox_id,
            checkpoint_bytes = bytes,
            memory_freed_bytes = memory,
            "sandbox hibernated"
        );
        Ok(Hibernated { checkpoint_bytes: bytes, memory_freed_bytes: memory })
    }

    /// As `is_hibernated`, by name (false for a name that is no sandbox id).
    pub(in crate::backends::docker) async fn is_hibernated_name(&self, name: &str) -> bool {
        match SandboxId::parse("sandbox_id", name) {
            Ok(id) => self.is_hibernated(&id).await,
            Err(_) => false,
        }
    }

    /// Whether the sandbox sleeps in a hibernation checkpoint: this process put it there, or
    /// (after a restart) its container is stopped with one.
    pub(in crate::backends::docker) async fn is_hibernated(&self, id: &SandboxId) -> bool {
        if self.is_known_hibernated(id.as_str()) {
            return true;
        }
        // The events table knows most sandboxes: one running or paused is not asleep.
        if matches!(self.states.state(id.as_str()), Some(ContainerState::Running | ContainerState::Paused)) {
            return false;
        }
        let Ok(Some(found)) = self.inspect(id.as_str()).await else { return false };
        if !found.owned || found.state.sandbox_status() != crate::core::spec::SandboxStatus::Stopped {
            return false;
        }
        let (Ok(root), Ok(full)) = (self.data_root().await, self.container_id(id.as_str()).await) else {
            return false;
        };
        Self::container_checkpoint(&root, &full, HIBERNATE_CHECKPOINT).is_dir()
    }

    /// Wake a hibernated sandbox (restored from its checkpoint, which is then removed):
    /// `Ok(false)` when it was not hibernated.
    pub(in crate::backends::docker) async fn wake(&self, id: &SandboxId) -> Result<bool> {
        if !self.is_hibernated(id).await {
            return Ok(false);
        }
        let sandbox_id = id.as_str();
        let (full, runtime) = self.id_and_runtime(sandbox_id).await?;
        let root = self.data_root().await?;
        let dir = Self::container_checkpoint(&root, &full, HIBERNATE_CHECKPOINT);
        let restore = match self.restore_dir(&runtime).await {
            Some(restore_dir) => Some(RestoreRequest::write(&restore_dir, &full, &dir).await?),
            None => {
                let (dir, full) = (dir.clone(), full.clone());
                blocking(move || mark_restore(&dir, &full)).await?;
                None
            }
        };
        let hub = self.states.hub();
        hub.expect_event(sandbox_id, "start", Some(EventKind::Resumed));
        let started = match &restore {
            Some(_) => self.start_restored(sandbox_id).await,
            None => self.start_from_checkpoint(sandbox_id, HIBERNATE_CHECKPOINT).await,
        };
        drop(restore);
        if let Err(e) = started {
            hub.take_expected(sandbox_id, "start");
            return Err(e);
        }
        self.records.update(sandbox_id, |r| r.hibernated = false);
        let _ = std::fs::remove_dir_all(&dir);
        tracing::info!(sandbox_id, "sandbox woken from hibernation");
        Ok(true)
    }

    /// The status a stopped sandbox really has: hibernated when it sleeps in a checkpoint.
    pub(in crate::backends::docker) async fn hibernated_or(
        &self,
        id: &SandboxId,
        status: crate::core::spec::SandboxStatus,
    ) -> crate::core::spec::SandboxStatus {
        use crate::core::spec::SandboxStatus;
        if self.is_known_hibernated(id.as_str())
            || (status == SandboxStatus::Stopped && self.is_hibernated(id).await)
        {
            SandboxStatus::Hibernated
        } else {
            status
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_names_follow_the_snapshot_id() {
        let id = "sandboxd-snapshot:0123456789abcdef0123456789abcdef";
        assert_eq!(hex_of(id), "0123456789abcdef0123456789abcdef");
        assert_eq!(checkpoint_name(id), "sbx-0123456789abcdef0123456789abcdef");
    }

    #[test]
    fn a_tree_is_linked_with_its_bytes() {
        let dir = std::env::temp_dir().join(format!("sandboxd-live-{}", std::process::id()));
        let from = dir.join("from");
        std::fs::create_dir_all(from.join("sub")).unwrap();
        std::fs::write(from.join("checkpoint.img"), b"12345").unwrap();
        std::fs::write(from.join("sub/x"), b"ab").unwrap();
        assert_eq!(link_tree(&from, &dir.join("to")).unwrap(), 7);
        assert_eq!(std::fs::read(dir.join("to/sub/x")).unwrap(), b"ab");
        assert_eq!(tree_bytes(&dir.join("to")), 7);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
