//! The agent exec engine: commands and files go to the sandbox's resident agent over one
//! persistent channel per sandbox (see `channel`), and `docker exec` is used for a sandbox
//! where the agent cannot run (said once in the log).

pub mod binary;
pub mod channel;
mod files;
mod forward;
mod procs;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandboxd_agent::protocol::{self, Event, ExecStart, Request};
use tokio::sync::{mpsc, oneshot};

use self::channel::{AgentChannel, Call, OpenError};
use super::cli::DockerCli;
use super::transport::cli::{container_running, DockerExecEngine};
use super::transport::{
    note_dropped, output_limit, spawn_stream, timed_out, ExecEngine, ExecSpec, ExecStream, FileDownload,
    StreamEvent, TerminalSession, UploadSource,
};
use crate::error::Result;
use crate::spec::PtySpec;
use crate::spec::{ExecErrorType, ExecResult, ExecUsage};

/// First look at the container when a command has been silent this long (a paused container
/// freezes the agent too, so silence alone cannot tell).
/// Largest download served through the agent: its channel (a `docker exec` stdout, about
/// 110 MB/s here) wins on small files by skipping `docker cp`'s fixed cost, `docker cp` wins on
/// large ones (about 220 MB/s out).
const AGENT_DOWNLOAD_MAX: u64 = 8 << 20;

const FIRST_CHECK: Duration = Duration::from_secs(1);
/// Then this often.
const NEXT_CHECK: Duration = Duration::from_secs(10);
/// How long a killed command has to report its end before the call returns anyway.
const KILL_GRACE: Duration = Duration::from_secs(5);

/// What a call gets when the channel ends under it.
const AGENT_LOST: &str = "the sandbox's exec agent went away during the call (killed inside the sandbox, or \
     the sandbox stopped); the next call starts a new one";

/// What a call gets when its caller went away first (it is logged, never seen).
const CALLER_LEFT: &str = "the caller went away";

type Slot = Arc<tokio::sync::Mutex<Option<Arc<AgentChannel>>>>;

/// Commands through the sandbox's agent.
pub struct AgentEngine {
    docker: DockerExecEngine,
    slots: Mutex<HashMap<String, Slot>>,
    /// Sandboxes without a usable agent: they use `docker exec`.
    without_agent: Mutex<HashSet<String>>,
}

/// Where a command's output goes while it runs.
enum Sink {
    Buffer { stdout: Vec<u8>, stderr: Vec<u8> },
    Stream(mpsc::Sender<StreamEvent>),
}

impl AgentEngine {
    pub fn new(docker: DockerExecEngine) -> Self {
        Self { docker, slots: Mutex::default(), without_agent: Mutex::default() }
    }

    /// Entries of the per-sandbox maps: channel slots, sandboxes without an agent.
    pub fn cache_sizes(&self) -> (usize, usize) {
        (self.slots.lock().map_or(0, |m| m.len()), self.without_agent.lock().map_or(0, |w| w.len()))
    }

    fn cli(&self) -> &DockerCli {
        &self.docker.cli
    }

    /// The sandbox's channel, opened on first use and reopened after the agent died; `None`
    /// means "use docker exec for this call".
    pub async fn channel(&self, name: &str) -> Option<Arc<AgentChannel>> {
        if self.without_agent.lock().is_ok_and(|w| w.contains(name)) {
            return None;
        }
        let slot = self.slots.lock().ok()?.entry(name.to_string()).or_default().clone();
        let mut guard = slot.lock().await;
        if let Some(channel) = guard.as_ref().filter(|c| c.is_alive()) {
            return Some(channel.clone());
        }
        match AgentChannel::open(self.cli(), name).await {
            Ok(channel) => {
                tracing::debug!(sandbox_id = %name, agent_pid = channel.agent_pid, "agent channel open");
                let channel = Arc::new(channel);
                *guard = Some(channel.clone());
                Some(channel)
            }
            Err(OpenError::NoAgent(reason)) => {
                tracing::warn!(sandbox_id = %name, %reason, "the sandbox's agent cannot run; using docker exec for it");
                if let Ok(mut w) = self.without_agent.lock() {
                    w.insert(name.to_string());
                }
                None
            }
            Err(OpenError::Transport(reason)) => {
                tracing::debug!(sandbox_id = %name, %reason, "agent channel not opened; docker exec answers this call");
                None
            }
        }
    }

