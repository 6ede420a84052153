//! The one place docker subprocesses are started and end: the `concurrency` semaphore, a
//! process group per call (so a timeout kills the client and anything it forked), a `tracing`
//! span with env values masked, bytes kept lossless, and a failed command classified once
//! ([`CliError::Failed`]).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::{Child, Command};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::Instrument;

use super::failure::{CliError, DockerFailure};
use super::mask::masked;

/// What a finished docker command produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandOutput {
    pub code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Bytes of stdout and stderr dropped past the output limit.
    pub dropped: u64,
}

impl CommandOutput {
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// Process groups of the docker clients running now, so an exit can end them all.
static LIVE_GROUPS: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());

fn track_group(pgid: i32) {
    if let Ok(mut live) = LIVE_GROUPS.lock() {
        live.push(pgid);
    }
}

fn untrack_group(pgid: i32) {
    if let Ok(mut live) = LIVE_GROUPS.lock() {
        if let Some(i) = live.iter().position(|p| *p == pgid) {
            live.swap_remove(i);
        }
    }
}

/// SIGKILL every docker client still running (the server is exiting: no client is left behind).
pub fn kill_all_clients() {
    let groups = LIVE_GROUPS.lock().map(|mut live| std::mem::take(&mut *live)).unwrap_or_default();
    for pgid in groups {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), nix::sys::signal::Signal::SIGKILL);
    }
}

/// A docker client subprocess that holds a concurrency permit while it lives and kills its
/// process group when dropped unfinished (a cancelled RPC leaves no client behind).
pub struct DockerChild {
    pub child: Child,
    pgid: Option<i32>,
    _permit: Option<OwnedSemaphorePermit>,
    pub command: String,
    /// The `docker` span (masked command line) the caller runs its I/O with this client in.
    pub span: tracing::Span,
    /// The docker subcommand and its start, for the subprocess-duration metric.
    started: (String, std::time::Instant),
    /// The arguments (without the binary), to classify a failure.
    args: Vec<String>,
    /// The stderr being collected in the background (`drain_stderr`).
    stderr_task: Option<tokio::task::JoinHandle<Vec<u8>>>,
}

impl DockerChild {
    /// Kill the client's whole process group.
    pub fn kill_group(&mut self) {
        if let Some(pgid) = self.pgid {
            // SAFETY-free: plain syscall; the group is ours (we created it with process_group(0)).
            let _ =
                nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), nix::sys::signal::Signal::SIGKILL);
        }
    }

    /// Collect the client's stderr in the background: it must be drained while the transfer
    /// runs, and it is what `finish` classifies a failure by.
    pub fn drain_stderr(&mut self) {
        let mut stderr = self.child.stderr.take();
        self.stderr_task = Some(tokio::spawn(async move { read_all(stderr.as_mut(), usize::MAX).await.0 }));
    }

    /// Wait for the client to exit; its exit code. The process group is then no longer ours to
    /// signal (the pgid may be reused).
    pub async fn wait(&mut self) -> std::io::Result<i32> {
        let status = self.child.wait().await;
        self.disarm();
        status.map(exit_code)
    }

    /// End the client now: kill its group, reap it.
    pub async fn abort(&mut self) {
        self.kill_group();
        let _ = self.wait().await;
    }

    /// Wait for a docker command whose exit is docker's own (not a command's, as in exec): a
    /// non-zero exit is a classified [`CliError::Failed`] (stderr from `drain_stderr`).
    pub async fn finish(&mut self) -> Result<(), CliError> {
        let code =
            self.wait().await.map_err(|source| CliError::Io { command: self.command.clone(), source })?;
        if code == 0 {
            return Ok(());
        }
        let stderr = match self.stderr_task.take() {
            Some(task) => task.await.unwrap_or_default(),
            None => read_all(self.child.stderr.as_mut(), usize::MAX).await.0,
        };
        Err(DockerFailure::new(&self.args, code, &String::from_utf8_lossy(&stderr), Vec::new()).into())
    }

    fn disarm(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            untrack_group(pgid);
        }
    }
}

