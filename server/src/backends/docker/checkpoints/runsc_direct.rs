//! gVisor driven by the server itself where Docker's checkpoint path adds copies (issue 35).
//!
//! `docker checkpoint create` has containerd pause the task, runsc write a compressed image into
//! containerd's state, and docker copy it out; `docker start --checkpoint` has containerd import
//! that image into its content store and unpack it again before runsc restores. With a 256 MiB
//! sandbox that was 5.3 s and 3.7 s; runsc's own calls take 0.2 s and about 1 s
//! (docs/gvisor.md). So, on a runtime registered through `scripts/sandboxd-runsc` (its
//! `runtimeArgs` name a restore directory, `argv::RESTORE_DIR_ARG`):
//! - a checkpoint is `runsc checkpoint --compression=none --exclude-committed-zero-pages` of the
//!   container's sandbox, by the runsc binary and state root its running sandbox process shows,
//!   into a directory of the server's (with `--leave-running` it never stops);
//! - a restore is a plain `docker start` of a container whose id the server has written into the
//!   restore directory with the image's path: the wrapper turns the shim's `create` into
//!   `runsc restore --detach`, so no checkpoint reaches containerd.
//!
//! Docker still knows every container (list, inspect, rm, events, labels): each is created,
//! started, stopped and removed by it; only the bytes of memory bypass it.

use std::path::{Path, PathBuf};

use super::argv;
use super::failure::DockerFailureKind;
use super::provider::DockerProvider;
use crate::error::{ProviderError, Result};

/// How long one runsc checkpoint may take (it writes the sandbox's memory once).
const CHECKPOINT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// Where runsc keeps one container's state (its `--root`) and the runsc binary, learnt from the
/// container's running gVisor sandbox process on this host.
///
/// Why: containerd pauses a task before it checkpoints it, and with the runsc release these
/// machines have, a checkpoint of a container that was itself *restored* leaves runsc's state
/// saying "paused" after the sandbox is gone; the shim's `runsc delete` then refuses ("cannot
/// delete container that is not stopped"), the state stays, and every later `docker start
/// --checkpoint` of that container fails with "id already in use" (hibernating a sandbox that had
/// been checkpointed once, then resuming it). Not a race: it lasted minutes.
#[derive(Debug, Clone)]
pub(in crate::backends::docker) struct RunscState {
    root: PathBuf,
    binary: PathBuf,
    container_id: String,
}

/// The runsc state of `container_id` (`None` when no runsc sandbox process of it is visible
/// here: another host, another runtime).
pub(in crate::backends::docker) fn runsc_state_of(container_id: &str) -> Option<RunscState> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let args: Vec<String> =
            cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).to_string()).collect();
        if !args.first().is_some_and(|a| a.starts_with("runsc"))
            || !args.iter().any(|a| a.contains(container_id))
        {
            continue;
        }
        // The gofer's command line has no --root; the sandbox's has.
        let Some(root) = args.iter().find_map(|a| a.strip_prefix("--root=")).map(PathBuf::from) else {
            continue;
        };
        let Ok(binary) = std::fs::read_link(entry.path().join("exe")) else { continue };
        return Some(RunscState { root, binary, container_id: container_id.to_string() });
    }
    None
}

impl RunscState {
    /// The container's state file(s) in runsc's root (`<id>_sandbox:<id>.state`).
    fn state_file(&self) -> Option<PathBuf> {
        let prefix = format!("{}_sandbox:", self.container_id);
        std::fs::read_dir(&self.root).ok()?.flatten().map(|e| e.path()).find(|p| {
            p.file_name().is_some_and(|n| {
                let n = n.to_string_lossy();
                n.starts_with(&prefix) && n.ends_with(".state")
            })
        })
    }

    /// (status, sandbox pid) the state file records; `None` when it is gone.
    fn recorded(&self) -> Option<(String, i64)> {
        let text = std::fs::read_to_string(self.state_file()?).ok()?;
        let state: serde_json::Value = serde_json::from_str(&text).ok()?;
        let status = state.get("status")?.as_str()?.to_string();
        let pid = state.get("sandbox").and_then(|s| s.get("pid")).and_then(|p| p.as_i64()).unwrap_or(0);
        Some((status, pid))
    }

