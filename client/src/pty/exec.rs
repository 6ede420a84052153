//! `pty().exec`: one command through a terminal. A default shell of the handle is reused under
//! the marker protocol (`sandboxd_proto::marker`); a command with its own cwd, env or user runs
//! in a private session that is drained and closed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{Pty, PtySession, PtySpec, CLOSE_WAIT};
use crate::defaults::DEFAULT_EXEC_TIMEOUT_S;
use crate::error::{ClientError, Result};
use sandboxd_proto::contract::{ExecErrorType, ExecResult};
use sandboxd_proto::marker::{normalize_terminal_output, Marker};

/// Upper bound of preparing a fresh default shell when `pty().exec` has no timeout.
const SETUP_WAIT: Duration = Duration::from_secs(60);

/// Options of `pty().exec`.
#[derive(Clone, Debug)]
pub struct PtyExecOptions<'a> {
    /// Run in this live session (a shell) instead of a default one.
    pub session: Option<&'a PtySession>,
    /// Working directory (opens a private session).
    pub cwd: Option<String>,
    /// Extra environment (opens a private session).
    pub env: HashMap<String, String>,
    /// User (opens a private session).
    pub user: Option<String>,
    /// Timeout in seconds (default 180); `None` waits forever.
    pub timeout_s: Option<f64>,
}

impl Default for PtyExecOptions<'_> {
    fn default() -> Self {
        PtyExecOptions {
            session: None,
            cwd: None,
            env: HashMap::new(),
            user: None,
            timeout_s: Some(DEFAULT_EXEC_TIMEOUT_S),
        }
    }
}

impl PtyExecOptions<'_> {
    /// True when an argument shapes the session (so a private one is needed).
    pub(crate) fn shapes_session(&self) -> bool {
        self.cwd.is_some() || !self.env.is_empty() || self.user.is_some()
    }
}

/// The default sessions `pty().exec` reuses, oldest first.
#[derive(Default)]
pub(crate) struct PtyExecState {
    pub(crate) sessions: Vec<PtySession>,
}

impl PtyExecState {
    /// Drops dead sessions and returns the oldest live one.
    pub(crate) fn oldest_live(&mut self) -> Option<PtySession> {
        self.sessions.retain(|s| s.is_live());
        self.sessions.first().cloned()
    }

    /// Forgets `session` (a retired one).
    pub(crate) fn retire(&mut self, session: &PtySession) {
        self.sessions.retain(|s| !Arc::ptr_eq(&s.inner, &session.inner));
    }
}

impl Pty<'_> {
    /// Runs one command in a terminal and collects its output (merged, `\r\n` turned into
    /// `\n`). Without `session`, the oldest live default shell of this handle is reused (one is
    /// opened when there is none) unless `cwd`, `env` or `user` is given, which runs the command
    /// in a private session that is drained and closed. Calls on one sandbox are serialised. A
    /// timeout returns `return_code = 125, error_type = "timeout"` and retires a reused default
    /// session (an explicit `session` is left as it is).
    pub async fn exec(&self, command: impl Into<String>, options: PtyExecOptions<'_>) -> Result<ExecResult> {
        self.sandbox.ensure_live()?;
        let command = command.into();
        let deadline = match options.timeout_s {
            None => None,
            Some(t) if t.is_finite() && t > 0.0 => Some(Instant::now() + Duration::from_secs_f64(t)),
            Some(t) => return Err(ClientError::InvalidArgument(format!("timeout_s must be > 0, got {t}"))),
        };
        let mut state = self.sandbox.pty_exec().lock().await;
        if let Some(session) = options.session {
            if options.shapes_session() {
                return Err(ClientError::InvalidArgument(
                    "cwd, env and user shape a new session; they cannot be combined with `session`"
                        .to_string(),
                ));
            }
            return Ok(run_marked(session, &command, deadline).await);
        }
        if options.shapes_session() {
            drop(state);
            return self.exec_private(&command, options, deadline).await;
        }
        let session = match state.oldest_live() {
            Some(session) => session,
            None => {
                // The open is bounded like the rest of the call: a server that never answers
                // it is a timeout, not a call that waits forever.
                let opened =
                    with_deadline(deadline, PtySession::open(self.sandbox, PtySpec::default())).await;
                let Some(opened) = opened else {
                    return Ok(failed_with_output(ExecErrorType::Timeout, Vec::new(), Vec::new()));
                };
                let session = opened?;
                if let Err(result) = prepare_default_shell(&session, deadline).await {
                    session.close().await.ok();
                    return result;
                }
                state.sessions.push(session.clone());
                session
            }
        };
        let result = run_marked(&session, &command, deadline).await;
        if result.error_type.is_some() || !session.is_live() {
            state.retire(&session);
            session.close().await.ok();
        }
        Ok(result)
    }

    async fn exec_private(
        &self,
        command: &str,
        options: PtyExecOptions<'_>,
        deadline: Option<Instant>,
    ) -> Result<ExecResult> {
        let command = if command.trim().is_empty() { ":" } else { command };
        let open = PtySpec {
            command: Some(format!("{{ {command}\n}} </dev/null")),
            cwd: options.cwd,
            env: options.env.into_iter().collect(),
            user: options.user,
            ..Default::default()
        };
        let session = match with_deadline(deadline, PtySession::open(self.sandbox, open)).await {
            Some(opened) => opened?,
            None => return Ok(failed_with_output(ExecErrorType::Timeout, Vec::new(), Vec::new())),
        };
        let mut output = Vec::new();
        let failure = loop {
            match session.read(remaining(deadline)).await {
                Ok(chunk) if chunk.is_empty() => break None,
                Ok(chunk) => output.extend_from_slice(&chunk),
                Err(ClientError::Timeout) => break Some((ExecErrorType::Timeout, String::new())),
                Err(e) => break Some((ExecErrorType::Pty, e.to_string())),
            }
        };
        let result = match failure {
            Some((kind, message)) => {
                failed_with_output(kind, normalize_terminal_output(&output), message.into_bytes())
            }
            None => match session.wait_exit(Some(remaining(deadline).unwrap_or(CLOSE_WAIT))).await {
                Ok(code) => ExecResult {
                    stdout: normalize_terminal_output(&output),
                    stderr: Vec::new(),
                    return_code: code,
                    error_type: None,
                    usage: None,
                    failure_kind: None,
                },
                Err(ClientError::Timeout) => {
                    failed_with_output(ExecErrorType::Timeout, normalize_terminal_output(&output), Vec::new())
                }
                Err(e) => failed_with_output(
                    ExecErrorType::Pty,
                    normalize_terminal_output(&output),
                    e.to_string().into_bytes(),
                ),
            },
        };
        session.close().await.ok();
        Ok(result)
    }
}

