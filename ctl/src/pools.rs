//! `sandboxctl pool create|ls|rm`: warm pools (ready sandboxes a `create --pool` is handed).

use clap::{Args, Subcommand};
use sandboxd_client::{proto, Client, PoolDefinition, PoolInfo};

use crate::error::CtlError;
use crate::{parse, Output};

#[derive(Debug, Args)]
pub struct PoolArgs {
    #[command(subcommand)]
    command: PoolCommand,
}

#[derive(Debug, Subcommand)]
enum PoolCommand {
    /// Add a pool: the server keeps TARGET sandboxes of IMAGE started and ready.
    Create(PoolCreateArgs),
    /// The pools you can claim from, with their ready and claimed counts.
    Ls(PoolLsArgs),
    /// Remove pools and their unclaimed sandboxes (claimed ones stay).
    Rm(PoolRmArgs),
    /// Set the pools a task schedule needs in one call: `pool targets IMAGE=N…` keeps N ready
    /// sandboxes of each IMAGE (a pool per image, made when missing; N=0 lets it drain).
    Targets(PoolTargetsArgs),
}

#[derive(Debug, Args)]
struct PoolTargetsArgs {
    /// IMAGE=COUNT, or IMAGE=COUNT@POOL to name the pool (default: derived from the image).
    #[arg(required = true, value_name = "IMAGE=N[@POOL]")]
    targets: Vec<String>,
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    output: Output,
}

#[derive(Debug, Args)]
struct PoolCreateArgs {
    /// The pool's name (a-z, 0-9, '_', '.', '-').
    name: String,
    /// Image of its sandboxes (must be present on the server's Docker daemon).
    image: String,
    /// Ready sandboxes to keep.
    #[arg(long, value_name = "N")]
    target: u32,
    /// Most sandboxes of the pool alive at once, claimed ones included (default: 2 × target, at least 1).
    #[arg(long, value_name = "N")]
    max: Option<u32>,
    /// A closed sandbox of the pool is reset and handed back to it instead of removed.
    #[arg(long)]
    recycle: bool,
    /// Environment of every command in its sandboxes (repeatable).
    #[arg(long = "env", short = 'e', value_name = "K=V", value_parser = parse::key_value)]
    env: Vec<(String, String)>,
    /// A label every sandbox of the pool carries (repeatable).
    #[arg(long = "label", short = 'l', value_name = "K=V", value_parser = parse::key_value)]
    labels: Vec<(String, String)>,
    /// A TCP port to publish (repeatable).
    #[arg(long = "port", short = 'p', value_name = "N")]
    ports: Vec<u16>,
    /// CPUs each sandbox may use, as `docker run --cpus`.
    #[arg(long, value_name = "N", value_parser = parse::cpus)]
    cpu: Option<f64>,
    /// Memory cap of each sandbox: `512m`, `2g`.
    #[arg(long, value_name = "SIZE", value_parser = parse::memory_mib)]
    memory: Option<u64>,
    /// Default working directory (absolute).
    #[arg(long, short = 'w', value_name = "PATH")]
    workdir: Option<String>,
}

#[derive(Debug, Args)]
struct PoolLsArgs {
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    output: Output,
}

#[derive(Debug, Args)]
struct PoolRmArgs {
    /// Pool names.
    #[arg(required = true)]
    names: Vec<String>,
}

pub async fn run(client: &Client, args: PoolArgs) -> Result<i32, CtlError> {
    match args.command {
        PoolCommand::Create(args) => create(client, args).await,
        PoolCommand::Ls(args) => ls(client, args).await,
        PoolCommand::Rm(args) => rm(client, args).await,
        PoolCommand::Targets(args) => targets(client, args).await,
    }
}

/// `IMAGE=COUNT[@POOL]`; the image may hold `=` only before the last one.
fn parse_target(text: &str) -> Result<proto::PoolTarget, CtlError> {
    let bad = || CtlError::local(format!("{text:?}: expected IMAGE=COUNT or IMAGE=COUNT@POOL"));
    let (image, rest) = text.rsplit_once('=').ok_or_else(bad)?;
    let (count, pool) = rest.split_once('@').unwrap_or((rest, ""));
    let count: u32 = count.parse().map_err(|_| bad())?;
    if image.is_empty() {
        return Err(bad());
    }
    Ok(proto::PoolTarget { image: image.into(), count, pool: pool.into(), template: None })
}

