//! `sandboxctl ttl ID 30m`: move a sandbox's lease (`SetTimeout`) and print its new end.

use std::time::{Duration, UNIX_EPOCH};

use clap::Args;
use sandboxd_client::{proto, Client};

use crate::error::CtlError;
use crate::parse;

#[derive(Debug, Args)]
pub struct TtlArgs {
    /// The sandbox.
    sandbox_id: String,
    /// How long from now until it is removed: 90s, 30m, 2h (capped by the server's
    /// `server.max_ttl_s`).
    #[arg(value_name = "DURATION", value_parser = parse::duration_s)]
    ttl: f64,
}

pub async fn ttl(client: &Client, args: TtlArgs) -> Result<i32, CtlError> {
    let request = proto::SetTimeoutRequest { sandbox_id: args.sandbox_id, ttl_s: args.ttl };
    let expires_ms = client.raw().set_timeout(request).await?.into_inner().expires_at_unix_ms;
    let at = UNIX_EPOCH + Duration::from_millis(u64::try_from(expires_ms).unwrap_or(0));
    println!("expires at {}", humantime::format_rfc3339_seconds(at));
    Ok(0)
}
