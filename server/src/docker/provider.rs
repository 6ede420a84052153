//! `DockerProvider`: create, drive and remove sandboxes through the docker CLI, as NeMo Gym's
//! provider does, plus the ownership checks a multi-tenant service needs.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::argv::{self, ExecOptions};
use super::classify;
use super::cli::{CliError, CommandOutput, DockerCli};
use crate::config::DockerConfig;
use crate::error::{ProviderError, Result};
use crate::spec::{
    normalize_user, validate_abs_path, validate_env, ExecErrorType, ExecResult, ProviderOptions,
    SandboxEndpoint, SandboxStatus, SANDBOX_RUNTIME_RETURN_CODE,
};

/// How many closed ids `status` remembers.
const CLOSED_MEMORY: usize = 65_536;

/// A live sandbox as this process knows it. Everything here can be rediscovered from the
/// container, so any replica can rebuild it from the id alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxHandle {
    pub sandbox_id: String,
    pub image: String,
    /// `<shell> -c` runs every command.
    pub shell: String,
    /// Ports declared at create (the endpoint check).
    pub ports: Vec<u16>,
    pub workdir: Option<String>,
}

/// What the provider needs of a live terminal session to release it with its sandbox.
pub trait LiveSession: Send + Sync {
    fn closed(&self) -> bool;
    fn close(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + '_>>;
    fn abandon(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>>;
}

/// What `serialize_handle` returns and `connect` takes.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SandboxDescriptor {
    pub sandbox_id: String,
    #[serde(default)]
    pub ports: Option<Vec<u16>>,
    #[serde(default)]
    pub workdir: Option<String>,
}

/// Options of one exec beyond the command.
#[derive(Debug, Clone, Default)]
pub struct ExecParams {
    pub cwd: Option<String>,
    pub env: BTreeMap<String, String>,
    pub timeout: Option<Duration>,
    pub user: Option<String>,
    pub stdin: Option<Vec<u8>>,
}

/// What one `docker inspect` says about a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Inspected {
    pub(super) owned: bool,
    pub(super) image: String,
    pub(super) state: String,
    pub(super) workdir: Option<String>,
    pub(super) ports: Vec<u16>,
}

/// The sandbox provider backed by the local docker CLI.
pub struct DockerProvider {
    pub(super) cli: DockerCli,
    pub(super) config: DockerConfig,
    handles: Mutex<HashMap<String, SandboxHandle>>,
    /// Ids this process closed, so their status reads `stopped` rather than unknown.
    closed: Mutex<HashSet<String>>,
    pty_sessions: Mutex<HashMap<String, Vec<Arc<dyn LiveSession>>>>,
    /// Held while snapshots are counted and committed (`server.max_snapshots`).
    pub(super) snapshot_lock: tokio::sync::Mutex<()>,
}

impl DockerProvider {
    /// A provider using the `docker` on `PATH` (or `$SANDBOXD_DOCKER`).
    pub fn new(config: DockerConfig) -> Result<Self> {
        let binary = DockerCli::locate().map_err(ProviderError::Unavailable)?;
        Self::with_binary(config, binary)
    }

    /// A provider running `binary` as docker (tests use a recording fake).
    pub fn with_binary(config: DockerConfig, binary: PathBuf) -> Result<Self> {
        config.validate()?;
        let concurrency = usize::try_from(config.exec.concurrency).unwrap_or(1);
        Ok(Self {
            cli: DockerCli::new(binary, concurrency),
            config,
            handles: Mutex::new(HashMap::new()),
            closed: Mutex::new(HashSet::new()),
            pty_sessions: Mutex::new(HashMap::new()),
            snapshot_lock: tokio::sync::Mutex::new(()),
        })
    }

    pub fn config(&self) -> &DockerConfig {
        &self.config
    }

    pub fn cli(&self) -> &DockerCli {
        &self.cli
    }

    fn control_timeout(&self) -> Option<Duration> {
        self.config.exec.default_timeout_s.map(Duration::from_secs_f64)
    }

    /// Run a short docker control command (inspect, rm, port, start).
    pub(super) async fn control(&self, args: Vec<String>) -> Result<CommandOutput> {
        self.cli.run(&args, self.control_timeout(), None).await.map_err(cli_error)
    }

