//! `sandboxctl attach ID SESSION` and `sandboxctl sessions ID`: terminal sessions the sandbox's
//! agent keeps. `attach` holds one again from any process (its retained output first, from
//! `--since`), like `shell` does; SIGTERM and SIGHUP detach (the session runs on), the exit
//! status is the program's. `sessions` lists what can be attached.

use std::io::IsTerminal;

use clap::Args;
use sandboxd_client::{proto, Client};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::error::CtlError;
use crate::shell::{drive, request};
use crate::terminal::{self, RawMode};
use crate::Output;
use proto::pty_request::Request as Req;
use proto::pty_response::Response as Resp;

#[derive(Debug, Args)]
pub struct AttachArgs {
    /// The sandbox.
    sandbox_id: String,
    /// The session (`sandboxctl sessions ID` lists them).
    session_id: String,
    /// Take the session over from the stream that holds it (that stream ends).
    #[arg(long)]
    takeover: bool,
    /// Replay the retained output from this byte offset (0, the default: all still retained).
    #[arg(long, value_name = "OFFSET", default_value_t = 0)]
    since: u64,
}

#[derive(Debug, Args)]
pub struct SessionsArgs {
    /// The sandbox.
    sandbox_id: String,
    /// `table` or `json` (one JSON array).
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    output: Output,
}

pub async fn attach(client: &Client, args: AttachArgs) -> Result<i32, CtlError> {
    let (tx, rx) = mpsc::channel(64);
    let first = proto::PtyAttach {
        sandbox_id: args.sandbox_id,
        session_id: args.session_id,
        takeover: args.takeover,
        since: args.since,
    };
    let _ = tx.send(request(Req::Attach(first))).await;
    let mut responses = client.raw().pty(ReceiverStream::new(rx)).await?.into_inner();
    let mode = match responses.message().await? {
        Some(proto::PtyResponse { response: Some(Resp::Opened(opened)) }) => opened.mode,
        Some(other) => {
            return Err(CtlError::local(format!("the server answered {other:?} instead of attaching")))
        }
        None => return Err(CtlError::local("the session ended before it was attached")),
    };
    // A terminal takes this terminal's size and keys raw; pipes stay as they are.
    let raw = if mode == "pty" && std::io::stdin().is_terminal() {
        let (rows, cols) = terminal::size();
        let resize = proto::PtyResize { rows: u32::from(rows), cols: u32::from(cols) };
        let _ = tx.send(request(Req::Resize(resize))).await;
        Some(RawMode::enable()?)
    } else {
        None
    };
    let outcome = drive(&tx, &mut responses, Req::Detach(proto::PtyDetach {})).await;
    drop(raw);
    outcome
}

pub async fn sessions(client: &Client, args: SessionsArgs) -> Result<i32, CtlError> {
    let request = proto::ListPtySessionsRequest { sandbox_id: args.sandbox_id };
    let sessions = client.raw().list_pty_sessions(request).await?.into_inner().sessions;
    match args.output {
        Output::Json => {
            let rows: Vec<serde_json::Value> = sessions
                .iter()
                .map(|s| {
                    serde_json::json!({
                        "session_id": s.session_id,
                        "command": s.command,
                        "mode": s.mode,
                        "rows": s.rows,
                        "cols": s.cols,
                        "running": s.running,
                        "exit_code": s.exit_code,
                        "attached": s.attached,
                        "retained_bytes": s.retained_bytes,
                    })
                })
                .collect();
            println!("{}", serde_json::Value::Array(rows));
        }
        Output::Table => {
            println!(
                "{:<18} {:<5} {:<8} {:<10} {:<9} {:>9}  COMMAND",
                "SESSION", "MODE", "SIZE", "STATE", "ATTACHED", "RETAINED"
            );
            for s in &sessions {
                let size = if s.mode == "pty" { format!("{}x{}", s.rows, s.cols) } else { "-".into() };
                let state = match (s.running, s.exit_code) {
                    (true, _) => "running".to_string(),
                    (false, Some(code)) => format!("exited {code}"),
                    (false, None) => "ended".to_string(),
                };
                let attached = if s.attached { "yes" } else { "no" };
                println!(
                    "{:<18} {:<5} {:<8} {:<10} {:<9} {:>9}  {}",
                    s.session_id, s.mode, size, state, attached, s.retained_bytes, s.command
                );
            }
        }
    }
    Ok(0)
}
