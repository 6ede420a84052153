//! The defaults that hold for untrusted code, as `docker` arguments: the server's resource
//! caps for a spec that names none, `no-new-privileges`, a disk bound through the storage
//! driver (`--storage-opt size=`), the tenant's own network, and the commands of the loop
//! disk (`docker/disk.rs`). Nothing a client sends reaches these lines but numbers.

use super::*;
use crate::config::{DiskBound, DockerCreateConfig};
use crate::core::spec::{SandboxResources, SandboxSpec};

/// The `spec.network` a sandbox without one is put on (scoped to its tenant, so
/// `sandboxd-net-<tenant>.default`): the tenant's own bridge, shared by its sandboxes only.
pub const TENANT_NETWORK: &str = "default";

/// The network of members of everyone's pools (made before any tenant claims them): a bridge
/// without inter-container traffic (`enable_icc=false`), so sandboxes claimed by different
/// tenants never reach each other; each still reaches what its egress allows.
pub const ISOLATED_NETWORK: &str = "isolated";

/// `docker network create`'s option that keeps a bridge's containers apart.
pub const NO_ICC_OPTION: &str = "com.docker.network.bridge.enable_icc=false";

/// The tenant network's `spec.network` for a deployment labelled `operator_labels` (the
/// `--label`s of `create.extra_run_args`): [`TENANT_NETWORK`], with a digest of those labels
/// when there are any, so deployments labelled apart on one daemon never meet on (or fight
/// over) one network.
pub fn tenant_network_name(operator_labels: &[String]) -> String {
    deployment_network(TENANT_NETWORK, operator_labels)
}

/// [`ISOLATED_NETWORK`] for a deployment labelled `operator_labels`.
pub fn isolated_network_name(operator_labels: &[String]) -> String {
    deployment_network(ISOLATED_NETWORK, operator_labels)
}

fn deployment_network(base: &str, operator_labels: &[String]) -> String {
    use sha2::{Digest, Sha256};
    if operator_labels.is_empty() {
        return base.to_string();
    }
    let mut sorted = operator_labels.to_vec();
    sorted.sort();
    let digest = Sha256::digest(sorted.join("\n").as_bytes());
    let hex: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    format!("{base}-{hex}")
}

/// `resources` with the server's defaults (`create.default_*`) where the spec names none.
pub fn effective_resources(cfg: &DockerCreateConfig, resources: &SandboxResources) -> SandboxResources {
    SandboxResources {
        cpu: resources.cpu.or(cfg.default_cpu),
        memory_mib: resources.memory_mib.or(cfg.default_memory_mib),
        disk_gib: resources.disk_gib.or(cfg.default_disk_gib),
        ..resources.clone()
    }
}

/// The disk bound of a sandbox in bytes (`None`: unbounded, as the operator configured).
pub fn disk_bound_bytes(cfg: &DockerCreateConfig, spec: &SandboxSpec) -> Option<u64> {
    if !cfg.apply_resource_limits {
        return None;
    }
    effective_resources(cfg, &spec.resources).disk_gib.map(|g| g.saturating_mul(1 << 30))
}

/// `--security-opt no-new-privileges` and `--storage-opt size=` where configured.
pub fn walls_flags(cfg: &DockerCreateConfig, spec: &SandboxSpec) -> Vec<String> {
    let mut a = Vec::new();
    if cfg.no_new_privileges && !cfg.security_opt.iter().any(|o| o.starts_with("no-new-privileges")) {
        a.extend([s("--security-opt"), s("no-new-privileges")]);
    }
    if cfg.disk_bound == DiskBound::StorageOpt {
        if let Some(bytes) = disk_bound_bytes(cfg, spec) {
            a.extend([s("--storage-opt"), format!("size={bytes}")]);
        }
    }
    a
}

/// `args` without the `--security-opt no-new-privileges` that [`walls_flags`] adds by default
/// (`docker.create.no_new_privileges`); one the operator put in `security_opt` stays.
pub fn drop_default_no_new_privileges(cfg: &DockerCreateConfig, args: &mut Vec<String>) {
    if !cfg.no_new_privileges || cfg.security_opt.iter().any(|o| o.starts_with("no-new-privileges")) {
        return;
    }
    if let Some(at) = args.windows(2).position(|w| w[0] == "--security-opt" && w[1] == "no-new-privileges") {
        args.drain(at..at + 2);
    }
}

/// Whether operator or client `docker run` flags choose the network themselves.
pub fn sets_network(args: &[String]) -> bool {
    args.iter().any(|a| {
        matches!(a.as_str(), "--network" | "--net") || a.starts_with("--network=") || a.starts_with("--net=")
    })
}

