//! Docker as the agent client's host (`agent_client::host::AgentHost`): the serve channel is a
//! `docker exec -i -u 0 NAME <agent> serve` client whose stdio carries the protocol, a sandbox's
//! facts come from one `docker inspect` (`argv::agent_facts_args`), its state from
//! `container_running`, the runtime's id from `docker info`, and the fallback engine is
//! `docker exec`/`docker cp` (`transport::cli`).

use std::collections::HashMap;
use std::time::Duration;

use crate::agent_client::host::{AgentHost, HostFacts, ServeChannel, ServeMode, ServeProcess};
use crate::backends::docker::argv;
use crate::backends::docker::cli::{DockerChild, Pool};
use crate::backends::docker::failure::{CliError, DockerFailureKind};
use crate::backends::docker::transport::cli::{container_running, DockerExecEngine};
use crate::backends::docker::transport::{output_limit, ExecEngine};
use crate::error::ProviderError;

/// Bound on the inspect that learns how to reach a sandbox's agent.
const FACTS_TIMEOUT: Duration = Duration::from_secs(20);
/// Bound on the control commands of a run-directory pass (`docker info`, `docker inspect`).
const CONTROL_TIMEOUT: Duration = Duration::from_secs(30);

/// The Docker daemon, as the agent client reaches sandboxes through it.
pub struct DockerAgentHost {
    engine: DockerExecEngine,
}

impl DockerAgentHost {
    /// `engine`: the `docker exec` engine (its pool starts serve channels; it is the fallback).
    pub fn new(engine: DockerExecEngine) -> Self {
        Self { engine }
    }
}

#[tonic::async_trait]
impl ServeProcess for DockerChild {
    async fn wait(&mut self) {
        let _ = DockerChild::wait(self).await;
    }

    async fn abort(&mut self) {
        DockerChild::abort(self).await;
    }
}

#[tonic::async_trait]
impl AgentHost for DockerAgentHost {
    async fn open_serve(
        &self,
        name: &str,
        agent_path: &str,
        mode: ServeMode,
    ) -> Result<ServeChannel, String> {
        let args = argv::agent_serve_args(name, agent_path, mode == ServeMode::Relay);
        let mut client = self.engine.cli.spawn_detached(&args, true).await.map_err(|e| e.to_string())?;
        let stdin = client.child.stdin.take().ok_or("no stdin pipe")?;
        let stdout = client.child.stdout.take().ok_or("no stdout pipe")?;
        let stderr = client.child.stderr.take();
        Ok(ServeChannel {
            stdin: Box::new(stdin),
            stdout: Box::new(stdout),
            stderr: stderr.map(|s| Box::new(s) as _),
            process: Box::new(client),
        })
    }

    async fn facts(&self, name: &str) -> Result<Option<HostFacts>, String> {
        // A control command: a crowd of execs must not hold up the channel that would take
        // them off `docker exec`.
        let control = self.engine.cli.in_pool(Pool::Control);
        let out = control.run(&argv::agent_facts_args(name), Some(FACTS_TIMEOUT), None).await;
        let out = out.map_err(|e| e.to_string())?;
        Ok(parse_facts(&out.stdout_text()).map(
            |(container_id, default_user, socket_started, inner_socket)| HostFacts {
                container_id,
                default_user,
                socket_started,
                inner_socket,
            },
        ))
    }

    async fn is_running(&self, name: &str) -> bool {
        container_running(&self.engine.cli, name).await
    }

    async fn is_gone(&self, name: &str) -> bool {
        no_container(&self.engine, name).await && no_container(&self.engine, &argv::creating_name(name)).await
    }

    async fn explain(&self, name: &str, e: ProviderError) -> ProviderError {
        crate::backends::docker::files::explain_by_state(&self.engine.cli, name, e).await
    }

    async fn runtime_id(&self) -> Result<String, String> {
        let out = self
            .engine
            .cli
            .in_pool(Pool::Control)
            .run(&argv::daemon_id_args(), Some(CONTROL_TIMEOUT), None)
            .await
            .map_err(|e| e.to_string())?;
        let id = out.stdout_text().trim().to_string();
        if id.is_empty() {
            return Err("docker info printed no daemon id".to_string());
        }
        Ok(id)
    }

    fn fallback(&self) -> &dyn ExecEngine {
        &self.engine
    }

    fn output_limit(&self) -> usize {
        output_limit(&self.engine.config)
    }
}

/// Whether the daemon certainly has no container `name` (an unreachable daemon is not that).
async fn no_container(engine: &DockerExecEngine, name: &str) -> bool {
    let run =
        engine.cli.in_pool(Pool::Control).run(&argv::inspect_args(name), Some(CONTROL_TIMEOUT), None).await;
    matches!(run, Err(CliError::Failed(f)) if f.kind == DockerFailureKind::MissingContainer)
}

/// `id \t user \t labels-json` of `argv::agent_facts_args`: the container id, the user a
/// command runs as by default (the image's, kept in a label when the agent runs as root),
/// whether the agent was started on a socket, and whether that socket is inside the sandbox
/// only (`argv::AGENT_INNER_LABEL`).
pub fn parse_facts(text: &str) -> Option<(String, Option<String>, bool, bool)> {
    let mut parts = text.trim_end_matches('\n').splitn(3, '\t');
    let id = parts.next()?.trim().to_string();
    let config_user = parts.next()?.trim().to_string();
    let labels: HashMap<String, String> = serde_json::from_str(parts.next()?.trim()).unwrap_or_default();
    let agent_user = labels.get(argv::AGENT_USER_LABEL);
    let user = agent_user.cloned().unwrap_or(config_user);
    let inner = labels.get(argv::AGENT_INNER_LABEL).is_some_and(|v| v == "1");
    Some((id, Some(user).filter(|u| !u.is_empty()), agent_user.is_some() && !inner, inner))
}

#[cfg(test)]
mod tests {
    use super::parse_facts;

    #[test]
    fn the_agents_user_label_wins_over_the_containers_user() {
        let socket = "abc\t0\t{\"sandboxd.agent.user\":\"sandbox\",\"x\":\"y\"}\n";
        assert_eq!(parse_facts(socket), Some(("abc".into(), Some("sandbox".into()), true, false)));
        let root_image = "abc\t\t{\"sandboxd.agent.user\":\"\"}\n";
        assert_eq!(parse_facts(root_image), Some(("abc".into(), None, true, false)));
        let older = "abc\tnobody\t{\"sandboxd.sandbox\":\"1\"}\n";
        assert_eq!(parse_facts(older), Some(("abc".into(), Some("nobody".into()), false, false)));
        assert_eq!(
            parse_facts("abc\tnobody\tnull\n"),
            Some(("abc".into(), Some("nobody".into()), false, false))
        );
        let inner = "abc\t0\t{\"sandboxd.agent.user\":\"\",\"sandboxd.agent.inner\":\"1\"}\n";
        assert_eq!(parse_facts(inner), Some(("abc".into(), None, false, true)));
        assert_eq!(parse_facts("garbage"), None);
    }
}