impl Drop for DockerChild {
    fn drop(&mut self) {
        crate::metrics::global().docker_command(&self.started.0, self.started.1.elapsed());
        if let Ok(None) = self.child.try_wait() {
            self.kill_group();
        }
        self.disarm();
    }
}

/// Which bounded pool a docker client waits in: commands of one kind never wait behind another
/// kind (a stalled transfer cannot hold up `inspect`, `rm` or a session's pid read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pool {
    /// `docker exec` of client commands (`exec.concurrency`).
    Exec,
    /// A create's `docker run` and, on the docker engine, its readiness probe
    /// (`exec.create_concurrency`): creates never queue behind a crowd of client execs.
    Create,
    /// Short control commands: inspect, rm, port, start, rename, ps, and the in-container pid
    /// reads, signals and cleanup of terminal sessions (`exec.control_concurrency`).
    Control,
    /// File transfers, `docker cp` (`exec.transfer_concurrency`).
    Transfer,
}

/// How many clients each pool lets run at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSizes {
    pub exec: usize,
    pub create: usize,
    pub control: usize,
    pub transfer: usize,
}

impl PoolSizes {
    /// The same limit for every pool (tests and tools).
    pub fn uniform(n: usize) -> Self {
        Self { exec: n, create: n, control: n, transfer: n }
    }
}

/// The permits of each pool.
struct Pools {
    exec: Arc<Semaphore>,
    create: Arc<Semaphore>,
    control: Arc<Semaphore>,
    transfer: Arc<Semaphore>,
}

/// Runs the docker CLI. `run`/`run_limited` use this value's pool (see `in_pool`).
#[derive(Clone)]
pub struct DockerCli {
    binary: PathBuf,
    pools: Arc<Pools>,
    pool: Pool,
    /// Added to the client's environment: env values travel here (`--env KEY` on the argv),
    /// never on a command line every host user can read.
    env: Arc<Vec<(String, String)>>,
    /// Sandbox ids that name a container of another name (a Swarm task's), shared by every
    /// copy of this CLI.
    aliases: Arc<ContainerAliases>,
}

/// Sandbox id -> the container that answers to it. A Swarm task's container is named
/// `<service>.<slot>.<task>` by Swarm and must keep that name (Swarm's executor finds its
/// containers by it), so the id every argv builder passes is swapped for the container's id
/// here, the one place a docker command line is started: an argument that is exactly an alias,
/// or `ALIAS:path` (`docker cp`). Empty on a single host.
#[derive(Debug, Default)]
pub struct ContainerAliases {
    names: std::sync::RwLock<std::collections::HashMap<String, String>>,
}

impl ContainerAliases {
    /// `id` now means `container` on this daemon.
    pub fn insert(&self, id: &str, container: &str) {
        if let Ok(mut names) = self.names.write() {
            names.insert(id.to_string(), container.to_string());
        }
    }

    pub fn remove(&self, id: &str) {
        if let Ok(mut names) = self.names.write() {
            names.remove(id);
        }
    }

    pub fn get(&self, id: &str) -> Option<String> {
        self.names.read().ok().and_then(|n| n.get(id).cloned())
    }

    /// `args` with every alias swapped for its container (`ALIAS:path` only in `docker cp`).
    pub fn apply(&self, args: &[String]) -> Vec<String> {
        let Ok(names) = self.names.read() else { return args.to_vec() };
        // Swarm's own nouns name the service, whose name the sandbox id is.
        let swarm_noun =
            args.first().is_some_and(|a| ["service", "node", "swarm", "info"].contains(&a.as_str()));
        if names.is_empty() || swarm_noun {
            return args.to_vec();
        }
        let copy = args.first().is_some_and(|a| a == "cp");
        args.iter()
            .map(|arg| {
                if let Some(container) = names.get(arg) {
                    return container.clone();
                }
                if let Some((head, path)) = arg.split_once(':').filter(|_| copy) {
                    if let Some(container) = names.get(head) {
                        return format!("{container}:{path}");
                    }
                }
                arg.clone()
            })
            .collect()
    }
}

