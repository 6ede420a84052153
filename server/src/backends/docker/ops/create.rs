//! Creating a sandbox: `docker run` with reconciliation of ambiguous outcomes, then the
//! readiness probe and shell detection: said by the agent in its hello on its socket (the
//! agent is the keep-alive), else in one exec.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use tracing::Instrument;

use super::argv;
use super::cli::Pool;
use super::failure::CliError;
use super::failure::{DockerFailure, DockerFailureKind};
use super::provider::DockerProvider;
use super::state::ContainerState;
use super::transport::{ExecEngine, ExecSpec};
use crate::agent_client::run_dirs::InFlight;
use crate::config::ExecTransport;
use crate::core::backend::CreatePlan;
use crate::core::lease;
use crate::core::spec::ExecParams;
use crate::core::spec::{normalize_image, SandboxHandle, SandboxSpec};
use crate::error::{ProviderError, Result};

const STAGE_RUNNING: u8 = 0;
const STAGE_STARTED: u8 = 1;
const STAGE_RENAMING: u8 = 2;

/// Marks the shell-detection line the combined probe prints on stderr.
const SHELL_MARK: &str = "__sandboxd_shell=";

impl DockerProvider {
    /// Start a detached keep-alive container, probe it until ready and write `spec.files`, with
    /// a fresh id, the lease `spec.ttl_s` asks for and the default create bound.
    /// The service plans its creates (`create_planned`); this is for tools and tests.
    pub async fn create(&self, spec: &SandboxSpec) -> Result<SandboxHandle> {
        self.create_planned(spec, &CreatePlan::for_spec(spec)).await
    }

