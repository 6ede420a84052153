//! The docker command lines of cluster mode, as pure functions: `service create` (a sandbox),
//! `service ps` / `ls` / `inspect` / `rm`, `node inspect`, `info` and the local `ps` that finds a
//! task's container. What Swarm has no field for is refused here, naming the option.

use std::collections::BTreeMap;

use crate::backends::docker::argv::{configures_docker_client, ENV_FILE_STDIN, PORTS_LABEL, SANDBOX_LABEL};
use crate::config::{ClusterSection, DockerCreateConfig};
use crate::core::spec::{normalize_image, SandboxSpec};
use crate::error::ProviderError;

pub use crate::backends::docker::labels::SERVICE_NAME_LABEL;

/// A node label that overrides the node's sandboxd address (`HOST:PORT`).
pub const NODE_ADDR_LABEL: &str = "sandboxd.addr";

fn s(v: &str) -> String {
    v.to_string()
}

/// What of the operator's `docker.create` config a Swarm service cannot carry: refused when the
/// server starts in cluster mode, never dropped silently.
pub fn check_config(cfg: &DockerCreateConfig) -> Result<(), crate::config::ConfigError> {
    use crate::config::ConfigError;
    let refuse = |field: &str, why: &str| {
        Err(ConfigError::new(field, format!("is not supported with cluster.mode swarm: {why}")))
    };
    if !cfg.security_opt.is_empty() {
        return refuse("create.security_opt", "docker service create has no --security-opt");
    }
    if !cfg.extra_run_args.is_empty() {
        return refuse("create.extra_run_args", "these are `docker run` flags; a sandbox is a Swarm service");
    }
    Ok(())
}

/// The defaults for untrusted code a Swarm service cannot carry (`docker service create` has
/// no `--security-opt` nor `--storage-opt`, and the service's network is `create.network`):
/// said at start, so the operator knows these walls are missing in cluster mode.
pub fn not_on_swarm(cfg: &DockerCreateConfig) -> Vec<&'static str> {
    let mut keys = Vec::new();
    if cfg.no_new_privileges {
        keys.push("docker.create.no_new_privileges");
    }
    if cfg.default_disk_gib.is_some() {
        keys.push("docker.create.default_disk_gib");
    }
    if cfg.tenant_network && cfg.network.is_none() {
        keys.push("docker.create.tenant_network");
    }
    keys
}

/// What of a spec a Swarm service cannot carry, as INVALID_ARGUMENT naming the option.
pub fn check_spec(spec: &SandboxSpec) -> Result<(), ProviderError> {
    let refuse = |field: &str, why: &str| {
        Err(ProviderError::invalid(
            field,
            format!("is not supported in cluster mode (cluster.mode swarm): {why}"),
        ))
    };
    if !spec.provider_options.run_args.is_empty() {
        return refuse(
            "spec.provider_options.run_args",
            "these are `docker run` flags; a sandbox is a Swarm service",
        );
    }
    if !spec.provider_options.volumes.is_empty() {
        return refuse(
            "spec.provider_options.volumes",
            "a host path exists on one node, and Swarm picks the node",
        );
    }
    if spec.resources.gpu.is_some_and(|g| g > 0) {
        return refuse(
            "spec.resources.gpu",
            "Swarm places GPUs only as generic resources the nodes advertise",
        );
    }
    if !spec.ports.is_empty() {
        return refuse("spec.ports", "a published port would be on whichever node Swarm picks");
    }
    if spec.resources.disk_gib.is_some() {
        return refuse(
            "spec.resources.disk_gib",
            "docker service create has no disk bound (no --storage-opt)",
        );
    }
    if spec.network.is_some() {
        return refuse(
            "spec.network",
            "a service network of one node is not the cluster's (an overlay network is not made)",
        );
    }
    if !spec.cap_add.is_empty() {
        return refuse("spec.cap_add", "not offered in cluster mode");
    }
    if spec.shm_size_bytes.is_some() {
        return refuse("spec.shm_size_bytes", "Swarm services have no --shm-size");
    }
    if !spec.volumes.is_empty() {
        return refuse("spec.volumes", "a named volume lives on one node, and Swarm picks the node");
    }
    if spec.egress.is_some() {
        return refuse(
            "spec.network_policy",
            "egress rules are enforced by the node's server, not offered in cluster mode",
        );
    }
    Ok(())
}

