//! The docker command lines of every operation, as pure functions: the exact argv is what the
//! unit tests pin down, and nothing a client sends can land where docker reads a flag.

use std::collections::BTreeMap;

use crate::config::{DockerCreateConfig, DockerExecConfig};
use crate::spec::{normalize_image, SandboxResources, SandboxSpec};

/// Ownership label: only containers carrying it are ever reused, connected to or driven.
pub const SANDBOX_LABEL: &str = "sandboxd.sandbox";
/// Declared ports, kept on the container so a restarted server still knows them.
pub const PORTS_LABEL: &str = "sandboxd.ports";

fn s(v: &str) -> String {
    v.to_string()
}

/// Name prefix of a container whose create has not completed: a create runs under
/// `sandboxd-creating-<hex>` and is renamed to its sandbox id `sandboxd-<hex>` as its last step,
/// so the name alone tells the sweep whether a create completed (labels cannot change).
pub const CREATING_NAME_PREFIX: &str = "sandboxd-creating-";

/// The name a create of sandbox `sandbox_id` runs under until it completes.
pub fn creating_name(sandbox_id: &str) -> String {
    let hex = sandbox_id.strip_prefix(crate::spec::SANDBOX_ID_PREFIX).unwrap_or(sandbox_id);
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
    use crate::lease::{CREATED_LABEL, CREATE_DEADLINE_LABEL, EXPIRES_LABEL};
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
    let image = run_image(spec);
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
    a.extend(super::labels::run_args(&spec.metadata));
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
        a.extend(resource_limit_flags(&spec.resources));
        if let Some(gpu) = spec.resources.gpu.filter(|g| *g > 0) {
            a.extend([s("--gpus"), gpu.to_string()]);
        }
    }
    if let Some(network) = &cfg.network {
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
    for port in &spec.ports {
        a.extend([s("--publish"), publish_arg(&cfg.publish_host, *port)]);
    }
    for volume in &spec.provider_options.volumes {
        a.extend([s("-v"), volume.clone()]);
    }
    a.push(format!("--pull={}", cfg.pull_policy));
    a.extend(cfg.extra_run_args.iter().cloned());
    a.extend(spec.provider_options.run_args.iter().cloned());
    match &spec.entrypoint {
        // The lease (`ttl_s`) is a label the server's sweep enforces (see `lease`), so the
        // keep-alive never ends by itself and a lease can be moved.
        Some(entrypoint) if !entrypoint.is_empty() => {
            a.extend([s("--entrypoint"), entrypoint[0].clone(), s(image)]);
            a.extend(entrypoint[1..].iter().cloned());
        }
        _ => {
            a.extend([
                s("--entrypoint"),
                cfg.keepalive_shell.clone(),
                s(image),
                s("-c"),
                cfg.keepalive_cmd.clone(),
            ]);
        }
    }
    a
}

/// `--mount` of the host's agent binary, read-only, at its fixed path in the sandbox.
pub fn agent_mount_args(host_path: &std::path::Path) -> Vec<String> {
    vec![
        s("--mount"),
        format!(
            "type=bind,source={},target={},readonly",
            host_path.display(),
            super::agent::binary::AGENT_PATH_IN_SANDBOX
        ),
    ]
}

/// Options of one `docker exec`.
#[derive(Debug, Clone, Default)]
pub struct ExecOptions<'a> {
    pub cwd: Option<&'a str>,
    pub env: Option<&'a BTreeMap<String, String>>,
    /// Already normalised (`root` -> `0`).
    pub user: Option<&'a str>,
    pub interactive: bool,
    pub tty: bool,
    /// Appended after all other `--env` flags (the PTY session marker).
    pub last_env: Option<&'a str>,
}

/// `docker exec [flags] NAME PROGRAM…`.
pub fn exec_args(
    cfg: &DockerExecConfig,
    name: &str,
    opts: &ExecOptions<'_>,
    program: &[String],
) -> Vec<String> {
    let mut a = vec![s("exec")];
    if opts.interactive {
        a.push(s("-i"));
    }
    if opts.tty {
        a.push(s("-t"));
    }
    if let Some(cwd) = opts.cwd {
        a.extend([s("-w"), s(cwd)]);
    }
    if let Some(env) = opts.env {
        // Names only: the values are in the client's environment (`exec_env`).
        for k in env.keys() {
            a.extend([s("--env"), exec_env_name(k)]);
        }
    }
    if let Some(user) = opts.user {
        a.extend([s("--user"), s(user)]);
    }
    a.extend(cfg.extra_exec_args.iter().cloned());
    if let Some(marker) = opts.last_env {
        a.extend([s("--env"), s(marker)]);
    }
    a.push(s(name));
    a.extend(program.iter().cloned());
    a
}

