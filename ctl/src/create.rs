//! `sandboxctl create IMAGE`: start a sandbox, print its id (or its full ref as JSON).

use clap::Args;
use sandboxd_client::{proto, spec, Client, Sandbox};

use crate::error::CtlError;
use crate::{parse, Output};

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Image to start (must be present on the server's Docker daemon); optional with `--pool`.
    #[arg(required_unless_present = "pool")]
    image: Option<String>,
    /// Claim a ready sandbox from this warm pool (`sandboxctl pool ls`); --env, --label and
    /// --ttl apply to it, other options must match the pool's template.
    #[arg(long, value_name = "NAME")]
    pool: Option<String>,
    /// Environment of every command in the sandbox (repeatable).
    #[arg(long = "env", short = 'e', value_name = "K=V", value_parser = parse::key_value)]
    env: Vec<(String, String)>,
    /// A label kept on the sandbox, for `ls --label` and `rm --label` (repeatable).
    #[arg(long = "label", short = 'l', value_name = "K=V", value_parser = parse::key_value)]
    labels: Vec<(String, String)>,
    /// A TCP port to publish (repeatable).
    #[arg(long = "port", short = 'p', value_name = "N")]
    ports: Vec<u16>,
    /// Lifetime, after which the sandbox removes itself: 90s, 30m, 2h (a unit is required).
    #[arg(long, value_name = "DURATION", value_parser = parse::duration_s)]
    ttl: Option<f64>,
    /// CPUs the sandbox may use (`1`, `0.5`), as `docker run --cpus`.
    #[arg(long, value_name = "N", value_parser = parse::cpus)]
    cpu: Option<f64>,
    /// Memory cap including swap: `512m`, `2g`.
    #[arg(long, value_name = "SIZE", value_parser = parse::memory_mib)]
    memory: Option<u64>,
    /// Default working directory of commands and shells (absolute).
    #[arg(long, short = 'w', value_name = "PATH")]
    workdir: Option<String>,
    /// A network of the server's to join (sandboxes on it reach each other by address).
    #[arg(long, value_name = "NAME")]
    network: Option<String>,
    /// A capability to add, from the server's `create.allowed_cap_add` (repeatable).
    #[arg(long = "cap-add", value_name = "CAP")]
    cap_add: Vec<String>,
    /// Size of /dev/shm: `64m`, `1g`.
    #[arg(long = "shm-size", value_name = "SIZE", value_parser = parse::size_bytes)]
    shm_size: Option<u64>,
    /// A named volume of the server to mount: NAME:TARGET[:ro] (repeatable; never a host path).
    #[arg(long = "volume", short = 'v', value_name = "NAME:TARGET[:ro]", value_parser = parse::named_volume)]
    volumes: Vec<(String, String, bool)>,
    /// The OCI runtime to run on, as the server offers it (`runsc`: gVisor); unset: the
    /// server's default (or the one your tenant is bound to).
    #[arg(long, value_name = "NAME")]
    runtime: Option<String>,
    /// `table` prints the id; `json` the full sandbox ref.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    output: Output,
    /// Start this many (1-256) in one `CreateBatch` call: one line per sandbox as it is ready,
    /// a failed one reported on stderr (exit 1 when any failed).
    #[arg(long, short = 'n', value_name = "N", default_value_t = 1)]
    count: u32,
}

pub async fn run(client: &Client, args: CreateArgs) -> Result<i32, CtlError> {
    let mut spec = spec(args.image.unwrap_or_default());
    spec.pool = args.pool;
    spec.env = args.env.into_iter().collect();
    spec.metadata = args.labels.into_iter().collect();
    spec.ports = args.ports.into_iter().map(u32::from).collect();
    spec.ttl_s = args.ttl;
    spec.workdir = args.workdir;
    if args.cpu.is_some() || args.memory.is_some() {
        spec.resources =
            Some(proto::SandboxResources { cpu: args.cpu, memory_mib: args.memory, ..Default::default() });
    }
    spec.network = args.network;
    spec.cap_add = args.cap_add;
    spec.shm_size_bytes = args.shm_size;
    spec.runtime = args.runtime.unwrap_or_default();
    spec.volumes = args
        .volumes
        .into_iter()
        .map(|(name, target, read_only)| proto::VolumeMount { name, target, read_only, subpath: None })
        .collect();
    if args.count != 1 {
        let progress = crate::progress::Counter::start("creating", args.count);
        let mut failed = 0;
        let outcome = Sandbox::start_batch_each(client, spec, args.count, |item| {
            match item {
                Ok(sandbox) => progress.above(|| print(&sandbox, args.output)),
                Err(e) => {
                    failed += 1;
                    progress.above(|| eprintln!("sandboxctl: {}", CtlError::from(e)));
                }
            }
            progress.inc();
        })
        .await;
        match outcome {
            Ok(()) => progress.finish("created", failed),
            Err(_) => progress.fail(),
        }
        outcome?;
        return Ok(i32::from(failed > 0));
    }
    let sandbox = Sandbox::start(client, spec).await?;
    print(&sandbox, args.output);
    Ok(0)
}

fn print(sandbox: &Sandbox, output: Output) {
    match output {
        Output::Table => println!("{}", sandbox.id()),
        Output::Json => println!(
            "{}",
            serde_json::json!({
                "sandbox_id": sandbox.id(),
                "ports": sandbox.ports(),
                "workdir": sandbox.workdir(),
                "metadata": sandbox.metadata(),
            })
        ),
    }
}
