//! Egress rules for a Docker sandbox, enforced from the host: `nsenter --net=/proc/<pid>/ns/net
//! nft -f -` with the ruleset of `egress::nft` on stdin, so the rules live in the sandbox's own
//! network namespace (they go with it when the container is removed) and no process in the
//! sandbox can change them (sandboxes never get CAP_NET_ADMIN). The allowed domains' addresses
//! are then written into the sandbox's `/etc/hosts` through the exec engine, as root.
//!
//! `nft` from the host is used rather than a netlink crate: a netlink socket must be opened
//! inside the namespace (`setns` on a thread of our own), while `nsenter` + `nft -f` applies a
//! file as one transaction with nothing of ours left in the namespace.

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use super::argv;
use super::provider::DockerProvider;
use super::transport::ExecSpec;
use crate::core::spec::ExecParams;
use crate::egress::{hosts, nft, EgressPlan};
use crate::error::{ProviderError, Result};

/// Bound on one `nsenter … nft -f -` and on the `/etc/hosts` update.
const APPLY_TIMEOUT: Duration = Duration::from_secs(15);

impl DockerProvider {
    /// Replace the egress rules of the running sandbox `name` (an id, or the creating name
    /// during a create) with `plan`. A sandbox without a network (`docker.create.network:
    /// none`) needs none.
    pub async fn apply_egress(&self, name: &str, plan: &EgressPlan) -> Result<()> {
        if self.enforce_egress(name, plan).await? && !plan.policy.domains.is_empty() {
            self.write_hosts(name, plan).await;
        }
        Ok(())
    }

    /// The rules alone (a create enforces them right after `docker run`, before anything runs
    /// in the sandbox, and writes `/etc/hosts` once it is ready); `false` when the sandbox has no
    /// network to filter.
    pub(in crate::backends::docker) async fn enforce_egress(
        &self,
        name: &str,
        plan: &EgressPlan,
    ) -> Result<bool> {
        if self.config.create.network.as_deref() == Some("none") {
            return Ok(false);
        }
        self.owned(name).await?;
        let pid: u32 = self
            .control(argv::pid_args(name))
            .await?
            .stdout_text()
            .trim()
            .parse()
            .map_err(|_| ProviderError::Docker(format!("docker inspect gave no pid for {name}")))?;
        if pid == 0 {
            return Err(ProviderError::Stopped(name.into()));
        }
        let netns = format!("/proc/{pid}/ns/net");
        shared_namespace_check(&netns, name)?;
        run_nft(&netns, &nft::ruleset(plan)).await.map_err(|e| {
            ProviderError::Docker(format!("cannot set the network policy of {name} (nsenter + nft): {e}"))
        })?;
        tracing::info!(sandbox_id = %name, rules = plan.policy.rules.len(), domains = plan.policy.domains.len(), "egress policy applied");
        Ok(true)
    }

    /// The allowed names into `/etc/hosts`: only for resolution, so a failure (a read-only
    /// file) is logged, never fatal.
    pub(in crate::backends::docker) async fn write_hosts(&self, name: &str, plan: &EgressPlan) {
        let script = hosts::update_script(plan);
        let params = ExecParams { timeout: Some(APPLY_TIMEOUT), ..Default::default() };
        let spec = ExecSpec { name, shell: "sh", command: &script, params: &params, user: Some("0") };
        let result = self.engine.exec(spec).await;
        if result.return_code != 0 {
            tracing::warn!(sandbox_id = %name, code = result.return_code, stderr = %result.stderr_str().trim(), "cannot write the allowed domains into /etc/hosts");
        }
    }
}

/// Refuse a namespace that is not the sandbox's own (the host's, `--network host`): rules there
/// would filter the host itself.
fn shared_namespace_check(netns: &str, name: &str) -> Result<()> {
    let inode = |path: &str| std::fs::metadata(path).map(|m| (m.dev(), m.ino()));
    let theirs = inode(netns).map_err(|e| {
        ProviderError::Docker(format!("cannot open the network namespace of {name} ({netns}): {e}"))
    })?;
    for ours in ["/proc/self/ns/net", "/proc/1/ns/net"] {
        if inode(ours).is_ok_and(|o| o == theirs) {
            return Err(ProviderError::Create(format!(
                "{name} shares a network namespace with the host: a network policy cannot be enforced there"
            )));
        }
    }
    Ok(())
}

/// `nsenter --net=NETNS -- nft -f -` with `ruleset` on stdin, within [`APPLY_TIMEOUT`].
async fn run_nft(netns: &str, ruleset: &str) -> std::io::Result<()> {
    use super::host_tools::program;
    let mut child = tokio::process::Command::new(program("nsenter"))
        .arg(format!("--net={netns}"))
        .arg("--")
        .arg(program("nft"))
        .args(["-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = child.stdin.take().ok_or_else(|| std::io::Error::other("no stdin"))?;
    let work = async {
        stdin.write_all(ruleset.as_bytes()).await?;
        drop(stdin);
        child.wait_with_output().await
    };
    let output = tokio::time::timeout(APPLY_TIMEOUT, work).await.map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::TimedOut, format!("nft took over {APPLY_TIMEOUT:?}"))
    })??;
    if output.status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "{}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}