/// Labels of the service and of its task's container: the ownership label and what the
/// owning node's docker backend reads back (ports, tenant, metadata).
fn sandbox_labels(spec: &SandboxSpec) -> Vec<(String, String)> {
    let mut labels = vec![(s(SANDBOX_LABEL), s("1"))];
    // The runtime it asked for (its node runs it: `runtimes.rs`), for List, Status and Watch.
    if let Some(runtime) = &spec.runtime {
        labels.push((s(crate::backends::docker::labels::OCI_RUNTIME_LABEL), runtime.clone()));
    }
    if !spec.ports.is_empty() {
        let ports: Vec<String> = spec.ports.iter().map(u16::to_string).collect();
        labels.push((s(PORTS_LABEL), ports.join(",")));
    }
    if let Some(tenant) = &spec.tenant {
        labels.push((s(crate::auth::TENANT_LABEL), tenant.clone()));
        if let Some(cpu) = spec.resources.cpu {
            labels.push((s(crate::auth::CPUS_LABEL), format!("{cpu}")));
        }
        if let Some(mib) = spec.resources.memory_mib {
            labels.push((s(crate::auth::MEMORY_LABEL), mib.to_string()));
        }
    }
    for (k, v) in &spec.metadata {
        labels.push((format!("{}{k}", crate::backends::docker::labels::METADATA_LABEL_PREFIX), v.clone()));
    }
    // A cluster pool's member: its pool, and the pool's key (`PoolMember::owner` in cluster
    // mode: the pool is the cluster's, not one server's).
    if let Some(member) = &spec.pool_member {
        labels.push((s(crate::backends::docker::labels::POOL_LABEL), member.pool.clone()));
        labels.push((s(super::records::POOL_KEY_LABEL), member.owner.clone()));
    }
    labels
}

