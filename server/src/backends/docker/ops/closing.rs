//! `Close` without making the caller wait for Docker. The close ends every process of the
//! sandbox from the host (`init_kill.rs`: SIGKILL to its init, whose pid namespace the kernel
//! empties, a few ms; `docker kill` where that cannot be done), writes down what is left to do
//! (`<state_dir>/closing/<sandbox id>`, held by this server while it does it: `held_files.rs`)
//! and answers. From then on nothing in the sandbox runs, its id answers NOT_FOUND here and
//! `stopped` on every replica, and the service has released its quota. The rest runs in the
//! background: the loop disk's unmount, `docker rm -f` (the loop device goes with the disk's
//! last mount), the disk file, then the record. Its service network stays: networks are removed
//! only by the sweep once unused for `docker.create.network_idle_s` (`runtime.rs`), never at a
//! close, so a replica's create never finds its network gone under it.
//!
//! A server that dies first leaves its records unheld: the next sweep of any server sharing the
//! state directory finishes them (`finish_abandoned_closes`). Nothing here touches anything but
//! the closed sandbox's own container, layer mount and disk file, so work another server still
//! does is never undone. A container renamed `sandboxd-closing-<hex>` (an older server's way)
//! is removed by every server's sweep (`owned.rs`).

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::argv;
use super::failure::{CliError, DockerFailureKind};
use super::held_files::{self, Held};
use super::provider::DockerProvider;
use super::records::DiskState;

/// How long a background removal keeps trying before it leaves the record to the sweep.
const BACKGROUND_REMOVAL_WAIT: Duration = Duration::from_secs(120);

/// How long a call freeing what closed sandboxes held waits for their background removals.
const REMOVALS_WAIT: Duration = Duration::from_secs(30);

/// How long a background removal waits for the daemon to have handled the killed sandbox's exit.
const EXIT_WAIT: Duration = Duration::from_secs(10);

/// How long a close waits for the killed sandbox's processes to be gone.
const KILL_WAIT: Duration = Duration::from_secs(2);

/// What a close left to do, as written in its record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Closing {
    sandbox_id: String,
    /// The container's full id when known (its name otherwise).
    container: String,
    /// The loop disk's file and the layer it is mounted on, when known.
    disk: Option<(PathBuf, PathBuf)>,
    /// No disk known, but there may be one: the layer is looked up before the removal.
    maybe_disk: bool,
}

pub use super::removal_state::{Closings, RemovalMode};