impl DockerCli {
    /// One limit for every pool (tests and tools); the server sizes each from its config.
    pub fn new(binary: PathBuf, concurrency: usize) -> Self {
        Self::with_pools(binary, PoolSizes::uniform(concurrency))
    }

    pub fn with_pools(binary: PathBuf, sizes: PoolSizes) -> Self {
        let pool = |n: usize| Arc::new(Semaphore::new(n.max(1)));
        let pools = Pools {
            exec: pool(sizes.exec),
            create: pool(sizes.create),
            control: pool(sizes.control),
            transfer: pool(sizes.transfer),
        };
        Self {
            binary,
            pools: Arc::new(pools),
            pool: Pool::Exec,
            env: Arc::default(),
            aliases: Arc::default(),
        }
    }

    /// The same CLI, counting its commands against `pool`.
    pub fn in_pool(&self, pool: Pool) -> Self {
        Self { pool, ..self.clone() }
    }

    /// The same CLI, its clients started with `env` added to their environment.
    pub fn with_env(&self, env: Vec<(String, String)>) -> Self {
        Self { env: Arc::new(env), ..self.clone() }
    }

    /// The sandbox ids this CLI swaps for their containers' ids.
    pub fn aliases(&self) -> &Arc<ContainerAliases> {
        &self.aliases
    }

    fn semaphore(&self) -> &Arc<Semaphore> {
        match self.pool {
            Pool::Exec => &self.pools.exec,
            Pool::Create => &self.pools.create,
            Pool::Control => &self.pools.control,
            Pool::Transfer => &self.pools.transfer,
        }
    }

    /// `docker` found on `PATH` (or `$SANDBOXD_DOCKER`), for error messages that say what to do.
    pub fn locate() -> Result<PathBuf, String> {
        if let Some(p) = std::env::var_os("SANDBOXD_DOCKER") {
            return Ok(PathBuf::from(p));
        }
        let path = std::env::var_os("PATH").unwrap_or_default();
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join("docker");
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
        Err("the 'docker' binary is required: install Docker and make sure the daemon runs".into())
    }

    pub fn binary(&self) -> &PathBuf {
        &self.binary
    }

    /// The full argv (binary first) for logs and the fake-boundary tests.
    pub fn argv(&self, args: &[String]) -> Vec<String> {
        let mut argv = Vec::with_capacity(args.len() + 1);
        argv.push(self.binary.to_string_lossy().into_owned());
        argv.extend(args.iter().cloned());
        argv
    }

    fn command(&self, args: &[String]) -> Command {
        let mut cmd = Command::new(&self.binary);
        cmd.args(self.aliases.apply(args))
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .process_group(0)
            .kill_on_drop(true);
        reset_signal_dispositions(cmd.as_std_mut());
        cmd
    }

    /// Start a client with piped stdio, holding a permit of this CLI's pool (when `counted`)
    /// until it is dropped.
    pub async fn spawn(&self, args: &[String], stdin: bool, counted: bool) -> Result<DockerChild, CliError> {
        self.spawn_in(args, stdin, counted, false).await
    }

    /// [`DockerCli::spawn`] for a client that outlives the call starting it (the agent
    /// channel): its span is a root that follows from the call's, so it does not hold the
    /// call's span (and its trace) open for the client's lifetime.
    pub async fn spawn_detached(&self, args: &[String], stdin: bool) -> Result<DockerChild, CliError> {
        self.spawn_in(args, stdin, false, true).await
    }

