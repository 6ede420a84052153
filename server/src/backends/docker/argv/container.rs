//! `docker run`, `rename`, `start`, `rm`, `inspect`, `ps`, `port`, `events`, `diff`, `pause`:
//! the command lines about a container, and what their output means (ports, endpoints).

use std::collections::BTreeMap;

use super::*;
use crate::config::DockerCreateConfig;
use crate::core::spec::{normalize_image, SandboxResources, SandboxSpec};

/// Name prefix of a container whose create has not completed: a create runs under
/// `sandboxd-creating-<hex>` and is renamed to its sandbox id `sandboxd-<hex>` as its last step,
/// so the name alone tells the sweep whether a create completed (labels cannot change).
pub const CREATING_NAME_PREFIX: &str = "sandboxd-creating-";

/// Names of containers whose removal a close left to the background.
pub const CLOSING_NAME_PREFIX: &str = "sandboxd-closing-";

/// The name a closed sandbox's container has until it is removed.
pub fn closing_name(sandbox_id: &str) -> String {
    let hex = sandbox_id.strip_prefix(crate::core::spec::SANDBOX_ID_PREFIX).unwrap_or(sandbox_id);
    format!("{CLOSING_NAME_PREFIX}{hex}")
}

/// The sandbox id a closing container's name stands for.
pub fn sandbox_of_closing(name: &str) -> Option<String> {
    name.strip_prefix(CLOSING_NAME_PREFIX).map(|hex| format!("{}{hex}", crate::core::spec::SANDBOX_ID_PREFIX))
}

/// The name a create of sandbox `sandbox_id` runs under until it completes.
pub fn creating_name(sandbox_id: &str) -> String {
    let hex = sandbox_id.strip_prefix(crate::core::spec::SANDBOX_ID_PREFIX).unwrap_or(sandbox_id);
    format!("{CREATING_NAME_PREFIX}{hex}")
}

/// `--label KEY=VALUE` pairs inserted right after the ownership label of a `run_args` argv.
pub fn with_labels(mut run: Vec<String>, labels: &[(&str, String)]) -> Vec<String> {
    let owner = format!("{SANDBOX_LABEL}=1");
    let at = run.iter().position(|a| *a == owner).map_or(run.len(), |i| i + 1);
    let flags = labels.iter().flat_map(|(k, v)| [s("--label"), format!("{k}={v}")]);
    run.splice(at..at, flags);
    run
}

/// `docker rename FROM TO`: the last step of a create.
pub fn rename_args(from: &str, to: &str) -> Vec<String> {
    vec![s("rename"), s(from), s(to)]
}

/// Every container carrying the ownership label and a lease label, one line each:
/// `name \t expires_ms \t create_deadline_ms` (the sweep's input).
/// Only containers that also carry the operator's own `--label` flags of `extra_run_args` are
/// listed: two deployments labelled apart on one daemon never sweep each other's containers.
pub fn sweep_list_args(cfg: &DockerCreateConfig) -> Vec<String> {
    use crate::core::lease::{CREATED_LABEL, CREATE_DEADLINE_LABEL, EXPIRES_LABEL};
    let mut a = vec![
        s("ps"),
        s("-a"),
        s("--no-trunc"),
        s("--filter"),
        format!("label={SANDBOX_LABEL}=1"),
        s("--filter"),
        format!("label={CREATED_LABEL}"),
    ];
    for label in operator_labels(&cfg.extra_run_args) {
        a.extend([s("--filter"), format!("label={label}")]);
    }
    a.extend([
        s("--format"),
        format!(
            "{{{{.Names}}}}\t{{{{.Label \"{EXPIRES_LABEL}\"}}}}\t{{{{.Label \"{CREATE_DEADLINE_LABEL}\"}}}}"
        ),
    ]);
    a
}

/// The `KEY=VALUE` of every `--label KEY=VALUE` / `--label=KEY=VALUE` / `-l KEY=VALUE` in `args`.
pub fn operator_labels(args: &[String]) -> Vec<String> {
    let mut labels = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--label" || arg == "-l" {
            if let Some(value) = it.next() {
                labels.push(value.clone());
            }
        } else if let Some(value) = arg.strip_prefix("--label=") {
            labels.push(value.to_string());
        }
    }
    labels
}

/// `--cpus`, and memory as a hard cap (`--memory-swap` equal to `--memory`).
pub fn resource_limit_flags(resources: &SandboxResources) -> Vec<String> {
    let mut flags = Vec::new();
    if let Some(cpu) = resources.cpu {
        flags.extend([s("--cpus"), format!("{cpu}")]);
    }
    if let Some(mib) = resources.memory_mib {
        flags.extend([s("--memory"), format!("{mib}m"), s("--memory-swap"), format!("{mib}m")]);
    }
    flags
}