    // ----- lookup ---------------------------------------------------------------------------

    /// `Ok(None)` when no container has that name.
    pub(super) async fn inspect(&self, name: &str) -> Result<Option<Inspected>> {
        let out = self.control(argv::inspect_args(name)).await?;
        if !out.success() {
            let err = out.stderr_text();
            if classify::is_missing_container(&err) {
                return Ok(None);
            }
            if classify::is_daemon_unreachable(&err) {
                return Err(ProviderError::Unavailable(err.trim().into()));
            }
            return Err(ProviderError::Docker(format!("docker inspect {name}: {}", err.trim())));
        }
        parse_inspect(&out.stdout_text()).map(Some)
    }

    pub(super) fn remember(&self, handle: &SandboxHandle) {
        if let Ok(mut map) = self.handles.lock() {
            map.insert(handle.sandbox_id.clone(), handle.clone());
        }
    }

    pub(super) fn forget(&self, id: &str) {
        if let Ok(mut map) = self.handles.lock() {
            map.remove(id);
        }
    }

    /// Remember that this process closed `id` (bounded: the oldest memory is dropped first).
    fn remember_closed(&self, id: &str) {
        if let Ok(mut set) = self.closed.lock() {
            if set.len() >= CLOSED_MEMORY {
                set.clear();
            }
            set.insert(id.to_string());
        }
    }

    /// Whether this process closed `id`.
    pub(crate) fn was_closed(&self, id: &str) -> bool {
        self.closed.lock().is_ok_and(|set| set.contains(id))
    }

    /// The status of a sandbox by id: `stopped` for one this process closed, `NotFound` for an
    /// id it never owned.
    pub async fn status_by_id(&self, sandbox_id: &str) -> Result<SandboxStatus> {
        match self.handle(sandbox_id).await {
            Ok(handle) => Ok(self.status(&handle).await),
            Err(ProviderError::SandboxNotFound(_)) if self.was_closed(sandbox_id) => {
                Ok(SandboxStatus::Stopped)
            }
            Err(e) => Err(e),
        }
    }

    /// The handle of a sandbox this service owns: from this process's cache, else rebuilt from
    /// the container (a restarted server or another replica). Ids of another shape, unknown
    /// containers and containers without the ownership label are all `SandboxNotFound`.
    pub async fn handle(&self, sandbox_id: &str) -> Result<SandboxHandle> {
        if !argv::is_valid_sandbox_id(sandbox_id) {
            return Err(ProviderError::SandboxNotFound(sandbox_id.into()));
        }
        if let Some(h) = self.handles.lock().ok().and_then(|m| m.get(sandbox_id).cloned()) {
            return Ok(h);
        }
        let found = self.owned(sandbox_id).await?;
        let running = SandboxStatus::from_docker_state(&found.state) == SandboxStatus::Running;
        let shell = if running { self.detect_shell(sandbox_id).await? } else { "sh".into() };
        let handle = SandboxHandle {
            sandbox_id: sandbox_id.into(),
            image: found.image,
            shell,
            ports: found.ports,
            workdir: found.workdir,
        };
        if running {
            self.remember(&handle);
        }
        Ok(handle)
    }

    pub(super) async fn owned(&self, sandbox_id: &str) -> Result<Inspected> {
        match self.inspect(sandbox_id).await? {
            Some(found) if found.owned => Ok(found),
            _ => Err(ProviderError::SandboxNotFound(sandbox_id.into())),
        }
    }

    /// Re-attach to a running sandbox from its descriptor, rediscovering image and shell.
    /// Containers without this service's ownership label are refused.
    pub async fn connect(&self, descriptor: &SandboxDescriptor) -> Result<SandboxHandle> {
        let id = descriptor.sandbox_id.as_str();
        if !argv::is_valid_sandbox_id(id) {
            return Err(ProviderError::SandboxNotFound(id.into()));
        }
        let found = self.owned(id).await?;
        match SandboxStatus::from_docker_state(&found.state) {
            SandboxStatus::Running => {}
            // Connect finds the exec shell by running a command, which a frozen sandbox refuses.
            SandboxStatus::Paused => return Err(ProviderError::Paused(id.into())),
            _ => {
                self.forget(id);
                return Err(ProviderError::Stopped(id.into()));
            }
        }
        let shell = self.detect_shell(id).await?;
        let handle = SandboxHandle {
            sandbox_id: id.into(),
            image: found.image,
            shell,
            ports: descriptor.ports.clone().unwrap_or(found.ports),
            workdir: descriptor.workdir.clone().or(found.workdir),
        };
        self.remember(&handle);
        Ok(handle)
    }

