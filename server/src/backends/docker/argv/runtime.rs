//! `docker network` and `docker volume`, and the `docker run` flags of a spec's runtime
//! requirements (its network, added capabilities, `/dev/shm`, named volumes). Names reach
//! these command lines only after `runtime::validate_name`, so none can be read as a flag.

use serde::{Deserialize, Serialize};

use super::*;
use crate::core::runtime::{scoped_name, VolumeMount, VOLUMES_DIR_IN_SANDBOX};
use crate::core::spec::SandboxSpec;

/// Docker name prefix of the networks this service makes for `spec.network`.
pub const NETWORK_PREFIX: &str = "sandboxd-net-";

/// Docker name prefix of the named volumes this service makes for `spec.volumes`.
pub const VOLUME_PREFIX: &str = "sandboxd-vol-";

/// Label on a sandbox with runtime requirements: them, as JSON, so a fork's children get the
/// same and a close knows which network may now be empty.
pub const RUNTIME_LABEL: &str = "sandboxd.runtime";

/// What `RUNTIME_LABEL` holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RuntimeLabel {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cap_add: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shm_size_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeMount>,
}

impl RuntimeLabel {
    /// The label of `spec`; `None` when it asks for nothing.
    pub fn of(spec: &SandboxSpec) -> Option<Self> {
        let label = Self {
            network: spec.network.clone(),
            cap_add: spec.cap_add.clone(),
            shm_size_bytes: spec.shm_size_bytes,
            volumes: spec.volumes.clone(),
        };
        (label != Self::default()).then_some(label)
    }

    /// From a container's label; anything unreadable is no requirement (a label a stranger set
    /// is refused by ownership long before this is read).
    pub fn parse(value: &str) -> Self {
        serde_json::from_str(value).unwrap_or_default()
    }

    /// Back into a spec's fields (a fork's children).
    pub fn apply(&self, spec: &mut SandboxSpec) {
        spec.network = self.network.clone();
        spec.cap_add = self.cap_add.clone();
        spec.shm_size_bytes = self.shm_size_bytes;
        spec.volumes = self.volumes.clone();
    }
}

/// The Docker network of `spec.network` for `tenant`.
pub fn network_name(tenant: Option<&str>, network: &str) -> String {
    scoped_name(NETWORK_PREFIX, tenant, network)
}

/// The Docker volume of a `VolumeMount.name` for `tenant`.
pub fn volume_name(tenant: Option<&str>, volume: &str) -> String {
    scoped_name(VOLUME_PREFIX, tenant, volume)
}

/// Where a volume shown through a subpath is mounted: the `i`-th of the spec's volumes.
pub fn subpath_mount_dir(i: usize) -> String {
    format!("{VOLUMES_DIR_IN_SANDBOX}/{i}")
}

/// The `docker run` flags of `spec`'s runtime requirements (the label, the network, caps,
/// `/dev/shm`, mounts). `--network` here replaces the operator's `create.network`, which the
/// backend has checked is not `none`.
pub fn runtime_run_args(spec: &SandboxSpec) -> Vec<String> {
    let mut a = Vec::new();
    let Some(label) = RuntimeLabel::of(spec) else { return a };
    let tenant = spec.tenant.as_deref();
    a.extend([
        s("--label"),
        format!("{RUNTIME_LABEL}={}", serde_json::to_string(&label).unwrap_or_default()),
    ]);
    if let Some(network) = &spec.network {
        a.extend([s("--network"), network_name(tenant, network)]);
    }
    for cap in &spec.cap_add {
        let name = crate::core::runtime::capability("spec.cap_add", cap).unwrap_or_else(|_| cap.clone());
        a.extend([s("--cap-add"), name]);
    }
    if let Some(size) = spec.shm_size_bytes {
        a.extend([s("--shm-size"), format!("{size}b")]);
    }
    for (i, volume) in spec.volumes.iter().enumerate() {
        let target = match &volume.subpath {
            Some(_) => subpath_mount_dir(i),
            None => volume.target.clone(),
        };
        let mut mount = format!("type=volume,source={},target={target}", volume_name(tenant, &volume.name));
        if volume.read_only {
            mount.push_str(",readonly");
        }
        a.extend([s("--mount"), mount]);
    }
    a
}

