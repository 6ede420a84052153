//! Background processes through the sandbox's agent: a process is an agent session opened
//! unheld that no holder's departure ends (`DETACH_NEVER`), attached by id with replay from an
//! offset, signalled by id. The agent's table is shared with terminals, so a listing shows both.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use sandboxd_agent::protocol::{
    DetachReason, Event, FailureKind, Request, SessionInfo, SessionStart, WindowSize, DETACH_NEVER,
};
use tokio::sync::mpsc;

use super::channel::{AgentChannel, Call};
use super::AgentEngine;
use crate::core::processes::{ProcessEvent, ProcessInfo, ProcessStart, ProcessStream, Started};
use crate::error::{ProviderError, Result};

/// How long a control request (start, list, signal, attach) may wait for the agent's answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// What the agent's table does not keep: the command line and user a caller gave, per
/// (sandbox, process). Rows of processes the agent no longer lists are dropped when listing.
/// (sandbox, process id) -> (command line, user).
type Book = HashMap<(String, String), (String, String)>;

static ASKED: Mutex<Option<Book>> = Mutex::new(None);

fn asked() -> std::sync::MutexGuard<'static, Option<Book>> {
    ASKED.lock().unwrap_or_else(|e| e.into_inner())
}

/// A failure the agent reported for a process request.
pub(super) fn failure(kind: FailureKind, message: String) -> ProviderError {
    match kind {
        FailureKind::NoSession => ProviderError::ProcessNotFound(message),
        FailureKind::OutOfRange => ProviderError::OutOfRange(message),
        FailureKind::Held => ProviderError::FailedPrecondition(message),
        FailureKind::User => ProviderError::invalid("user", message),
        FailureKind::Invalid => ProviderError::invalid("request", message),
        FailureKind::Permission => ProviderError::PermissionDenied(message),
        FailureKind::NotFound
        | FailureKind::Cwd
        | FailureKind::NotDirectory
        | FailureKind::IsDirectory
        | FailureKind::NotRegular
        | FailureKind::ReadOnly
        | FailureKind::NotEmpty
        | FailureKind::CrossDevice
        | FailureKind::Unsupported => ProviderError::FailedPrecondition(message),
        FailureKind::AlreadyExists => ProviderError::AlreadyExists(message),
        FailureKind::Overflow => ProviderError::ResourceExhausted(message),
        FailureKind::Other => ProviderError::Docker(message),
    }
}

/// The channel ended under a request.
pub(super) fn lost(name: &str) -> ProviderError {
    ProviderError::Unavailable(format!(
        "the agent of sandbox {name} went away during the call (killed inside the sandbox, or the sandbox stopped)"
    ))
}

/// The first answer to `call` (its last, for control requests).
async fn answer(name: &str, call: &mut Call) -> Result<Event> {
    match tokio::time::timeout(ANSWER_TIMEOUT, call.events.recv()).await {
        Ok(Some(event)) => Ok(event),
        Ok(None) => Err(lost(name)),
        Err(_) => Err(ProviderError::Timeout(format!(
            "the agent of sandbox {name} did not answer within {}s",
            ANSWER_TIMEOUT.as_secs()
        ))),
    }
}

/// Send a request that answers with one event.
async fn ask(name: &str, channel: &AgentChannel, request: Request) -> Result<Event> {
    let mut call = channel.call(request).await.ok_or_else(|| lost(name))?;
    let event = answer(name, &mut call).await;
    call.finish();
    match event? {
        Event::Failed { kind, message } => Err(failure(kind, message)),
        other => Ok(other),
    }
}

fn info(name: &str, s: SessionInfo, book: &Book) -> ProcessInfo {
    let (command, user) = book
        .get(&(name.to_string(), s.session_id.clone()))
        .cloned()
        .unwrap_or_else(|| (s.argv.join(" "), String::new()));
    ProcessInfo {
        process_id: s.session_id,
        pid: s.pid,
        command,
        user,
        started_at_unix_ms: s.started_ms,
        exit_code: s.exit_code,
        pty: s.pty.is_some(),
        attached: s.attached,
        oldest_offset: s.oldest_offset,
        end_offset: s.end_offset,
    }
}

impl AgentEngine {
    /// The sandbox's channel, or why processes cannot run there.
    pub(super) async fn agent_of(&self, name: &str) -> Result<std::sync::Arc<AgentChannel>> {
        self.channel(name).await.ok_or_else(|| {
            ProviderError::FailedPrecondition(format!(
                "sandbox {name} has no reachable agent (made by an older server or with exec.engine: docker, \
                 an image the agent cannot run in, or the daemon did not start it): processes and port \
                 forwarding need the agent"
            ))
        })
    }

    /// `StartProcess`: an unheld session that runs until it exits or is signalled.
    pub async fn start_process(
        &self,
        name: &str,
        shell: &str,
        start: &ProcessStart,
        user: Option<&str>,
    ) -> Result<Started> {
        let argv = start.argv_with(shell)?;
        let channel = self.agent_of(name).await?;
        let user = user.map(String::from).or_else(|| channel.default_user.clone());
        let request = Request::SessionOpen(SessionStart {
            argv,
            env: start.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            cwd: start.cwd.clone(),
            user: user.clone(),
            pty: start.pty.map(|(rows, cols)| WindowSize { rows, cols }),
            retain_bytes: 0,
            detach_timeout_ms: Some(DETACH_NEVER),
            attach: false,
        });
        match ask(name, &channel, request).await? {
            Event::SessionOpened { session_id, pid, .. } => {
                asked().get_or_insert_with(HashMap::new).insert(
                    (name.to_string(), session_id.clone()),
                    (start.display(), user.unwrap_or_default()),
                );
                Ok(Started { process_id: session_id, pid })
            }
            other => Err(ProviderError::Docker(format!("the agent answered a start with {other:?}"))),
        }
    }

