//! `sandboxctl grant ID --scope operate|read [--ttl 10m]` (a narrower token for one sandbox,
//! printed so it can be handed on) and `sandboxctl revoke TOKEN_ID`.

use std::time::{Duration, UNIX_EPOCH};

use clap::{Args, ValueEnum};
use sandboxd_client::{Client, TokenScope};

use crate::error::CtlError;
use crate::{parse, Output};

/// The scope a grant asks for (never wider than the caller's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scope {
    /// Everything, ending the sandbox included.
    Owner,
    /// Run commands, move files, terminals, ports, status; not close or snapshot.
    Operate,
    /// Status, download, diff.
    Read,
}

#[derive(Debug, Args)]
pub struct GrantArgs {
    /// The sandbox the token is for.
    sandbox_id: String,
    /// What the token allows.
    #[arg(long, value_enum)]
    scope: Scope,
    /// How long it is valid: 90s, 10m, 2h (default: the server's `server.auth.grant_ttl_s`).
    #[arg(long, value_parser = parse::duration_s)]
    ttl: Option<f64>,
    /// `table`: the token on stdout, its id and expiry on stderr; `json`: all three on stdout.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    output: Output,
}

#[derive(Debug, Args)]
pub struct RevokeArgs {
    /// A token id printed by `grant` (it and every token granted from it stop working).
    token_id: String,
}

pub async fn grant(client: &Client, args: GrantArgs) -> Result<i32, CtlError> {
    let scope = match args.scope {
        Scope::Owner => TokenScope::Owner,
        Scope::Operate => TokenScope::Operate,
        Scope::Read => TokenScope::Read,
    };
    let grant = client.grant(&args.sandbox_id, scope, args.ttl).await?;
    let expires = UNIX_EPOCH + Duration::from_secs_f64(grant.expires_at_s.max(0.0));
    match args.output {
        Output::Table => {
            println!("{}", grant.token);
            eprintln!(
                "token id {} expires at {}",
                grant.token_id,
                humantime::format_rfc3339_seconds(expires)
            );
        }
        Output::Json => println!(
            "{}",
            serde_json::json!({"token": grant.token, "token_id": grant.token_id, "expires_at_s": grant.expires_at_s})
        ),
    }
    Ok(0)
}

pub async fn revoke(client: &Client, args: RevokeArgs) -> Result<i32, CtlError> {
    client.revoke(&args.token_id).await?;
    println!("revoked {}", args.token_id);
    Ok(0)
}