/// The labels this service's networks and volumes carry: its ownership label, the tenant's,
/// and the operator's own `--label`s of `extra_run_args` (deployments kept apart).
pub fn resource_labels(tenant: Option<&str>, operator_labels: &[String]) -> Vec<String> {
    let mut labels = vec![format!("{SANDBOX_LABEL}=1")];
    if let Some(t) = tenant {
        labels.push(format!("{}={t}", crate::auth::TENANT_LABEL));
    }
    labels.extend(operator_labels.iter().cloned());
    labels
}

/// `docker network create` of a bridge network carrying `labels`.
pub fn network_create_args(name: &str, labels: &[String]) -> Vec<String> {
    let mut a = vec![s("network"), s("create"), s("--driver"), s("bridge")];
    for label in labels {
        a.extend([s("--label"), label.clone()]);
    }
    a.push(s(name));
    a
}

/// `docker volume create` of a local volume carrying `labels` (a no-op for an existing name).
pub fn volume_create_args(name: &str, labels: &[String]) -> Vec<String> {
    let mut a = vec![s("volume"), s("create")];
    for label in labels {
        a.extend([s("--label"), label.clone()]);
    }
    a.push(s(name));
    a
}

/// The labels of a network or volume as JSON (`kind` is `network` or `volume`).
pub fn labels_inspect_args(kind: &str, name: &str) -> Vec<String> {
    vec![s(kind), s("inspect"), s("--format"), s("{{json .Labels}}"), s(name)]
}

/// [`network_create_args`] of a network on `subnet` (from `docker.create.tenant_subnets`).
pub fn with_subnet(mut create: Vec<String>, subnet: &str) -> Vec<String> {
    let at = create.len() - 1;
    create.splice(at..at, [s("--subnet"), s(subnet)]);
    create
}

/// The full ids of the networks named exactly `name` (Engine 20.10 may hold two of a name
/// that two callers made at once).
pub fn network_ids_args(name: &str) -> Vec<String> {
    vec![s("network"), s("ls"), s("-q"), s("--no-trunc"), s("--filter"), format!("name=^{name}$")]
}

/// Every network's id (whose subnets are taken).
pub fn all_network_ids_args() -> Vec<String> {
    vec![s("network"), s("ls"), s("-q"), s("--no-trunc")]
}

/// The IPv4/IPv6 subnets of networks `ids`, space-separated.
pub fn network_subnets_args(ids: &[String]) -> Vec<String> {
    let mut a =
        vec![s("network"), s("inspect"), s("--format"), s("{{range .IPAM.Config}}{{.Subnet}} {{end}}")];
    a.extend(ids.iter().cloned());
    a
}

/// The names of this deployment's networks: those carrying every one of `labels`.
pub fn labelled_networks_args(labels: &[String]) -> Vec<String> {
    let mut a = vec![s("network"), s("ls"), s("--format"), s("{{.Name}}")];
    for label in labels {
        a.extend([s("--filter"), format!("label={label}")]);
    }
    a
}

/// The networks of every sandbox (any state, any deployment), comma-separated per line: a
/// created container not started yet holds no endpoint, but is listed here.
pub fn sandbox_networks_args() -> Vec<String> {
    vec![
        s("ps"),
        s("-a"),
        s("--filter"),
        format!("label={SANDBOX_LABEL}=1"),
        s("--format"),
        s("{{.Networks}}"),
    ]
}

/// How many containers Docker shows on network `name` (a number).
pub fn network_containers_args(name: &str) -> Vec<String> {
    vec![s("network"), s("inspect"), s("--format"), s("{{len .Containers}}"), s("--"), s(name)]
}

