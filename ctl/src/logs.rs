//! `sandboxctl logs ID [-f]`: what the sandbox's main process (the keep-alive, or a custom
//! entrypoint) wrote, its stdout to ours and its stderr to ours; `-f` keeps following until
//! the sandbox stops or Ctrl-C.

use std::io::Write;

use clap::Args;
use sandboxd_client::{Client, LogChunk, LogsOptions};

use crate::error::CtlError;

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The sandbox.
    sandbox_id: String,
    /// Keep printing new output as it is written.
    #[arg(long, short = 'f')]
    follow: bool,
    /// Only the last N lines written so far.
    #[arg(long, short = 'n', value_name = "N")]
    tail: Option<u32>,
}

pub async fn run(client: &Client, args: LogsArgs) -> Result<i32, CtlError> {
    let options = LogsOptions { follow: args.follow, tail_lines: args.tail };
    let mut stream = client.logs(args.sandbox_id, options).await?;
    while let Some(chunk) = stream.next().await? {
        match chunk {
            LogChunk::Stdout(data) => write_out(&mut std::io::stdout(), &data)?,
            LogChunk::Stderr(data) => write_out(&mut std::io::stderr(), &data)?,
        }
    }
    Ok(0)
}

fn write_out(out: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    out.write_all(bytes)?;
    out.flush()
}
