//! `sandboxctl shell ID`: an interactive terminal through the `Pty` RPC, like `docker exec -it`.
//! The local terminal is raw while the session lives; its size goes with the open and with
//! every SIGWINCH; SIGINT is forwarded, SIGTERM and SIGHUP close the session; the exit status
//! is the remote program's.

use std::io::{IsTerminal, Read, Write};
use std::time::Duration;

use clap::Args;
use sandboxd_client::{proto, Client, PtySpec};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::error::CtlError;
use crate::exec::RunInArgs;
use crate::parse;
use crate::terminal::{self, RawMode};
use proto::pty_request::Request as Req;
use proto::pty_response::Response as Resp;

#[derive(Debug, Args)]
pub struct ShellArgs {
    #[command(flatten)]
    run_in: RunInArgs,
    /// The program to run instead of the sandbox's shell (one argument: a shell command line).
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

/// How long a closing session may take to end the call before we leave anyway.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

pub(crate) fn request(r: Req) -> proto::PtyRequest {
    proto::PtyRequest { request: Some(r) }
}

pub async fn run(client: &Client, args: ShellArgs) -> Result<i32, CtlError> {
    if !std::io::stdin().is_terminal() {
        return Err(CtlError::local(
            "shell needs a terminal on stdin; for pipes and scripts use `sandboxctl exec`",
        ));
    }
    let command = if args.command.is_empty() {
        None
    } else {
        Some(parse::command_line(&args.command).map_err(CtlError::local)?)
    };
    let (rows, cols) = terminal::size();
    let (tx, rx) = mpsc::channel(64);
    let run_in = args.run_in;
    let open = PtySpec {
        command,
        cwd: run_in.cwd,
        env: run_in.env.into_iter().collect(),
        rows,
        cols,
        user: run_in.user,
        ..Default::default()
    }
    .to_open(&run_in.sandbox_id);
    let _ = tx.send(request(Req::Open(open))).await;
    let mut responses = client.raw().pty(ReceiverStream::new(rx)).await?.into_inner();
    match responses.message().await? {
        Some(proto::PtyResponse { response: Some(Resp::Opened(_)) }) => {}
        Some(other) => {
            return Err(CtlError::local(format!(
                "the server answered {other:?} instead of opening the session"
            )))
        }
        None => return Err(CtlError::local("the session ended before it opened")),
    }

    let raw = RawMode::enable()?;
    let outcome = drive(&tx, &mut responses, Req::Close(proto::PtyClose {})).await;
    drop(raw);
    outcome
}

/// Keys, resizes and SIGINT to the session, its output to ours, until it exits (its code), or
/// SIGTERM / SIGHUP send `leave` (a close, or a detach) and return 128 + the signal.
pub(crate) async fn drive(
    tx: &mpsc::Sender<proto::PtyRequest>,
    responses: &mut tonic::Streaming<proto::PtyResponse>,
    leave: Req,
) -> Result<i32, CtlError> {
    let mut winch = signal(SignalKind::window_change())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut hangup = signal(SignalKind::hangup())?;
    let mut keys = read_stdin();
    let mut stdout = std::io::stdout();
    let mut stderr = std::io::stderr();
    loop {
        tokio::select! {
            message = responses.message() => match message {
                Ok(Some(proto::PtyResponse { response: Some(Resp::Output(bytes)) })) => {
                    stdout.write_all(&bytes)?;
                    stdout.flush()?;
                }
                Ok(Some(proto::PtyResponse { response: Some(Resp::Stderr(bytes)) })) => {
                    stderr.write_all(&bytes)?;
                    stderr.flush()?;
                }
                Ok(Some(proto::PtyResponse { response: Some(Resp::Exit(exit)) })) => break Ok(exit.exit_code),
                Ok(Some(_)) => {}
                Ok(None) => break Err(CtlError::local("the session ended without an exit status")),
                Err(status) => break Err(status.into()),
            },
            Some(bytes) = keys.recv() => {
                let _ = tx.send(request(Req::Input(bytes))).await;
            }
            _ = winch.recv() => {
                let (rows, cols) = terminal::size();
                let resize = proto::PtyResize { rows: u32::from(rows), cols: u32::from(cols) };
                let _ = tx.send(request(Req::Resize(resize))).await;
            }
            _ = interrupt.recv() => {
                let _ = tx.send(request(Req::Signal(proto::PtySignal { name: "SIGINT".into() }))).await;
            }
            _ = terminate.recv() => break leave_with(tx, responses, leave, 128 + libc::SIGTERM).await,
            _ = hangup.recv() => break leave_with(tx, responses, leave, 128 + libc::SIGHUP).await,
        }
    }
}

/// Ends the stream from our side with `leave` (a close ends the session's processes, a detach
/// leaves them running) and returns `code`.
async fn leave_with(
    tx: &mpsc::Sender<proto::PtyRequest>,
    responses: &mut tonic::Streaming<proto::PtyResponse>,
    leave: Req,
    code: i32,
) -> Result<i32, CtlError> {
    let _ = tx.send(request(leave)).await;
    let _ = tokio::time::timeout(CLOSE_WAIT, async { while let Ok(Some(_)) = responses.message().await {} })
        .await;
    Ok(code)
}

/// Keys from the local terminal, read on a thread of their own (a blocking read must not hold
/// a runtime worker; `main` exits without waiting for it).
fn read_stdin() -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel(16);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = [0u8; 4096];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.blocking_send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
            }
        }
    });
    rx
}