/// `docker network rm` / `docker volume rm`.
pub fn resource_rm_args(kind: &str, name: &str) -> Vec<String> {
    vec![s(kind), s("rm"), s(name)]
}

/// This service's volumes carrying every one of `labels`: `name \t CreatedAt` per line.
pub fn volume_ls_args(labels: &[String]) -> Vec<String> {
    let mut a = vec![s("volume"), s("ls"), s("--quiet")];
    for label in labels {
        a.extend([s("--filter"), format!("label={label}")]);
    }
    a
}

/// The containers (running or not) that mount volume `name`.
pub fn containers_using_volume_args(name: &str) -> Vec<String> {
    vec![s("ps"), s("-aq"), s("--filter"), format!("volume={name}")]
}

/// What `NetworkAddress` needs of a container in one inspect: `labels-json \t state`, then one
/// `network-name \t ip` line per network it is on.
pub fn network_addresses_args(sandbox_id: &str) -> Vec<String> {
    vec![
        s("inspect"),
        s("--type"),
        s("container"),
        s("--format"),
        s("{{json .Config.Labels}}\t{{.State.Status}}\n{{range $k, $v := .NetworkSettings.Networks}}{{$k}}\t{{$v.IPAddress}}\n{{end}}"),
        s(sandbox_id),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SandboxSpec {
        SandboxSpec {
            network: Some("lab".into()),
            cap_add: vec!["cap_sys_ptrace".into()],
            shm_size_bytes: Some(1 << 27),
            volumes: vec![
                VolumeMount { name: "data".into(), target: "/data".into(), read_only: true, subpath: None },
                VolumeMount {
                    name: "data".into(),
                    target: "/work".into(),
                    read_only: false,
                    subpath: Some("tasks/1".into()),
                },
            ],
            tenant: Some("team-a".into()),
            ..SandboxSpec::new("img")
        }
    }

    #[test]
    fn run_flags_name_the_tenants_network_and_volumes() {
        let a = runtime_run_args(&spec());
        let pos = |flag: &str| a.iter().position(|x| x == flag).unwrap();
        assert_eq!(a[pos("--network") + 1], "sandboxd-net-team-a.lab");
        assert_eq!(a[pos("--cap-add") + 1], "SYS_PTRACE");
        assert_eq!(a[pos("--shm-size") + 1], "134217728b");
        let mounts: Vec<&String> =
            a.iter().zip(a.iter().skip(1)).filter(|(f, _)| *f == "--mount").map(|(_, m)| m).collect();
        assert_eq!(
            mounts,
            [
                "type=volume,source=sandboxd-vol-team-a.data,target=/data,readonly",
                "type=volume,source=sandboxd-vol-team-a.data,target=/.sandboxd/volumes/1",
            ]
        );
        let label = a.iter().find(|x| x.starts_with("sandboxd.runtime=")).unwrap();
        let parsed = RuntimeLabel::parse(label.strip_prefix("sandboxd.runtime=").unwrap());
        let mut back = SandboxSpec::new("img");
        parsed.apply(&mut back);
        assert_eq!((back.network, back.volumes.len()), (Some("lab".into()), 2));
        assert!(runtime_run_args(&SandboxSpec::new("img")).is_empty(), "no requirement, no flag");
    }

    #[test]
    fn resources_carry_the_owner_tenant_and_operator_labels() {
        let labels = resource_labels(Some("t"), &["sandboxd.test=1".into()]);
        assert_eq!(labels, ["sandboxd.sandbox=1", "sandboxd.tenant=t", "sandboxd.test=1"]);
        assert_eq!(
            network_create_args("sandboxd-net-x", &labels[..1]),
            ["network", "create", "--driver", "bridge", "--label", "sandboxd.sandbox=1", "sandboxd-net-x"]
        );
        assert_eq!(volume_create_args("v", &[]), ["volume", "create", "v"]);
    }
}