/// Whether a sandbox of `spec` goes on its tenant's network: no network of its own, none
/// set by the operator (`create.network`, a `--network` run flag) and `create.tenant_network`.
pub fn wants_tenant_network(cfg: &DockerCreateConfig, spec: &SandboxSpec) -> bool {
    cfg.tenant_network
        && spec.network.is_none()
        && cfg.network.is_none()
        && !sets_network(&cfg.extra_run_args)
        && !sets_network(&spec.provider_options.run_args)
}

/// `docker create` of the same container `run_args` would run (`run -d` → `create`), so the
/// loop disk can go under its writable layer before it starts.
pub fn as_create_args(mut run: Vec<String>) -> Vec<String> {
    if run.len() >= 2 && run[0] == "run" && run[1] == "-d" {
        run.splice(0..2, [s("create")]);
    }
    run
}

/// Where a container's layers are: `id \t driver \t upper-dir \t lower-dirs` (`<no value>` on
/// drivers without them), what `engine_api::LayerFacts` holds.
pub fn layer_facts_args(name: &str) -> Vec<String> {
    vec![
        s("inspect"),
        s("--type"),
        s("container"),
        s("--format"),
        s("{{.Id}}\t{{.GraphDriver.Name}}\t{{index .GraphDriver.Data \"UpperDir\"}}\t{{index .GraphDriver.Data \"LowerDir\"}}"),
        s(name),
    ]
}

/// Every container's full id, one a line (the disk files' owners).
pub fn all_container_ids_args() -> Vec<String> {
    vec![s("ps"), s("-aq"), s("--no-trunc")]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_only_what_a_spec_leaves_out() {
        let cfg = DockerCreateConfig::default();
        let asked = SandboxResources { memory_mib: Some(64), ..Default::default() };
        let got = effective_resources(&cfg, &asked);
        assert_eq!(
            (got.cpu, got.memory_mib, got.disk_gib),
            (cfg.default_cpu, Some(64), cfg.default_disk_gib)
        );
        let spec = SandboxSpec {
            resources: SandboxResources { disk_gib: Some(3), ..Default::default() },
            ..SandboxSpec::new("i")
        };
        assert_eq!(disk_bound_bytes(&cfg, &spec), Some(3 << 30));
        let off = DockerCreateConfig { apply_resource_limits: false, ..cfg.clone() };
        assert_eq!(disk_bound_bytes(&off, &spec), None);
    }

    #[test]
    fn flags_name_no_new_privileges_and_the_storage_driver_bound() {
        let spec = SandboxSpec::new("i");
        let cfg = DockerCreateConfig::default();
        assert_eq!(walls_flags(&cfg, &spec), ["--security-opt", "no-new-privileges"]);
        let opt = DockerCreateConfig {
            disk_bound: DiskBound::StorageOpt,
            no_new_privileges: false,
            default_disk_gib: Some(2),
            ..cfg
        };
        assert_eq!(walls_flags(&opt, &spec), ["--storage-opt", "size=2147483648"]);
    }

    #[test]
    fn the_tenant_network_yields_to_any_network_chosen_elsewhere() {
        let cfg = DockerCreateConfig::default();
        assert!(wants_tenant_network(&cfg, &SandboxSpec::new("i")));
        let named = SandboxSpec { network: Some("lab".into()), ..SandboxSpec::new("i") };
        assert!(!wants_tenant_network(&cfg, &named));
        let none = DockerCreateConfig { network: Some("none".into()), ..cfg.clone() };
        assert!(!wants_tenant_network(&none, &SandboxSpec::new("i")));
        let flag = DockerCreateConfig { extra_run_args: vec!["--network=host".into()], ..cfg.clone() };
        assert!(!wants_tenant_network(&flag, &SandboxSpec::new("i")));
        let off = DockerCreateConfig { tenant_network: false, ..cfg };
        assert!(!wants_tenant_network(&off, &SandboxSpec::new("i")));
        assert_eq!(tenant_network_name(&[]), "default");
        let a = tenant_network_name(&["x=1".into(), "y=2".into()]);
        assert_eq!(a, tenant_network_name(&["y=2".into(), "x=1".into()]), "order does not matter");
        assert!(a.starts_with("default-") && a.len() == 16 && a != tenant_network_name(&["x=1".into()]));
        assert_eq!(as_create_args(vec![s("run"), s("-d"), s("--name"), s("x")]), ["create", "--name", "x"]);
    }
}
