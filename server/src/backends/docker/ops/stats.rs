//! `Stats` on Docker: one `docker inspect` for the container's full id, init pid and state,
//! then the kernel's counters ([`super::cgroup`]), read on a blocking thread.

use std::path::Path;

use super::cgroup;
use super::failure::DockerFailureKind;
use super::provider::DockerProvider;
use crate::core::spec::SandboxId;
use crate::core::stats::SandboxStats;
use crate::error::{ProviderError, Result};

impl DockerProvider {
    /// The sandbox's usage now. A stopped sandbox has none (`Stopped`).
    pub async fn stats(&self, id: &SandboxId) -> Result<SandboxStats> {
        let sandbox_id = id.as_str();
        self.handle(sandbox_id).await?;
        let out = match self.control(super::argv::stats_inspect_args(sandbox_id)).await {
            Ok(out) => out,
            Err(e) if e.kind() == Some(DockerFailureKind::MissingContainer) => {
                return Err(ProviderError::SandboxNotFound(sandbox_id.into()))
            }
            Err(e) => return Err(e.into()),
        };
        let text = out.stdout_text();
        let mut parts = text.trim().split('\t');
        let (container_id, pid, state) = (parts.next(), parts.next(), parts.next());
        let (Some(container_id), Some(pid)) = (container_id, pid.and_then(|p| p.parse::<u32>().ok())) else {
            return Err(ProviderError::Docker(format!("unexpected docker inspect output: {text:?}")));
        };
        if pid == 0 || !matches!(state, Some("running" | "paused")) {
            return Err(ProviderError::Stopped(sandbox_id.into()));
        }
        self.read_cgroup(sandbox_id, pid, container_id).await
    }

    /// The kernel's counters of sandbox `sandbox_id` (its process `pid`, container
    /// `container_id`), read off the async threads. A process that ended between the caller's
    /// look-up and the read is a sandbox that stopped (`Stopped`), not an unreadable one.
    pub(in crate::backends::docker) async fn read_cgroup(
        &self,
        sandbox_id: &str,
        pid: u32,
        container_id: &str,
    ) -> Result<SandboxStats> {
        let container_id = container_id.to_string();
        let read = tokio::task::spawn_blocking(move || {
            cgroup::read(Path::new(cgroup::CGROUP_ROOT), Path::new("/proc"), pid, &container_id)
        })
        .await
        .map_err(|e| ProviderError::Docker(format!("the cgroup reader failed: {e}")))?;
        read.map_err(|e| {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                return ProviderError::Stopped(sandbox_id.into());
            }
            ProviderError::Unavailable(format!("cannot read the usage of sandbox {sandbox_id:?}: {e}"))
        })
    }
}
