//! What only the daemon and the kernel can tell about a sandbox's life: `Usage` (its cgroup's
//! counters, as `Stats` reads them, plus its age and the processes this server started), and
//! why an exec produced no result of its own (the failure kind of an exec result).
//!
//! An OOM kill is read from the sandbox's own cgroup (`memory.oom_control`'s `oom_kill` on v1,
//! `memory.events` on v2) on the host, never from inside the sandbox: a command that ended by
//! SIGKILL while the count grew was the kernel's OOM killer's.

use std::path::Path;
use std::time::{Duration, SystemTime};

use super::cgroup::{self, Cgroup};
use super::failure::DockerFailureKind;
use super::provider::DockerProvider;
use crate::core::failure::FailureKind;
use crate::core::spec::{ExecErrorType, ExecResult, SandboxId};
use crate::core::usage::SandboxUsage;
use crate::error::{ProviderError, Result};

/// The exit code of a command ended by SIGKILL (the OOM killer's signal).
const KILLED: i32 = 128 + 9;

/// What one `docker inspect` says of a container's life.
struct Facts {
    id: String,
    pid: u32,
    state: String,
    oom_killed: bool,
    started_at: Option<SystemTime>,
}

impl Facts {
    fn parse(text: &str) -> Option<Facts> {
        let mut parts = text.trim().split('\t');
        let id = parts.next()?.to_string();
        let pid = parts.next()?.parse().ok()?;
        let state = parts.next()?.to_string();
        let oom_killed = parts.next()? == "true";
        let started_at = parts.next().and_then(|t| humantime::parse_rfc3339_weak(t).ok());
        Some(Facts { id, pid, state, oom_killed, started_at })
    }

    fn live(&self) -> bool {
        self.pid != 0 && matches!(self.state.as_str(), "running" | "paused")
    }
}