/// Time left until `deadline` (zero once passed); `None` without a deadline.
fn remaining(deadline: Option<Instant>) -> Option<Duration> {
    deadline.map(|d| d.saturating_duration_since(Instant::now()))
}

/// Runs `fut` until `deadline`; `None` when it passed first.
async fn with_deadline<F: std::future::Future>(deadline: Option<Instant>, fut: F) -> Option<F::Output> {
    match deadline {
        None => Some(fut.await),
        Some(d) => tokio::time::timeout_at(d, fut).await.ok(),
    }
}

/// Turns echo, prompts and bracketed paste off in a fresh default shell so later outputs come
/// back clean. `Err` holds what `exec` returns when that fails.
async fn prepare_default_shell(
    session: &PtySession,
    deadline: Option<Instant>,
) -> std::result::Result<(), Result<ExecResult>> {
    let setup_deadline = match deadline {
        Some(d) => d.min(Instant::now() + SETUP_WAIT),
        None => Instant::now() + SETUP_WAIT,
    };
    let marker = Marker::new();
    session.write(marker.setup_line().as_bytes()).await.map_err(Err)?;
    let mut buf = Vec::new();
    loop {
        match session.read(remaining(Some(setup_deadline))).await {
            Ok(chunk) if chunk.is_empty() => {
                return Err(Err(ClientError::Pty(format!(
                    "the default shell ended during setup: {}",
                    String::from_utf8_lossy(&normalize_terminal_output(&buf))
                ))))
            }
            Ok(chunk) => {
                buf.extend_from_slice(&chunk);
                if marker.find(&buf).is_some() {
                    return Ok(());
                }
            }
            Err(ClientError::Timeout) if deadline.is_some_and(|d| d <= setup_deadline) => {
                return Err(Ok(failed_with_output(ExecErrorType::Timeout, Vec::new(), Vec::new())))
            }
            Err(ClientError::Timeout) => {
                return Err(Err(ClientError::Pty("the default shell did not answer its setup".to_string())))
            }
            Err(e) => return Err(Err(e)),
        }
    }
}

/// A terminal exec that did not reach the command's exit, with the output seen so far.
fn failed_with_output(error_type: ExecErrorType, stdout: Vec<u8>, stderr: Vec<u8>) -> ExecResult {
    ExecResult { stdout, ..ExecResult::failed(error_type, stderr) }
}

