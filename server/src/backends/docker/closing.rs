//! `Close` without making the caller wait for Docker's removal. The close kills the container
//! (`docker kill`: nothing in it runs once it returns) and renames it
//! `sandboxd-closing-<hex>` (its id answers NOT_FOUND from then on, and a create may reuse
//! nothing of it); the removal (`docker rm -f`, the loop disk's detach and file) finishes in a
//! background task. A server that dies before that leaves the renamed container, which the
//! sweep lists as an unfinished operation past its deadline (`owned.rs`) and removes at its
//! first pass. A sandbox on a service network is removed in the foreground (the network goes
//! when its last container does).

use std::path::PathBuf;
use std::time::Duration;

use super::argv;
use super::failure::{CliError, DockerFailureKind};
use super::provider::DockerProvider;

use super::argv::closing_name;

/// How long a background removal keeps trying.
const BACKGROUND_REMOVAL_WAIT: Duration = Duration::from_secs(120);

impl DockerProvider {
    /// Kill and rename `sandbox_id`'s container, then remove it in the background. `Ok(false)`:
    /// it was not renamed (a service network to release, or the kill or rename failed), the
    /// caller removes it in the foreground.
    pub(super) async fn close_in_background(&self, sandbox_id: &str) -> std::result::Result<bool, CliError> {
        if self.networks.lock().map(|m| m.contains_key(sandbox_id)).unwrap_or(true) {
            return Ok(false);
        }
        match self.control(argv::kill_args(sandbox_id)).await {
            Ok(_) => {}
            Err(e) if e.kind() == Some(DockerFailureKind::MissingContainer) => return Ok(true),
            Err(e) if e.kind() == Some(DockerFailureKind::NotRunning) => {}
            Err(_) => return Ok(false),
        }
        let closing = closing_name(sandbox_id);
        match self.control(argv::rename_args(sandbox_id, &closing)).await {
            Ok(_) => {}
            Err(e) if e.kind() == Some(DockerFailureKind::MissingContainer) => return Ok(true),
            Err(_) => return Ok(false),
        }
        let disk = self.disks.lock().ok().and_then(|mut m| m.remove(sandbox_id));
        let loop_disk = disk.is_some() || self.config.create.disk_bound == crate::config::DiskBound::Loop;
        let cli = self.cli.in_pool(super::cli::Pool::Control);
        let timeout = self.control_timeout();
        self.removals.spawn(async move {
            remove_closed(cli, closing, disk.filter(|_| loop_disk), timeout).await;
        });
        Ok(true)
    }

    /// Wait for the removals closes left to the background (a shutdown).
    pub async fn settle_removals(&self) {
        self.removals.close();
        self.removals.wait().await;
        self.removals.reopen();
    }
}

/// Detach the loop disk (as `detach_disk`), `docker rm -f` (waiting out a removal in
/// progress), then the disk file.
async fn remove_closed(
    cli: super::cli::DockerCli,
    name: String,
    disk: Option<(PathBuf, PathBuf)>,
    timeout: Option<Duration>,
) {
    if let Some((_, layer)) = &disk {
        super::disk::detach_layer(&name, layer).await;
    }
    let started = std::time::Instant::now();
    let mut pause = Duration::from_millis(100);
    loop {
        match cli.run(&argv::rm_args(&name), timeout, None).await {
            Ok(_) => break,
            Err(e) if e.kind() == Some(DockerFailureKind::MissingContainer) => break,
            Err(e) if started.elapsed() + pause < BACKGROUND_REMOVAL_WAIT => {
                tracing::debug!(container = %name, error = %e, "background removal retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            Err(e) => {
                tracing::warn!(container = %name, error = %e, "a closed sandbox's container could not be removed; the sweep removes it");
                return;
            }
        }
    }
    if let Some((file, _)) = disk {
        if let Err(e) = std::fs::remove_file(&file) {
            tracing::debug!(file = %file.display(), error = %e, "disk file already gone");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::docker::argv::sandbox_of_closing;

    #[test]
    fn closing_names_map_back_to_their_sandbox() {
        let id = "sandboxd-0123456789abcdef0123456789abcdef";
        let name = closing_name(id);
        assert_eq!(name, "sandboxd-closing-0123456789abcdef0123456789abcdef");
        assert_eq!(sandbox_of_closing(&name).as_deref(), Some(id));
        assert_eq!(sandbox_of_closing(id), None);
    }
}