    /// Wait until runsc's state of the checkpointed container is gone: the shim's delete
    /// removes it, or it is the stale "paused" state of a sandbox that is gone (its process
    /// exited), which is deleted here (`runsc delete --force`, which removes it and then
    /// panics on the same transition in this release).
    pub(in crate::backends::docker) async fn settle(&self) {
        const PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);
        let give_up = std::time::Instant::now() + PATIENCE;
        loop {
            match self.recorded() {
                None => return,
                Some((status, pid)) if status == "paused" && !process_alive(pid) => {
                    tracing::info!(container_id = %self.container_id, "removing runsc's stale paused state of a checkpointed sandbox");
                    let _ = tokio::process::Command::new(&self.binary)
                        .arg(format!("--root={}", self.root.display()))
                        .args(["delete", "--force", &self.container_id])
                        .stdin(std::process::Stdio::null())
                        .stdout(std::process::Stdio::null())
                        .stderr(std::process::Stdio::null())
                        .status()
                        .await;
                    if self.recorded().is_none() {
                        return;
                    }
                }
                Some(_) => {}
            }
            if std::time::Instant::now() >= give_up {
                tracing::warn!(container_id = %self.container_id, root = %self.root.display(), "runsc's state of a checkpointed sandbox is still there; its restore may fail ('id already in use')");
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// Whether process `pid` runs (a zombie or no process is not running).
fn process_alive(pid: i64) -> bool {
    if pid <= 0 {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the field after the command's closing parenthesis.
        Ok(stat) => stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()) != Some("Z"),
        Err(_) => false,
    }
}

/// What `runsc checkpoint` is given: the image uncompressed (a fork reads it at disk speed),
/// pages never written left out, and with `leave_running` the sandbox going on.
pub(in crate::backends::docker) fn checkpoint_args(
    state: &RunscState,
    image: &Path,
    leave_running: bool,
) -> Vec<String> {
    let mut args = vec![format!("--root={}", state.root.display()), "checkpoint".to_string()];
    if leave_running {
        args.push("--leave-running".to_string());
    }
    args.extend([
        "--compression=none".to_string(),
        "--exclude-committed-zero-pages".to_string(),
        format!("--image-path={}", image.display()),
        state.container_id.clone(),
    ]);
    args
}

/// The file by which the server asks the wrapper to restore container `container_id`.
fn restore_request(restore_dir: &Path, container_id: &str) -> PathBuf {
    restore_dir.join(container_id)
}

impl DockerProvider {
    /// The restore directory of daemon runtime `daemon_runtime` when it is registered through
    /// `scripts/sandboxd-runsc` (then its sandboxes are checkpointed and restored directly), or
    /// `None` (through `docker checkpoint`). Asked of `docker info` once per runtime.
    pub(in crate::backends::docker) async fn restore_dir(&self, daemon_runtime: &str) -> Option<PathBuf> {
        if let Some(known) = self.restore_dirs.lock().ok().and_then(|m| m.get(daemon_runtime).cloned()) {
            return known;
        }
        let out = self.control(argv::daemon_runtimes_args()).await.ok()?;
        let dir = argv::parse_restore_dir(&out.stdout_text(), daemon_runtime);
        if let Ok(mut m) = self.restore_dirs.lock() {
            m.insert(daemon_runtime.to_string(), dir.clone());
        }
        dir
    }

    /// (full id, daemon runtime) of container `name`.
    pub(in crate::backends::docker) async fn id_and_runtime(&self, name: &str) -> Result<(String, String)> {
        let out = self.control(argv::id_and_runtime_args(name)).await.map_err(|e| match e.kind() {
            Some(DockerFailureKind::MissingContainer) => ProviderError::SandboxNotFound(name.into()),
            _ => e.into(),
        })?;
        let text = out.stdout_text();
        let (id, runtime) = text.trim().split_once('\t').unwrap_or((text.trim(), ""));
        Ok((id.to_string(), runtime.to_string()))
    }

    /// `runsc checkpoint` of the running sandbox `sandbox_id` (container `container_id`) into
    /// `image` (made by runsc; whatever is there is replaced).
    pub(in crate::backends::docker) async fn runsc_checkpoint(
        &self,
        sandbox_id: &str,
        container_id: &str,
        image: &Path,
        leave_running: bool,
    ) -> Result<()> {
        let state = runsc_state_of(container_id).ok_or_else(|| {
            ProviderError::FailedPrecondition(format!(
                "sandbox {sandbox_id}: no gVisor sandbox process of it runs on this server's host \
                 (a checkpoint calls runsc where the sandbox runs)"
            ))
        })?;
        if image.exists() {
            let dir = image.to_path_buf();
            let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir)).await;
        }
        if let Some(parent) = image.parent() {
            crate::agent_client::run_dirs::make_private_dir(parent).map_err(|e| {
                ProviderError::Docker(format!("checkpoint directory {}: {e}", parent.display()))
            })?;
        }
        let run = tokio::process::Command::new(&state.binary)
            .args(checkpoint_args(&state, image, leave_running))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(CHECKPOINT_TIMEOUT, run)
            .await
            .map_err(|_| {
                ProviderError::Docker(format!(
                    "runsc checkpoint of {sandbox_id} took over {CHECKPOINT_TIMEOUT:?}"
                ))
            })?
            .map_err(|e| ProviderError::Docker(format!("runsc checkpoint of {sandbox_id}: {e}")))?;
        if !out.status.success() {
            let _ = std::fs::remove_dir_all(image);
            let stderr = String::from_utf8_lossy(&out.stderr);
            let line = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string();
            return Err(ProviderError::Docker(format!("runsc checkpoint of {sandbox_id} failed: {line}")));
        }
        if !leave_running {
            // The sandbox is gone: the shim's delete removes its state (a restore of the same
            // container needs that done).
            state.settle().await;
        }
        Ok(())
    }
}