/// Where `docker run` reads the env file of the variables that would configure the docker client
/// itself: its stdin, which a detached run does not otherwise use.
pub const ENV_FILE_STDIN: &str = "/dev/stdin";

/// Prefix of the name under which a docker-client variable travels through `docker exec`; the
/// shell in the container gives it back its own name.
pub const ENV_ALIAS_PREFIX: &str = "SANDBOXD_ENV_";

/// Whether the docker client (or the dynamic loader, the Go runtime and the config lookups under
/// it) reads `key` from its own environment. A sandbox's env travels in that environment
/// (`--env KEY`), so such a key would redirect or alter the client instead of reaching the
/// container: the daemon it talks to (`DOCKER_HOST`, `DOCKER_CONTEXT`, `DOCKER_TLS*`, proxies),
/// its config and credential helpers (`DOCKER_CONFIG`, `HOME`, `PATH`), code it loads
/// (`LD_*`), its runtime (`GO*` knobs, `TMPDIR`, TLS roots) or its telemetry (`OTEL_*`).
/// These go another way: an env file on stdin for `docker run`, a renamed variable the
/// container's shell renames back for `docker exec`.
pub fn configures_docker_client(key: &str) -> bool {
    const EXACT: &[&str] = &[
        "PATH",
        "HOME",
        "TMPDIR",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "GODEBUG",
        "GOGC",
        "GOMAXPROCS",
        "GOMEMLIMIT",
        "GOTRACEBACK",
        "GOFIPS",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "ALL_PROXY",
    ];
    const PREFIXES: &[&str] = &["DOCKER_", "LD_", "OTEL_", "BUILDKIT_", ENV_ALIAS_PREFIX];
    let upper = key.to_ascii_uppercase();
    let proxy = upper.ends_with("_PROXY") && EXACT.contains(&upper.as_str());
    EXACT.contains(&key) || proxy || PREFIXES.iter().any(|p| key.starts_with(p))
}

/// The name `--env` carries for `key` on a `docker exec`.
pub fn exec_env_name(key: &str) -> String {
    if configures_docker_client(key) {
        format!("{ENV_ALIAS_PREFIX}{key}")
    } else {
        key.to_string()
    }
}

/// Why `env` cannot travel to `docker run`/`docker exec` this way, if it cannot: a variable that
/// configures the docker client must be a shell name (the container's shell renames it back),
/// and for `docker run` a value the env file can hold (one line, not ending in CR).
pub fn check_docker_env(env: &BTreeMap<String, String>, for_run: bool) -> Result<(), String> {
    for (k, v) in env.iter().filter(|(k, _)| configures_docker_client(k)) {
        let shell_name = k.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !shell_name {
            return Err(format!(
                "{k:?} would configure the host's docker client, so it is passed another way, which needs a name of letters, digits and '_'"
            ));
        }
        if k.starts_with(ENV_ALIAS_PREFIX) {
            return Err(format!("names starting with {ENV_ALIAS_PREFIX} are reserved (got {k:?})"));
        }
        if for_run && (v.contains('\n') || v.ends_with('\r')) {
            return Err(format!(
                "the value of {k} (a variable the docker client reads, passed through an env file) must be one line not ending in CR"
            ));
        }
    }
    Ok(())
}

/// The values of a `docker run`'s env: the docker client's environment additions, and the env
/// file (`--env-file /dev/stdin`) of the keys that would configure the client itself.
pub fn run_env(env: &BTreeMap<String, String>) -> (Vec<(String, String)>, Option<Vec<u8>>) {
    let (client, plain): (Vec<_>, Vec<_>) = env.iter().partition(|(k, _)| configures_docker_client(k));
    let plain = plain.into_iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let file =
        (!client.is_empty()).then(|| client.iter().map(|(k, v)| format!("{k}={v}\n")).collect::<String>());
    (plain, file.map(String::into_bytes))
}