    /// Send the command (and its stdin) to the agent.
    async fn start(channel: &AgentChannel, spec: ExecSpec<'_>, output_limit: u64) -> Option<Call> {
        let params = spec.params;
        let user = spec.user.map(String::from).or_else(|| channel.default_user.clone());
        let start = ExecStart {
            shell: spec.shell.to_string(),
            command: spec.command.as_bytes().to_vec(),
            env: params.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            cwd: params.cwd.clone(),
            user,
            stdin: params.stdin.is_some(),
            output_limit,
        };
        let call = channel.call(Request::Exec(start)).await?;
        if let Some(stdin) = &params.stdin {
            for chunk in stdin.chunks(protocol::MAX_CHUNK) {
                if !call.send(Request::Stdin(chunk.to_vec())).await {
                    return None;
                }
            }
            call.send(Request::StdinEnd).await;
        }
        Some(call)
    }
}

/// Follow a call to its end: output into `sink`, the timeout, the container's health, and
/// `stop` (the stream's consumer went away).
async fn drive(
    cli: &DockerCli,
    name: &str,
    mut call: Call,
    timeout: Option<Duration>,
    sink: &mut Sink,
    mut stop: Option<oneshot::Receiver<()>>,
    limit: usize,
) -> ExecResult {
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let mut next_check = tokio::time::Instant::now() + FIRST_CHECK;
    loop {
        let wake = deadline.map_or(next_check, |d| d.min(next_check));
        let stopped = async {
            match stop.as_mut() {
                Some(rx) => {
                    let _ = rx.await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            event = call.events.recv() => {
                let chunk = match event {
                    Some(Event::Stdout(data)) => StreamEvent::Stdout(data),
                    Some(Event::Stderr(data)) => StreamEvent::Stderr(data),
                    Some(Event::Exit(exit)) => {
                        call.finish();
                        let mut result = ExecResult {
                            return_code: exit.code,
                            usage: Some(ExecUsage {
                                wall_time: Duration::from_micros(exit.usage.wall_us),
                                user_cpu: Duration::from_micros(exit.usage.user_us),
                                system_cpu: Duration::from_micros(exit.usage.system_us),
                                peak_rss_bytes: exit.usage.peak_rss_bytes,
                            }),
                            ..Default::default()
                        };
                        note_dropped(&mut result.stderr, limit, exit.dropped_stdout + exit.dropped_stderr);
                        return result;
                    }
                    Some(Event::Failed { message, .. }) => {
                        call.finish();
                        return ExecResult::failed(ExecErrorType::Sandbox, message);
                    }
                    Some(_) => continue,
                    None => {
                        call.finish();
                        return ExecResult::failed(ExecErrorType::Sandbox, AGENT_LOST);
                    }
                };
                let n = match &chunk {
                    StreamEvent::Stdout(d) | StreamEvent::Stderr(d) => d.len() as u64,
                    StreamEvent::Exit(_) => 0,
                };
                if !sink.push(chunk).await {
                    return ExecResult::failed(ExecErrorType::Sandbox, CALLER_LEFT);
                }
                call.send(Request::Credit(n)).await;
            }
            _ = tokio::time::sleep_until(wake) => {
                if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                    kill_and_wait(&mut call).await;
                    return timed_out(timeout, None);
                }
                if !container_running(cli, name).await {
                    kill_and_wait(&mut call).await;
                    return ExecResult::failed(
                        ExecErrorType::Sandbox,
                        format!("sandbox {name} is not running (stopped or paused)"),
                    );
                }
                next_check = tokio::time::Instant::now() + NEXT_CHECK;
            }
            _ = stopped => {
                kill_and_wait(&mut call).await;
                return ExecResult::failed(ExecErrorType::Sandbox, CALLER_LEFT);
            }
        }
    }
}

/// Stop the command's tree and wait (briefly) for the agent to report it ended.
async fn kill_and_wait(call: &mut Call) {
    call.send(Request::Kill).await;
    let _ = tokio::time::timeout(KILL_GRACE, async {
        while let Some(event) = call.events.recv().await {
            if matches!(event, Event::Exit(_) | Event::Failed { .. }) {
                break;
            }
        }
    })
    .await;
    call.finish();
}

impl Sink {
    /// Keep or forward one chunk; false when a stream's consumer is gone.
    async fn push(&mut self, event: StreamEvent) -> bool {
        match (self, event) {
            (Sink::Buffer { stdout, .. }, StreamEvent::Stdout(d)) => stdout.extend_from_slice(&d),
            (Sink::Buffer { stderr, .. }, StreamEvent::Stderr(d)) => stderr.extend_from_slice(&d),
            (Sink::Stream(tx), event) => return tx.send(event).await.is_ok(),
            (Sink::Buffer { .. }, StreamEvent::Exit(_)) => {}
        }
        true
    }
}

#[tonic::async_trait]
impl ExecEngine for AgentEngine {
    async fn exec(&self, spec: ExecSpec<'_>) -> ExecResult {
        let Some(channel) = self.channel(spec.name).await else {
            return self.docker.exec(spec).await;
        };
        let limit = output_limit(&self.docker.config);
        let Some(call) = Self::start(&channel, spec, limit as u64).await else {
            return ExecResult::failed(ExecErrorType::Sandbox, AGENT_LOST);
        };
        let timeout = spec.params.timeout;
        let mut sink = Sink::Buffer { stdout: Vec::new(), stderr: Vec::new() };
        let started = Instant::now();
        let mut result = drive(self.cli(), spec.name, call, timeout, &mut sink, None, limit).await;
        if let Sink::Buffer { stdout, mut stderr } = sink {
            if result.error_type != Some(ExecErrorType::Timeout) {
                stderr.extend_from_slice(&result.stderr);
                result.stdout = stdout;
                result.stderr = stderr;
            }
        }
        tracing::debug!(elapsed = ?started.elapsed(), code = result.return_code, "agent exec");
        result
    }

    async fn exec_stream(&self, spec: ExecSpec<'_>) -> ExecStream {
        let Some(channel) = self.channel(spec.name).await else {
            return self.docker.exec_stream(spec).await;
        };
        let Some(call) = Self::start(&channel, spec, u64::MAX).await else {
            return ExecStream::finished(ExecResult::failed(ExecErrorType::Sandbox, AGENT_LOST));
        };
        let timeout = spec.params.timeout;
        let (cli, name) = (self.cli().clone(), spec.name.to_string());
        spawn_stream(move |tx, stop| async move {
            let mut sink = Sink::Stream(tx.clone());
            let result = drive(&cli, &name, call, timeout, &mut sink, Some(stop), usize::MAX).await;
            let _ = tx.send(StreamEvent::Exit(result)).await;
        })
    }

    async fn upload(
        &self,
        name: &str,
        source: UploadSource<'_>,
        size: u64,
        path: &str,
        mode: u32,
    ) -> Result<u64> {
        let Some(channel) = self.channel(name).await else {
            return self.docker.upload(name, source, size, path, mode).await;
        };
        match files::upload(&channel, name, source, size, path, mode).await {
            Err(e) => Err(crate::docker::files::explain_by_state(self.cli(), name, e).await),
            ok => ok,
        }
    }

    async fn download(&self, name: &str, path: &str) -> Result<Box<dyn FileDownload>> {
        let Some(channel) = self.channel(name).await else {
            return self.docker.download(name, path).await;
        };
        let download = match files::AgentDownload::open(&channel, name, path).await {
            Ok(download) => download,
            Err(e) => return Err(crate::docker::files::explain_by_state(self.cli(), name, e).await),
        };
        if download.size() <= AGENT_DOWNLOAD_MAX {
            return Ok(Box::new(download));
        }
        // A large file: `docker cp` streams it faster than the agent's stdio channel (the agent
        // has already checked the path); dropping the agent's read cancels it.
        drop(download);
        self.docker.download(name, path).await
    }

    /// Terminals do not go through the agent yet: the docker transport's terminal.
    async fn open_terminal(
        &self,
        name: &str,
        shell: &str,
        spec: &PtySpec,
        user: Option<&str>,
    ) -> Result<Arc<dyn TerminalSession>> {
        self.docker.open_terminal(name, shell, spec, user).await
    }

    fn renamed(&self, from: &str, to: &str) {
        if let Ok(mut slots) = self.slots.lock() {
            if let Some(slot) = slots.remove(from) {
                slots.insert(to.to_string(), slot);
            }
        }
        if let Ok(mut w) = self.without_agent.lock() {
            if w.remove(from) {
                w.insert(to.to_string());
            }
        }
    }

    fn forget(&self, name: &str) {
        if let Ok(mut slots) = self.slots.lock() {
            slots.remove(name);
        }
        if let Ok(mut w) = self.without_agent.lock() {
            w.remove(name);
        }
    }
}