impl DockerProvider {
    /// `Ok(None)` when no container has that name.
    async fn facts(&self, name: &str) -> Result<Option<Facts>> {
        match self.control(super::argv::usage_inspect_args(name)).await {
            Ok(out) => Facts::parse(&out.stdout_text()).map(Some).ok_or_else(|| {
                ProviderError::Docker(format!("unexpected docker inspect output: {:?}", out.stdout_text()))
            }),
            Err(e) if e.kind() == Some(DockerFailureKind::MissingContainer) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// What the sandbox used since it started. A stopped sandbox has nothing to read
    /// (`Stopped`).
    pub async fn usage(&self, id: &SandboxId) -> Result<SandboxUsage> {
        let name = id.as_str();
        self.handle(name).await?;
        let facts = match self.known_facts(name) {
            Some(facts) => facts,
            None => self.facts(name).await?.ok_or_else(|| ProviderError::SandboxNotFound(name.into()))?,
        };
        if !facts.live() {
            return Err(ProviderError::Stopped(name.into()));
        }
        let stats = self.read_cgroup(name, facts.pid, &facts.id).await?;
        let wall_time =
            facts.started_at.and_then(|t| SystemTime::now().duration_since(t).ok()).unwrap_or(Duration::ZERO);
        Ok(SandboxUsage {
            wall_time,
            cpu_time: Duration::from_nanos(stats.cpu_usage_ns),
            peak_memory_bytes: stats.memory_peak_bytes,
            disk_write_bytes: stats.block_write_bytes,
            network_rx_bytes: stats.network_rx_bytes,
            network_tx_bytes: stats.network_tx_bytes,
            processes_started: self.records.read(name, |r| r.usage.processes_started()).unwrap_or(0),
        })
    }

    /// The facts of a sandbox this process created, from what its create kept and its cgroup
    /// (no `docker inspect`: a close reads its usage on its hot path); `None` when not known so.
    fn known_facts(&self, name: &str) -> Option<Facts> {
        let (id, started_at) = self.records.read(name, |r| r.init.clone())??;
        let pid = super::init_kill::init_pid(Path::new(cgroup::CGROUP_ROOT), Path::new("/proc"), &id)?;
        let state = "running".to_string();
        Some(Facts { id, pid, state, oom_killed: false, started_at: Some(started_at) })
    }

    /// One more command or process started in `name` (counted in `Usage`).
    pub(in crate::backends::docker) fn note_started(&self, name: &str) {
        self.records.update(name, |r| r.usage.started());
    }

    /// Whether the sandbox's cgroup saw an OOM kill not yet attributed to a command.
    async fn new_oom_kill(&self, name: &str, facts: &Facts) -> bool {
        if facts.pid == 0 {
            return facts.oom_killed;
        }
        let (pid, id) = (facts.pid, facts.id.clone());
        let count =
            tokio::task::spawn_blocking(move || oom_kill_count(Path::new(cgroup::CGROUP_ROOT), pid, &id))
                .await
                .ok()
                .flatten();
        match count {
            Some(n) => self.records.update(name, |r| r.usage.new_oom_kill(n)),
            None => facts.oom_killed,
        }
    }

    /// The failure kind of a finished exec: a command killed by SIGKILL while its sandbox's
    /// cgroup counted an OOM kill is OOM_KILLED; a command that did not reach its exit is
    /// told apart by the container's state (gone, paused, OOM-killed, the daemon away, the
    /// agent lost). A paused sandbox is the `Paused` error, as before.
    pub async fn settle_exec(&self, name: &str, mut result: ExecResult) -> Result<ExecResult> {
        match result.error_type {
            None if result.return_code == KILLED => {
                if let Ok(Some(facts)) = self.facts(name).await {
                    if self.new_oom_kill(name, &facts).await {
                        result.failure_kind = Some(FailureKind::OomKilled);
                    }
                }
            }
            None => result.failure_kind = None,
            Some(ExecErrorType::Timeout) => result.failure_kind = Some(FailureKind::Timeout),
            Some(_) => {
                // The engine's own message ends the stderr of a lost agent.
                let lost_agent = result.stderr_str().trim_end().ends_with(crate::agent_client::AGENT_LOST);
                result.failure_kind = Some(match self.facts(name).await {
                    Err(ProviderError::Unavailable(_) | ProviderError::Timeout(_)) => {
                        FailureKind::DaemonUnavailable
                    }
                    Err(_) => FailureKind::Internal,
                    Ok(None) => FailureKind::SandboxGone,
                    Ok(Some(facts)) if facts.state == "paused" => {
                        return Err(ProviderError::Paused(name.into()));
                    }
                    // Asleep on disk (after a server restart this process does not know it).
                    Ok(Some(facts)) if facts.state != "running" && self.is_hibernated_name(name).await => {
                        return Err(super::live::hibernated_error(name));
                    }
                    Ok(Some(facts)) if facts.state != "running" => {
                        if facts.oom_killed || self.new_oom_kill(name, &facts).await {
                            FailureKind::OomKilled
                        } else {
                            FailureKind::SandboxGone
                        }
                    }
                    // The agent lost while the sandbox's cgroup ran out of memory: its
                    // commands' memory did it (they are the OOM killer's first choice, but a
                    // kill of the agent's own share of the cap is still the task's doing).
                    Ok(Some(facts)) if lost_agent => {
                        if self.new_oom_kill(name, &facts).await {
                            FailureKind::OomKilled
                        } else {
                            FailureKind::AgentLost
                        }
                    }
                    Ok(Some(_)) => FailureKind::ExecRefused,
                });
            }
        }
        Ok(result)
    }
}

/// The OOM kills the kernel counted in the cgroup of the container whose init is `pid`
/// (`None` where the kernel does not say or the pid is not the container's).
fn oom_kill_count(root: &Path, pid: u32, container_id: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    if !text.contains(container_id) {
        return None;
    }
    let file = match cgroup::locate(root, &text).ok()? {
        Cgroup::V1 { memory, .. } => memory.join("memory.oom_control"),
        Cgroup::V2(dir) => dir.join("memory.events"),
    };
    oom_kill_field(&std::fs::read_to_string(file).ok()?)
}

/// `oom_kill N` from `memory.oom_control` or `memory.events`.
fn oom_kill_field(text: &str) -> Option<u64> {
    text.lines().find_map(|line| line.strip_prefix("oom_kill ")).and_then(|n| n.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_facts_and_oom_counts() {
        let f = Facts::parse("abc\t42\trunning\tfalse\t2026-12-04T13:10:00.123456789Z\n").unwrap();
        assert_eq!((f.id.as_str(), f.pid, f.state.as_str(), f.oom_killed), ("abc", 42, "running", false));
        assert!(f.started_at.is_some() && f.live());
        let f = Facts::parse("abc\t0\texited\ttrue\t0001-01-01T00:00:00Z").unwrap();
        assert!(f.oom_killed && !f.live());
        assert_eq!(oom_kill_field("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"), Some(3));
        assert_eq!(oom_kill_field("low 0\nhigh 0\nmax 5\noom 2\noom_kill 2\n"), Some(2));
        assert_eq!(oom_kill_field("oom_kill_disable 0\n"), None);
    }
}