/// `HOST::PORT/tcp`, IPv6 hosts bracketed.
pub fn publish_arg(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]::{port}/tcp")
    } else {
        format!("{host}::{port}/tcp")
    }
}

/// The image a sandbox runs: its snapshot's, else `spec.image` (`docker://` dropped).
pub fn run_image(spec: &SandboxSpec) -> &str {
    spec.snapshot_id.as_deref().unwrap_or_else(|| normalize_image(&spec.image))
}

/// `docker run -d …`: the detached keep-alive with the image ENTRYPOINT overridden (or the
/// spec's own entrypoint), every flag from the config and spec.
pub fn run_args(cfg: &DockerCreateConfig, spec: &SandboxSpec, name: &str) -> Vec<String> {
    let mut a = run_flags(cfg, spec, name);
    let image = run_image(spec);
    match &spec.entrypoint {
        Some(entrypoint) if !entrypoint.is_empty() => {
            a.extend([s("--entrypoint"), entrypoint[0].clone(), s(image)]);
            a.extend(entrypoint[1..].iter().cloned());
        }
        _ => a.extend(keepalive_entry(cfg, image)),
    }
    a
}

/// The keep-alive as `--entrypoint SHELL IMAGE -c CMD`.
fn keepalive_entry(cfg: &DockerCreateConfig, image: &str) -> Vec<String> {
    // The lease (`ttl_s`) is a label the server's sweep enforces (see `lease`), so the
    // keep-alive never ends by itself and a lease can be moved.
    vec![s("--entrypoint"), cfg.keepalive_shell.clone(), s(image), s("-c"), cfg.keepalive_cmd.clone()]
}

/// What the sandbox's process would have been without the agent: the spec's entrypoint, else
/// the keep-alive.
fn wrapped_argv(cfg: &DockerCreateConfig, spec: &SandboxSpec) -> Vec<String> {
    match &spec.entrypoint {
        Some(entrypoint) if !entrypoint.is_empty() => entrypoint.clone(),
        _ => vec![cfg.keepalive_shell.clone(), s("-c"), cfg.keepalive_cmd.clone()],
    }
}

/// `docker run` with the agent as the sandbox's keep-alive: `--entrypoint /.sandboxd/agent
/// IMAGE init <init_flags> [--keep-alive] -- <the entrypoint or keep-alive>`, its run directory mounted at
/// `/.sandboxd/run` and the agent binary read-only, the agent as root (`-u 0`) when the image
/// has a user of its own (`init --user` runs the wrapped command as it), and that user kept in
/// the [`AGENT_USER_LABEL`] label (the container's own user is then root).
pub fn agent_run_args(
    cfg: &DockerCreateConfig,
    spec: &SandboxSpec,
    name: &str,
    agent: &AgentRun,
) -> Vec<String> {
    let mut a = run_flags(cfg, spec, name);
    let mut head = agent_mount_args(&agent.binary);
    let run_dir = crate::agent_client::socket::RUN_DIR_IN_SANDBOX;
    match &agent.run_dir {
        Some(dir) => {
            head.extend([s("--mount"), format!("type=bind,source={},target={run_dir}", dir.display())])
        }
        // The socket inside the sandbox only: a tmpfs (gVisor's own memory, saved with a
        // checkpoint), root's alone.
        None => head.extend([
            s("--mount"),
            format!("type=tmpfs,target={run_dir},tmpfs-mode=0700"),
            s("--label"),
            format!("{AGENT_INNER_LABEL}=1"),
        ]),
    }
    head.extend([s("--label"), format!("{AGENT_USER_LABEL}={}", agent.image_user)]);
    if !agent.image_user.is_empty() {
        head.extend([s("-u"), s("0")]);
    }
    a.splice(2..2, head);
    a.extend([s("--entrypoint"), s(crate::agent_client::binary::AGENT_PATH_IN_SANDBOX), s(run_image(spec))]);
    a.push(s("init"));
    if !agent.image_user.is_empty() {
        a.extend([s("--user"), agent.image_user.clone()]);
    }
    a.extend(agent.init_flags.iter().cloned());
    if !has_entrypoint(spec) {
        // The wrapped command is only the keep-alive: an image without its program (without a
        // shell) is kept alive by the agent itself.
        a.push(s("--keep-alive"));
    }
    a.push(s("--"));
    a.extend(wrapped_argv(cfg, spec));
    a
}

fn has_entrypoint(spec: &SandboxSpec) -> bool {
    spec.entrypoint.as_ref().is_some_and(|e| !e.is_empty())
}