    /// Create sandbox `plan.id` leased for `plan.ttl`, finishing within `plan.timeout` or
    /// failing. The container runs under `sandboxd-creating-<hex>` and carries its create
    /// deadline and lease as labels; it is renamed to its id as the last step, so a container
    /// still under the creating name past its deadline is one nobody will ever use (the sweep
    /// removes it). Any failure, and the timeout, remove it. Dropping this future halfway does
    /// not clean up: callers that can be cancelled run it in a task of its own (the service does).
    pub async fn create_planned(&self, spec: &SandboxSpec, plan: &CreatePlan) -> Result<SandboxHandle> {
        spec.validate()?;
        argv::check_docker_env(&spec.env, true).map_err(|m| ProviderError::invalid("spec.env", m))?;
        self.check_runtime_policy(spec)?;
        let (snapshot_runtime, live) = match &spec.snapshot_id {
            Some(snapshot_id) => {
                let info = self.snapshot_info(snapshot_id).await?;
                (Some(info.runtime), info.live.then(|| snapshot_id.clone()))
            }
            None => (None, None),
        };
        let runtime = self.choose_runtime(spec, snapshot_runtime.as_deref()).await?;
        if live.is_some() {
            // A live snapshot's sandbox is restored, not booted (`live.rs`).
            self.refuse_unless_checkpointable(
                "spec.snapshot_id (a live snapshot)",
                &runtime.name,
                "a restore",
            )?;
        }
        let disk = self.loop_disk_for(spec)?;
        // No network of its own: the tenant's bridge, never the host's shared default one.
        let walled;
        let spec = if argv::wants_tenant_network(&self.config.create, spec) {
            let operator = argv::operator_labels(&self.config.create.extra_run_args);
            // A member of everyone's pool may go to any tenant: alone on its bridge.
            let network = match (&spec.pool_member, &spec.tenant) {
                (Some(_), None) => argv::isolated_network_name(&operator),
                _ => argv::tenant_network_name(&operator),
            };
            walled = SandboxSpec { network: Some(network), ..spec.clone() };
            &walled
        } else {
            spec
        };
        let sandbox_id = plan.id.as_str();
        let timeout = plan.timeout;
        let creating = argv::creating_name(sandbox_id);
        // Made if this server has not seen it; found gone later, made again (`remake_network`).
        let step = Instant::now();
        self.join_network(spec).await?;
        let network_took = step.elapsed();
        self.prepare_runtime(spec).await?;
        let image = argv::run_image(spec).to_string();
        let now = lease::now_ms();
        let mut labels = vec![
            (lease::CREATED_LABEL, now.to_string()),
            (lease::CREATE_DEADLINE_LABEL, lease::after_ms(now, timeout).to_string()),
        ];
        if let Some(ttl) = plan.ttl {
            labels.push((lease::EXPIRES_LABEL, lease::after_ms(now, ttl).to_string()));
        }
        labels.extend(self.disk_label(&creating, disk));
        // The agent as the keep-alive, on its socket, when this sandbox can have it; on a
        // runtime that checkpoints, on a socket inside the sandbox (reached by `agent connect`),
        // so that the agent with its sessions is part of every checkpoint.
        let socket = runtime.transport.unwrap_or(self.config.exec.transport) == ExecTransport::Socket;
        let (agent_start, _run_dir_hold) =
            match self.agent_start(spec, sandbox_id, &image, socket, runtime.checkpoint).await {
                Some((run, hold)) => (Some(run), hold),
                None => (None, None),
            };
        let mut args = match &agent_start {
            Some(run) => argv::agent_run_args(&self.config.create, spec, &creating, run),
            None => {
                let mut args = argv::run_args(&self.config.create, spec, &creating);
                if let Some(agent) = &self.agent_binary {
                    // The agent: one read-only file, so no process in the sandbox can replace it.
                    args.splice(2..2, argv::agent_mount_args(agent));
                    // Reached by `docker exec -u 0` (the channel), which no-new-privileges
                    // leaves without capabilities in an image that runs as another user: the
                    // agent could not switch users there. Only the socket's agent (the
                    // sandbox's root init) keeps the default flag.
                    argv::drop_default_no_new_privileges(&self.config.create, &mut args);
                }
                args
            }
        };
        args.splice(2..2, argv::oci_runtime_run_args(&runtime.name, &runtime.daemon_name));
        args = argv::with_labels(args, &labels);
        if disk.is_some() || live.is_some() {
            // Created, given its disk (or its checkpoint), then started
            // (`run_create_with_reconciliation`).
            args = argv::as_create_args(args);
        }
        let span = tracing::info_span!("create", sandbox_id = %sandbox_id, image = %image);
        // How far the work got, for the clean-up: before the run succeeded a container under
        // the creating name may be a stranger's (only removed when ours); after it, it is ours.
        let stage = AtomicU8::new(STAGE_RUNNING);
        let work = async {
            let step = Instant::now();
            let container_id = self
                .run_create_with_reconciliation(&args, &creating, &image, disk, live.as_deref(), spec)
                .await?;
            let run_took = step.elapsed();
            stage.store(STAGE_STARTED, Ordering::SeqCst);
            let started = Instant::now();
            let started_at = std::time::SystemTime::now();
            let mut init_id = container_id.clone();
            let socket = match (&agent_start, &self.agent) {
                (Some(run), Some(agent)) => {
                    let container_id = match container_id {
                        Some(id) => id,
                        None => self.container_id(&creating).await?,
                    };
                    init_id = Some(container_id.clone());
                    let default_user = Some(run.image_user.clone()).filter(|u| !u.is_empty());
                    let run_dir = run.run_dir.clone();
                    let inner = run_dir.is_none();
                    agent.started(
                        &creating,
                        crate::agent_client::Facts { container_id, default_user, run_dir, inner },
                    );
                    Some(agent)
                }
                _ => None,
            };
            // The egress rules before anything of the caller's can run in it (the probe, files).
            let filtered = match &spec.egress {
                Some(plan) => self.enforce_egress(&creating, plan).await?,
                None => false,
            };
            let mut handle = SandboxHandle {
                sandbox_id: creating.clone(),
                image: image.clone(),
                shell: self.config.exec.exec_shell.clone().unwrap_or_else(|| "sh".into()),
                ports: spec.ports.clone(),
                workdir: spec.workdir.clone(),
                metadata: spec.metadata.clone(),
                tenant: spec.tenant.clone(),
                runtime: Some(runtime.name.clone()),
            };
            handle.shell = match socket {
                Some(agent) => self.ready_by_agent(agent, &creating, spec.ready_timeout_s).await?,
                None => {
                    let shell = self.verify_and_detect_shell(&creating, spec.ready_timeout_s).await?;
                    if spec.entrypoint.as_ref().is_some_and(|e| !e.is_empty()) {
                        self.entrypoint_lived(&creating, started).await?;
                    }
                    shell
                }
            };
            self.link_subpaths(&creating, spec).await?;
            if let Some(plan) = spec.egress.as_ref().filter(|p| filtered && !p.policy.domains.is_empty()) {
                self.write_hosts(&creating, plan).await;
            }
            for (path, content) in &spec.files {
                self.upload_reader(&handle, content.as_slice(), content.len() as u64, path, None, &[])
                    .await?;
            }
            if let Some(command) = &spec.setup {
                self.run_setup(&handle, command, spec.setup_timeout_s.map(Duration::from_secs_f64)).await?;
            }
            let ready_took = started.elapsed();
            stage.store(STAGE_RENAMING, Ordering::SeqCst);
            let step = Instant::now();
            match self.rename_created(&creating, sandbox_id).await {
                Ok(_) => {}
                Err(CliError::Failed(f)) => {
                    return Err(ProviderError::Create(format!(
                        "docker rename {creating} {sandbox_id}: {}",
                        f.stderr
                    )))
                }
                Err(e) => return Err(e.into()),
            }
            // The agent channel opened by the probe serves the sandbox under its final name.
            self.engine.renamed(&creating, sandbox_id);
            handle.sandbox_id = sandbox_id.to_string();
            // Where a create's time went (`RUST_LOG=sandboxd::backends::docker::create=debug`):
            // the run includes, with a disk bound, the disk's attach and the start (logged
            // apart by `disk_then_start`); ready is the agent's hello or the probe, with the
            // spec's files and setup.
            tracing::debug!(
                sandbox_id = %sandbox_id,
                network_ms = network_took.as_secs_f64() * 1e3,
                run_ms = run_took.as_secs_f64() * 1e3,
                ready_ms = ready_took.as_secs_f64() * 1e3,
                rename_ms = step.elapsed().as_secs_f64() * 1e3,
                "create steps"
            );
            Ok((handle, init_id, started_at))
        };
        let (result, timed_out) = match tokio::time::timeout(timeout, work).instrument(span).await {
            Ok(result) => (result, false),
            Err(_) => {
                let e = ProviderError::CreateTimeout(format!(
                    "create of {sandbox_id} did not finish within {timeout:?} (the call's deadline or server.create_timeout_s)"
                ));
                (Err(e), true)
            }
        };
        match result {
            Ok((handle, init_id, started_at)) => {
                // What was kept under the creating name (its disk) is the sandbox's now.
                self.records.rename(&creating, sandbox_id);
                self.remember(&handle);
                self.records.update(sandbox_id, |r| r.init = init_id.map(|id| (id, started_at)));
                self.keep_baseline(sandbox_id, spec);
                tracing::info!(sandbox_id = %sandbox_id, shell = %handle.shell, "sandbox created");
                Ok(handle)
            }
            Err(e) => {
                match stage.load(Ordering::SeqCst) {
                    // A failed run cleaned up after itself; a run cut by the timeout may have
                    // left a container under the creating name.
                    STAGE_RUNNING if timed_out => self.remove_if_owned(&creating, &image).await,
                    STAGE_RUNNING => {}
                    STAGE_STARTED => self.force_remove(&creating).await,
                    // The rename's answer may be lost: either name may hold it.
                    _ => {
                        self.force_remove(&creating).await;
                        self.force_remove(sandbox_id).await;
                        self.engine.forget(sandbox_id);
                    }
                }
                // The readiness probe may have opened an agent channel under the creating name:
                // kept, its writer task would hold the channel's stdin pipe and child for good.
                // (This also removes the sandbox's run directory.)
                self.engine.forget(&creating);
                self.release_disk(&creating);
                if let Some(dir) = agent_start.as_ref().and_then(|run| run.run_dir.as_deref()?.parent()) {
                    let _ = std::fs::remove_dir_all(dir);
                }
                Err(e)
            }
        }
    }