    /// The descriptor another process reconnects from: id, declared ports, workdir.
    pub fn serialize_handle(&self, handle: &SandboxHandle) -> SandboxDescriptor {
        SandboxDescriptor {
            sandbox_id: handle.sandbox_id.clone(),
            ports: Some(handle.ports.clone()),
            workdir: handle.workdir.clone(),
        }
    }

    // ----- exec -----------------------------------------------------------------------------

    /// Run `<shell> -c <command>`; command failure is a result. Only bad arguments are errors.
    pub async fn exec(
        &self,
        handle: &SandboxHandle,
        command: &str,
        params: &ExecParams,
    ) -> Result<ExecResult> {
        if command.contains('\0') {
            return Err(ProviderError::invalid("command", "must not contain NUL bytes"));
        }
        if let Some(cwd) = &params.cwd {
            validate_abs_path("cwd", cwd)?;
        }
        validate_env("env", &params.env)?;
        let user = params.user.as_deref().map(|u| normalize_user("user", u)).transpose()?;
        if params.timeout.is_some_and(|t| t.is_zero()) {
            return Err(ProviderError::invalid("timeout_s", "must be > 0"));
        }
        let result = self.exec_in(&handle.sandbox_id, &handle.shell, command, params, user.as_deref()).await;
        // Only a failed exec is read for the paused refusal: no inspect before every exec.
        if result.error_type == Some(ExecErrorType::Sandbox)
            && classify::is_paused_container(&result.stderr_lossy())
        {
            return Err(ProviderError::Paused(handle.sandbox_id.clone()));
        }
        Ok(result)
    }

    /// One `docker exec` with the timeout and runtime-failure rules of the seed.
    pub(crate) async fn exec_in(
        &self,
        name: &str,
        shell: &str,
        command: &str,
        params: &ExecParams,
        user: Option<&str>,
    ) -> ExecResult {
        run_exec(&self.cli, &self.config, name, shell, command, params, user).await
    }

    // ----- status, endpoint, close ----------------------------------------------------------

    /// `running` running, `paused` paused, `created|restarting` starting, gone or exited stopped,
    /// error or timeout unknown.
    pub async fn status(&self, handle: &SandboxHandle) -> SandboxStatus {
        match self.inspect(&handle.sandbox_id).await {
            Ok(Some(found)) => SandboxStatus::from_docker_state(&found.state),
            Ok(None) => SandboxStatus::Stopped,
            Err(_) => SandboxStatus::Unknown,
        }
    }

    /// The host URL of a declared, published port.
    pub async fn endpoint(&self, handle: &SandboxHandle, port: u16) -> Result<SandboxEndpoint> {
        if !handle.ports.contains(&port) {
            return Err(ProviderError::invalid(
                "port",
                format!("port {port} was not declared in spec.ports; declared ports: {:?}", handle.ports),
            ));
        }
        let out = self.control(argv::port_args(&handle.sandbox_id, port)).await?;
        if !out.success() {
            let err = out.stderr_text();
            if classify::is_missing_container(&err) {
                return Err(ProviderError::Stopped(handle.sandbox_id.clone()));
            }
            return Err(ProviderError::Docker(format!("docker port {port}: {}", err.trim())));
        }
        let text = out.stdout_text();
        let bindings: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        let preferred =
            bindings.iter().find(|b| b.starts_with("127.0.0.1:")).or(bindings.first()).ok_or_else(|| {
                ProviderError::Docker(format!("docker returned no host binding for port {port}"))
            })?;
        let (mut host, host_port) = argv::parse_port_binding(preferred).map_err(ProviderError::Docker)?;
        if host == "0.0.0.0" || host == "::" {
            host = self.config.create.publish_host.clone();
        }
        Ok(SandboxEndpoint { endpoint: argv::http_endpoint(&host, host_port), headers: BTreeMap::new() })
    }

