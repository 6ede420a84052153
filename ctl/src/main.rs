//! `sandboxctl`: sandboxd from a terminal. Create sandboxes, run commands with live output,
//! open an interactive shell, copy files and trees, read logs and published ports, snapshot,
//! fork, pause and resume, move leases, list and remove sandboxes by label, watch their
//! lifecycle events and read their usage, and list, stat, move, make and remove paths (`fs`).
//!
//! Every failure is one line on stderr, `sandboxctl: CODE: message`, and exit status 1;
//! `exec` and `shell` exit with the remote command's own status.

mod access;
mod attach;
mod branching;
mod completions;
mod cp;
mod create;
mod error;
mod events;
mod exec;
mod fork_progress;
mod fs;
mod images;
mod inventory;
mod lease;
mod logs;
mod parse;
mod pools;
mod port;
mod port_forward;
mod processes;
mod progress;
mod runtime;
mod shell;
mod terminal;
mod tree;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use sandboxd_client::Client;

use error::CtlError;

/// Command-line client for sandboxd (sandbox.v1 over gRPC).
#[derive(Debug, Parser)]
#[command(name = "sandboxctl", version)]
pub(crate) struct Cli {
    /// Server address: `host:port` (plaintext) or a URL.
    #[arg(long, global = true, env = "SANDBOXD_ADDR", default_value = "127.0.0.1:50051")]
    addr: String,
    /// File holding the server's bearer token.
    #[arg(long, global = true, env = "SANDBOXD_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// A bearer token to present (a tenant key, or a capability token from `grant`); wins
    /// over --token-file.
    #[arg(long, global = true, env = "SANDBOXD_TOKEN", hide_env_values = true)]
    token: Option<String>,
    #[command(subcommand)]
    command: Command,
}

/// How a command prints what it made or found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Human-readable (an id, a table).
    Table,
    /// JSON.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start a sandbox from IMAGE and print its id.
    Create(create::CreateArgs),
    /// Run a command and stream its output; exits with the command's exit code.
    Exec(exec::ExecArgs),
    /// An interactive terminal in the sandbox (like `docker exec -it`).
    Shell(shell::ShellArgs),
    /// Hold a terminal session the sandbox keeps again (its retained output first); SIGTERM
    /// or SIGHUP detach.
    Attach(attach::AttachArgs),
    /// List the terminal sessions the sandbox keeps.
    Sessions(attach::SessionsArgs),
    /// Copy a file (or with -r a directory): `SRC DST`, one side `ID:/path`; `-` is stdin or stdout.
    Cp(cp::CpArgs),
    /// Print what the sandbox's main process wrote; -f follows it.
    Logs(logs::LogsArgs),
    /// Print the host address of a published port (all of them without PORT).
    Port(port::PortArgs),
    /// Commit the sandbox's filesystem to a snapshot and print its id.
    Snapshot(branching::SnapshotArgs),
    /// Take a live snapshot (processes, memory, files) of a gVisor sandbox and print its id.
    Checkpoint(branching::CheckpointArgs),
    /// Start N new sandboxes from a snapshot of this one (--live: restored, processes and all)
    /// and print their ids.
    Fork(branching::ForkArgs),
    /// Freeze every process of the sandbox.
    Pause(branching::FreezeArgs),
    /// Checkpoint a gVisor sandbox to disk and stop it (its memory freed) until resume.
    Hibernate(branching::FreezeArgs),
    /// Thaw a paused sandbox, or wake a hibernated one.
    Resume(branching::FreezeArgs),
    /// Remove the sandbox DURATION from now (90s, 30m, 2h) and print when.
    Ttl(lease::TtlArgs),
    /// List sandboxes (filter by label and status).
    Ls(inventory::LsArgs),
    /// Print a sandbox's status.
    Status(inventory::StatusArgs),
    /// Remove sandboxes by id, or every sandbox carrying the given labels.
    Rm(inventory::RmArgs),
    /// Print the sandbox's address on its network (what another sandbox dials).
    Address(runtime::AddressArgs),
    /// The server's named volumes: `volume ls`, `volume rm NAME…`.
    Volume(runtime::VolumeArgs),
    /// Print lifecycle events (created, ready, paused, stopped, removed, ...) as they happen.
    Events(events::EventsArgs),
    /// Print sandboxes' CPU, memory, network and block I/O use (as `docker stats --no-stream`).
    Stats(events::StatsArgs),
    /// Print what a sandbox used so far (wall time, CPU, peak memory, disk and network bytes,
    /// processes started) as JSON.
    Usage(events::UsageArgs),
    /// Print what a tenant spent over one period (its closed sandboxes' receipts, their sums)
    /// and its budgets, as JSON.
    TenantUsage(events::TenantUsageArgs),
    /// Put a sandbox back to the state it was created in, in place (processes killed, files
    /// rolled back to the image and the spec's); prints what was done as JSON.
    Reset(events::ResetArgs),
    /// Mint a narrower token for one sandbox (--scope operate|read) and print it.
    Grant(access::GrantArgs),
    /// Revoke a token by its id (and every token granted from it).
    Revoke(access::RevokeArgs),
    /// Warm pools: `pool create NAME IMAGE --target N`, `pool ls`, `pool rm NAME…`.
    Pool(pools::PoolArgs),
    /// Make images ready on the nodes (pulled, or copied from a node that has them) before
    /// the tasks that need them; a progress bar per image and node.
    Prefetch(images::PrefetchArgs),
    /// Files in the sandbox: ls, stat, rm, mv, mkdir (as the sandbox's user or --user).
    Fs(fs::FsArgs),
    /// Print a completion script: bash, zsh or fish.
    Completions(completions::CompletionsArgs),
    // --- processes and ports ---
    /// The sandbox's background processes and terminal sessions.
    Ps(processes::PsArgs),
    /// Start a background process (prints its id); it outlives this command.
    Start(processes::StartArgs),
    /// A process's output (replayed from --since, then live) until it exits or Ctrl-C.
    AttachProcess(processes::AttachArgs),
    /// Signal a process's whole group.
    Signal(processes::SignalArgs),
    /// Forward local ports to ports inside the sandbox, until Ctrl-C.
    PortForward(port_forward::PortForwardArgs),
}

