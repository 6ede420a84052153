//! `DockerProvider`: create, drive and remove sandboxes through the docker CLI, as NeMo Gym's
//! provider does, plus the ownership checks a multi-tenant service needs.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tracing::Instrument;

use super::argv::{self, ExecOptions};
use super::classify;
use super::cli::{CliError, CommandOutput, DockerCli};
use super::tarstream::{self, FirstEntry};
use crate::config::DockerConfig;
use crate::error::{ProviderError, Result};
use crate::spec::{
    normalize_image, normalize_user, validate_abs_path, validate_env, ExecErrorType, ExecResult,
    ProviderOptions, SandboxEndpoint, SandboxSpec, SandboxStatus, SANDBOX_RUNTIME_RETURN_CODE,
};

/// Marks the shell-detection line the combined probe prints on stderr.
const SHELL_MARK: &str = "__sandboxd_shell=";
/// How many closed ids `status` remembers.
const CLOSED_MEMORY: usize = 65_536;
/// Copy buffer for file transfers.
const CHUNK: usize = 256 * 1024;

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
struct Inspected {
    owned: bool,
    image: String,
    state: String,
    workdir: Option<String>,
    ports: Vec<u16>,
}

/// The sandbox provider backed by the local docker CLI.
pub struct DockerProvider {
    cli: DockerCli,
    config: DockerConfig,
    handles: Mutex<HashMap<String, SandboxHandle>>,
    /// Ids this process closed, so their status reads `stopped` rather than unknown.
    closed: Mutex<HashSet<String>>,
    pty_sessions: Mutex<HashMap<String, Vec<Arc<dyn LiveSession>>>>,
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
    async fn control(&self, args: Vec<String>) -> Result<CommandOutput> {
        self.cli.run(&args, self.control_timeout(), None).await.map_err(cli_error)
    }

    // ----- create ---------------------------------------------------------------------------

    /// Start a detached keep-alive container and probe it until ready. A half-created
    /// container is force-removed on any failure.
    pub async fn create(&self, spec: &SandboxSpec) -> Result<SandboxHandle> {
        spec.validate()?;
        let name = argv::new_container_name();
        let image = normalize_image(&spec.image).to_string();
        let args = argv::run_args(&self.config.create, spec, &name);
        let span = tracing::info_span!("create", sandbox_id = %name, image = %image);
        self.run_create_with_reconciliation(&args, &name, &image).instrument(span).await?;
        let mut handle = SandboxHandle {
            sandbox_id: name.clone(),
            image,
            shell: self.config.exec.exec_shell.clone().unwrap_or_else(|| "sh".into()),
            ports: spec.ports.clone(),
            workdir: spec.workdir.clone(),
        };
        match self.verify_and_detect_shell(&name, spec.ready_timeout_s).await {
            Ok(shell) => handle.shell = shell,
            Err(e) => {
                self.force_remove(&name).await;
                return Err(e);
            }
        }
        self.remember(&handle);
        tracing::info!(sandbox_id = %name, shell = %handle.shell, "sandbox created");
        Ok(handle)
    }

