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

/// `docker run -d …`: the detached keep-alive with the image ENTRYPOINT overridden (or the
/// spec's own entrypoint), every flag from the config and spec.
pub fn run_args(cfg: &DockerCreateConfig, spec: &SandboxSpec, name: &str) -> Vec<String> {
    let image = normalize_image(&spec.image);
    let mut a = vec![s("run"), s("-d"), s("--name"), s(name), s("--label"), format!("{SANDBOX_LABEL}=1")];
    if !spec.ports.is_empty() {
        let ports: Vec<String> = spec.ports.iter().map(u16::to_string).collect();
        a.extend([s("--label"), format!("{PORTS_LABEL}={}", ports.join(","))]);
    }
    if cfg.use_init {
        a.push(s("--init"));
    }
    if let Some(dir) = &spec.workdir {
        a.extend([s("-w"), dir.clone()]);
    }
    for (k, v) in &spec.env {
        a.extend([s("--env"), format!("{k}={v}")]);
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
        for (k, v) in env {
            a.extend([s("--env"), format!("{k}={v}")]);
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
                "A=1",
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
                "K=v",
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
