//! One command through the agent: its `Exec` request (and stdin), then its output, timeout,
//! the container's health and the caller's cancel until the agent reports the end.

use std::time::Duration;

use sandboxd_agent::protocol::{self, Event, ExecStart, Request};
use tokio::sync::{mpsc, oneshot};

use super::channel::{AgentChannel, Call};
use super::host::AgentHost;
use crate::core::backend::StreamEvent;
use crate::core::exec_engine::{note_dropped, timed_out, ExecSpec};
use crate::core::spec::{ExecErrorType, ExecResult, ExecUsage};

/// First look at the container when a command has been silent this long (a paused container
/// freezes the agent too, so silence alone cannot tell).
pub(super) const FIRST_CHECK: Duration = Duration::from_secs(1);
/// Then this often.
const NEXT_CHECK: Duration = Duration::from_secs(10);
/// How long a killed command has to report its end before the call returns anyway.
const KILL_GRACE: Duration = Duration::from_secs(5);

/// What a call gets when the channel ends under it.
pub(crate) const AGENT_LOST: &str =
    "the sandbox's exec agent went away during the call (killed inside the sandbox, or \
     the sandbox stopped); the next call starts a new one";

/// What a call gets when its caller went away first (it is logged, never seen).
const CALLER_LEFT: &str = "the caller went away";

/// Where a command's output goes while it runs.
pub(super) enum Sink {
    Buffer { stdout: Vec<u8>, stderr: Vec<u8> },
    Stream(mpsc::Sender<StreamEvent>),
}

/// Send the command (and its stdin) to the agent.
pub(super) async fn start(channel: &AgentChannel, spec: ExecSpec<'_>, output_limit: u64) -> Option<Call> {
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

/// Follow a call to its end: output into `sink`, the timeout, the container's health, and
/// `stop` (the stream's consumer went away).
pub(super) async fn drive(
    host: &dyn AgentHost,
    name: &str,
    mut call: Call,
    timeout: Option<Duration>,
    sink: &mut Sink,
    mut stop: Option<oneshot::Receiver<()>>,
    limit: usize,
) -> ExecResult {
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let mut first_byte = true;
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
                        agent_timing(&exit);
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
                if std::mem::take(&mut first_byte) {
                    crate::otel::event("agent.first_byte", None, Vec::new());
                }
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
                if !host.is_running(name).await {
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
/// The agent's own timing as events of the current span (traces on): its wall time ends
/// now, so the command started (spawned) that long ago.
fn agent_timing(exit: &protocol::ExecExit) {
    if !crate::otel::enabled() {
        return;
    }
    use opentelemetry::KeyValue;
    let wall = Duration::from_micros(exit.usage.wall_us);
    let now = std::time::SystemTime::now();
    crate::otel::event("agent.spawn", now.checked_sub(wall), Vec::new());
    crate::otel::event(
        "agent.exit",
        Some(now),
        vec![
            KeyValue::new("exit_code", i64::from(exit.code)),
            KeyValue::new("wall_us", exit.usage.wall_us as i64),
            KeyValue::new("user_us", exit.usage.user_us as i64),
            KeyValue::new("system_us", exit.usage.system_us as i64),
            KeyValue::new("peak_rss_bytes", exit.usage.peak_rss_bytes as i64),
        ],
    );
}

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