impl DockerProvider {
    /// End every process of sandbox `name` now and remember it closed, for a backend whose
    /// removal finishes after its close answered (Swarm removes a service's task in its own
    /// time): a Close answers once nothing in the sandbox runs, and Status reads it stopped.
    /// Already stopped or gone is success.
    pub(crate) async fn end_for_close(&self, name: &str) -> crate::error::Result<()> {
        self.remember_closed(name);
        match self.control(argv::kill_args(name)).await {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.kind(),
                    Some(DockerFailureKind::MissingContainer | DockerFailureKind::NotRunning)
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// End `sandbox_id` (container `container` when this process knows its full id) now and
    /// remove its container in the background. `Ok(false)`: not done
    /// this way (the kill failed, or no record could be written), the caller removes it in the
    /// foreground.
    pub(in crate::backends::docker) async fn close_in_background(
        &self,
        sandbox_id: &str,
        container: Option<String>,
        disk: &DiskState,
    ) -> std::result::Result<bool, CliError> {
        let killed = match &container {
            Some(id) => super::init_kill::kill_container(id, KILL_WAIT).await,
            None => false,
        };
        if !killed {
            match self.control(argv::kill_args(sandbox_id)).await {
                Ok(_) => {}
                Err(e) if e.kind() == Some(DockerFailureKind::MissingContainer) => return Ok(true),
                Err(e) if e.kind() == Some(DockerFailureKind::NotRunning) => {}
                Err(_) => return Ok(false),
            }
        }
        let closing = Closing {
            sandbox_id: sandbox_id.to_string(),
            container: container.unwrap_or_else(|| sandbox_id.to_string()),
            maybe_disk: *disk == DiskState::Unknown
                && self.config.create.disk_bound == crate::config::DiskBound::Loop,
            disk: match disk {
                DiskState::Attached { file, layer } => Some((file.clone(), layer.clone())),
                DiskState::None | DiskState::Unknown => None,
            },
        };
        let record = serde_json::to_vec(&closing).unwrap_or_default();
        let held = match Held::create(&self.closing_record(sandbox_id), &record) {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!(sandbox_id = %sandbox_id, error = %e, "cannot record a close: removing in the foreground");
                return Ok(false);
            }
        };
        if let Ok(mut set) = self.closings.in_flight.lock() {
            set.insert(sandbox_id.to_string());
        }
        let remover = self.remover();
        let timeout = self.control_timeout();
        let closings = self.closings.clone();
        self.removals.spawn(async move {
            loop {
                match closings.mode() {
                    RemovalMode::Run => break,
                    RemovalMode::Hold => tokio::time::sleep(Duration::from_millis(20)).await,
                    RemovalMode::Abandon => {
                        held.release();
                        closings.done(&closing.sandbox_id);
                        return;
                    }
                }
            }
            finish(&remover, held, &closing, timeout).await;
            closings.done(&closing.sandbox_id);
        });
        Ok(true)
    }

    /// What a background removal runs its daemon calls with.
    fn remover(&self) -> Remover {
        Remover { cli: self.cli.in_pool(super::cli::Pool::Control), api: self.engine_api.clone() }
    }

    /// Where the close of `sandbox_id` writes what is left to do: in the state directory, so
    /// every replica sharing it sees the record.
    fn closing_record(&self, sandbox_id: &str) -> PathBuf {
        self.closing_dir.join(sandbox_id)
    }

    /// Whether `sandbox_id` was closed by this server or a replica sharing its state directory
    /// and its removal is not finished: from the close's answer on, although Docker may show
    /// the killed container running for a moment longer.
    pub(in crate::backends::docker) fn closed_by_any(&self, sandbox_id: &str) -> bool {
        self.closing_record(sandbox_id).exists()
    }

    /// Whether `sandbox_id` was closed here and its removal is still under way.
    pub(in crate::backends::docker) fn closing_now(&self, sandbox_id: &str) -> bool {
        self.closings.in_flight.lock().is_ok_and(|set| set.contains(sandbox_id))
    }

    /// The sandboxes closed here whose removal is under way now. A reader of Docker's state
    /// takes this before reading: a removal that ends while it reads (the id no longer in
    /// flight) may still show in what it read.
    pub(in crate::backends::docker) fn closing_ids(&self) -> std::collections::HashSet<String> {
        self.closings.in_flight.lock().map(|set| set.clone()).unwrap_or_default()
    }

    /// `SandboxNotFound` for a sandbox closed here whose removal is under way: a call that holds
    /// its handle from before the close must not reach the stopped container (`docker cp` into
    /// it would still work).
    pub(in crate::backends::docker) fn refuse_closing(&self, sandbox_id: &str) -> crate::error::Result<()> {
        if self.closing_now(sandbox_id) {
            return Err(crate::error::ProviderError::SandboxNotFound(sandbox_id.into()));
        }
        Ok(())
    }

    /// The sweep's part: finish the closes whose server died before their removal did (records
    /// nobody holds).
    pub(in crate::backends::docker) async fn finish_abandoned_closes(&self) {
        for held in held_files::unheld(&self.closing_dir, Duration::from_secs(60)) {
            let closing = held.read().ok().and_then(|b| serde_json::from_slice::<Closing>(&b).ok());
            match closing {
                Some(closing) => {
                    tracing::info!(sandbox_id = %closing.sandbox_id, "finishing a close another server left");
                    finish(&self.remover(), held, &closing, self.control_timeout()).await;
                }
                None => held.finish(),
            }
        }
    }

    /// How background removals behave from now on (tests see a close before Docker's part).
    pub fn set_removal_mode(&self, mode: RemovalMode) {
        self.closings.mode.store(mode as u8, Ordering::SeqCst);
    }

    /// Whether any removal this server left to the background is under way.
    pub(in crate::backends::docker) fn removals_under_way(&self) -> bool {
        self.closings.in_flight.lock().is_ok_and(|set| !set.is_empty())
    }

    /// Wait (up to `limit`) until no removal this server left to the background is under way:
    /// what a sandbox closed a moment ago still holds (an image, a volume) is then free.
    async fn removals_done(&self, limit: Duration) {
        let deadline = std::time::Instant::now() + limit;
        while self.removals_under_way() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `look` (a count of a resource's users, a removal Docker may refuse), once more after the
    /// background removals under way (up to `REMOVALS_WAIT`) when its answer is `held` and
    /// removals were under way before it or are now: the only holders may be sandboxes closed
    /// a moment ago. Asked before as well as after: a removal that ends between the look and
    /// the question freed the resource, and the second look must still come.
    pub(in crate::backends::docker) async fn looked_at_after_removals<T, Look, Fut>(
        &self,
        mut look: Look,
        held: impl Fn(&T) -> bool,
    ) -> T
    where
        Look: FnMut() -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        let closing_before = self.removals_under_way();
        let first = look().await;
        if held(&first) && (closing_before || self.removals_under_way()) {
            self.removals_done(REMOVALS_WAIT).await;
            return look().await;
        }
        first
    }

    /// Wait for the removals closes left to the background (a shutdown).
    pub async fn settle_removals(&self) {
        self.removals.close();
        self.removals.wait().await;
        self.removals.reopen();
    }
}

/// The daemon calls of a background removal: the Engine API where the daemon is local (a
/// request costs a few ms of CPU where each docker CLI process costs tens: three per close),
/// the CLI otherwise and wherever the API fails (its errors are the classified ones).
struct Remover {
    cli: super::cli::DockerCli,
    api: Option<super::engine_api::EngineApi>,
}

impl Remover {
    /// `docker wait`, bounded by `within`; whether the exit was seen is only logged.
    async fn wait(&self, name: &str, within: Duration) {
        if let Some(api) = &self.api {
            if let Ok(Ok(())) = tokio::time::timeout(within, api.wait(name)).await {
                return;
            }
        }
        if let Err(e) = self.cli.run(&argv::wait_args(name), Some(within), None).await {
            tracing::debug!(container = %name, error = %e, "no exit seen before the removal");
        }
    }

    /// `docker rm -f`: gone (or never there) is success.
    async fn remove(&self, name: &str, timeout: Option<Duration>) -> std::result::Result<(), CliError> {
        if let Some(api) = &self.api {
            let removal = api.remove(name);
            let answer = match timeout {
                Some(within) => tokio::time::timeout(within, removal).await.ok(),
                None => Some(removal.await),
            };
            match answer {
                Some(Ok(())) => return Ok(()),
                Some(Err(e)) if e.is_not_found() => return Ok(()),
                _ => {}
            }
        }
        match self.cli.run(&argv::rm_args(name), timeout, None).await {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == Some(DockerFailureKind::MissingContainer) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The writable layer's directory of container `name` (where a loop disk would be mounted).
    async fn layer_of(&self, name: &str, timeout: Option<Duration>) -> Option<PathBuf> {
        let facts = super::lookup::layer_facts(&self.cli, self.api.as_ref(), name, timeout).await.ok()?;
        facts.layer_dir()
    }
}

/// Detach the loop disk, `docker rm -f` (waiting out a removal in progress), then the disk file
/// and the record. Whether the container is gone; if not, the record is left for the sweep.
async fn finish(remover: &Remover, held: Held, closing: &Closing, timeout: Option<Duration>) -> bool {
    let name = &closing.container;
    let layer = match (&closing.disk, closing.maybe_disk) {
        (Some((_, layer)), _) => Some(layer.clone()),
        (None, true) => remover.layer_of(name, timeout).await,
        (None, false) => None,
    };
    if let Some(layer) = &layer {
        super::loop_mount::detach_layer(&closing.sandbox_id, layer).await;
    }
    // The sandbox was killed from the host: the daemon hears of the exit on its own and then
    // releases its network endpoint. `docker rm -f` waits for that first, as `docker kill`
    // did: a removal racing the daemon's exit handling can leave the network counting an
    // endpoint no container holds, after which it can never be removed ("has active
    // endpoints" with no container on it, seen under load). Bounded; the removal follows
    // either way.
    let exit_wait = timeout.unwrap_or(EXIT_WAIT).min(EXIT_WAIT);
    remover.wait(name, exit_wait).await;
    let started = std::time::Instant::now();
    let mut pause = Duration::from_millis(100);
    loop {
        match remover.remove(name, timeout).await {
            Ok(()) => break,
            Err(e) if started.elapsed() + pause < BACKGROUND_REMOVAL_WAIT => {
                tracing::debug!(container = %name, error = %e, "background removal retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            Err(e) => {
                tracing::warn!(container = %name, error = %e, "a closed sandbox's container could not be removed; the sweep tries again");
                held.release();
                return false;
            }
        }
    }
    if let Some((file, _)) = &closing.disk {
        remove_file(file);
    }
    held.finish();
    true
}

fn remove_file(file: &Path) {
    if let Err(e) = std::fs::remove_file(file) {
        tracing::debug!(file = %file.display(), error = %e, "disk file already gone");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::docker::argv::{closing_name, sandbox_of_closing};

    #[test]
    fn closing_names_map_back_to_their_sandbox() {
        let id = "sandboxd-0123456789abcdef0123456789abcdef";
        let name = closing_name(id);
        assert_eq!(name, "sandboxd-closing-0123456789abcdef0123456789abcdef");
        assert_eq!(sandbox_of_closing(&name).as_deref(), Some(id));
        assert_eq!(sandbox_of_closing(id), None);
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let closing = Closing {
            sandbox_id: "sandboxd-0123456789abcdef0123456789abcdef".into(),
            container: "ab".repeat(32),
            disk: Some(("/s/disks/x.img".into(), "/var/lib/docker/l/x".into())),
            maybe_disk: false,
        };
        let bytes = serde_json::to_vec(&closing).unwrap();
        assert_eq!(serde_json::from_slice::<Closing>(&bytes).unwrap(), closing);
    }
}