/// The server's ask that the wrapper restore one container from an image at its next start;
/// withdrawn when dropped (the wrapper removes it itself once it has restored).
pub(in crate::backends::docker) struct RestoreRequest(PathBuf);

impl RestoreRequest {
    /// Ask that container `container_id` be restored from runsc image `image`, in `restore_dir`
    /// (the directory its runtime was registered with).
    pub(in crate::backends::docker) async fn write(
        restore_dir: &Path,
        container_id: &str,
        image: &Path,
    ) -> Result<Self> {
        let (dir, request) = (restore_dir.to_path_buf(), restore_request(restore_dir, container_id));
        let text = image.display().to_string();
        let path = request.clone();
        tokio::task::spawn_blocking(move || {
            crate::agent_client::run_dirs::make_private_dir(&dir)?;
            std::fs::write(&path, text)
        })
        .await
        .map_err(|e| ProviderError::Docker(format!("restore request task failed: {e}")))?
        .map_err(|e| ProviderError::Docker(format!("restore request {}: {e}", request.display())))?;
        Ok(Self(request))
    }
}

impl Drop for RestoreRequest {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let mut marked = self.0.clone().into_os_string();
        marked.push(".restored");
        let _ = std::fs::remove_file(marked);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_is_uncompressed_without_zero_pages() {
        let state = RunscState {
            root: PathBuf::from("/run/r"),
            binary: PathBuf::from("/opt/runsc"),
            container_id: "c0ffee".into(),
        };
        assert_eq!(
            checkpoint_args(&state, Path::new("/d/img"), true),
            [
                "--root=/run/r",
                "checkpoint",
                "--leave-running",
                "--compression=none",
                "--exclude-committed-zero-pages",
                "--image-path=/d/img",
                "c0ffee"
            ]
        );
        assert!(!checkpoint_args(&state, Path::new("/d/img"), false).contains(&"--leave-running".to_string()));
        assert_eq!(restore_request(Path::new("/d/r"), "c0ffee"), PathBuf::from("/d/r/c0ffee"));
    }
}
