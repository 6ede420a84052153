//! Background processes (`StartProcess`, `ListProcesses`, `AttachProcess`, `SignalProcess`):
//! programs the sandbox's agent supervises, which outlive every client until they exit, the
//! sandbox closes, or a signal ends them.

use std::collections::HashMap;

use crate::client::Client;
use crate::error::{ClientError, Result};
use crate::proto;

/// A row of [`Client::list_processes`].
pub use proto::ProcessInfo;

/// What to start: `command` through the sandbox's shell, or `argv` as is.
#[derive(Debug, Clone, Default)]
pub struct StartProcess {
    pub command: String,
    pub argv: Vec<String>,
    pub cwd: Option<String>,
    pub env: HashMap<String, String>,
    pub user: Option<String>,
    /// Under a terminal of (rows, cols).
    pub pty: Option<(u16, u16)>,
}

impl StartProcess {
    /// `command` through the sandbox's shell.
    pub fn shell(command: impl Into<String>) -> Self {
        Self { command: command.into(), ..Default::default() }
    }
}

/// A started process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartedProcess {
    pub process_id: String,
    pub pid: u32,
}

/// What an attached stream delivers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessEvent {
    /// First: the offset of the first byte this stream carries.
    Attached {
        offset: u64,
        pid: u32,
    },
    Output {
        data: Vec<u8>,
        offset: u64,
        stderr: bool,
    },
    /// Last.
    Exited {
        code: i32,
    },
}

/// One `AttachProcess` call; dropping it detaches (the process runs on).
pub struct ProcessStream {
    inner: tonic::Streaming<proto::AttachProcessResponse>,
}

impl ProcessStream {
    /// The next event; `None` after `Exited` or when the server ended the stream.
    pub async fn next(&mut self) -> Result<Option<ProcessEvent>> {
        use proto::attach_process_response::Event;
        let Some(message) = self.inner.message().await? else { return Ok(None) };
        Ok(Some(match message.event {
            Some(Event::Attached(a)) => ProcessEvent::Attached { offset: a.offset, pid: a.pid },
            Some(Event::Output(o)) => {
                ProcessEvent::Output { data: o.data, offset: o.offset, stderr: o.stderr }
            }
            Some(Event::Exited(e)) => ProcessEvent::Exited { code: e.exit_code },
            None => return Err(ClientError::Protocol("an empty AttachProcessResponse".into())),
        }))
    }
}

impl Client {
    /// Start a background process; returns at once.
    pub async fn start_process(
        &self,
        sandbox_id: impl Into<String>,
        start: &StartProcess,
    ) -> Result<StartedProcess> {
        let (rows, cols) = start.pty.unwrap_or_default();
        let req = proto::StartProcessRequest {
            sandbox_id: sandbox_id.into(),
            command: start.command.clone(),
            cwd: start.cwd.clone(),
            env: start.env.clone(),
            user: start.user.clone(),
            pty: start.pty.is_some(),
            rows: u32::from(rows),
            cols: u32::from(cols),
            argv: start.argv.clone(),
        };
        let reply = self.raw().start_process(req).await?.into_inner();
        Ok(StartedProcess { process_id: reply.process_id, pid: reply.pid })
    }

    /// Every process and terminal session of the sandbox, oldest first.
    pub async fn list_processes(&self, sandbox_id: impl Into<String>) -> Result<Vec<ProcessInfo>> {
        let req = proto::ListProcessesRequest { sandbox_id: sandbox_id.into() };
        Ok(self.raw().list_processes(req).await?.into_inner().processes)
    }

    /// A process's output from `since` (`None`: the oldest retained byte), then live, then its
    /// exit. A later attach takes the process over (this stream then fails with ABORTED).
    pub async fn attach_process(
        &self,
        sandbox_id: impl Into<String>,
        process_id: impl Into<String>,
        since: Option<u64>,
    ) -> Result<ProcessStream> {
        let req = proto::AttachProcessRequest {
            sandbox_id: sandbox_id.into(),
            process_id: process_id.into(),
            since,
        };
        Ok(ProcessStream { inner: self.raw().attach_process(req).await?.into_inner() })
    }

    /// Signal a process's group: a name (`SIGTERM`, `TERM`) or a number.
    pub async fn signal_process(
        &self,
        sandbox_id: impl Into<String>,
        process_id: impl Into<String>,
        signal: impl Into<String>,
    ) -> Result<()> {
        let req = proto::SignalProcessRequest {
            sandbox_id: sandbox_id.into(),
            process_id: process_id.into(),
            signal: signal.into(),
        };
        self.raw().signal_process(req).await?;
        Ok(())
    }
}
