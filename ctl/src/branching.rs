//! `snapshot`, `checkpoint`, `fork` (`--live`), `pause`, `hibernate` and `resume`: branching a
//! sandbox, and freezing or putting it to sleep.

use clap::Args;
use sandboxd_client::{proto, Client};

use crate::error::CtlError;
use crate::{parse, Output};

#[derive(Debug, Args)]
pub struct SnapshotArgs {
    /// The sandbox to snapshot (frozen for the commit, then thawed unless it was paused).
    sandbox_id: String,
    /// A label kept on the snapshot (repeatable).
    #[arg(long = "label", short = 'l', value_name = "K=V", value_parser = parse::key_value)]
    labels: Vec<(String, String)>,
    /// `table` prints the snapshot id; `json` the snapshot's details.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    output: Output,
}

#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The sandbox to branch; it keeps running.
    sandbox_id: String,
    /// How many children (1..=64).
    #[arg(long = "count", short = 'n', default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    count: u32,
    /// A label added to the children's (repeatable).
    #[arg(long = "label", short = 'l', value_name = "K=V", value_parser = parse::key_value)]
    labels: Vec<(String, String)>,
    /// Live: the children are restored from a live snapshot (processes and memory go on);
    /// the sandbox must run on gVisor (runsc).
    #[arg(long)]
    live: bool,
    /// With --live: restore from this live snapshot (`sandboxctl checkpoint`) instead of a
    /// fresh one.
    #[arg(long = "snapshot", value_name = "SNAPSHOT_ID", requires = "live")]
    snapshot_id: Option<String>,
    /// `table` prints the children's ids, one a line; `json` the ids and the snapshot.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    output: Output,
}

#[derive(Debug, Args)]
pub struct CheckpointArgs {
    /// The sandbox (on gVisor, runsc) to checkpoint; it goes on unless --stop.
    sandbox_id: String,
    /// A label kept on the snapshot (repeatable).
    #[arg(long = "label", short = 'l', value_name = "K=V", value_parser = parse::key_value)]
    labels: Vec<(String, String)>,
    /// Leave the sandbox stopped after the checkpoint.
    #[arg(long)]
    stop: bool,
    /// `table` prints the snapshot id; `json` the snapshot's details.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    output: Output,
}

#[derive(Debug, Args)]
pub struct FreezeArgs {
    /// The sandbox.
    sandbox_id: String,
}

pub async fn snapshot(client: &Client, args: SnapshotArgs) -> Result<i32, CtlError> {
    let request =
        proto::SnapshotRequest { sandbox_id: args.sandbox_id, labels: args.labels.into_iter().collect() };
    let snapshot = client
        .raw()
        .snapshot(request)
        .await?
        .into_inner()
        .snapshot
        .ok_or_else(|| CtlError::local("the server answered Snapshot without a snapshot"))?;
    match args.output {
        Output::Table => println!("{}", snapshot.snapshot_id),
        Output::Json => println!(
            "{}",
            serde_json::json!({
                "snapshot_id": snapshot.snapshot_id,
                "source_sandbox_id": snapshot.source_sandbox_id,
                "labels": snapshot.labels,
                "created_at_unix_ms": snapshot.created_at_unix_ms,
                "size_bytes": snapshot.size_bytes,
            })
        ),
    }
    Ok(0)
}

pub async fn fork(client: &Client, args: ForkArgs) -> Result<i32, CtlError> {
    let progress =
        crate::fork_progress::ForkProgress::start(client, &args.sandbox_id, args.count, &args.labels).await;
    let request = proto::ForkRequest {
        sandbox_id: args.sandbox_id,
        count: args.count,
        labels: args.labels.into_iter().collect(),
        live: args.live,
        snapshot_id: args.snapshot_id,
    };
    let forked = match client.raw().fork(request).await {
        Ok(forked) => forked.into_inner(),
        Err(e) => {
            progress.fail();
            return Err(e.into());
        }
    };
    progress.finish(forked.sandboxes.len());
    let ids: Vec<&str> = forked.sandboxes.iter().map(|s| s.sandbox_id.as_str()).collect();
    match args.output {
        Output::Table => ids.iter().for_each(|id| println!("{id}")),
        Output::Json => {
            println!("{}", serde_json::json!({ "sandbox_ids": ids, "snapshot_id": forked.snapshot_id }))
        }
    }
    Ok(0)
}

pub async fn pause(client: &Client, args: FreezeArgs) -> Result<i32, CtlError> {
    client.raw().pause(proto::PauseRequest { sandbox_id: args.sandbox_id.clone() }).await?;
    println!("{}", args.sandbox_id);
    Ok(0)
}

pub async fn resume(client: &Client, args: FreezeArgs) -> Result<i32, CtlError> {
    client.raw().resume(proto::ResumeRequest { sandbox_id: args.sandbox_id.clone() }).await?;
    println!("{}", args.sandbox_id);
    Ok(0)
}

pub async fn checkpoint(client: &Client, args: CheckpointArgs) -> Result<i32, CtlError> {
    let request = proto::CheckpointRequest {
        sandbox_id: args.sandbox_id,
        labels: args.labels.into_iter().collect(),
        leave_running: Some(!args.stop),
    };
    let snapshot = client
        .raw()
        .checkpoint(request)
        .await?
        .into_inner()
        .snapshot
        .ok_or_else(|| CtlError::local("the server answered Checkpoint without a snapshot"))?;
    match args.output {
        Output::Table => println!("{}", snapshot.snapshot_id),
        Output::Json => println!(
            "{}",
            serde_json::json!({
                "snapshot_id": snapshot.snapshot_id,
                "source_sandbox_id": snapshot.source_sandbox_id,
                "labels": snapshot.labels,
                "created_at_unix_ms": snapshot.created_at_unix_ms,
                "size_bytes": snapshot.size_bytes,
                "runtime": snapshot.runtime,
                "live": snapshot.live,
            })
        ),
    }
    Ok(0)
}

pub async fn hibernate(client: &Client, args: FreezeArgs) -> Result<i32, CtlError> {
    let done = client
        .raw()
        .hibernate(proto::HibernateRequest { sandbox_id: args.sandbox_id.clone() })
        .await?
        .into_inner();
    println!(
        "{}\tcheckpoint {} bytes\tmemory freed {} bytes",
        args.sandbox_id, done.checkpoint_bytes, done.memory_freed_bytes
    );
    Ok(0)
}
