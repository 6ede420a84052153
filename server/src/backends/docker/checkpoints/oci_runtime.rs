//! Which OCI runtime a new sandbox runs on (`SandboxSpec.runtime`, `docker.create.runtime`,
//! `docker.runtimes`), checked before anything is created: a name the server does not offer is
//! INVALID_ARGUMENT naming the offered ones; an offer the daemon has not registered is
//! FAILED_PRECONDITION naming what `docker info` lists. A sandbox from a snapshot (a fork's
//! children too) runs on the snapshot's runtime.

use std::time::{Duration, Instant};

use super::argv;
use super::provider::DockerProvider;
use crate::config::ExecTransport;
use crate::core::spec::SandboxSpec;
use crate::error::{ProviderError, Result};

/// How long one `docker info` answer about the daemon's runtimes is trusted; a runtime found
/// missing is asked again (an operator may have registered it since, `SIGHUP` reloads them).
const DAEMON_RUNTIMES_TTL: Duration = Duration::from_secs(300);

/// The runtime a create runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeChoice {
    /// As the server offers it (the label, `List`).
    pub name: String,
    /// As the daemon knows it (`docker run --runtime`).
    pub daemon_name: String,
    /// Its transport override (`docker.runtimes[].transport`).
    pub transport: Option<ExecTransport>,
    /// Whether sandboxes on it can be checkpointed (`docker.runtimes[].checkpoint`): their
    /// agent's socket stays inside them (`argv::AGENT_INNER_LABEL`).
    pub checkpoint: bool,
}

/// The runtime every Docker daemon has registered, under this name.
const BUILT_IN_RUNTIME: &str = "runc";

impl DockerProvider {
    /// Whether a sandbox on offered runtime `name` (`None`: the default) runs on Docker's
    /// built-in runc, whose container init is a host process that is pid 1 of the sandbox's
    /// namespace (what `init_kill.rs` ends a sandbox through). Another runtime's (gVisor's
    /// sandbox processes) may die while Docker still reads the container running.
    pub(in crate::backends::docker) fn on_built_in_runtime(&self, name: Option<&str>) -> bool {
        let name = name.unwrap_or(self.config.create.runtime.as_str());
        self.config.runtimes.get(name).is_some_and(|offer| offer.daemon_name() == BUILT_IN_RUNTIME)
    }

    /// The runtime `spec` runs on; `snapshot_runtime` is its snapshot's (`""`: one taken
    /// before runtimes were recorded, which runs on the default).
    pub(in crate::backends::docker) async fn choose_runtime(
        &self,
        spec: &SandboxSpec,
        snapshot_runtime: Option<&str>,
    ) -> Result<RuntimeChoice> {
        let offered = &self.config.runtimes;
        let snapshot_runtime = snapshot_runtime.filter(|r| !r.is_empty());
        let name = match (spec.runtime.as_deref(), snapshot_runtime) {
            (Some(asked), Some(taken)) if asked != taken => {
                return Err(ProviderError::invalid(
                    "spec.runtime",
                    format!(
                        "{asked:?}: spec.snapshot_id was taken on runtime {taken:?}, and a sandbox \
                         from it runs on that one (leave spec.runtime empty or set it to {taken:?})"
                    ),
                ))
            }
            (_, Some(taken)) => taken,
            (Some(asked), None) => asked,
            (None, None) => self.config.create.runtime.as_str(),
        };
        let offer = offered.get(name).ok_or_else(|| {
            ProviderError::invalid(
                "spec.runtime",
                format!("runtime {name:?} is not offered by this server; offered: {}", offered.names()),
            )
        })?;
        let daemon_name = offer.daemon_name().to_string();
        // Docker registers `runc` itself (its built-in default): no `docker info` for it.
        if daemon_name == BUILT_IN_RUNTIME {
            return Ok(RuntimeChoice {
                name: name.to_string(),
                daemon_name,
                transport: offer.transport,
                checkpoint: offer.checkpoint,
            });
        }
        let registered = self.daemon_runtimes(&daemon_name).await?;
        if !registered.contains(&daemon_name) {
            return Err(ProviderError::FailedPrecondition(format!(
                "spec.runtime: runtime {name:?} needs the Docker daemon's runtime {daemon_name:?}, which the \
                 daemon has not registered (`docker info` lists: {}); register it in the daemon's \
                 daemon.json (see docs/runtimes.md, \"Sandboxes on gVisor\")",
                registered.join(", ")
            )));
        }
        Ok(RuntimeChoice {
            name: name.to_string(),
            daemon_name,
            transport: offer.transport,
            checkpoint: offer.checkpoint,
        })
    }

    /// The runtimes the daemon lists, from one `docker info` kept for a while; asked again when
    /// `wanted` is not among them.
    async fn daemon_runtimes(&self, wanted: &str) -> Result<Vec<String>> {
        let mut cached = self.daemon_runtimes.lock().await;
        if let Some((at, names)) = cached.as_ref() {
            if at.elapsed() < DAEMON_RUNTIMES_TTL && names.iter().any(|n| n == wanted) {
                return Ok(names.clone());
            }
        }
        let out = self.control(argv::daemon_runtimes_args()).await.map_err(ProviderError::from)?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let names = argv::parse_daemon_runtimes(&stdout).ok_or_else(|| {
            ProviderError::Docker(format!(
                "`docker info` did not list the daemon's runtimes as JSON: {:?}",
                stdout.chars().take(200).collect::<String>()
            ))
        })?;
        *cached = Some((Instant::now(), names.clone()));
        Ok(names)
    }
}