/// The values of a `docker exec`'s env, for the client's environment (under the names
/// `exec_env_name` gives), and the shell prefix that renames the aliased ones back inside the
/// container (empty when there are none).
pub fn exec_env(env: &BTreeMap<String, String>) -> (Vec<(String, String)>, String) {
    let values = env.iter().map(|(k, v)| (exec_env_name(k), v.clone())).collect();
    let prefix = env
        .keys()
        .filter(|k| configures_docker_client(k))
        .map(|k| format!("{k}=\"${ENV_ALIAS_PREFIX}{k}\"; export {k}; unset {ENV_ALIAS_PREFIX}{k}; "))
        .collect();
    (values, prefix)
}

/// `<shell> -c <command>`.
pub fn shell_command(shell: &str, command: &str) -> Vec<String> {
    vec![s(shell), s("-c"), s(command)]
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

pub fn rm_args(name: &str) -> Vec<String> {
    vec![s("rm"), s("-f"), s(name)]
}

pub fn port_args(name: &str, port: u16) -> Vec<String> {
    vec![s("port"), s(name), format!("{port}/tcp")]
}

/// `docker cp - NAME:/`: a tar on stdin, extracted at the root (so it carries the parents).
pub fn cp_in_args(name: &str) -> Vec<String> {
    vec![s("cp"), s("-"), format!("{name}:/")]
}

/// `docker cp -L NAME:PATH -`: the file as a tar on stdout (a link is followed to its file).
pub fn cp_out_args(name: &str, path: &str) -> Vec<String> {
    vec![s("cp"), s("-L"), format!("{name}:{path}"), s("-")]
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

// ----- snapshots, diff, pause ------------------------------------------------------------

/// Repository of every snapshot image; a snapshot id is `sandboxd-snapshot:<32 hex>`.
pub const SNAPSHOT_REPOSITORY: &str = "sandboxd-snapshot";
/// Ownership label of snapshot images (containers carry `SANDBOX_LABEL` instead).
pub const SNAPSHOT_LABEL: &str = "sandboxd.snapshot";
/// The sandbox a snapshot was taken from.
pub const SNAPSHOT_SOURCE_LABEL: &str = "sandboxd.snapshot.source";
/// The caller's labels of a snapshot: base64url of their JSON object (no quoting to get wrong).
pub const SNAPSHOT_LABELS_LABEL: &str = "sandboxd.snapshot.labels";
/// When the snapshot was taken, in milliseconds since the Unix epoch.
pub const SNAPSHOT_CREATED_LABEL: &str = "sandboxd.snapshot.created_ms";

/// A fresh snapshot id: the repository plus 128 random bits as the tag.
pub fn new_snapshot_id() -> String {
    format!("{SNAPSHOT_REPOSITORY}:{}", uuid::Uuid::new_v4().simple())
}

/// A snapshot id this service could have made; anything else is refused before docker sees it.
pub fn is_valid_snapshot_id(id: &str) -> bool {
    id.strip_prefix(SNAPSHOT_REPOSITORY).and_then(|rest| rest.strip_prefix(':')).is_some_and(|hex| {
        hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    })
}

/// What `docker commit` records about a snapshot besides the filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotMarks<'a> {
    pub source: &'a str,
    /// `SNAPSHOT_LABELS_LABEL`'s value (already encoded).
    pub labels: &'a str,
    pub created_ms: i64,
}

/// `docker commit --pause=true …`: the container is frozen for the commit (docker resumes it
/// after, and leaves an already paused one paused). The image inherits the container's labels:
/// the sandbox ownership, port and lease labels are blanked so a snapshot never passes for a
/// sandbox (a container run from it elsewhere is not ours) and a child never inherits its
/// source's lease, and the snapshot's own labels are set.
pub fn commit_args(name: &str, snapshot_id: &str, marks: &SnapshotMarks<'_>) -> Vec<String> {
    let mut a = vec![s("commit"), s("--pause=true")];
    use crate::lease::{CREATED_LABEL, CREATE_DEADLINE_LABEL, EXPIRES_LABEL};
    for label in [
        format!("{SANDBOX_LABEL}="),
        format!("{PORTS_LABEL}="),
        format!("{CREATED_LABEL}="),
        format!("{EXPIRES_LABEL}="),
        format!("{CREATE_DEADLINE_LABEL}="),
        format!("{SNAPSHOT_LABEL}=1"),
        format!("{SNAPSHOT_SOURCE_LABEL}={}", marks.source),
        format!("{SNAPSHOT_LABELS_LABEL}={}", marks.labels),
        format!("{SNAPSHOT_CREATED_LABEL}={}", marks.created_ms),
    ] {
        a.extend([s("--change"), format!("LABEL {label}")]);
    }
    a.extend([s(name), s(snapshot_id)]);
    a
}

/// The snapshot images on the daemon: `repo:tag` per line, only those with the ownership label.
pub fn snapshot_list_args() -> Vec<String> {
    vec![
        s("images"),
        s("--filter"),
        format!("label={SNAPSHOT_LABEL}=1"),
        s("--format"),
        s("{{.Repository}}:{{.Tag}}"),
        s(SNAPSHOT_REPOSITORY),
    ]
}

/// `docker image inspect` of images by reference (a JSON array).
pub fn image_inspect_args(refs: &[String]) -> Vec<String> {
    let mut a = vec![s("image"), s("inspect")];
    a.extend(refs.iter().cloned());
    a
}

/// `docker rmi REF` without `--force`: docker itself refuses an image a container still uses.
pub fn rmi_args(image: &str) -> Vec<String> {
    vec![s("rmi"), s(image)]
}

/// The containers (any state) whose image is `image` or built on it.
pub fn image_users_args(image: &str) -> Vec<String> {
    vec![s("ps"), s("-a"), s("--filter"), format!("ancestor={image}"), s("--format"), s("{{.Names}}")]
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

#[cfg(test)]
mod branching_tests {
    use super::*;

    fn v(items: &[&str]) -> Vec<String> {
        items.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn snapshot_ids_are_checked_by_shape() {
        let id = new_snapshot_id();
        assert!(is_valid_snapshot_id(&id), "{id}");
        assert!(id.starts_with("sandboxd-snapshot:"));
        for bad in [
            "busybox:latest",
            "sandboxd-snapshot:latest",
            "sandboxd-snapshot:0123456789ABCDEF0123456789abcdef",
            "sandboxd-snapshot0123456789abcdef0123456789abcdef",
            "--force",
            "sandboxd-0123456789abcdef0123456789abcdef",
        ] {
            assert!(!is_valid_snapshot_id(bad), "{bad}");
        }
        assert!(!crate::spec::SandboxId::has_valid_shape(&id), "a snapshot id is never a sandbox id");
    }

    #[test]
    fn commit_blanks_sandbox_labels_and_marks_the_snapshot() {
        let marks = SnapshotMarks { source: "sandboxd-a", labels: "e30", created_ms: 7 };
        assert_eq!(
            commit_args("sandboxd-a", "sandboxd-snapshot:b", &marks),
            v(&[
                "commit",
                "--pause=true",
                "--change",
                "LABEL sandboxd.sandbox=",
                "--change",
                "LABEL sandboxd.ports=",
                "--change",
                "LABEL sandboxd.created_ms=",
                "--change",
                "LABEL sandboxd.expires_ms=",
                "--change",
                "LABEL sandboxd.create_deadline_ms=",
                "--change",
                "LABEL sandboxd.snapshot=1",
                "--change",
                "LABEL sandboxd.snapshot.source=sandboxd-a",
                "--change",
                "LABEL sandboxd.snapshot.labels=e30",
                "--change",
                "LABEL sandboxd.snapshot.created_ms=7",
                "sandboxd-a",
                "sandboxd-snapshot:b"
            ])
        );
    }

    #[test]
    fn snapshot_diff_and_pause_commands() {
        assert_eq!(
            snapshot_list_args(),
            v(&[
                "images",
                "--filter",
                "label=sandboxd.snapshot=1",
                "--format",
                "{{.Repository}}:{{.Tag}}",
                "sandboxd-snapshot"
            ])
        );
        assert_eq!(image_inspect_args(&v(&["a", "b"])), v(&["image", "inspect", "a", "b"]));
        assert_eq!(rmi_args("i"), v(&["rmi", "i"]));
        assert_eq!(
            image_users_args("i"),
            v(&["ps", "-a", "--filter", "ancestor=i", "--format", "{{.Names}}"])
        );
        assert_eq!(inspect_full_args("n"), v(&["inspect", "--type", "container", "n"]));
        assert_eq!(diff_args("n"), v(&["diff", "n"]));
        assert_eq!(pause_args("n"), v(&["pause", "n"]));
        assert_eq!(unpause_args("n"), v(&["unpause", "n"]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_is_one_read_only_file_mount() {
        let a = agent_mount_args(std::path::Path::new("/var/lib/sandboxd/agent-0123"));
        assert_eq!(
            a,
            ["--mount", "type=bind,source=/var/lib/sandboxd/agent-0123,target=/.sandboxd/agent,readonly"]
        );
    }
    use crate::spec::ProviderOptions;

    fn v(items: &[&str]) -> Vec<String> {
        items.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn run_with_defaults() {
        let cfg = DockerCreateConfig::default();
        let spec = SandboxSpec::new("docker://img:1");
        assert_eq!(
            run_args(&cfg, &spec, "sandboxd-x"),
            v(&[
                "run",
                "-d",
                "--name",
                "sandboxd-x",
                "--label",
                "sandboxd.sandbox=1",
                "--init",
                "--pull=missing",
                "--entrypoint",
                "/bin/sh",
                "img:1",
                "-c",
                "while :; do sleep 2147483647; done"
            ])
        );
    }

    #[test]
    fn run_with_everything() {
        let cfg = DockerCreateConfig {
            network: Some("none".into()),
            read_only: true,
            cap_drop: vec!["ALL".into()],
            security_opt: vec!["no-new-privileges".into()],
            pids_limit: Some(128),
            extra_run_args: vec!["--label".into(), "op=1".into()],
            publish_host: "::1".into(),
            use_init: false,
            ..Default::default()
        };
        let spec = SandboxSpec {
            image: "img".into(),
            ttl_s: Some(2.2),
            workdir: Some("/work".into()),
            env: [("A".to_string(), "1".to_string())].into(),
            resources: SandboxResources {
                cpu: Some(1.5),
                memory_mib: Some(256),
                gpu: Some(1),
                disk_gib: Some(9),
                gpu_type: Some("h100".into()),
            },
            ports: vec![8080],
            provider_options: ProviderOptions {
                volumes: vec!["/data:/data".into()],
                run_args: vec!["--tmpfs=/x".into()],
            },
            ..Default::default()
        };
        assert_eq!(
            run_args(&cfg, &spec, "n"),
            v(&[
                "run",
                "-d",
                "--name",
                "n",
                "--label",
                "sandboxd.sandbox=1",
                "--label",
                "sandboxd.ports=8080",
                "-w",
                "/work",
                "--env",
                "A",
                "--cpus",
                "1.5",
                "--memory",
                "256m",
                "--memory-swap",
                "256m",
                "--gpus",
                "1",
                "--network",
                "none",
                "--read-only",
                "--cap-drop",
                "ALL",
                "--security-opt",
                "no-new-privileges",
                "--pids-limit",
                "128",
                "--publish",
                "[::1]::8080/tcp",
                "-v",
                "/data:/data",
                "--pull=missing",
                "--label",
                "op=1",
                "--tmpfs=/x",
                "--entrypoint",
                "/bin/sh",
                "img",
                "-c",
                "while :; do sleep 2147483647; done"
            ])
        );
    }

    #[test]
    fn run_with_custom_entrypoint_and_no_limits() {
        let cfg = DockerCreateConfig { apply_resource_limits: false, ..Default::default() };
        let spec = SandboxSpec {
            image: "img".into(),
            ttl_s: Some(5.0),
            entrypoint: Some(v(&["/bin/app", "--serve"])),
            resources: SandboxResources { cpu: Some(2.0), gpu: Some(1), ..Default::default() },
            ..Default::default()
        };
        let argv = run_args(&cfg, &spec, "n");
        assert!(!argv.contains(&"--rm".to_string()));
        assert!(!argv.contains(&"--cpus".to_string()));
        assert!(!argv.contains(&"--gpus".to_string()), "--gpus is a resource limit: {argv:?}");
        assert!(argv.ends_with(&v(&["--entrypoint", "/bin/app", "img", "--serve"])));
    }

    #[test]
    fn exec_flags_in_order_with_marker_last() {
        let cfg = DockerExecConfig { extra_exec_args: v(&["--privileged"]), ..Default::default() };
        let env: BTreeMap<String, String> = [("K".to_string(), "v".to_string())].into();
        let opts = ExecOptions {
            cwd: Some("/w"),
            env: Some(&env),
            user: Some("0"),
            interactive: true,
            tty: true,
            last_env: Some("SANDBOXD_PTY_SESSION=abc"),
        };
        assert_eq!(
            exec_args(&cfg, "c", &opts, &shell_command("bash", "echo hi")),
            v(&[
                "exec",
                "-i",
                "-t",
                "-w",
                "/w",
                "--env",
                "K",
                "--user",
                "0",
                "--privileged",
                "--env",
                "SANDBOXD_PTY_SESSION=abc",
                "c",
                "bash",
                "-c",
                "echo hi"
            ])
        );
        assert_eq!(
            exec_args(&DockerExecConfig::default(), "c", &ExecOptions::default(), &shell_command("sh", "x")),
            v(&["exec", "c", "sh", "-c", "x"])
        );
    }

    #[test]
    fn env_values_never_reach_the_argv() {
        let env: BTreeMap<String, String> = [
            ("TOKEN".to_string(), "s3cret".to_string()),
            ("DOCKER_HOST".to_string(), "tcp://inner:2375".to_string()),
            ("PATH".to_string(), "/opt/bin:/bin".to_string()),
        ]
        .into();
        let spec = SandboxSpec { image: "img".into(), env: env.clone(), ..Default::default() };
        let run = run_args(&DockerCreateConfig::default(), &spec, "n");
        assert!(run.windows(2).any(|w| w == ["--env", "TOKEN"]), "{run:?}");
        assert!(run.windows(2).any(|w| w == ["--env-file", ENV_FILE_STDIN]), "{run:?}");
        assert!(!run.iter().any(|a| a.contains("s3cret") || a.contains("inner") || a.contains("/opt/bin")));
        let (values, file) = run_env(&env);
        assert_eq!(values, [("TOKEN".to_string(), "s3cret".to_string())]);
        assert_eq!(
            String::from_utf8(file.unwrap()).unwrap(),
            "DOCKER_HOST=tcp://inner:2375\nPATH=/opt/bin:/bin\n"
        );

        let opts = ExecOptions { env: Some(&env), ..Default::default() };
        let exec = exec_args(&DockerExecConfig::default(), "c", &opts, &shell_command("sh", "x"));
        assert_eq!(
            exec,
            v(&[
                "exec",
                "--env",
                "SANDBOXD_ENV_DOCKER_HOST",
                "--env",
                "SANDBOXD_ENV_PATH",
                "--env",
                "TOKEN",
                "c",
                "sh",
                "-c",
                "x"
            ])
        );
        let (values, prefix) = exec_env(&env);
        assert!(values.contains(&("SANDBOXD_ENV_PATH".to_string(), "/opt/bin:/bin".to_string())));
        assert!(values.contains(&("TOKEN".to_string(), "s3cret".to_string())));
        assert!(
            !values.iter().any(|(k, _)| k == "PATH" || k == "DOCKER_HOST"),
            "never set for the client: {values:?}"
        );
        assert_eq!(
            prefix,
            "DOCKER_HOST=\"$SANDBOXD_ENV_DOCKER_HOST\"; export DOCKER_HOST; unset SANDBOXD_ENV_DOCKER_HOST; \
             PATH=\"$SANDBOXD_ENV_PATH\"; export PATH; unset SANDBOXD_ENV_PATH; "
        );
        for key in ["DOCKER_CONFIG", "LD_PRELOAD", "https_proxy", "HOME", "OTEL_EXPORTER_OTLP_ENDPOINT"] {
            assert!(configures_docker_client(key), "{key}");
        }
        for key in ["TOKEN", "TERM", "LANG", "GOPATH", "PYTHONPATH"] {
            assert!(!configures_docker_client(key), "{key}");
        }
        let bad = |k: &str, v: &str| [(k.to_string(), v.to_string())].into();
        assert!(check_docker_env(&bad("DOCKER_X-Y", "1"), false).is_err());
        assert!(check_docker_env(&bad("SANDBOXD_ENV_X", "1"), false).unwrap_err().contains("reserved"));
        assert!(check_docker_env(&bad("PATH", "a\nb"), true).is_err());
        assert!(check_docker_env(&bad("PATH", "a\nb"), false).is_ok(), "exec renames, any value goes");
        assert!(check_docker_env(&bad("TOKEN", "a\nb"), true).is_ok());
    }

    #[test]
    fn small_commands() {
        assert_eq!(rm_args("n"), v(&["rm", "-f", "n"]));
        assert_eq!(start_args("n"), v(&["start", "n"]));
        assert_eq!(port_args("n", 80), v(&["port", "n", "80/tcp"]));
        assert_eq!(cp_in_args("n"), v(&["cp", "-", "n:/"]));
        assert_eq!(cp_out_args("n", "/a b"), v(&["cp", "-L", "n:/a b", "-"]));
        assert_eq!(inspect_args("n")[..4], v(&["inspect", "--type", "container", "-f"])[..]);
        assert_eq!(pull_policy_args("missing").unwrap(), v(&["--pull=missing"]));
        assert!(pull_policy_args("sometimes").unwrap_err().contains("always, missing, never"));
        let ulimits: BTreeMap<String, String> = [("nofile".to_string(), "1024:2048".to_string())].into();
        let sysctls: BTreeMap<String, String> =
            [("net.core.somaxconn".to_string(), "1024".to_string())].into();
        assert_eq!(
            service_option_args(&v(&["/run"]), &ulimits, &sysctls, &v(&["seccomp=unconfined"])),
            v(&[
                "--tmpfs",
                "/run",
                "--ulimit",
                "nofile=1024:2048",
                "--sysctl",
                "net.core.somaxconn=1024",
                "--security-opt",
                "seccomp=unconfined"
            ])
        );
    }

    #[test]
    fn lease_labels_follow_the_ownership_label_and_creates_run_under_their_own_name() {
        let run = run_args(&DockerCreateConfig::default(), &SandboxSpec::new("img"), "c");
        let run = with_labels(run, &[("sandboxd.created_ms", "5".into())]);
        assert_eq!(
            run[..8],
            v(&[
                "run",
                "-d",
                "--name",
                "c",
                "--label",
                "sandboxd.sandbox=1",
                "--label",
                "sandboxd.created_ms=5"
            ])[..]
        );
        let id = crate::spec::SandboxId::generate().to_string();
        let creating = creating_name(&id);
        assert!(creating.starts_with(CREATING_NAME_PREFIX) && creating.ends_with(&id["sandboxd-".len()..]));
        assert!(
            !crate::spec::SandboxId::has_valid_shape(&creating),
            "a create in progress is never reachable by id"
        );
        assert_eq!(rename_args("a", "b"), v(&["rename", "a", "b"]));
        let cfg = DockerCreateConfig {
            extra_run_args: v(&["--label", "team=a", "--label=tier=2", "--init"]),
            ..Default::default()
        };
        let list = sweep_list_args(&cfg);
        assert!(list.last().unwrap().contains("{{.Label \"sandboxd.expires_ms\"}}"));
        assert!(
            list.windows(2).any(|w| w == ["--filter", "label=team=a"])
                && list.windows(2).any(|w| w == ["--filter", "label=tier=2"]),
            "{list:?}"
        );
    }

    #[test]
    fn ids_and_ports() {
        let name = crate::spec::SandboxId::generate().to_string();
        assert!(crate::spec::SandboxId::has_valid_shape(&name), "{name}");
        assert!(!crate::spec::SandboxId::has_valid_shape("--privileged"));
        assert!(!crate::spec::SandboxId::has_valid_shape("sandboxd-../../x"));
        assert!(!crate::spec::SandboxId::has_valid_shape("other-0123456789abcdef0123456789abcdef"));
        assert_eq!(parse_port_binding("127.0.0.1:49153").unwrap(), ("127.0.0.1".into(), 49153));
        assert_eq!(parse_port_binding("[::]:8080").unwrap(), ("::".into(), 8080));
        assert!(parse_port_binding("nonsense").is_err());
        assert_eq!(http_endpoint("::1", 80), "http://[::1]:80");
        assert_eq!(publish_arg("127.0.0.1", 80), "127.0.0.1::80/tcp");
    }
}