/// The label holding the image's user of a sandbox whose agent runs as root (`-u 0`): the
/// user a command runs as when none is named.
pub const AGENT_USER_LABEL: &str = "sandboxd.agent.user";

/// The label of a sandbox whose agent socket is inside the sandbox only (a tmpfs at the run
/// directory; a sandbox made to be checkpointed): the server reaches it by `agent connect`.
pub const AGENT_INNER_LABEL: &str = "sandboxd.agent.inner";

/// What `agent_run_args` adds.
#[derive(Debug, Clone)]
pub struct AgentRun {
    pub binary: std::path::PathBuf,
    /// The host's run directory bind-mounted for the socket; `None`: the socket stays inside
    /// the sandbox (a tmpfs), reached through `agent connect`.
    pub run_dir: Option<std::path::PathBuf>,
    /// The image's configured user (`""`: root).
    pub image_user: String,
    /// `init`'s options (probe, shell).
    pub init_flags: Vec<String>,
}

/// Whether `args` (operator or client `docker run` flags) set the user or the entrypoint, which
/// the agent's start needs to own.
pub fn sets_user_or_entrypoint(args: &[String]) -> bool {
    args.iter().any(|a| {
        matches!(a.as_str(), "-u" | "--user" | "--entrypoint")
            || a.starts_with("--user=")
            || a.starts_with("--entrypoint=")
            || (a.starts_with("-u") && !a.starts_with("--"))
    })
}

/// `docker image inspect` of an image's configured user.
pub fn image_user_args(image: &str) -> Vec<String> {
    vec![s("image"), s("inspect"), s("-f"), s("{{.Config.User}}"), s(image)]
}

/// `docker inspect` of what the server needs to reach a container's agent:
/// `id \t config user \t labels-json`.
pub fn agent_facts_args(name: &str) -> Vec<String> {
    vec![
        s("inspect"),
        s("--type"),
        s("container"),
        s("-f"),
        s("{{.Id}}\t{{.Config.User}}\t{{json .Config.Labels}}"),
        s(name),
    ]
}

/// Every `docker run` flag before the entrypoint.
fn run_flags(cfg: &DockerCreateConfig, spec: &SandboxSpec, name: &str) -> Vec<String> {
    let mut a = vec![s("run"), s("-d"), s("--name"), s(name), s("--label"), format!("{SANDBOX_LABEL}=1")];
    if !spec.ports.is_empty() {
        let ports: Vec<String> = spec.ports.iter().map(u16::to_string).collect();
        a.extend([s("--label"), format!("{PORTS_LABEL}={}", ports.join(","))]);
    }
    if let Some(tenant) = &spec.tenant {
        a.extend([s("--label"), format!("{}={tenant}", crate::auth::TENANT_LABEL)]);
        // What it reserves, read back by the tenant's quotas (labels survive a restart).
        if let Some(cpu) = spec.resources.cpu {
            a.extend([s("--label"), format!("{}={cpu}", crate::auth::CPUS_LABEL)]);
        }
        if let Some(mib) = spec.resources.memory_mib {
            a.extend([s("--label"), format!("{}={mib}", crate::auth::MEMORY_LABEL)]);
        }
    }
    a.extend(metadata_label_args(&spec.metadata));
    a.extend(pool_label_args(spec.pool_member.as_ref()));
    if cfg.use_init {
        a.push(s("--init"));
    }
    if let Some(dir) = &spec.workdir {
        a.extend([s("-w"), dir.clone()]);
    }
    // Values travel in the docker client's environment (`run_env`), never on its argv: a
    // host's `/proc/<pid>/cmdline` is readable by every user.
    for k in spec.env.keys().filter(|k| !configures_docker_client(k)) {
        a.extend([s("--env"), k.clone()]);
    }
    if spec.env.keys().any(|k| configures_docker_client(k)) {
        a.extend([s("--env-file"), s(ENV_FILE_STDIN)]);
    }
    if cfg.apply_resource_limits {
        a.extend(resource_limit_flags(&effective_resources(cfg, &spec.resources)));
        if let Some(gpu) = spec.resources.gpu.filter(|g| *g > 0) {
            a.extend([s("--gpus"), gpu.to_string()]);
        }
    }
    // A spec's own network (`runtime_run_args`) replaces the operator's default one.
    if let Some(network) = cfg.network.as_ref().filter(|_| spec.network.is_none()) {
        a.extend([s("--network"), network.clone()]);
    }
    if cfg.read_only {
        a.push(s("--read-only"));
    }
    for cap in &cfg.cap_drop {
        a.extend([s("--cap-drop"), cap.clone()]);
    }
    for opt in &cfg.security_opt {
        a.extend([s("--security-opt"), opt.clone()]);
    }
    if let Some(limit) = cfg.pids_limit {
        a.extend([s("--pids-limit"), limit.to_string()]);
    }
    a.extend(walls_flags(cfg, spec));
    for port in &spec.ports {
        a.extend([s("--publish"), publish_arg(&cfg.publish_host, *port)]);
    }
    for volume in &spec.provider_options.volumes {
        a.extend([s("-v"), volume.clone()]);
    }
    a.extend(runtime_run_args(spec));
    a.push(format!("--pull={}", cfg.pull_policy));
    a.extend(cfg.extra_run_args.iter().cloned());
    a.extend(spec.provider_options.run_args.iter().cloned());
    a
}