    async fn spawn_in(
        &self,
        args: &[String],
        stdin: bool,
        counted: bool,
        detached: bool,
    ) -> Result<DockerChild, CliError> {
        let command = masked(&self.argv(args));
        let waiting = std::time::Instant::now();
        let permit = if counted { self.semaphore().clone().acquire_owned().await.ok() } else { None };
        if counted {
            crate::metrics::global().permit_wait.observe(waiting.elapsed().as_secs_f64());
        }
        let started = (args.first().cloned().unwrap_or_default(), std::time::Instant::now());
        let mut cmd = self.command(args);
        cmd.stdin(if stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let span = if detached {
            let span = tracing::debug_span!(parent: None, "docker", cmd = %command);
            span.follows_from(tracing::Span::current());
            span
        } else {
            tracing::debug_span!("docker", cmd = %command)
        };
        let child = cmd.spawn().map_err(|source| CliError::Spawn { command: command.clone(), source })?;
        span.in_scope(|| tracing::debug!("docker started"));
        if let Some(pipe) = &child.stdin {
            widen_pipe(pipe);
        }
        if let Some(pipe) = &child.stdout {
            widen_pipe(pipe);
        }
        let pgid = child.id().map(|p| p as i32);
        if let Some(pgid) = pgid {
            track_group(pgid);
        }
        Ok(DockerChild {
            child,
            pgid,
            _permit: permit,
            command,
            span,
            started,
            args: args.to_vec(),
            stderr_task: None,
        })
    }

    /// Run a docker command to completion, feeding `stdin`; kill the process group at
    /// `timeout`. A non-zero exit is docker's failure, classified: [`CliError::Failed`].
    pub async fn run(
        &self,
        args: &[String],
        timeout: Option<Duration>,
        stdin: Option<&[u8]>,
    ) -> Result<CommandOutput, CliError> {
        let out = self.run_limited(args, timeout, stdin, usize::MAX).await?;
        if out.code == 0 {
            return Ok(out);
        }
        Err(DockerFailure::new(args, out.code, &out.stderr_text(), out.stdout).into())
    }

    /// As `run`, for `docker exec` of a command: the exit code is the command's, so nothing is
    /// classified here. Keeps at most `limit` bytes of each of stdout and stderr: the rest is
    /// read and dropped, so a command that floods its output can neither block nor exhaust the
    /// server.
    pub async fn run_limited(
        &self,
        args: &[String],
        timeout: Option<Duration>,
        stdin: Option<&[u8]>,
        limit: usize,
    ) -> Result<CommandOutput, CliError> {
        // The wait for a permit counts against the timeout.
        let started = tokio::time::Instant::now();
        let mut child = match timeout {
            Some(t) => match tokio::time::timeout(t, self.spawn(args, stdin.is_some(), true)).await {
                Ok(child) => child?,
                Err(_) => {
                    let command = masked(&self.argv(args));
                    tracing::warn!(?timeout, pool = ?self.pool, "no docker permit within the timeout");
                    return Err(CliError::Timeout { after: t, command });
                }
            },
            None => self.spawn(args, stdin.is_some(), true).await?,
        };
        let timeout = timeout.map(|t| t.saturating_sub(started.elapsed()).max(Duration::from_millis(1)));
        let span = child.span.clone();
        async move {
            let command = child.command.clone();
            let feed = feed_stdin(child.child.stdin.take(), stdin.map(<[u8]>::to_vec));
            let work = async {
                let mut stdout = child.child.stdout.take();
                let mut stderr = child.child.stderr.take();
                let read_out = read_all(stdout.as_mut(), limit);
                let read_err = read_all(stderr.as_mut(), limit);
                let ((), out, err) = tokio::join!(feed, read_out, read_err);
                let code = child.wait().await;
                (code, out, err)
            };
            let result = match timeout {
                Some(t) => tokio::time::timeout(t, work).await,
                None => Ok(work.await),
            };
            match result {
                Ok((code, out, err)) => {
                    let code = code.map_err(|source| CliError::Io { command: command.clone(), source })?;
                    tracing::debug!(code, "docker finished");
                    let ((stdout, out_dropped), (stderr, err_dropped)) = (out, err);
                    Ok(CommandOutput { code, stdout, stderr, dropped: out_dropped + err_dropped })
                }
                Err(_) => {
                    child.abort().await;
                    tracing::warn!(?timeout, "docker command timed out");
                    Err(CliError::Timeout { after: timeout.unwrap_or_default(), command })
                }
            }
        }
        .instrument(span)
        .await
    }
}

/// Write `data` to a client's stdin and close it (no data: just close it). A command that
/// exits without reading its input is not an error.
pub async fn feed_stdin(pipe: Option<tokio::process::ChildStdin>, data: Option<Vec<u8>>) {
    if let (Some(mut pipe), Some(data)) = (pipe, data) {
        let _ = pipe.write_all(&data).await;
        let _ = pipe.shutdown().await;
    }
}

/// Children start with default signal dispositions and an empty mask: a server (or test) started
/// in the background by a shell inherits SIGINT and SIGQUIT ignored, and `exec` keeps ignored
/// signals ignored, so a child could not be interrupted otherwise.
pub fn reset_signal_dispositions(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec only async-signal-safe calls are made (sigaction and
    // sigprocmask through nix, no allocation).
    unsafe {
        cmd.pre_exec(|| {
            use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
            let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
            for signal in [Signal::SIGINT, Signal::SIGQUIT, Signal::SIGTERM, Signal::SIGHUP, Signal::SIGPIPE]
            {
                let _ = sigaction(signal, &default);
            }
            let _ = nix::sys::signal::sigprocmask(
                nix::sys::signal::SigmaskHow::SIG_SETMASK,
                Some(&SigSet::empty()),
                None,
            );
            Ok(())
        });
    }
}

/// Pipes default to 64 KiB: a transfer through one would cost a wakeup per 64 KiB. Best effort
/// (the kernel caps it at /proc/sys/fs/pipe-max-size).
fn widen_pipe(pipe: &impl std::os::fd::AsFd) {
    let _ = nix::fcntl::fcntl(pipe, nix::fcntl::FcntlArg::F_SETPIPE_SZ(PIPE_SIZE));
}

const PIPE_SIZE: i32 = 1 << 20;

/// Everything `reader` produces, keeping the first `limit` bytes; returns them and how many
/// more were dropped.
async fn read_all<R: tokio::io::AsyncRead + Unpin>(reader: Option<&mut R>, limit: usize) -> (Vec<u8>, u64) {
    use tokio::io::AsyncReadExt;
    let mut kept = Vec::new();
    let mut dropped = 0u64;
    let Some(r) = reader else { return (kept, dropped) };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = limit.saturating_sub(kept.len()).min(n);
                kept.extend_from_slice(&buf[..room]);
                dropped += (n - room) as u64;
            }
        }
    }
    (kept, dropped)
}