    /// Release the sandbox's terminal sessions, then force-remove it; already gone is success.
    pub async fn close(&self, handle: &SandboxHandle) -> Result<()> {
        self.release_pty_sessions(&handle.sandbox_id, true).await;
        self.forget(&handle.sandbox_id);
        self.remember_closed(&handle.sandbox_id);
        let out = self.control(argv::rm_args(&handle.sandbox_id)).await?;
        if !out.success() {
            let err = out.stderr_text();
            if !classify::is_missing_container(&err) {
                if classify::is_daemon_unreachable(&err) {
                    return Err(ProviderError::Unavailable(err.trim().into()));
                }
                return Err(ProviderError::Docker(format!(
                    "docker rm -f {}: {}",
                    handle.sandbox_id,
                    err.trim()
                )));
            }
        }
        tracing::info!(sandbox_id = %handle.sandbox_id, "sandbox closed");
        Ok(())
    }

    /// Close by id: already gone is success, a container this service does not own is
    /// `SandboxNotFound` and is left untouched.
    pub async fn close_id(&self, sandbox_id: &str) -> Result<()> {
        if !argv::is_valid_sandbox_id(sandbox_id) {
            return Err(ProviderError::SandboxNotFound(sandbox_id.into()));
        }
        let cached = self.handles.lock().ok().and_then(|m| m.get(sandbox_id).cloned());
        let handle = match cached {
            Some(h) => h,
            None => match self.inspect(sandbox_id).await? {
                None => {
                    self.release_pty_sessions(sandbox_id, true).await;
                    return Ok(());
                }
                Some(found) if !found.owned => return Err(ProviderError::SandboxNotFound(sandbox_id.into())),
                Some(found) => SandboxHandle {
                    sandbox_id: sandbox_id.into(),
                    image: found.image,
                    shell: "sh".into(),
                    ports: found.ports,
                    workdir: found.workdir,
                },
            },
        };
        self.close(&handle).await
    }

    /// Close the terminal sessions still open; the containers belong to their handles.
    pub async fn aclose(&self) {
        let ids: Vec<String> =
            self.pty_sessions.lock().map(|m| m.keys().cloned().collect()).unwrap_or_default();
        for id in &ids {
            self.release_pty_sessions(id, false).await;
        }
    }

    /// Compose's `pull_policy` as run args.
    pub fn pull_policy_options(policy: &str) -> Result<ProviderOptions> {
        let run_args =
            argv::pull_policy_args(policy).map_err(|m| ProviderError::invalid("pull_policy", m))?;
        Ok(ProviderOptions { volumes: Vec::new(), run_args })
    }

    /// Compose service options (`tmpfs`, `ulimits`, `sysctls`, `security_opt`) as run args.
    pub fn service_options(
        tmpfs: &[String],
        ulimits: &BTreeMap<String, String>,
        sysctls: &BTreeMap<String, String>,
        security_opt: &[String],
    ) -> ProviderOptions {
        ProviderOptions {
            volumes: Vec::new(),
            run_args: argv::service_option_args(tmpfs, ulimits, sysctls, security_opt),
        }
    }

    // ----- pty sessions ---------------------------------------------------------------------

    pub(crate) fn track_pty_session(&self, sandbox_id: &str, session: Arc<dyn LiveSession>) {
        if let Ok(mut map) = self.pty_sessions.lock() {
            let list = map.entry(sandbox_id.to_string()).or_default();
            list.retain(|s| !s.closed());
            list.push(session);
        }
    }

    /// Close (or, when the container goes away, abandon) the live sessions of a sandbox.
    async fn release_pty_sessions(&self, sandbox_id: &str, abandon: bool) {
        let sessions =
            self.pty_sessions.lock().ok().and_then(|mut m| m.remove(sandbox_id)).unwrap_or_default();
        for session in sessions {
            if abandon {
                session.abandon().await;
            } else if let Err(e) = session.close().await {
                tracing::warn!(sandbox_id, error = %e, "closing a pty session failed");
            }
        }
    }
}