/// Runs `command` in the live shell `session` under the marker protocol. Never an error: a
/// failure of the session is `error_type = "pty"`, a timeout `error_type = "timeout"`.
async fn run_marked(session: &PtySession, command: &str, deadline: Option<Instant>) -> ExecResult {
    session.discard_pending();
    let marker = Marker::new();
    let needle_len = marker.text().len() + 1;
    if let Err(e) = session.write(marker.command_line(command).as_bytes()).await {
        return failed_with_output(ExecErrorType::Pty, Vec::new(), e.to_string().into_bytes());
    }
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let read = session.read(remaining(deadline)).await;
        match read {
            Ok(chunk) if chunk.is_empty() => {
                // The shell ended (for example `exit 3`): its exit code is the command's.
                let stdout = marker.extract(&buf, buf.len());
                return match session.exit_code() {
                    Some(code) => ExecResult {
                        stdout,
                        stderr: Vec::new(),
                        return_code: code,
                        error_type: None,
                        usage: None,
                        failure_kind: None,
                    },
                    None => failed_with_output(ExecErrorType::Pty, stdout, b"the session ended".to_vec()),
                };
            }
            Ok(chunk) => {
                // Only the tail can hold a marker line that was incomplete before.
                let scan_from = buf.len().saturating_sub(needle_len + 16);
                buf.extend_from_slice(&chunk);
                if let Some(hit) = marker.find(&buf[scan_from..]) {
                    let end = scan_from + hit.start;
                    return ExecResult {
                        stdout: marker.extract(&buf, end),
                        stderr: Vec::new(),
                        return_code: hit.code,
                        error_type: None,
                        usage: None,
                        failure_kind: None,
                    };
                }
            }
            Err(ClientError::Timeout) => {
                return failed_with_output(
                    ExecErrorType::Timeout,
                    marker.extract(&buf, buf.len()),
                    Vec::new(),
                );
            }
            Err(e) => {
                return failed_with_output(
                    ExecErrorType::Pty,
                    marker.extract(&buf, buf.len()),
                    e.to_string().into_bytes(),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::fake_session;
    use super::*;
    use crate::error::StreamEnd;
    use crate::proto;
    use crate::proto::pty_request::Request as Req;
    use tokio::sync::mpsc;

    #[test]
    fn shaping_arguments_need_a_private_session() {
        assert!(!PtyExecOptions::default().shapes_session());
        assert_eq!(PtyExecOptions::default().timeout_s, Some(180.0));
        assert!(PtyExecOptions { cwd: Some("/tmp".into()), ..Default::default() }.shapes_session());
        assert!(PtyExecOptions { user: Some("nobody".into()), ..Default::default() }.shapes_session());
        let env = HashMap::from([("A".to_string(), "1".to_string())]);
        assert!(PtyExecOptions { env, ..Default::default() }.shapes_session());
        assert!(!PtyExecOptions { timeout_s: None, ..Default::default() }.shapes_session());
    }

    #[tokio::test]
    async fn oldest_live_default_session_is_chosen() {
        let (dead, _a) = fake_session(Some(StreamEnd::Exited(0)), true);
        let (live1, _b) = fake_session(None, false);
        let (live2, _c) = fake_session(None, false);
        let mut state = PtyExecState { sessions: vec![dead, live1.clone(), live2.clone()] };
        let chosen = state.oldest_live().expect("a live session");
        assert!(Arc::ptr_eq(&chosen.inner, &live1.inner));
        assert_eq!(state.sessions.len(), 2);
        state.retire(&live1);
        let chosen = state.oldest_live().expect("a live session");
        assert!(Arc::ptr_eq(&chosen.inner, &live2.inner));
        live2.abandon();
        assert!(state.oldest_live().is_none());
    }

    #[tokio::test]
    async fn run_marked_extracts_output_and_times_out() {
        let (s, tx) = fake_session(None, false);
        // The marker is random, so answer with whatever the command line asked for: read the
        // typed request and echo back the marker built from its quoted halves.
        let (req_tx, mut req_rx) = mpsc::channel::<proto::PtyRequest>(4);
        if let Ok(mut guard) = s.inner.requests.lock() {
            *guard = Some(req_tx);
        }
        let responder = tokio::spawn(async move {
            if let Some(proto::PtyRequest { request: Some(Req::Input(typed)) }) = req_rx.recv().await {
                let typed = String::from_utf8_lossy(&typed).into_owned();
                let quoted: Vec<&str> = typed.split('\'').collect();
                // ... printf '%s%s:%s\n' 'HEAD' 'TAIL' "$?"
                let head = quoted[quoted.len() - 4];
                let tail = quoted[quoted.len() - 2];
                let _ = tx.send(format!("hello\r\nworld\r\n{head}{tail}:4\r\n").into_bytes());
            }
            (tx, req_rx)
        });
        let result = run_marked(&s, "echo hello; echo world; exit 4", None).await;
        assert_eq!(result.stdout_str(), "hello\nworld\n");
        assert_eq!(result.return_code, 4);
        assert!(result.error_type.is_none());
        let _keep = responder.await.expect("responder");

        let deadline = Some(Instant::now() + Duration::from_millis(30));
        let result = run_marked(&s, "sleep 100", deadline).await;
        assert_eq!(result.return_code, 125);
        assert_eq!(result.error_type, Some(ExecErrorType::Timeout));
    }
}