async fn targets(client: &Client, args: PoolTargetsArgs) -> Result<i32, CtlError> {
    let targets = args.targets.iter().map(|t| parse_target(t)).collect::<Result<Vec<_>, _>>()?;
    let set = client.set_pool_targets(targets).await?;
    match args.output {
        Output::Json => {
            let rows: Vec<_> = set
                .iter()
                .map(|p| {
                    let nodes: serde_json::Map<String, serde_json::Value> =
                        p.nodes.iter().map(|n| (n.node.clone(), n.ready.into())).collect();
                    serde_json::json!({
                        "pool": p.pool, "image": p.image, "target": p.target, "max": p.max,
                        "created": p.created, "ready_by_node": nodes,
                    })
                })
                .collect();
            println!("{}", serde_json::Value::Array(rows));
        }
        Output::Table => {
            for p in &set {
                let nodes: Vec<String> = p.nodes.iter().map(|n| format!("{}:{}", n.node, n.ready)).collect();
                println!(
                    "{}  {}  target {} (max {}){}  ready {}",
                    p.pool,
                    p.image,
                    p.target,
                    p.max,
                    if p.created { "  created" } else { "" },
                    if nodes.is_empty() { "-".to_string() } else { nodes.join(" ") }
                );
            }
        }
    }
    Ok(0)
}

async fn create(client: &Client, args: PoolCreateArgs) -> Result<i32, CtlError> {
    let mut template = proto::SandboxSpec {
        env: args.env.into_iter().collect(),
        metadata: args.labels.into_iter().collect(),
        ports: args.ports.into_iter().map(u32::from).collect(),
        workdir: args.workdir,
        ..Default::default()
    };
    if args.cpu.is_some() || args.memory.is_some() {
        template.resources =
            Some(proto::SandboxResources { cpu: args.cpu, memory_mib: args.memory, ..Default::default() });
    }
    let max = args.max.unwrap_or((args.target * 2).max(1));
    let pool = PoolDefinition {
        template,
        recycle: args.recycle,
        ..PoolDefinition::new(args.name, args.image, args.target, max)
    };
    let info = client.create_pool(pool).await?;
    println!("{}", info.name);
    Ok(0)
}

async fn ls(client: &Client, args: PoolLsArgs) -> Result<i32, CtlError> {
    let pools = client.list_pools().await?;
    match args.output {
        Output::Json => {
            let rows: Vec<_> = pools.iter().map(json).collect();
            println!("{}", serde_json::Value::Array(rows));
        }
        Output::Table => print!("{}", table(&pools)),
    }
    Ok(0)
}

async fn rm(client: &Client, args: PoolRmArgs) -> Result<i32, CtlError> {
    for name in args.names {
        let removed = client.delete_pool(&name).await?;
        println!("{name} ({removed} unclaimed sandboxes removed)");
    }
    Ok(0)
}

fn json(p: &PoolInfo) -> serde_json::Value {
    serde_json::json!({
        "name": p.name, "image": p.image, "target": p.target, "max": p.max, "ready": p.ready,
        "claimed": p.claimed, "created": p.created, "in_use": p.in_use, "recycled": p.recycled,
        "from_config": p.from_config, "tenant": p.tenant,
    })
}

/// `NAME IMAGE READY/TARGET MAX IN USE CLAIMED ORIGIN`, columns padded to their widest cell.
fn table(pools: &[PoolInfo]) -> String {
    let mut rows = vec![["NAME", "IMAGE", "READY", "MAX", "IN USE", "CLAIMED", "ORIGIN"].map(String::from)];
    for p in pools {
        let origin = if p.from_config {
            "config".to_string()
        } else if p.tenant.is_empty() {
            "api".to_string()
        } else {
            format!("tenant {}", p.tenant)
        };
        rows.push([
            p.name.clone(),
            p.image.clone(),
            format!("{}/{}", p.ready, p.target),
            p.max.to_string(),
            p.in_use.to_string(),
            p.claimed.to_string(),
            origin,
        ]);
    }
    let widths: Vec<usize> = (0..7).map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}