    /// `ListProcesses`: the agent's whole table.
    pub async fn list_processes(&self, name: &str) -> Result<Vec<ProcessInfo>> {
        let channel = self.agent_of(name).await?;
        let sessions = match ask(name, &channel, Request::ListSessions).await? {
            Event::Sessions(list) => list,
            other => {
                return Err(ProviderError::Docker(format!("the agent answered a listing with {other:?}")))
            }
        };
        let mut book = asked();
        let book = book.get_or_insert_with(HashMap::new);
        book.retain(|(sandbox, id), _| sandbox != name || sessions.iter().any(|s| &s.session_id == id));
        Ok(sessions.into_iter().map(|s| info(name, s, book)).collect())
    }

    /// End and forget every session of the sandbox (terminals and processes, running or
    /// ended, with their retained output): a reset's first step. Returns how many.
    pub async fn close_all_sessions(&self, name: &str) -> Result<u32> {
        let channel = self.agent_of(name).await?;
        let sessions = match ask(name, &channel, Request::ListSessions).await? {
            Event::Sessions(list) => list,
            other => {
                return Err(ProviderError::Docker(format!("the agent answered a listing with {other:?}")))
            }
        };
        let mut closed = 0;
        for session in sessions {
            let request = Request::CloseSession { session_id: session.session_id.clone() };
            if ask(name, &channel, request).await.is_ok() {
                closed += 1;
            }
        }
        if let Some(book) = asked().as_mut() {
            book.retain(|(sandbox, _), _| sandbox != name);
        }
        Ok(closed)
    }

    /// `SignalProcess`: the agent signals the session's group (a terminal's foreground group).
    pub async fn signal_process(&self, name: &str, process_id: &str, signal: i32) -> Result<()> {
        let channel = self.agent_of(name).await?;
        let request = Request::SignalSession { session_id: process_id.to_string(), signal };
        ask(name, &channel, request).await.map(|_| ())
    }

    /// `AttachProcess`: hold the session (taking it over) from `since`, or from its oldest
    /// retained byte. Dropping the stream detaches; the process runs on.
    pub async fn attach_process(
        &self,
        name: &str,
        process_id: &str,
        since: Option<u64>,
    ) -> Result<ProcessStream> {
        let channel = self.agent_of(name).await?;
        let mut tries = 0;
        let (call, offset, pid) = loop {
            tries += 1;
            let from = match since {
                Some(s) => s,
                None => {
                    let all = self.list_processes(name).await?;
                    let p = all.iter().find(|p| p.process_id == process_id).ok_or_else(|| {
                        ProviderError::ProcessNotFound(format!("no process {process_id:?} in sandbox {name}"))
                    })?;
                    p.oldest_offset
                }
            };
            let request = Request::SessionAttach {
                session_id: process_id.to_string(),
                since: Some(from),
                takeover: true,
            };
            let mut call = channel.call(request).await.ok_or_else(|| lost(name))?;
            match answer(name, &mut call).await {
                Ok(Event::SessionOpened { offset, pid, .. }) => break (call, offset, pid),
                // The ring moved on between the listing and the attach: list again.
                Ok(Event::Failed { kind: FailureKind::OutOfRange, .. }) if since.is_none() && tries < 3 => {
                    call.finish();
                }
                Ok(Event::Failed { kind, message }) => {
                    call.finish();
                    return Err(failure(kind, message));
                }
                Ok(other) => {
                    call.finish();
                    return Err(ProviderError::Docker(format!(
                        "the agent answered an attach with {other:?}"
                    )));
                }
                Err(e) => {
                    call.finish();
                    return Err(e);
                }
            }
        };
        let (tx, rx) = mpsc::channel(16);
        let _ = tx.send(Ok(ProcessEvent::Attached { offset, pid })).await;
        let name = name.to_string();
        tokio::spawn(follow(name, call, tx));
        Ok(rx)
    }
}

/// Forward a held session's events until its exit, a takeover, or the consumer leaving (then
/// `Detach`, never `Kill`: leaving must not end the process).
async fn follow(name: String, mut call: Call, tx: mpsc::Sender<Result<ProcessEvent>>) {
    loop {
        let event = tokio::select! {
            event = call.events.recv() => event,
            _ = tx.closed() => break,
        };
        let item = match event {
            Some(Event::Output { stderr, offset, data }) => {
                let n = data.len() as u64;
                if tx.send(Ok(ProcessEvent::Output { data, offset, stderr })).await.is_err() {
                    break;
                }
                call.send(Request::Credit(n)).await;
                continue;
            }
            Some(Event::SessionExit { code }) => Ok(ProcessEvent::Exited { code }),
            Some(Event::Detached { reason: DetachReason::TakenOver, message }) => {
                Err(ProviderError::Aborted(message))
            }
            Some(Event::Detached { reason: DetachReason::Requested, message }) => {
                Err(ProviderError::Aborted(message))
            }
            Some(Event::Detached { reason: DetachReason::InputFull, message }) => {
                Err(ProviderError::ResourceExhausted(message))
            }
            Some(Event::Failed { kind, message }) => Err(failure(kind, message)),
            Some(_) => continue,
            None => Err(lost(&name)),
        };
        call.finish();
        let _ = tx.send(item).await;
        return;
    }
    call.send(Request::Detach).await;
    call.finish();
}
