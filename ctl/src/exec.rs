//! `sandboxctl exec ID -- CMD…`: output streamed as it is produced (`ExecStream`; `Exec` on a
//! server without it), the command's exit code as ours.

use std::collections::HashMap;
use std::io::{IsTerminal, Read, Write};

use clap::Args;
use sandboxd_client::{proto, Client};

use crate::error::CtlError;
use crate::parse;

/// The sandbox and how a command runs in it: what `exec` and `shell` both take.
#[derive(Debug, Args)]
pub struct RunInArgs {
    /// The sandbox.
    pub sandbox_id: String,
    /// User name or uid to run as.
    #[arg(long, short = 'u')]
    pub user: Option<String>,
    /// Working directory (absolute).
    #[arg(long, short = 'w')]
    pub cwd: Option<String>,
    /// Extra environment (repeatable).
    #[arg(long = "env", short = 'e', value_name = "K=V", value_parser = parse::key_value)]
    pub env: Vec<(String, String)>,
}

#[derive(Debug, Args)]
pub struct ExecArgs {
    #[command(flatten)]
    run_in: RunInArgs,
    /// Timeout; the server's default (180 s) when unset.
    #[arg(long, value_name = "DURATION", value_parser = parse::duration_s)]
    timeout: Option<f64>,
    /// One argument: a shell command line, as is. Several: an argv, quoted for the shell.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

pub async fn run(client: &Client, args: ExecArgs) -> Result<i32, CtlError> {
    let command = parse::command_line(&args.command).map_err(CtlError::local)?;
    // Input is forwarded only when it is not a terminal (a pipe or a file), as `docker exec`
    // without `-i` would not wait on a keyboard.
    let stdin = if std::io::stdin().is_terminal() {
        None
    } else {
        let mut buf = Vec::new();
        std::io::stdin().read_to_end(&mut buf)?;
        Some(buf)
    };
    let request = proto::ExecRequest {
        sandbox_id: args.run_in.sandbox_id,
        command,
        cwd: args.run_in.cwd,
        env: args.run_in.env.into_iter().collect::<HashMap<_, _>>(),
        timeout_s: args.timeout,
        user: args.run_in.user,
        stdin,
    };
    let mut rpc = client.raw();
    match rpc.exec_stream(request.clone()).await {
        Ok(stream) => streamed(stream.into_inner()).await,
        Err(status) if status.code() == tonic::Code::Unimplemented => {
            let response = rpc.exec(request).await?.into_inner();
            write_out(&mut std::io::stdout(), &response.stdout)?;
            write_out(&mut std::io::stderr(), &response.stderr)?;
            // Unary `Exec` carries a failure's reason in stderr, printed above.
            Ok(finish(response.return_code, &response.error_type, "", response.failure_kind))
        }
        Err(status) => Err(status.into()),
    }
}

async fn streamed(mut stream: tonic::Streaming<proto::ExecStreamResponse>) -> Result<i32, CtlError> {
    use proto::exec_stream_response::Response;
    while let Some(message) = stream.message().await? {
        match message.response {
            Some(Response::Stdout(bytes)) => write_out(&mut std::io::stdout(), &bytes)?,
            Some(Response::Stderr(bytes)) => write_out(&mut std::io::stderr(), &bytes)?,
            Some(Response::Exit(exit)) => {
                return Ok(finish(exit.return_code, &exit.error_type, &exit.message, exit.failure_kind))
            }
            None => {}
        }
    }
    Err(CtlError {
        code: Some(tonic::Code::Internal),
        message: "the exec stream ended without an exit".into(),
        failure_kind: None,
    })
}

fn write_out(out: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    out.write_all(bytes)?;
    out.flush()
}

/// The exit code, saying on stderr when (and why) the command did not run to its own exit.
fn finish(return_code: i32, error_type: &str, message: &str, failure_kind: i32) -> i32 {
    // The kind first: the last line stays the reason and the exit code.
    if let Some(kind) = sandboxd_client::FailureKind::from_wire(failure_kind) {
        eprintln!("sandboxctl: failure kind {}", kind.reason());
    }
    if !error_type.is_empty() {
        eprintln!("sandboxctl: {}", not_finished(return_code, error_type, message));
    }
    return_code
}

/// One line: the reason (a multi-line one joined with ` | `), the error type, the exit code.
fn not_finished(return_code: i32, error_type: &str, message: &str) -> String {
    let reason: Vec<&str> = message.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    match reason.is_empty() {
        true => format!("the command did not finish ({error_type}); exit code {return_code}"),
        false => format!("{} ({error_type}); exit code {return_code}", reason.join(" | ")),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_reason_leads_the_line() {
        assert_eq!(
            super::not_finished(125, "sandbox", "cwd \"/nope\" does not exist in the sandbox\n"),
            "cwd \"/nope\" does not exist in the sandbox (sandbox); exit code 125"
        );
        assert_eq!(
            super::not_finished(125, "timeout", ""),
            "the command did not finish (timeout); exit code 125"
        );
    }
}