/// One word as the docker CLI's `--entrypoint` (a shell command line it splits) reads it back.
fn shell_word(word: &str) -> String {
    let plain =
        !word.is_empty() && word.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-+=:,@%".contains(&b));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// `docker service create`: sandbox `id` as a one-replica service that is never restarted,
/// placed by Swarm within `cluster.constraints`, reserving (and limited to) `spec.resources`,
/// its lease and create time as service labels (`lease`: `(key, value)` pairs), the container
/// labelled as the docker backend expects of a sandbox it owns. Env values travel in the
/// client's environment (`--env KEY`), as for `docker run`. Check the spec with [`check_spec`]
/// first.
pub fn service_create_args(
    cfg: &DockerCreateConfig,
    cluster: &ClusterSection,
    spec: &SandboxSpec,
    id: &str,
    lease: &[(&str, String)],
) -> Vec<String> {
    let image = normalize_image(&spec.image);
    let mut a = vec![
        s("service"),
        s("create"),
        s("--detach"),
        s("--quiet"),
        s("--no-resolve-image"),
        s("--name"),
        s(id),
        s("--replicas"),
        s("1"),
        s("--restart-condition"),
        s("none"),
    ];
    for (k, v) in sandbox_labels(spec) {
        a.extend([s("--label"), format!("{k}={v}")]);
        a.extend([s("--container-label"), format!("{k}={v}")]);
    }
    for (k, v) in lease {
        a.extend([s("--label"), format!("{k}={v}")]);
    }
    for constraint in &cluster.constraints {
        a.extend([s("--constraint"), constraint.clone()]);
    }
    if cfg.apply_resource_limits {
        // What the spec asks for is reserved (placement) and a limit; the server's defaults
        // (`create.default_cpu`, `default_memory_mib`) where it asks nothing are limits only,
        // so they never keep Swarm from placing a sandbox.
        let limits = crate::backends::docker::argv::effective_resources(cfg, &spec.resources);
        if let Some(cpu) = spec.resources.cpu {
            a.extend([s("--reserve-cpu"), format!("{cpu}")]);
        }
        if let Some(cpu) = limits.cpu {
            a.extend([s("--limit-cpu"), format!("{cpu}")]);
        }
        if let Some(mib) = spec.resources.memory_mib {
            a.extend([s("--reserve-memory"), format!("{mib}m")]);
        }
        if let Some(mib) = limits.memory_mib {
            a.extend([s("--limit-memory"), format!("{mib}m")]);
        }
    }
    if cfg.use_init {
        a.push(s("--init"));
    }
    if let Some(dir) = &spec.workdir {
        a.extend([s("--workdir"), dir.clone()]);
    }
    for k in spec.env.keys().filter(|k| !configures_docker_client(k)) {
        a.extend([s("--env"), k.clone()]);
    }
    if spec.env.keys().any(|k| configures_docker_client(k)) {
        a.extend([s("--env-file"), s(ENV_FILE_STDIN)]);
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
    if let Some(limit) = cfg.pids_limit {
        a.extend([s("--limit-pids"), limit.to_string()]);
    }
    match &spec.entrypoint {
        Some(entrypoint) if !entrypoint.is_empty() => {
            a.extend([s("--entrypoint"), shell_word(&entrypoint[0]), s("--"), s(image)]);
            a.extend(entrypoint[1..].iter().cloned());
        }
        _ => {
            a.extend([
                s("--entrypoint"),
                shell_word(&cfg.keepalive_shell),
                s("--"),
                s(image),
                s("-c"),
                cfg.keepalive_cmd.clone(),
            ]);
        }
    }
    a
}

/// Tasks of the services `ids`, newest first per service, one line each:
/// `service.slot \t node hostname \t desired state \t current state \t error`.
pub fn service_ps_args(ids: &[String]) -> Vec<String> {
    let mut a = vec![
        s("service"),
        s("ps"),
        s("--no-trunc"),
        s("--format"),
        s("{{.Name}}\t{{.Node}}\t{{.DesiredState}}\t{{.CurrentState}}\t{{.Error}}"),
    ];
    a.extend(ids.iter().cloned());
    a
}

/// The ids of the sandbox services carrying every label of `filters` (already `label=…`).
pub fn service_ls_args(filters: &[String]) -> Vec<String> {
    let mut a = vec![s("service"), s("ls"), s("-q"), s("--filter"), format!("label={SANDBOX_LABEL}=1")];
    for f in filters {
        a.extend([s("--filter"), f.clone()]);
    }
    a
}

/// One line per service: `name \t created (JSON) \t labels (JSON) \t image \t workdir`.
pub fn service_inspect_args(ids: &[String]) -> Vec<String> {
    let mut a = vec![
        s("service"),
        s("inspect"),
        s("--format"),
        s("{{.Spec.Name}}\t{{json .CreatedAt}}\t{{json .Spec.Labels}}\t{{.Spec.TaskTemplate.ContainerSpec.Image}}\t{{json .Spec.TaskTemplate.Resources}}\t{{.Spec.TaskTemplate.ContainerSpec.Dir}}"),
    ];
    a.extend(ids.iter().cloned());
    a
}

/// `docker service rm IDS…`.
pub fn service_rm_args(ids: &[String]) -> Vec<String> {
    let mut a = vec![s("service"), s("rm")];
    a.extend(ids.iter().cloned());
    a
}

/// `id \t hostname \t state \t address \t availability \t sandboxd.addr label` of a node (by id
/// or hostname).
pub fn node_inspect_args(node: &str) -> Vec<String> {
    vec![
        s("node"),
        s("inspect"),
        s("--format"),
        format!(
            "{{{{.ID}}}}\t{{{{.Description.Hostname}}}}\t{{{{.Status.State}}}}\t{{{{.Status.Addr}}}}\t{{{{.Spec.Availability}}}}\t{{{{index .Spec.Labels \"{NODE_ADDR_LABEL}\"}}}}"
        ),
        s(node),
    ]
}

/// `node id \t local node state \t is manager` of the daemon this server talks to.
pub fn swarm_info_args() -> Vec<String> {
    vec![
        s("info"),
        s("--format"),
        s("{{.Swarm.NodeID}}\t{{.Swarm.LocalNodeState}}\t{{.Swarm.ControlAvailable}}"),
    ]
}

/// The container of service `id`'s task on this daemon, if it is here: `full id \t pool key`
/// (the key empty unless it is a pool's member).
pub fn local_task_container_args(id: &str) -> Vec<String> {
    vec![
        s("ps"),
        s("-a"),
        s("--no-trunc"),
        s("--filter"),
        format!("label={SERVICE_NAME_LABEL}={id}"),
        s("--format"),
        format!("{{{{.ID}}}}\t{{{{.Label \"{}\"}}}}", super::records::POOL_KEY_LABEL),
    ]
}

/// Marks pool member `id` ready to be claimed, with the shell its node found (a label-only
/// update: the task is not restarted).
pub fn mark_ready_args(id: &str, shell: &str) -> Vec<String> {
    vec![
        s("service"),
        s("update"),
        s("--detach"),
        s("--quiet"),
        s("--label-add"),
        format!("{}={shell}", super::records::POOL_READY_LABEL),
        s(id),
    ]
}

/// `--filter label=…` for metadata and tenant (ANDed by docker), as for containers.
pub fn list_filters(labels: &BTreeMap<String, String>, tenant: Option<&str>) -> Vec<String> {
    let mut f: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("label={}{k}={v}", crate::backends::docker::labels::METADATA_LABEL_PREFIX))
        .collect();
    if let Some(tenant) = tenant {
        f.push(format!("label={}={tenant}", crate::auth::TENANT_LABEL));
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::spec::SandboxResources;

    const ID: &str = "sandboxd-0123456789abcdef0123456789abcdef";

    fn spec() -> SandboxSpec {
        let mut spec = SandboxSpec::new("docker://sandboxd-test/busybox:1");
        spec.metadata.insert("run".into(), "r1".into());
        spec.env.insert("A".into(), "secret".into());
        spec.workdir = Some("/work".into());
        spec.resources = SandboxResources { cpu: Some(0.5), memory_mib: Some(128), ..Default::default() };
        spec
    }

    #[test]
    fn a_sandbox_is_a_one_replica_service_never_restarted() {
        let cluster = ClusterSection { constraints: vec!["node.role==manager".into()], ..Default::default() };
        let lease = [("sandboxd.created_ms", "1".to_string()), ("sandboxd.expires_ms", "2".to_string())];
        let a = service_create_args(&DockerCreateConfig::default(), &cluster, &spec(), ID, &lease);
        let expected: Vec<String> = [
            "service",
            "create",
            "--detach",
            "--quiet",
            "--no-resolve-image",
            "--name",
            ID,
            "--replicas",
            "1",
            "--restart-condition",
            "none",
            "--label",
            "sandboxd.sandbox=1",
            "--container-label",
            "sandboxd.sandbox=1",
            "--label",
            "sandboxd.meta.run=r1",
            "--container-label",
            "sandboxd.meta.run=r1",
            "--label",
            "sandboxd.created_ms=1",
            "--label",
            "sandboxd.expires_ms=2",
            "--constraint",
            "node.role==manager",
            "--reserve-cpu",
            "0.5",
            "--limit-cpu",
            "0.5",
            "--reserve-memory",
            "128m",
            "--limit-memory",
            "128m",
            "--init",
            "--workdir",
            "/work",
            "--env",
            "A",
            "--cap-drop",
            "AUDIT_WRITE",
            "--cap-drop",
            "MKNOD",
            "--cap-drop",
            "NET_RAW",
            "--cap-drop",
            "SETFCAP",
            "--cap-drop",
            "SETPCAP",
            "--cap-drop",
            "SYS_CHROOT",
            "--limit-pids",
            "4096",
            "--entrypoint",
            "/bin/sh",
            "--",
            "sandboxd-test/busybox:1",
            "-c",
            "while :; do sleep 2147483647; done",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(a, expected);
        // The env value is never on the argv.
        assert!(!a.iter().any(|x| x.contains("secret")));
    }

    #[test]
    fn the_servers_default_caps_are_limits_never_reservations() {
        let a = service_create_args(
            &DockerCreateConfig::default(),
            &ClusterSection::default(),
            &SandboxSpec::new("img"),
            ID,
            &[],
        );
        let value = |flag: &str| a.iter().position(|x| x == flag).map(|i| a[i + 1].as_str());
        assert_eq!((value("--limit-cpu"), value("--limit-memory")), (Some("2"), Some("4096m")));
        assert_eq!((value("--reserve-cpu"), value("--reserve-memory")), (None, None));
        assert_eq!(not_on_swarm(&DockerCreateConfig::default()).len(), 3);
    }

    #[test]
    fn an_entrypoint_is_quoted_for_the_clis_split() {
        let mut spec = SandboxSpec::new("img");
        spec.entrypoint = Some(vec!["/opt/my tool".into(), "a b".into()]);
        let a =
            service_create_args(&DockerCreateConfig::default(), &ClusterSection::default(), &spec, ID, &[]);
        let tail: Vec<&str> = a[a.len() - 5..].iter().map(String::as_str).collect();
        assert_eq!(tail, ["--entrypoint", "'/opt/my tool'", "--", "img", "a b"]);
        assert_eq!(shell_word("it's"), r"'it'\''s'");
    }

    #[test]
    fn what_swarm_cannot_express_is_named() {
        type Change = fn(&mut SandboxSpec);
        let cases: [(Change, &str); 4] = [
            (|s| s.provider_options.run_args = vec!["--privileged".into()], "spec.provider_options.run_args"),
            (|s| s.provider_options.volumes = vec!["/a:/b".into()], "spec.provider_options.volumes"),
            (|s| s.resources.gpu = Some(1), "spec.resources.gpu"),
            (|s| s.ports = vec![80], "spec.ports"),
        ];
        for (change, field) in cases {
            let mut s = SandboxSpec::new("img");
            change(&mut s);
            match check_spec(&s) {
                Err(ProviderError::InvalidArgument { field: f, message }) => {
                    assert_eq!(f, field);
                    assert!(message.contains("cluster mode"), "{message}");
                }
                other => panic!("{field}: {other:?}"),
            }
        }
        assert!(check_spec(&spec()).is_ok());
        let cfg = DockerCreateConfig { security_opt: vec!["no-new-privileges".into()], ..Default::default() };
        assert_eq!(check_config(&cfg).unwrap_err().field, "create.security_opt");
        // A runtime is placement's (`runtimes.rs`): the nodes whose tasks run on it.
        let cfg = DockerCreateConfig { runtime: "runsc".into(), ..Default::default() };
        assert!(check_config(&cfg).is_ok());
        let runsc = SandboxSpec { runtime: Some("runsc".into()), ..SandboxSpec::new("img") };
        assert!(check_spec(&runsc).is_ok());
        let labels = sandbox_labels(&runsc);
        assert!(labels.contains(&(s("sandboxd.oci_runtime"), s("runsc"))), "{labels:?}");
    }

    #[test]
    fn lookups_and_listing() {
        assert_eq!(
            local_task_container_args(ID),
            [
                "ps",
                "-a",
                "--no-trunc",
                "--filter",
                &format!("label=com.docker.swarm.service.name={ID}"),
                "--format",
                "{{.ID}}\t{{.Label \"sandboxd.pool.key\"}}"
            ]
        );
        assert_eq!(
            mark_ready_args(ID, "/bin/sh"),
            ["service", "update", "--detach", "--quiet", "--label-add", "sandboxd.pool.ready=/bin/sh", ID]
        );
        assert_eq!(
            node_inspect_args("n1")[3],
            "{{.ID}}\t{{.Description.Hostname}}\t{{.Status.State}}\t{{.Status.Addr}}\t{{.Spec.Availability}}\t{{index .Spec.Labels \"sandboxd.addr\"}}"
        );
        let labels = BTreeMap::from([("run".to_string(), "r1".to_string())]);
        assert_eq!(
            service_ls_args(&list_filters(&labels, Some("red"))),
            [
                "service",
                "ls",
                "-q",
                "--filter",
                "label=sandboxd.sandbox=1",
                "--filter",
                "label=sandboxd.meta.run=r1",
                "--filter",
                "label=sandboxd.tenant=red"
            ]
        );
        assert_eq!(service_rm_args(&[ID.to_string()]), ["service", "rm", ID]);
    }
}
