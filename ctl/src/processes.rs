//! `ps`, `start`, `attach-process` and `signal`: background processes the sandbox's agent
//! supervises (they outlive this command).

use std::io::Write;

use clap::Args;
use sandboxd_client::{Client, ProcessEvent, StartProcess};

use crate::error::CtlError;
use crate::{parse, Output};

#[derive(Debug, Args)]
pub struct PsArgs {
    /// The sandbox.
    sandbox_id: String,
    /// `table` or `json` (one JSON array).
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    output: Output,
}

#[derive(Debug, Args)]
pub struct StartArgs {
    /// The sandbox.
    sandbox_id: String,
    /// Run as this user (name, uid, `uid:gid`); default the image's.
    #[arg(long, short = 'u')]
    user: Option<String>,
    /// Working directory in the sandbox.
    #[arg(long)]
    cwd: Option<String>,
    /// Environment variable (repeatable).
    #[arg(long = "env", short = 'e', value_name = "K=V", value_parser = parse::key_value)]
    env: Vec<(String, String)>,
    /// Under a terminal (24x80).
    #[arg(long, short = 't')]
    tty: bool,
    /// The command: one argument is a shell command line, several an argv (quoted for the shell).
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct AttachArgs {
    /// The sandbox.
    sandbox_id: String,
    /// The process (`sandboxctl ps`).
    process_id: String,
    /// Replay from this output offset (default: everything still retained).
    #[arg(long)]
    since: Option<u64>,
}

#[derive(Debug, Args)]
pub struct SignalArgs {
    /// The sandbox.
    sandbox_id: String,
    /// The process (`sandboxctl ps`).
    process_id: String,
    /// A name (`TERM`, `SIGKILL`) or number; reaches the process's whole group.
    #[arg(default_value = "TERM")]
    signal: String,
}

pub async fn ps(client: &Client, args: PsArgs) -> Result<i32, CtlError> {
    let list = client.list_processes(&args.sandbox_id).await?;
    match args.output {
        Output::Json => {
            let rows: Vec<serde_json::Value> = list
                .iter()
                .map(|p| {
                    serde_json::json!({
                        "process_id": p.process_id, "pid": p.pid, "command": p.command, "user": p.user,
                        "started_at_unix_ms": p.started_at_unix_ms, "running": p.running,
                        "exit_code": p.exit_code, "retained_bytes": p.retained_bytes, "pty": p.pty,
                        "attached": p.attached,
                    })
                })
                .collect();
            println!("{}", serde_json::Value::Array(rows));
        }
        Output::Table => {
            let mut out = String::from("PROCESS ID        PID     STATUS       USER  RETAINED  COMMAND\n");
            for p in &list {
                let status = match p.exit_code {
                    Some(code) => format!("exited({code})"),
                    None => "running".to_string(),
                };
                let user = if p.user.is_empty() { "-" } else { &p.user };
                out.push_str(&format!(
                    "{:<16}  {:<6}  {:<11}  {:<4}  {:<8}  {}\n",
                    p.process_id,
                    p.pid,
                    status,
                    user,
                    p.retained_bytes,
                    p.command.replace('\n', " ")
                ));
            }
            print!("{out}");
        }
    }
    Ok(0)
}

pub async fn start(client: &Client, args: StartArgs) -> Result<i32, CtlError> {
    let command = parse::command_line(&args.command).map_err(CtlError::local)?;
    let start = StartProcess {
        command,
        cwd: args.cwd,
        env: args.env.into_iter().collect(),
        user: args.user,
        pty: args.tty.then_some((24, 80)),
        ..Default::default()
    };
    let started = client.start_process(&args.sandbox_id, &start).await?;
    println!("{}", started.process_id);
    Ok(0)
}

/// Output to stdout/stderr until the process exits (exit status: its code) or Ctrl-C (which
/// detaches; the process runs on).
pub async fn attach(client: &Client, args: AttachArgs) -> Result<i32, CtlError> {
    let mut stream = client.attach_process(&args.sandbox_id, &args.process_id, args.since).await?;
    loop {
        let event = tokio::select! {
            event = stream.next() => event?,
            _ = tokio::signal::ctrl_c() => return Ok(130),
        };
        match event {
            Some(ProcessEvent::Output { data, stderr: false, .. }) => {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(&data).and_then(|_| out.flush());
            }
            Some(ProcessEvent::Output { data, stderr: true, .. }) => {
                let _ = std::io::stderr().lock().write_all(&data);
            }
            Some(ProcessEvent::Exited { code }) => return Ok(code),
            Some(ProcessEvent::Attached { .. }) => {}
            None => return Ok(0),
        }
    }
}

pub async fn signal(client: &Client, args: SignalArgs) -> Result<i32, CtlError> {
    client.signal_process(&args.sandbox_id, &args.process_id, args.signal).await?;
    Ok(0)
}