/// One `docker exec` of `<shell> -c <command>`: timeout kills the client's process group and
/// returns 125/`timeout`; a refusal by the daemon returns 125/`sandbox`.
pub(crate) async fn run_exec(
    cli: &DockerCli,
    config: &DockerConfig,
    name: &str,
    shell: &str,
    command: &str,
    params: &ExecParams,
    user: Option<&str>,
) -> ExecResult {
    let opts = ExecOptions {
        cwd: params.cwd.as_deref(),
        env: (!params.env.is_empty()).then_some(&params.env),
        user,
        interactive: params.stdin.is_some(),
        tty: false,
        last_env: None,
    };
    let args = argv::exec_args(&config.exec, name, &opts, &argv::shell_command(shell, command));
    let timeout = params.timeout.or(config.exec.default_timeout_s.map(Duration::from_secs_f64));
    let limit = usize::try_from(config.exec.max_output_bytes).unwrap_or(usize::MAX);
    match cli.run_limited(&args, timeout, params.stdin.as_deref(), limit).await {
        Ok(mut out) => {
            if out.dropped > 0 {
                tracing::warn!(dropped = out.dropped, limit, "exec output over the limit was dropped");
                out.stderr.extend_from_slice(
                    format!(
                        "\n[sandboxd: output past {limit} bytes per stream was dropped ({} bytes); \
                         exec.max_output_bytes sets the limit]\n",
                        out.dropped
                    )
                    .as_bytes(),
                );
            }
            let err = out.stderr_text();
            if out.code != 0 && classify::is_runtime_failure(&err) {
                ExecResult {
                    stdout: out.stdout,
                    stderr: out.stderr,
                    return_code: SANDBOX_RUNTIME_RETURN_CODE,
                    error_type: Some(ExecErrorType::Sandbox),
                }
            } else {
                ExecResult { stdout: out.stdout, stderr: out.stderr, return_code: out.code, error_type: None }
            }
        }
        Err(e @ CliError::Timeout { .. }) => ExecResult::failed(ExecErrorType::Timeout, e.to_string()),
        Err(e) => ExecResult::failed(ExecErrorType::Sandbox, e.to_string()),
    }
}

fn parse_inspect(text: &str) -> Result<Inspected> {
    let line = text.trim_end_matches('\n');
    let mut parts = line.splitn(4, '\t');
    let labels_json = parts.next().unwrap_or("null");
    let image = parts.next().unwrap_or_default().to_string();
    let state = parts.next().unwrap_or_default().to_string();
    let workdir = parts.next().map(str::trim).filter(|w| !w.is_empty()).map(String::from);
    let labels: BTreeMap<String, String> =
        serde_json::from_str::<Option<BTreeMap<String, String>>>(labels_json)
            .map_err(|e| ProviderError::Docker(format!("unexpected docker inspect output: {e}")))?
            .unwrap_or_default();
    let owned = labels.get(argv::SANDBOX_LABEL).is_some_and(|v| v == "1");
    let ports = labels
        .get(argv::PORTS_LABEL)
        .map(|p| p.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_default();
    Ok(Inspected { owned, image, state, workdir, ports })
}

pub(super) fn cli_error(e: CliError) -> ProviderError {
    match e {
        CliError::Timeout { .. } => ProviderError::Timeout(e.to_string()),
        CliError::Spawn { .. } => ProviderError::Unavailable(e.to_string()),
        CliError::Io { source, .. } => ProviderError::Io(source),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inspect_output_parses() {
        let text = "{\"sandboxd.sandbox\":\"1\",\"sandboxd.ports\":\"80,8080\"}\tsandboxd-test/busybox:1\trunning\t/work\n";
        let i = parse_inspect(text).unwrap();
        assert!(i.owned);
        assert_eq!(i.ports, vec![80, 8080]);
        assert_eq!(i.state, "running");
        assert_eq!(i.workdir.as_deref(), Some("/work"));
        let stranger = parse_inspect("null\timg\texited\t\n").unwrap();
        assert!(!stranger.owned);
        assert_eq!(stranger.workdir, None);
    }
}