    /// Run `docker run` without leaking a container when its response is lost: after a timeout,
    /// transport error or same-name conflict, inspect that exact name before retrying; reuse it
    /// only when both the ownership label and the image match; never remove a stranger.
    async fn run_create_with_reconciliation(&self, args: &[String], name: &str, image: &str) -> Result<()> {
        let cfg = &self.config.create;
        let timeout = cfg.start_timeout_s.map(Duration::from_secs_f64);
        let attempts = cfg.transport_retries.max(0) as u32 + 1;
        let mut last_error = String::new();
        for attempt in 0..attempts {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_secs_f64(cfg.transport_retry_delay_s)).await;
            }
            let detail = match self.cli.run(args, timeout, None).await {
                Ok(out) if out.success() => return Ok(()),
                Ok(out) => {
                    let err = out.stderr_text();
                    if classify::is_name_conflict(&err) || is_transport_failure(&err) {
                        err.trim().to_string()
                    } else {
                        self.remove_if_owned(name, image).await;
                        return Err(create_failure(image, out.code, &err));
                    }
                }
                Err(CliError::Timeout { after, .. }) => format!("docker run timed out after {after:?}"),
                Err(e @ CliError::Spawn { .. }) => return Err(ProviderError::Unavailable(e.to_string())),
                Err(e) => e.to_string(),
            };
            last_error = detail;
            tracing::warn!(attempt, error = %last_error, "ambiguous docker run; reconciling by name");
            match self.inspect(name).await {
                Ok(Some(found)) if found.owned && same_image(&found.image, image) => {
                    if self.start_reconciled_container(name, &found.state).await? {
                        return Ok(());
                    }
                }
                Ok(Some(_)) => {
                    return Err(ProviderError::Create(format!(
                        "container name {name:?} is taken by a container this service does not own; left untouched"
                    )))
                }
                Ok(None) | Err(_) => {}
            }
        }
        if classify::is_daemon_unreachable(&last_error) {
            return Err(ProviderError::Unavailable(last_error));
        }
        self.remove_if_owned(name, image).await;
        Err(ProviderError::Create(format!(
            "docker run for image {image:?} failed after {attempts} attempt(s): {last_error}"
        )))
    }

    /// Finish a run that created its container but lost the start response.
    async fn start_reconciled_container(&self, name: &str, state: &str) -> Result<bool> {
        match SandboxStatus::from_docker_state(state) {
            SandboxStatus::Running => Ok(true),
            _ if state == "created" => {
                let out = self.control(argv::start_args(name)).await?;
                Ok(out.success())
            }
            _ => Ok(false),
        }
    }

    /// The readiness probe, polled until it passes `stable_count` times in a row or the deadline
    /// passes; the first completed attempt also tells whether the image has bash, so a create
    /// costs `docker run` plus one exec.
    async fn verify_and_detect_shell(&self, name: &str, ready_timeout_s: Option<f64>) -> Result<String> {
        let probe = &self.config.probe;
        let configured_shell = self.config.exec.exec_shell.clone();
        let Some(command) = probe.command.clone() else {
            return match configured_shell {
                Some(shell) => Ok(shell),
                None => self.detect_shell(name).await,
            };
        };
        let detect = configured_shell.is_none();
        let script = if detect { probe_with_shell_detection(&command) } else { command };
        let deadline_s = ready_timeout_s.or(probe.deadline_s);
        let deadline = deadline_s.map(|s| Instant::now() + Duration::from_secs_f64(s));
        let mut shell = configured_shell;
        let mut consecutive = 0;
        let mut last_detail = String::from("no probe attempt completed");
        loop {
            let params =
                ExecParams { timeout: Some(Duration::from_secs_f64(probe.timeout_s)), ..Default::default() };
            let result = self.exec_in(name, "sh", &script, &params, None).await;
            if shell.is_none() && result.error_type.is_none() {
                let stderr = result.stderr_lossy();
                shell =
                    Some(if stderr.contains(&format!("{SHELL_MARK}bash")) { "bash" } else { "sh" }.into());
            }
            let stdout = result.stdout_lossy();
            let passed = result.return_code == 0
                && probe.expected_stdout.as_deref().is_none_or(|want| stdout.contains(want));
            if passed {
                consecutive += 1;
                if consecutive >= probe.stable_count {
                    return Ok(shell.unwrap_or_else(|| "sh".into()));
                }
            } else {
                consecutive = 0;
                let stderr = result.stderr_lossy();
                let stderr =
                    stderr.lines().filter(|l| !l.contains(SHELL_MARK)).collect::<Vec<_>>().join("\n");
                last_detail = format!("return_code={}, stderr={:?}", result.return_code, stderr.trim());
                if deadline.is_none() {
                    return Err(ProviderError::CreateVerification(format!(
                        "sandbox {name:?} failed its readiness probe: {last_detail}"
                    )));
                }
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(ProviderError::CreateVerification(format!(
                    "sandbox {name:?} did not pass its readiness probe within {}s: {last_detail}",
                    deadline_s.unwrap_or_default()
                )));
            }
            if probe.stable_delay_s > 0.0 {
                tokio::time::sleep(Duration::from_secs_f64(probe.stable_delay_s)).await;
            } else if !passed {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// Configured exec shell, else bash when the image has it, else sh.
    async fn detect_shell(&self, name: &str) -> Result<String> {
        if let Some(shell) = &self.config.exec.exec_shell {
            return Ok(shell.clone());
        }
        let result = self.exec_in(name, "sh", "command -v bash", &ExecParams::default(), None).await;
        Ok(if result.return_code == 0 && result.error_type.is_none() { "bash" } else { "sh" }.into())
    }

    /// Force-remove a container this call created, whatever state it is in.
    async fn force_remove(&self, name: &str) {
        if let Err(e) = self.control(argv::rm_args(name)).await {
            tracing::warn!(sandbox_id = %name, error = %e, "could not remove a half-created container");
        }
    }

    /// Remove `name` only when it is ours (label and image): a failed run may have left it.
    async fn remove_if_owned(&self, name: &str, image: &str) {
        if let Ok(Some(found)) = self.inspect(name).await {
            if found.owned && same_image(&found.image, image) {
                self.force_remove(name).await;
            }
        }
    }

    // ----- lookup ---------------------------------------------------------------------------

    /// `Ok(None)` when no container has that name.
    async fn inspect(&self, name: &str) -> Result<Option<Inspected>> {
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

    fn remember(&self, handle: &SandboxHandle) {
        if let Ok(mut map) = self.handles.lock() {
            map.insert(handle.sandbox_id.clone(), handle.clone());
        }
    }

    fn forget(&self, id: &str) {
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

    async fn owned(&self, sandbox_id: &str) -> Result<Inspected> {
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
        if SandboxStatus::from_docker_state(&found.state) != SandboxStatus::Running {
            self.forget(id);
            return Err(ProviderError::Stopped(id.into()));
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
        Ok(self.exec_in(&handle.sandbox_id, &handle.shell, command, params, user.as_deref()).await)
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

    // ----- files ----------------------------------------------------------------------------

    /// Upload one host file; parent directories are created as root by the same docker call.
    pub async fn upload_file(&self, handle: &SandboxHandle, source: &Path, target: &str) -> Result<u64> {
        let file = tokio::fs::File::open(source).await.map_err(|e| {
            ProviderError::FileNotFound(format!("cannot read local file {}: {e}", source.display()))
        })?;
        let meta = file.metadata().await?;
        if !meta.is_file() {
            return Err(ProviderError::FileNotFound(format!("{} is not a regular file", source.display())));
        }
        self.upload_reader(handle, file, meta.len(), target, None).await
    }

    /// Stream exactly `size` bytes from `reader` into `target` (mode default 0644), without
    /// holding the file in memory: one `docker cp -` fed a tar that names the full path.
    pub async fn upload_reader<R: AsyncRead + Unpin>(
        &self,
        handle: &SandboxHandle,
        mut reader: R,
        size: u64,
        target: &str,
        mode: Option<u32>,
    ) -> Result<u64> {
        validate_abs_path("path", target)?;
        if target.ends_with('/') {
            return Err(ProviderError::invalid(
                "path",
                format!("must name a file, not a directory (got {target:?})"),
            ));
        }
        let mode = mode.unwrap_or(0o644);
        if mode > 0o7777 {
            return Err(ProviderError::invalid(
                "mode",
                format!("must be permission bits <= 0o7777 (got {mode:o})"),
            ));
        }
        let prefix =
            tarstream::file_prefix(target, size, mode).map_err(|e| ProviderError::invalid("path", e))?;
        let args = argv::cp_in_args(&handle.sandbox_id);
        let mut child = self.cli.spawn(&args, true, true).await.map_err(cli_error)?;
        let mut stdin =
            child.child.stdin.take().ok_or_else(|| ProviderError::Docker("no stdin pipe".into()))?;
        let stderr_task = child.drain_stderr();
        let feed = async {
            stdin.write_all(&prefix).await?;
            let copied = copy_exact(&mut reader, &mut stdin, size).await?;
            if copied != size {
                return Ok::<_, std::io::Error>(Some(copied));
            }
            stdin.write_all(&tarstream::file_suffix(size)).await?;
            stdin.shutdown().await?;
            Ok(None)
        };
        let fed = feed.instrument(child.span.clone()).await;
        drop(stdin);
        if !matches!(fed, Ok(None)) {
            // Never let docker finish a truncated archive.
            child.kill_group();
        }
        let status = child.child.wait().await?;
        child.disarm();
        let err = String::from_utf8_lossy(&stderr_task.await.unwrap_or_default()).into_owned();
        match fed {
            Ok(Some(copied)) => {
                return Err(ProviderError::invalid(
                    "size",
                    format!("declared {size} bytes but the stream had {copied}"),
                ))
            }
            Err(e) if status.success() => return Err(e.into()),
            _ => {}
        }
        if !status.success() {
            return Err(self.transfer_error(&handle.sandbox_id, target, &err).await);
        }
        Ok(size)
    }

    /// Download one container file to the host (parents of `target` created).
    pub async fn download_file(&self, handle: &SandboxHandle, source: &str, target: &Path) -> Result<u64> {
        let mut download = self.download(handle, source).await?;
        if let Some(parent) = target.parent() {
            tokio::fs::create_dir_all(parent).await?;
        }
        let mut file = tokio::fs::File::create(target).await?;
        let mut written = 0u64;
        while let Some(chunk) = download.next_chunk().await? {
            file.write_all(&chunk).await?;
            written += chunk.len() as u64;
        }
        file.flush().await?;
        Ok(written)
    }

    /// Open a streaming download: errors about the path (missing, a directory) come here, before
    /// the first byte, so a caller can still answer with a clean status.
    pub async fn download(&self, handle: &SandboxHandle, source: &str) -> Result<Download> {
        validate_abs_path("path", source)?;
        let args = argv::cp_out_args(&handle.sandbox_id, source);
        let mut child = self.cli.spawn(&args, false, true).await.map_err(cli_error)?;
        let mut stdout =
            child.child.stdout.take().ok_or_else(|| ProviderError::Docker("no stdout pipe".into()))?;
        let stderr_task = child.drain_stderr();
        let first = tarstream::read_first_entry(&mut stdout).instrument(child.span.clone()).await;
        let size = match first {
            Ok(FirstEntry::File { size, .. }) => size,
            Ok(FirstEntry::Directory) => {
                return Err(ProviderError::invalid("path", format!("{source} is a directory, not a file")))
            }
            Ok(FirstEntry::Other(kind)) => {
                return Err(ProviderError::invalid(
                    "path",
                    format!("{source} is not a regular file ({kind})"),
                ))
            }
            Ok(FirstEntry::Empty) | Err(_) => {
                let _ = child.child.wait().await;
                child.disarm();
                let err = String::from_utf8_lossy(&stderr_task.await.unwrap_or_default()).into_owned();
                return Err(self.transfer_error(&handle.sandbox_id, source, &err).await);
            }
        };
        Ok(Download { child, stdout, remaining: size, size })
    }

    /// Why a `docker cp` failed. The client words a missing container in several ways (one
    /// is "destination must be a directory"), so a failure it does not name is checked by name.
    async fn transfer_error(&self, name: &str, path: &str, stderr: &str) -> ProviderError {
        let low = stderr.to_ascii_lowercase();
        if classify::is_missing_container(stderr) || matches!(self.inspect(name).await, Ok(None)) {
            ProviderError::SandboxNotFound(name.into())
        } else if classify::is_daemon_unreachable(stderr) {
            ProviderError::Unavailable(stderr.trim().into())
        } else if low.contains("could not find the file") || low.contains("no such file or directory") {
            ProviderError::FileNotFound(format!("{path}: no such file in sandbox {name}"))
        } else if low.contains("not a directory") {
            ProviderError::invalid("path", format!("{path}: a parent is not a directory"))
        } else if low.contains("read-only file system") || low.contains("marked read-only") {
            ProviderError::invalid("path", format!("{path}: the sandbox's filesystem is read-only there"))
        } else if low.contains("is not running") {
            ProviderError::Stopped(name.into())
        } else {
            ProviderError::Docker(format!("docker cp {path}: {}", stderr.trim()))
        }
    }

    // ----- status, endpoint, close ----------------------------------------------------------

    /// `running|paused` running, `created|restarting` starting, gone or exited stopped,
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
    match cli.run(&args, timeout, params.stdin.as_deref()).await {
        Ok(out) => {
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

/// A file coming out of a sandbox, chunk by chunk.
pub struct Download {
    child: super::cli::DockerChild,
    stdout: tokio::process::ChildStdout,
    remaining: u64,
    size: u64,
}

impl Download {
    /// The file's size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The next chunk, `None` at the end.
    pub async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>> {
        if self.remaining == 0 {
            self.child.kill_group();
            let _ = self.child.child.wait().await;
            self.child.disarm();
            return Ok(None);
        }
        let want = self.remaining.min(CHUNK as u64) as usize;
        let mut buf = vec![0u8; want];
        let n = self.stdout.read(&mut buf).await?;
        if n == 0 {
            return Err(ProviderError::Docker(format!("download ended {} bytes early", self.remaining)));
        }
        buf.truncate(n);
        self.remaining -= n as u64;
        Ok(Some(buf))
    }
}

/// Copy up to `size` bytes; returns how many the reader had.
async fn copy_exact<R, W>(reader: &mut R, writer: &mut W, size: u64) -> std::io::Result<u64>
where
    R: AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; CHUNK];
    let mut copied = 0u64;
    while copied < size {
        let want = (size - copied).min(CHUNK as u64) as usize;
        let n = reader.read(&mut buf[..want]).await?;
        if n == 0 {
            return Ok(copied);
        }
        writer.write_all(&buf[..n]).await?;
        copied += n as u64;
    }
    // One more byte means the stream was longer than declared.
    let mut extra = [0u8; 1];
    if reader.read(&mut extra).await? > 0 {
        return Ok(size + 1);
    }
    Ok(copied)
}

/// The probe, then a stderr line saying whether bash exists; the probe's own exit code wins.
fn probe_with_shell_detection(probe: &str) -> String {
    format!(
        "{probe}\n__sandboxd_rc=$?\ncommand -v bash >/dev/null 2>&1 && printf '\\n{SHELL_MARK}bash\\n' >&2\nexit $__sandboxd_rc"
    )
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

/// Docker stores `busybox` as given; compare modulo the implied `:latest` and `docker://`.
fn same_image(found: &str, requested: &str) -> bool {
    fn canonical(s: &str) -> String {
        let s = normalize_image(s);
        let last = s.rsplit('/').next().unwrap_or(s);
        if last.contains(':') || s.contains('@') {
            s.to_string()
        } else {
            format!("{s}:latest")
        }
    }
    canonical(found) == canonical(requested)
}

fn is_transport_failure(stderr: &str) -> bool {
    let low = stderr.to_ascii_lowercase();
    classify::is_daemon_unreachable(stderr)
        || ["connection reset", "unexpected eof", "broken pipe", "i/o timeout", "context deadline exceeded"]
            .iter()
            .any(|m| low.contains(m))
}

fn create_failure(image: &str, code: i32, stderr: &str) -> ProviderError {
    let detail = stderr.trim();
    if classify::is_missing_image(detail) {
        ProviderError::Create(format!("image {image:?} is not available on the daemon: {detail}"))
    } else {
        ProviderError::Create(format!("docker run failed (code={code}) for image {image:?}: {detail}"))
    }
}

fn cli_error(e: CliError) -> ProviderError {
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

    #[test]
    fn images_compare_with_implied_latest() {
        assert!(same_image("busybox", "busybox:latest"));
        assert!(same_image("docker://reg:5000/x", "reg:5000/x:latest"));
        assert!(!same_image("busybox:1", "busybox:2"));
    }

    #[test]
    fn probe_script_keeps_the_probe_exit_code() {
        let s = probe_with_shell_detection("printf ok");
        assert!(s.starts_with("printf ok\n"));
        assert!(s.ends_with("exit $__sandboxd_rc"));
    }
}