    /// Run `docker run` without leaking a container when its response is lost: after a timeout,
    /// transport error or same-name conflict, inspect that exact name before retrying; reuse it
    /// only when both the ownership label and the image match; never remove a stranger.
    #[allow(clippy::too_many_arguments)]
    async fn run_create_with_reconciliation(
        &self,
        args: &[String],
        name: &str,
        image: &str,
        disk: Option<u64>,
        live: Option<&str>,
        spec: &SandboxSpec,
    ) -> Result<Option<String>> {
        // The spec's environment, passed to the client (never in its argv).
        let (env, env_file) = &argv::run_env(&spec.env);
        let cfg = &self.config.create;
        let cli = self.cli.in_pool(Pool::Create).with_env(env.clone());
        let timeout = cfg.start_timeout;
        let attempts = cfg.transport_retries.max(0) as u32 + 1;
        let mut last_error = String::new();
        let mut unreachable = false;
        let mut remade = false;
        let mut attempt = 0;
        while attempt < attempts {
            attempt += 1;
            if attempt > 1 {
                tokio::time::sleep(cfg.transport_retry_delay).await;
            }
            unreachable = false;
            let detail = match cli.run(args, timeout, env_file.as_deref()).await {
                // `docker run -d` prints the container's id.
                Ok(out) if disk.is_none() && live.is_none() => {
                    return Ok(Some(out.stdout_text().trim().to_string()).filter(|id| !id.is_empty()))
                }
                // `docker create`: its disk, then the start.
                Ok(out) => {
                    self.disk_then_start(name, image, disk, live, spec).await?;
                    return Ok(Some(out.stdout_text().trim().to_string()).filter(|id| !id.is_empty()));
                }
                // The run may have made its container: reconcile below.
                Err(CliError::Failed(f))
                    if matches!(
                        f.kind,
                        DockerFailureKind::NameConflict
                            | DockerFailureKind::DaemonUnreachable
                            | DockerFailureKind::Interrupted
                    ) =>
                {
                    unreachable = f.kind == DockerFailureKind::DaemonUnreachable;
                    f.stderr
                }
                // The service network went away (another server's sweep) or was doubled
                // under this create: the run's container (made, not started) goes, the network
                // is made again, and the run runs again, once; this attempt is not counted.
                Err(CliError::Failed(f)) if f.kind == DockerFailureKind::NetworkGone && !remade => {
                    self.remove_if_owned(name, image).await;
                    self.remake_network(spec).await?;
                    remade = true;
                    attempt -= 1;
                    continue;
                }
                Err(CliError::Failed(f)) => {
                    self.remove_if_owned(name, image).await;
                    return Err(create_failure(image, &cfg.pull_policy, &f));
                }
                Err(CliError::Timeout { after, .. }) => format!("docker run timed out after {after:?}"),
                Err(e @ CliError::Spawn { .. }) => return Err(ProviderError::Unavailable(e.to_string())),
                Err(e) => e.to_string(),
            };
            last_error = detail;
            tracing::warn!(attempt, error = %last_error, "ambiguous docker run; reconciling by name");
            match self.inspect(name).await {
                Ok(Some(found)) if found.owned && same_image(&found.image, image) => {
                    if (disk.is_some() || live.is_some()) && found.state == ContainerState::Created {
                        self.disk_then_start(name, image, disk, live, spec).await?;
                        return Ok(None);
                    }
                    if self.start_reconciled_container(name, &found.state).await? {
                        return Ok(None);
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
        if unreachable {
            return Err(ProviderError::Unavailable(last_error));
        }
        self.remove_if_owned(name, image).await;
        Err(ProviderError::Create(format!(
            "docker run for image {image:?} failed after {attempts} attempt(s): {last_error}"
        )))
    }

    /// Start the created container `name` on its loop disk of `disk` bytes, restored from live
    /// snapshot `live`'s checkpoint when given; on failure it is removed (with its disk file).
    async fn disk_then_start(
        &self,
        name: &str,
        image: &str,
        disk: Option<u64>,
        live: Option<&str>,
        spec: &SandboxSpec,
    ) -> Result<()> {
        let step = Instant::now();
        if let Some(bytes) = disk {
            match self.attach_disk(name, bytes).await {
                // Known before the start, so any removal detaches it first.
                Ok(attached) => self.note_disk(name, attached),
                Err(e) => {
                    self.remove_if_owned(name, image).await;
                    return Err(e);
                }
            }
        }
        let live_start = match live {
            None => None,
            Some(snapshot_id) => match self.place_checkpoint(name, snapshot_id).await {
                Ok(how) => Some(how),
                Err(e) => {
                    self.remove_if_owned(name, image).await;
                    self.release_disk(name);
                    return Err(e);
                }
            },
        };
        let run_start = || async {
            match &live_start {
                // A restore reads the whole checkpoint: bounded as a create's start.
                Some(how) => {
                    self.cli.run(&how.start_args(name), self.config.create.start_timeout, None).await
                }
                None => match &self.engine_api {
                    Some(api) if api.start(name).await.is_ok() => Ok(Default::default()),
                    _ => self.control(argv::start_args(name)).await,
                },
            }
        };
        let disk_took = step.elapsed();
        let step = Instant::now();
        let mut started = run_start().await;
        tracing::debug!(
            sandbox_id = %name,
            disk_ms = disk_took.as_secs_f64() * 1e3,
            start_ms = step.elapsed().as_secs_f64() * 1e3,
            "create steps: the disk and the start"
        );
        // The service network went away (another server's sweep) or was doubled between the
        // create and this start: made again, the start runs again, once.
        if matches!(&started, Err(CliError::Failed(f)) if f.kind == DockerFailureKind::NetworkGone) {
            match self.remake_network(spec).await {
                Ok(()) => started = run_start().await,
                Err(e) => {
                    self.remove_if_owned(name, image).await;
                    self.release_disk(name);
                    return Err(e);
                }
            }
        }
        drop(live_start);
        match started {
            Ok(_) => Ok(()),
            Err(e) => {
                // `docker start` says only "failed to start containers" when the daemon went
                // away under it: a daemon that does not answer now makes this UNAVAILABLE.
                let unreachable = match &e {
                    CliError::Failed(_) => self.inspect(name).await.err(),
                    _ => None,
                };
                self.remove_if_owned(name, image).await;
                self.release_disk(name);
                if let Some(gone) = unreachable {
                    return Err(gone);
                }
                Err(match e {
                    CliError::Failed(f) => create_failure(image, &self.config.create.pull_policy, &f),
                    e => e.into(),
                })
            }
        }
    }

    /// The create's last step, `docker rename`: through the Engine API when there is one (the
    /// CLI where it fails, whose error the caller reads).
    async fn rename_created(
        &self,
        creating: &str,
        sandbox_id: &str,
    ) -> std::result::Result<super::cli::CommandOutput, CliError> {
        if let Some(api) = &self.engine_api {
            if api.rename(creating, sandbox_id).await.is_ok() {
                return Ok(Default::default());
            }
        }
        self.control(argv::rename_args(creating, sandbox_id)).await
    }

    /// Finish a run that created its container but lost the start response.
    async fn start_reconciled_container(&self, name: &str, state: &ContainerState) -> Result<bool> {
        match state {
            ContainerState::Running => Ok(true),
            ContainerState::Created => match self.control(argv::start_args(name)).await {
                Ok(_) => Ok(true),
                Err(CliError::Failed(_)) => Ok(false),
                Err(e) => Err(e.into()),
            },
            _ => Ok(false),
        }
    }

    /// How this create starts the agent as its keep-alive on a socket: the `docker run`
    /// additions and the image's user, or `None` for the exec channel's way (no socket here,
    /// flags that set the user or entrypoint themselves, an image not on the daemon yet).
    /// The directory stays the create's own (the prune leaves it alone) while the hold lives.
    async fn agent_start(
        &self,
        spec: &SandboxSpec,
        sandbox_id: &str,
        image: &str,
        socket: bool,
        inner: bool,
    ) -> Option<(argv::AgentRun, Option<InFlight<'_>>)> {
        let agent = self.agent.as_ref()?;
        let binary = self.agent_binary.clone()?;
        if !inner {
            agent.run_dir_for(sandbox_id).filter(|_| socket)?;
        }
        if argv::sets_user_or_entrypoint(&self.config.create.extra_run_args)
            || argv::sets_user_or_entrypoint(&spec.provider_options.run_args)
        {
            tracing::info!(sandbox_id = %sandbox_id, "docker run flags set the user or entrypoint: no agent socket for this sandbox");
            return None;
        }
        let image_user = self.image_user(image).await?;
        if inner {
            let run = argv::AgentRun { binary, run_dir: None, image_user, init_flags: self.init_flags(spec) };
            return Some((run, None));
        }
        let (run_dir, hold) = match agent.make_run_dir_for_runtime(sandbox_id, socket).await? {
            Ok(made) => made,
            Err(e) => {
                tracing::warn!(sandbox_id = %sandbox_id, error = %e, "cannot make the sandbox's run directory: no agent socket for it");
                return None;
            }
        };
        let run =
            argv::AgentRun { binary, run_dir: Some(run_dir), image_user, init_flags: self.init_flags(spec) };
        Some((run, Some(hold)))
    }

    /// `init`'s options: the probe (`docker.probe`, the spec's `ready_timeout_s`) and shell.
    fn init_flags(&self, spec: &SandboxSpec) -> Vec<String> {
        let probe = &self.config.probe;
        let ms = |d: Duration| d.as_millis().to_string();
        let mut f = Vec::new();
        if let Some(shell) = &self.config.exec.exec_shell {
            f.extend(["--shell".to_string(), shell.clone()]);
        }
        if let Some(command) = &probe.command {
            f.extend(["--probe".to_string(), command.clone()]);
            if let Some(expect) = &probe.expected_stdout {
                f.extend(["--probe-expect".to_string(), expect.clone()]);
            }
            f.extend(["--probe-timeout-ms".to_string(), ms(probe.timeout)]);
            let patience = spec.ready_timeout_s.map(Duration::from_secs_f64).or(probe.deadline);
            if let Some(deadline) = patience {
                f.extend(["--probe-deadline-ms".to_string(), ms(deadline)]);
            }
            f.extend(["--probe-stable-count".to_string(), probe.stable_count.max(1).to_string()]);
            f.extend(["--probe-stable-delay-ms".to_string(), ms(probe.stable_delay)]);
        }
        f
    }

    /// The image's configured user (`""`: root), or `None` when the daemon does not have the
    /// image (yet). Kept for a short while: a burst of creates asks once.
    async fn image_user(&self, image: &str) -> Option<String> {
        const KEEP: Duration = Duration::from_secs(30);
        if let Some((at, user)) = self.image_users.lock().ok()?.get(image) {
            if at.elapsed() < KEEP {
                return Some(user.clone());
            }
        }
        let out = self.control(argv::image_user_args(image)).await.ok()?;
        let user = out.stdout_text().trim().to_string();
        if let Ok(mut users) = self.image_users.lock() {
            users.retain(|_, (at, _)| at.elapsed() < KEEP);
            users.insert(image.to_string(), (Instant::now(), user.clone()));
        }
        Some(user)
    }

    /// A container's full id.
    pub(in crate::backends::docker) async fn container_id(&self, name: &str) -> Result<String> {
        let out = self.control(argv::agent_facts_args(name)).await?;
        Ok(out.stdout_text().split('\t').next().unwrap_or("").trim().to_string())
    }

    /// A create on the agent's socket: the agent runs the probe and finds the shell itself and
    /// says both in its hello, so there is no readiness exec. Should its socket not come up,
    /// the probe runs by exec as before.
    async fn ready_by_agent(
        &self,
        agent: &crate::agent_client::AgentEngine,
        name: &str,
        ready_timeout_s: Option<f64>,
    ) -> Result<String> {
        // The agent's own probe deadline applies; this bound only catches an agent that never
        // says anything (the create's own timeout bounds it all anyway).
        let patience = ready_timeout_s.map(Duration::from_secs_f64).or(self.config.probe.deadline);
        let bound = patience.unwrap_or_default() + self.config.probe.timeout + Duration::from_secs(30);
        match agent.await_ready(name, bound).await {
            Ok(shell) if shell.is_empty() => Ok("sh".into()),
            Ok(shell) => Ok(shell),
            // The agent's own words lead its detail: past the deadline is CREATE_TIMEOUT.
            Err(Some(detail)) if detail.starts_with("the readiness probe did not pass within") => {
                Err(ProviderError::ReadyTimeout(format!("sandbox {name:?}: {detail}")))
            }
            Err(Some(detail)) => {
                Err(ProviderError::CreateVerification(format!("sandbox {name:?}: {detail}")))
            }
            Err(None) => self.verify_and_detect_shell(name, ready_timeout_s).await,
        }
    }

    /// The spec's setup command, in the new sandbox's shell and workdir with its env, bounded
    /// by `timeout` (else only by the create's own bound): a hang is SETUP_TIMEOUT, a non-zero
    /// exit CREATE_FAILED with its output; the caller's clean-up removes the sandbox either way.
    async fn run_setup(
        &self,
        handle: &SandboxHandle,
        command: &str,
        timeout: Option<Duration>,
    ) -> Result<()> {
        let params = ExecParams { timeout, ..Default::default() };
        let spec =
            ExecSpec { name: &handle.sandbox_id, shell: &handle.shell, command, params: &params, user: None };
        let result = self.engine.exec(spec).await;
        let tail = |bytes: &[u8]| {
            let text = String::from_utf8_lossy(bytes);
            let text = text.trim();
            let from = (text.len().saturating_sub(500)..=text.len()).find(|i| text.is_char_boundary(*i));
            text[from.unwrap_or(0)..].to_string()
        };
        match result.error_type {
            Some(sandboxd_proto::contract::ExecErrorType::Timeout) => Err(ProviderError::SetupTimeout(format!(
                "sandbox {:?}: spec.setup did not finish within {} s (spec.setup_timeout_s); it was killed and the sandbox removed",
                handle.sandbox_id,
                timeout.unwrap_or_default().as_secs_f64()
            ))),
            Some(other) => Err(ProviderError::Create(format!(
                "sandbox {:?}: spec.setup could not run ({}): {}",
                handle.sandbox_id,
                other.as_str(),
                tail(&result.stderr)
            ))),
            None if result.return_code != 0 => Err(ProviderError::Create(format!(
                "sandbox {:?}: spec.setup exited with {}: {}",
                handle.sandbox_id,
                result.return_code,
                tail(&result.stderr)
            ))),
            None => Ok(()),
        }
    }

    /// Without the agent's socket nothing watched a spec's entrypoint while the probe ran (a
    /// probe may pass before an entrypoint that exits at once has exited): it must have lived
    /// the agent's settle window and still run, or the create fails as the agent's would.
    async fn entrypoint_lived(&self, name: &str, started: Instant) -> Result<()> {
        tokio::time::sleep(sandboxd_agent::init::ENTRYPOINT_SETTLE.saturating_sub(started.elapsed())).await;
        if super::transport::cli::container_running(&self.cli, name).await {
            return Ok(());
        }
        Err(ProviderError::CreateVerification(format!(
            "sandbox {name:?}: its entrypoint exited before the sandbox was ready"
        )))
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
                None => self.detect_shell(self.create_engine.as_ref(), name).await,
            };
        };
        let detect = configured_shell.is_none();
        let script = if detect { probe_with_shell_detection(&command) } else { command };
        // The spec's `ready_timeout_s` was bounded where the request entered.
        let patience = ready_timeout_s.map(Duration::from_secs_f64).or(probe.deadline);
        let deadline = patience.map(|p| Instant::now() + p);
        let mut shell = configured_shell;
        let mut consecutive = 0;
        let mut last_detail = String::from("no probe attempt completed");
        loop {
            let params = ExecParams { timeout: Some(probe.timeout), ..Default::default() };
            let spec = ExecSpec { name, shell: "sh", command: &script, params: &params, user: None };
            let result = self.create_engine.exec(spec).await;
            if shell.is_none() && result.error_type.is_none() {
                let stderr = result.stderr_str();
                shell =
                    Some(if stderr.contains(&format!("{SHELL_MARK}bash")) { "bash" } else { "sh" }.into());
            }
            let stdout = result.stdout_str();
            let passed = result.return_code == 0
                && probe.expected_stdout.as_deref().is_none_or(|want| stdout.contains(want));
            if passed {
                consecutive += 1;
                if consecutive >= probe.stable_count {
                    return Ok(shell.unwrap_or_else(|| "sh".into()));
                }
            } else {
                consecutive = 0;
                let stderr = result.stderr_str();
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
                return Err(ProviderError::ReadyTimeout(format!(
                    "sandbox {name:?} did not pass its readiness probe within {}s: {last_detail}",
                    patience.unwrap_or_default().as_secs_f64()
                )));
            }
            if !probe.stable_delay.is_zero() {
                tokio::time::sleep(probe.stable_delay).await;
            } else if !passed {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// Configured exec shell, else bash when the image has it, else sh, asked through `engine`
    /// (a create asks in its own pool, a lookup of an existing sandbox in the exec pool).
    pub(in crate::backends::docker) async fn detect_shell(
        &self,
        engine: &dyn ExecEngine,
        name: &str,
    ) -> Result<String> {
        if let Some(shell) = &self.config.exec.exec_shell {
            return Ok(shell.clone());
        }
        let params = ExecParams { timeout: self.control_timeout(), ..Default::default() };
        let spec = ExecSpec { name, shell: "sh", command: "command -v bash", params: &params, user: None };
        let result = engine.exec(spec).await;
        Ok(if result.return_code == 0 && result.error_type.is_none() { "bash" } else { "sh" }.into())
    }

    /// Force-remove a container this call created, whatever state it is in.
    pub(in crate::backends::docker) async fn force_remove(&self, name: &str) {
        if let Err(e) = self.remove_container(name).await {
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
}

/// The probe, then a stderr line saying whether bash exists; the probe's own exit code wins.
fn probe_with_shell_detection(probe: &str) -> String {
    format!(
        "{probe}\n__sandboxd_rc=$?\ncommand -v bash >/dev/null 2>&1 && printf '\\n{SHELL_MARK}bash\\n' >&2\nexit $__sandboxd_rc"
    )
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

/// What failed, in words a caller can act on: a missing image names the image, the pull policy
/// and what to do, with docker's own error line (not its usage hint).
fn create_failure(image: &str, pull_policy: &str, failure: &DockerFailure) -> ProviderError {
    let (code, detail) = (failure.code, failure.error_line());
    if failure.kind == DockerFailureKind::MissingImage {
        let what = if pull_policy == "never" {
            format!("image {image:?} is not on the daemon and create.pull_policy is \"never\": load or build it there first (docker load, docker build)")
        } else {
            format!(
                "image {image:?} is not on the daemon and could not be pulled (create.pull_policy {pull_policy:?}): \
                 load or build it there first (docker load, docker build), or make its registry reachable"
            )
        };
        ProviderError::Create(format!("{what}; docker said: {detail}"))
    } else if failure.kind == DockerFailureKind::NetworkGone {
        // The service's own network, never the caller's doing: worth a retry.
        ProviderError::Unavailable(format!(
            "docker run failed (code={code}) for image {image:?}: {detail} (the service network was removed or doubled under this create; retry)"
        ))
    } else if matches!(failure.kind, DockerFailureKind::NoSpace | DockerFailureKind::AddressPoolsExhausted) {
        ProviderError::ResourceExhausted(format!(
            "docker run failed (code={code}) for image {image:?}: {detail}"
        ))
    } else {
        ProviderError::Create(format!("docker run failed (code={code}) for image {image:?}: {detail}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_compare_with_implied_latest() {
        assert!(same_image("busybox", "busybox:latest"));
        assert!(same_image("docker://reg:5000/x", "reg:5000/x:latest"));
        assert!(!same_image("busybox:1", "busybox:2"));
    }

    #[test]
    fn a_missing_image_is_named_with_what_to_do_and_no_usage_hint() {
        let stderr = "docker: Error response from daemon: No such image: img:1\n\nRun 'docker run --help' for more information\n";
        let run = |stderr: &str| DockerFailure::new(&["run".into()], 125, stderr, Vec::new());
        let err = create_failure("img:1", "never", &run(stderr)).to_string();
        assert!(
            err.contains("\"img:1\"")
                && err.contains("pull_policy is \"never\"")
                && err.contains("docker load"),
            "{err}"
        );
        assert!(err.contains("No such image") && !err.contains("--help"), "{err}");
        let err = create_failure("img:1", "missing", &run("Unable to find image 'img:1' locally\ndocker: Error response from daemon: pull access denied\nSee 'docker run --help'.")).to_string();
        assert!(err.contains("could not be pulled") && !err.contains("--help"), "{err}");
    }

    #[test]
    fn a_network_gone_under_a_create_is_the_services_and_names_the_network() {
        let stderr = "Error response from daemon: network sandboxd-net-default not found\nError: failed to start containers: sandboxd-creating-ab";
        let start =
            DockerFailure::new(&["start".into(), "sandboxd-creating-ab".into()], 1, stderr, Vec::new());
        let err = create_failure("img:1", "missing", &start);
        assert!(matches!(&err, ProviderError::Unavailable(_)), "{err:?}");
        assert!(err.to_string().contains("network sandboxd-net-default not found"), "{err}");
        let status = tonic::Status::from(err);
        assert_eq!(status.code(), tonic::Code::Unavailable);
    }

    #[test]
    fn probe_script_keeps_the_probe_exit_code() {
        let s = probe_with_shell_detection("printf ok");
        assert!(s.starts_with("printf ok\n"));
        assert!(s.ends_with("exit $__sandboxd_rc"));
    }
}