/// `--mount` of the host's agent binary, read-only, at its fixed path in the sandbox.
pub fn agent_mount_args(host_path: &std::path::Path) -> Vec<String> {
    vec![
        s("--mount"),
        format!(
            "type=bind,source={},target={},readonly",
            host_path.display(),
            crate::agent_client::binary::AGENT_PATH_IN_SANDBOX
        ),
    ]
}

/// One inspect that answers ownership, image, state and workdir: `labels-json \t image \t state \t workdir`.
/// The event stream of containers carrying the ownership label, one JSON object a line.
pub fn events_args() -> Vec<String> {
    vec![
        s("events"),
        s("--filter"),
        s("type=container"),
        s("--filter"),
        format!("label={SANDBOX_LABEL}=1"),
        s("--format"),
        s("{{json .}}"),
    ]
}

/// Every owned container's name and state, one `name\tstate` a line.
pub fn owned_states_args() -> Vec<String> {
    vec![
        s("ps"),
        s("-a"),
        s("--filter"),
        format!("label={SANDBOX_LABEL}=1"),
        s("--format"),
        s("{{.Names}}\t{{.State}}"),
    ]
}

pub fn inspect_args(name: &str) -> Vec<String> {
    vec![
        s("inspect"),
        s("--type"),
        s("container"),
        s("-f"),
        s("{{json .Config.Labels}}\t{{.Config.Image}}\t{{.State.Status}}\t{{.Config.WorkingDir}}"),
        s(name),
    ]
}

/// `Stats`' `docker inspect`: the full id, the init pid and the state, tab-separated.
pub fn stats_inspect_args(name: &str) -> Vec<String> {
    vec![
        s("inspect"),
        s("--type"),
        s("container"),
        s("-f"),
        s("{{.Id}}\t{{.State.Pid}}\t{{.State.Status}}"),
        s(name),
    ]
}

/// `docker inspect` of what `Usage` and the OOM check need: full id, init pid, state, whether
/// Docker saw an OOM kill, and when it started.
pub fn usage_inspect_args(name: &str) -> Vec<String> {
    vec![
        s("inspect"),
        s("--type"),
        s("container"),
        s("-f"),
        s("{{.Id}}\t{{.State.Pid}}\t{{.State.Status}}\t{{.State.OOMKilled}}\t{{.State.StartedAt}}"),
        s(name),
    ]
}

/// `docker ps -a` of every container carrying the ownership label (and `filters`), names only.
pub fn ps_owned_args(filters: &[String]) -> Vec<String> {
    let mut a = vec![s("ps"), s("-a"), s("--no-trunc"), s("--filter"), format!("label={SANDBOX_LABEL}=1")];
    a.extend(filters.iter().cloned());
    a.extend([s("--format"), s("{{.Names}}")]);
    a
}

/// One inspect of many containers, a line each: `name \t created \t labels-json \t image \t state \t workdir`.
pub fn inspect_many_args(names: &[String]) -> Vec<String> {
    let mut a = vec![
        s("inspect"),
        s("--type"),
        s("container"),
        s("-f"),
        s("{{.Name}}\t{{.Created}}\t{{json .Config.Labels}}\t{{.Config.Image}}\t{{.State.Status}}\t{{.Config.WorkingDir}}"),
        s("--"),
    ];
    a.extend(names.iter().cloned());
    a
}

pub fn start_args(name: &str) -> Vec<String> {
    vec![s("start"), s(name)]
}

/// `docker kill NAME` (SIGKILL: returns once the container stopped).
pub fn kill_args(name: &str) -> Vec<String> {
    vec![s("kill"), s(name)]
}

/// `docker wait`: returns once the daemon has handled the container's exit.
pub fn wait_args(name: &str) -> Vec<String> {
    vec![s("wait"), s(name)]
}