/// A process's exit code, `128 + n` when it died of signal `n` (the shell convention).
pub fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

#[cfg(test)]
mod alias_tests {
    use super::ContainerAliases;

    #[test]
    fn an_alias_replaces_whole_arguments_and_cp_sources_only() {
        let aliases = ContainerAliases::default();
        let id = "sandboxd-0123456789abcdef0123456789abcdef";
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(aliases.apply(&args(&["exec", id, "true"])), args(&["exec", id, "true"]));
        aliases.insert(id, "c0ffee");
        assert_eq!(aliases.apply(&args(&["exec", id, "true"])), args(&["exec", "c0ffee", "true"]));
        let typed = format!("{id}:x");
        assert_eq!(aliases.apply(&args(&["exec", id, &typed])), args(&["exec", "c0ffee", &typed]));
        assert_eq!(
            aliases.apply(&args(&["cp", &format!("{id}:/a:b"), "-"])),
            args(&["cp", "c0ffee:/a:b", "-"])
        );
        // A filter or label naming the id is not a container reference.
        assert_eq!(aliases.apply(&args(&["service", "rm", id])), args(&["service", "rm", id]));
        let filter = format!("label=x={id}");
        assert_eq!(aliases.apply(&args(&["ps", "--filter", &filter])), args(&["ps", "--filter", &filter]));
        aliases.remove(id);
        assert_eq!(aliases.apply(&args(&["exec", id])), args(&["exec", id]));
    }
}
