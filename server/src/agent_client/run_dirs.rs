//! Sandboxes' directories on this host, `<state_dir>/sandboxes/<sandbox id>/`: the agent's
//! socket in its `run/` (bind-mounted into the sandbox) and, beside it where the sandbox cannot
//! reach, `daemon`: the id of the Docker daemon whose container uses it. Closing a sandbox
//! removes its directory; one left behind (a create whose server was killed, a sandbox removed
//! while no server ran) is pruned here when it is this daemon's, older than [`PRUNE_AGE`], no
//! create of this process is using it, its socket does not answer and the daemon has no
//! container under the sandbox's id or its creating name. Directories without a `daemon` file
//! or of another daemon (several daemons may share a state directory) are never touched.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::OnceCell;

use super::host::AgentHost;
use super::socket;
use crate::core::spec::SandboxId;

/// How old a directory must be before it may be pruned: well past any create's `docker run`.
pub const PRUNE_AGE: Duration = Duration::from_secs(600);
/// How often the sweep's pass looks (the first sweep of a server looks at once).
const PRUNE_EVERY: Duration = Duration::from_secs(300);
/// The file naming the daemon, in a sandbox's directory.
const DAEMON_FILE: &str = "daemon";

/// The sandboxes' directories under one root, and what prunes them.
pub struct RunDirs {
    root: PathBuf,
    /// This server's daemon's id, once a create or a pass asked for it.
    daemon: OnceCell<String>,
    /// Sandbox ids whose create in this process made their directory and is still running.
    in_flight: Mutex<HashSet<String>>,
    last_pass: Mutex<Option<Instant>>,
}

/// A create's hold on its directory: the pass leaves it alone until this drops.
pub struct InFlight<'a> {
    dirs: &'a RunDirs,
    sandbox_id: String,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Ok(mut f) = self.dirs.in_flight.lock() {
            f.remove(&self.sandbox_id);
        }
    }
}

/// Make `dir` (and its parents), 0700, owned by this server.
pub fn make_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

impl RunDirs {
    pub fn new(root: PathBuf) -> Self {
        Self { root, daemon: OnceCell::new(), in_flight: Mutex::default(), last_pass: Mutex::default() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The daemon's id (`docker info`), asked once; `None` while it cannot be read.
    async fn daemon_id(&self, host: &dyn AgentHost) -> Option<&str> {
        let id = self.daemon.get_or_try_init(|| host.runtime_id()).await;
        match id {
            Ok(id) => Some(id.as_str()),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the docker daemon's id: run directories made now are never pruned");
                None
            }
        }
    }

    /// Make `run_dir` (`<root>/<sandbox_id>/run`, 0700) for a create, its daemon recorded beside
    /// it; the pass leaves it alone while the returned hold lives.
    pub async fn make(
        &self,
        host: &dyn AgentHost,
        sandbox_id: &str,
        run_dir: &Path,
    ) -> std::io::Result<InFlight<'_>> {
        if let Ok(mut f) = self.in_flight.lock() {
            f.insert(sandbox_id.to_string());
        }
        let hold = InFlight { dirs: self, sandbox_id: sandbox_id.to_string() };
        make_private_dir(run_dir)?;
        if let Some(daemon) = self.daemon_id(host).await {
            let file = self.root.join(sandbox_id).join(DAEMON_FILE);
            std::fs::write(&file, daemon)?;
        }
        Ok(hold)
    }

    /// The pass, when the last one was at least [`PRUNE_EVERY`] ago.
    pub async fn prune_due(&self, host: &dyn AgentHost) {
        {
            let Ok(mut last) = self.last_pass.lock() else { return };
            if last.is_some_and(|at| at.elapsed() < PRUNE_EVERY) {
                return;
            }
            *last = Some(Instant::now());
        }
        let pruned = self.prune(host, PRUNE_AGE).await;
        if !pruned.is_empty() {
            tracing::info!(count = pruned.len(), "pruned run directories left by sandboxes that are gone");
        }
    }

    /// Remove every directory left behind (see the module's rules) at least `min_age` old; the
    /// sandbox ids whose directory went.
    pub async fn prune(&self, host: &dyn AgentHost, min_age: Duration) -> Vec<String> {
        let Some(daemon) = self.daemon_id(host).await.map(str::to_string) else { return Vec::new() };
        let Ok(entries) = std::fs::read_dir(&self.root) else { return Vec::new() };
        let mut pruned = Vec::new();
        for entry in entries.flatten() {
            let Some(id) = entry.file_name().to_str().map(str::to_string) else { continue };
            if !SandboxId::has_valid_shape(&id) || !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let dir = entry.path();
            let recorded = std::fs::read_to_string(dir.join(DAEMON_FILE)).ok();
            let age = std::fs::metadata(dir.join(DAEMON_FILE))
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| SystemTime::now().duration_since(t).ok());
            let in_flight = self.in_flight.lock().map_or(true, |f| f.contains(&id));
            if !left_behind(recorded.as_deref(), &daemon, age, min_age, in_flight)
                || socket::answers(&dir.join("run"))
            {
                continue;
            }
            if !host.is_gone(&id).await {
                continue;
            }
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => {
                    tracing::info!(sandbox_id = %id, dir = %dir.display(), "pruned the run directory of a sandbox that is gone");
                    pruned.push(id);
                }
                Err(e) => {
                    tracing::warn!(sandbox_id = %id, dir = %dir.display(), error = %e, "cannot prune a run directory")
                }
            }
        }
        pruned
    }
}

/// The rules a directory passes before its socket and container are looked at: this daemon's,
/// old enough, no create of this process using it.
fn left_behind(
    recorded: Option<&str>,
    daemon: &str,
    age: Option<Duration>,
    min_age: Duration,
    in_flight: bool,
) -> bool {
    recorded.map(str::trim) == Some(daemon) && age.is_some_and(|a| a >= min_age) && !in_flight
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_daemons_old_idle_directories_are_candidates() {
        let old = Some(Duration::from_secs(700));
        assert!(left_behind(Some("D1\n"), "D1", old, PRUNE_AGE, false));
        assert!(!left_behind(Some("D2"), "D1", old, PRUNE_AGE, false), "another daemon's");
        assert!(!left_behind(None, "D1", old, PRUNE_AGE, false), "no record: not ours to judge");
        assert!(!left_behind(Some("D1"), "D1", Some(Duration::from_secs(60)), PRUNE_AGE, false), "young");
        assert!(!left_behind(Some("D1"), "D1", None, PRUNE_AGE, false), "age unknown");
        assert!(!left_behind(Some("D1"), "D1", old, PRUNE_AGE, true), "a create of ours uses it");
    }
}