pub fn rm_args(name: &str) -> Vec<String> {
    vec![s("rm"), s("-f"), s(name)]
}

pub fn port_args(name: &str, port: u16) -> Vec<String> {
    vec![s("port"), s(name), format!("{port}/tcp")]
}

/// Compose's `pull_policy` as `docker run --pull`.
pub fn pull_policy_args(policy: &str) -> Result<Vec<String>, String> {
    match policy {
        "always" | "missing" | "never" => Ok(vec![format!("--pull={policy}")]),
        other => Err(format!("pull_policy must be one of always, missing, never (got {other:?})")),
    }
}

/// Compose service options as run args.
pub fn service_option_args(
    tmpfs: &[String],
    ulimits: &BTreeMap<String, String>,
    sysctls: &BTreeMap<String, String>,
    security_opt: &[String],
) -> Vec<String> {
    let mut a = Vec::new();
    for t in tmpfs {
        a.extend([s("--tmpfs"), t.clone()]);
    }
    for (name, limit) in ulimits {
        a.extend([s("--ulimit"), format!("{name}={limit}")]);
    }
    for (k, v) in sysctls {
        a.extend([s("--sysctl"), format!("{k}={v}")]);
    }
    for o in security_opt {
        a.extend([s("--security-opt"), o.clone()]);
    }
    a
}

/// One `docker port` line (`127.0.0.1:49153`, `[::]:49153`) as host and port.
pub fn parse_port_binding(binding: &str) -> Result<(String, u16), String> {
    let value = binding.trim();
    let (host, port) =
        value.rsplit_once(':').ok_or_else(|| format!("invalid Docker port binding {binding:?}"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let host = if host.is_empty() { "0.0.0.0" } else { host };
    let port: u16 = port.parse().map_err(|_| format!("invalid Docker host port in {binding:?}"))?;
    if port == 0 {
        return Err(format!("invalid Docker host port in {binding:?}"));
    }
    Ok((host.to_string(), port))
}

/// `http://host:port`, IPv6 hosts bracketed.
pub fn http_endpoint(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("http://[{host}]:{port}")
    } else {
        format!("http://{host}:{port}")
    }
}

/// `docker inspect --type container NAME`: the full JSON (a fork reads the source's settings).
pub fn inspect_full_args(name: &str) -> Vec<String> {
    vec![s("inspect"), s("--type"), s("container"), s(name)]
}

/// `docker diff NAME`: one `K /path` line per change against the container's image.
pub fn diff_args(name: &str) -> Vec<String> {
    vec![s("diff"), s(name)]
}

pub fn pause_args(name: &str) -> Vec<String> {
    vec![s("pause"), s(name)]
}

pub fn unpause_args(name: &str) -> Vec<String> {
    vec![s("unpause"), s(name)]
}

/// `docker inspect` of whether container `name` runs and is not paused: `true false` when it does.
pub fn running_args(name: &str) -> Vec<String> {
    vec![
        s("inspect"),
        s("--type"),
        s("container"),
        s("-f"),
        s("{{.State.Running}} {{.State.Paused}}"),
        s(name),
    ]
}

/// `docker inspect` of the host pid of container `name`'s init (0 when it is not running):
/// its `/proc/<pid>/ns/net` is the sandbox's network namespace.
pub fn pid_args(name: &str) -> Vec<String> {
    vec![s("inspect"), s("--type"), s("container"), s("-f"), s("{{.State.Pid}}"), s(name)]
}

/// `docker checkpoint create NAME CHECKPOINT`: gVisor writes the sandbox's processes and memory
/// to the container's `checkpoints/CHECKPOINT` and stops it (`--leave-running` panics in the
/// runsc release these machines have: the caller restarts the container from it instead).
pub fn checkpoint_create_args(name: &str, checkpoint: &str) -> Vec<String> {
    vec![s("checkpoint"), s("create"), s(name), s(checkpoint)]
}

/// `docker start --checkpoint CHECKPOINT NAME`: restore the container from its checkpoint.
pub fn start_from_checkpoint_args(name: &str, checkpoint: &str) -> Vec<String> {
    vec![s("start"), format!("--checkpoint={checkpoint}"), s(name)]
}

/// `docker info`'s data root (where `containers/<id>/checkpoints/` lie).
pub fn data_root_args() -> Vec<String> {
    vec![s("info"), s("--format"), s("{{.DockerRootDir}}")]
}

/// How many `docker exec` processes of the container run now.
pub fn running_execs_args(name: &str) -> Vec<String> {
    vec![s("inspect"), s("--type"), s("container"), s("--format"), s("{{len .ExecIDs}}"), s(name)]
}