async fn connect(cli: &Cli) -> Result<Client, CtlError> {
    if let Some(token) = cli.token.as_deref().map(str::trim) {
        if token.is_empty() {
            return Err(CtlError::local("--token (SANDBOXD_TOKEN) is empty"));
        }
        return Client::connect_with_token(cli.addr.clone(), token)
            .await
            .map_err(|e| CtlError::from(e).context(format!("cannot reach sandboxd at {}", cli.addr)));
    }
    let client = match &cli.token_file {
        Some(path) => {
            let token = std::fs::read_to_string(path)
                .map_err(|e| CtlError::local(format!("--token-file {}: {e}", path.display())))?;
            let token = token.trim();
            if token.is_empty() {
                return Err(CtlError::local(format!("--token-file {} is empty", path.display())));
            }
            Client::connect_with_token(cli.addr.clone(), token).await
        }
        None => Client::connect(cli.addr.clone()).await,
    };
    client.map_err(|e| CtlError::from(e).context(format!("cannot reach sandboxd at {}", cli.addr)))
}

async fn run(cli: Cli) -> Result<i32, CtlError> {
    if let Command::Completions(args) = cli.command {
        return Ok(completions::run(args));
    }
    let client = connect(&cli).await?;
    match cli.command {
        Command::Completions(args) => Ok(completions::run(args)),
        Command::Logs(args) => logs::run(&client, args).await,
        Command::Port(args) => port::run(&client, args).await,
        Command::Snapshot(args) => branching::snapshot(&client, args).await,
        Command::Fork(args) => branching::fork(&client, args).await,
        Command::Pause(args) => branching::pause(&client, args).await,
        Command::Checkpoint(args) => branching::checkpoint(&client, args).await,
        Command::Hibernate(args) => branching::hibernate(&client, args).await,
        Command::Resume(args) => branching::resume(&client, args).await,
        Command::Ttl(args) => lease::ttl(&client, args).await,
        Command::Create(args) => create::run(&client, args).await,
        Command::Exec(args) => exec::run(&client, args).await,
        Command::Shell(args) => shell::run(&client, args).await,
        Command::Attach(args) => attach::attach(&client, args).await,
        Command::Sessions(args) => attach::sessions(&client, args).await,
        Command::Cp(args) => cp::run(&client, args).await,
        Command::Ls(args) if args.watch => {
            events::watch_list(&client, inventory::labels(args.labels), args.statuses, args.output).await
        }
        Command::Ls(args) => inventory::ls(&client, args).await,
        Command::Status(args) => inventory::status(&client, args).await,
        Command::Rm(args) => inventory::rm(&client, args).await,
        Command::Address(args) => runtime::address(&client, args).await,
        Command::Volume(args) => runtime::volume(&client, args).await,
        Command::Events(args) => events::events(&client, args).await,
        Command::Stats(args) => events::stats(&client, args).await,
        Command::Usage(args) => events::usage(&client, args).await,
        Command::TenantUsage(args) => events::tenant_usage(&client, args).await,
        Command::Reset(args) => events::reset(&client, args).await,
        Command::Grant(args) => access::grant(&client, args).await,
        Command::Revoke(args) => access::revoke(&client, args).await,
        Command::Pool(args) => pools::run(&client, args).await,
        Command::Prefetch(args) => images::prefetch(&client, args).await,
        Command::Ps(args) => processes::ps(&client, args).await,
        Command::Start(args) => processes::start(&client, args).await,
        Command::AttachProcess(args) => processes::attach(&client, args).await,
        Command::Signal(args) => processes::signal(&client, args).await,
        Command::PortForward(args) => port_forward::run(&client, args).await,
        Command::Fs(args) => fs::run(&client, args).await,
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sandboxctl: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sandboxctl: {e}");
            1
        }
    };
    // A thread may still block on reading stdin (`shell`): leave without waiting for it.
    std::process::exit(code.clamp(0, 255));
}
