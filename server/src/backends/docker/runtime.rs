//! A spec's runtime requirements on Docker: the operator's policy (allowed capabilities, a
//! `none` network), the service's own networks and named volumes (made on first use, checked
//! to be ours, a network removed when its last sandbox closes), volume subpaths linked in the
//! sandbox, and a sandbox's address (`NetworkAddress`).

use std::collections::BTreeMap;

use super::argv;
use super::failure::{CliError, DockerFailureKind};
use super::provider::DockerProvider;
use super::state::ContainerState;
use super::transport::ExecSpec;
use crate::core::runtime::{unscoped_name, NetworkAddress, VolumeInfo, NEVER_ADDED};
use crate::core::spec::{ExecParams, SandboxId, SandboxSpec};
use crate::error::{ProviderError, Result};

impl DockerProvider {
    /// The operator's policy over `spec`'s requirements, before anything is made: each added
    /// capability allowed (and never one of `NEVER_ADDED`), no network where the operator said
    /// `none`.
    pub(super) fn check_runtime_policy(&self, spec: &SandboxSpec) -> Result<()> {
        let create = &self.config.create;
        // Checked and in Docker's spelling since the config was loaded.
        let allowed = &create.allowed_cap_add;
        for cap in &spec.cap_add {
            let name = crate::core::runtime::capability("spec.cap_add", cap)?;
            if NEVER_ADDED.contains(&name.as_str()) || !allowed.contains(&name) {
                return Err(ProviderError::PermissionDenied(format!(
                    "spec.cap_add: {name} is not in the server's create.allowed_cap_add ({})",
                    if allowed.is_empty() { "empty".to_string() } else { allowed.join(", ") }
                )));
            }
        }
        if spec.network.is_some() && create.network.as_deref() == Some("none") {
            return Err(ProviderError::PermissionDenied(
                "spec.network: the server's create.network is none (sandboxes get no network)".into(),
            ));
        }
        Ok(())
    }

    /// Make (or find, and check to be ours) the volumes `spec` names (its network:
    /// `join_network`).
    pub(super) async fn prepare_runtime(&self, spec: &SandboxSpec) -> Result<()> {
        let tenant = spec.tenant.as_deref();
        let labels = self.resource_labels(tenant);
        for (i, volume) in spec.volumes.iter().enumerate() {
            let name = argv::volume_name(tenant, &volume.name);
            // `volume create` of an existing name succeeds whoever made it: check the labels.
            self.control(argv::volume_create_args(&name, &labels)).await?;
            self.check_ours("volume", &name, &labels, &format!("spec.volumes[{i}].name")).await?;
        }
        Ok(())
    }

    /// Show each volume's subpath at its target: a link into the volume's mount under
    /// `/.sandboxd/volumes/`, the subpath made first unless read-only. Runs as root in the
    /// sandbox (the only place these paths mean anything; the server never resolves them).
    pub(super) async fn link_subpaths(&self, name: &str, spec: &SandboxSpec) -> Result<()> {
        use crate::backends::docker::pty::container::shell_quote as q;
        for (i, volume) in spec.volumes.iter().enumerate() {
            let Some(sub) = &volume.subpath else { continue };
            let source = format!("{}/{}", argv::subpath_mount_dir(i), sub.trim_matches('/'));
            let target = volume.target.trim_end_matches('/');
            let parent = match target.rfind('/') {
                Some(0) | None => "/",
                Some(at) => &target[..at],
            };
            let make = if volume.read_only { String::new() } else { format!("mkdir -p {} && ", q(&source)) };
            // A target the image already has: only an empty directory may give way.
            let script = format!(
                "{make}mkdir -p {p} && {{ if [ -e {t} ] && [ ! -L {t} ]; then rmdir {t} || exit 3; fi; }} && ln -sfn {s} {t}",
                p = q(parent),
                t = q(target),
                s = q(&source),
            );
            let params =
                ExecParams { timeout: Some(self.control_timeout_or_default()), ..Default::default() };
            let exec = ExecSpec { name, shell: "sh", command: &script, params: &params, user: Some("0") };
            let result = self.create_engine.exec(exec).await;
            if result.return_code != 0 || result.error_type.is_some() {
                return Err(ProviderError::Create(format!(
                    "spec.volumes[{i}]: cannot show subpath {sub:?} at {target:?}: {}",
                    if result.return_code == 3 {
                        "the image has a non-empty directory there".to_string()
                    } else {
                        result.stderr_str().trim().to_string()
                    }
                )));
            }
        }
        Ok(())
    }

    /// Remember that `sandbox_id` is on the service network of `spec` (or of its label).
    pub(super) fn note_network(&self, sandbox_id: &str, tenant: Option<&str>, network: Option<&str>) {
        if let (Some(network), Ok(mut map)) = (network, self.networks.lock()) {
            map.insert(sandbox_id.to_string(), argv::network_name(tenant, network));
        }
    }

    /// A create of `spec` under `creating` will use its network: noted under the gate, so a
    /// `release_network` either sees this user or has removed the network before
    /// `prepare_runtime` makes it again.
    /// Made (or found, and checked to be ours) under the gate too, unless another sandbox
    /// known here is on it: concurrent `docker network create`s of one name can make two
    /// networks of that name on Engine 20.10, and every later use is then "ambiguous".
    pub(super) async fn join_network(&self, creating: &str, spec: &SandboxSpec) -> Result<()> {
        let Some(network) = &spec.network else { return Ok(()) };
        let tenant = spec.tenant.as_deref();
        let name = argv::network_name(tenant, network);
        let _gate = self.network_gate.lock().await;
        let known = self.networks.lock().map(|m| m.values().any(|n| *n == name)).unwrap_or(false);
        self.note_network(creating, tenant, Some(network));
        if known {
            return Ok(());
        }
        let labels = self.resource_labels(tenant);
        let mut create = argv::network_create_args(&name, &labels);
        let operator = argv::operator_labels(&self.config.create.extra_run_args);
        if tenant.is_none() && *network == argv::isolated_network_name(&operator) {
            create.splice(
                create.len() - 1..create.len() - 1,
                [String::from("--opt"), argv::NO_ICC_OPTION.into()],
            );
        }
        let made = match self.control(create).await {
            Ok(_) => Ok(()),
            // Another server made it first, or it is a stranger's: its labels say which.
            Err(CliError::Failed(f)) if f.stderr.contains("already exists") => {
                self.check_ours("network", &name, &labels, "spec.network").await
            }
            Err(e) => Err(e.into()),
        };
        if made.is_err() {
            self.forget_network(creating);
        }
        made
    }

    /// Drop a create's note (the sandbox is noted under its id now).
    pub(super) fn forget_network(&self, creating: &str) {
        if let Ok(mut map) = self.networks.lock() {
            map.remove(creating);
        }
    }

    /// After a sandbox is removed: remove its service network if no container is left on it
    /// (Docker refuses to remove a network in use, so one another sandbox uses stays).
    pub(super) async fn release_network(&self, sandbox_id: &str) {
        let _gate = self.network_gate.lock().await;
        // Forgotten, and whether another sandbox known here is still on it, under one lock.
        let name = match self.networks.lock() {
            Ok(mut map) => match map.remove(sandbox_id) {
                Some(name) if !map.values().any(|n| *n == name) => name,
                _ => return,
            },
            Err(_) => return,
        };
        if let Err(e) = self.control(argv::resource_rm_args("network", &name)).await {
            tracing::debug!(network = %name, error = %e, "network kept (still in use, or gone)");
        }
    }

    /// The sandbox's address on its spec network, else on the first network it is on: one
    /// `docker inspect` for ownership, state and addresses.
    pub async fn network_address(&self, id: &SandboxId) -> Result<NetworkAddress> {
        let sandbox_id = id.as_str();
        match self.control(argv::network_addresses_args(sandbox_id)).await {
            Ok(out) => address_of(sandbox_id, &out.stdout_text()),
            Err(e) if e.kind() == Some(DockerFailureKind::MissingContainer) => {
                Err(ProviderError::SandboxNotFound(sandbox_id.into()))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The tenant's named volumes.
    pub async fn list_volumes(&self, tenant: Option<&str>) -> Result<Vec<VolumeInfo>> {
        let labels = self.resource_labels(tenant);
        let out = self.control(argv::volume_ls_args(&labels)).await?;
        let mut volumes = Vec::new();
        for docker_name in String::from_utf8_lossy(&out.stdout).lines().map(str::trim) {
            // A tenant-less caller sees only tenant-less volumes (no `.` in their names).
            let Some(name) = unscoped_name(argv::VOLUME_PREFIX, tenant, docker_name) else { continue };
            volumes.push(VolumeInfo { name: name.to_string(), created_at_unix_ms: 0 });
        }
        volumes.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(volumes)
    }

    /// Remove the tenant's volume `name`; FAILED_PRECONDITION while a container mounts it.
    pub async fn delete_volume(&self, tenant: Option<&str>, name: &str) -> Result<()> {
        crate::core::runtime::validate_name("name", name)?;
        let docker_name = argv::volume_name(tenant, name);
        let labels = self.resource_labels(tenant);
        match self.labels_of("volume", &docker_name).await? {
            None => return Ok(()),
            Some(found) if !has_all(&found, &labels) => return Ok(()),
            Some(_) => {}
        }
        let users = self.control(argv::containers_using_volume_args(&docker_name)).await?;
        let count = String::from_utf8_lossy(&users.stdout).lines().filter(|l| !l.trim().is_empty()).count();
        if count > 0 {
            return Err(ProviderError::InUse(format!("volume {name:?} is mounted by {count} sandbox(es)")));
        }
        match self.control(argv::resource_rm_args("volume", &docker_name)).await {
            Ok(_) => Ok(()),
            Err(CliError::Failed(f)) if f.stderr.contains("no such volume") => Ok(()),
            Err(CliError::Failed(f)) if f.stderr.contains("in use") => {
                Err(ProviderError::InUse(format!("volume {name:?} is in use")))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The labels this service's networks and volumes carry (owner, tenant, operator's).
    fn resource_labels(&self, tenant: Option<&str>) -> Vec<String> {
        argv::resource_labels(tenant, &argv::operator_labels(&self.config.create.extra_run_args))
    }

    /// Refuse a network or volume under our name that is not ours (a stranger's, another
    /// deployment's): PERMISSION_DENIED naming the field.
    async fn check_ours(&self, kind: &str, name: &str, labels: &[String], field: &str) -> Result<()> {
        match self.labels_of(kind, name).await? {
            Some(found) if has_all(&found, labels) => Ok(()),
            _ => Err(ProviderError::PermissionDenied(format!(
                "{field}: the {kind} {name} exists but was not made by this service"
            ))),
        }
    }

    /// A network's or volume's labels; `None` when it does not exist.
    async fn labels_of(&self, kind: &str, name: &str) -> Result<Option<BTreeMap<String, String>>> {
        match self.control(argv::labels_inspect_args(kind, name)).await {
            Ok(out) => {
                let labels: Option<BTreeMap<String, String>> =
                    serde_json::from_slice(&out.stdout).unwrap_or_default();
                Ok(Some(labels.unwrap_or_default()))
            }
            Err(CliError::Failed(f)) if f.stderr.to_ascii_lowercase().contains("no such") => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn control_timeout_or_default(&self) -> std::time::Duration {
        self.control_timeout().unwrap_or(std::time::Duration::from_secs(30))
    }
}

/// Whether `found` carries every `KEY=VALUE` of `labels`.
fn has_all(found: &BTreeMap<String, String>, labels: &[String]) -> bool {
    labels.iter().all(|l| {
        let (k, v) = l.split_once('=').unwrap_or((l, ""));
        found.get(k).is_some_and(|x| x == v)
    })
}

/// The address [`argv::network_addresses_args`]' output gives: `labels-json \t state`, then
/// `network \t ip` lines. A container without the ownership label is not found; one not running
/// has no address.
fn address_of(sandbox_id: &str, text: &str) -> Result<NetworkAddress> {
    let mut lines = text.lines();
    let head = lines.next().unwrap_or_default();
    let (labels_json, state) = head.split_once('\t').unwrap_or((head, ""));
    let labels: BTreeMap<String, String> =
        serde_json::from_str::<Option<BTreeMap<String, String>>>(labels_json)
            .map_err(|e| ProviderError::Docker(format!("unexpected docker inspect output: {e}")))?
            .unwrap_or_default();
    if labels.get(argv::SANDBOX_LABEL).is_none_or(|v| v != "1") {
        return Err(ProviderError::SandboxNotFound(sandbox_id.into()));
    }
    if !ContainerState::parse(state.trim()).is_running() {
        return Err(ProviderError::Stopped(sandbox_id.into()));
    }
    let tenant = labels.get(crate::auth::TENANT_LABEL).map(String::as_str);
    let wanted = labels.get(argv::RUNTIME_LABEL).and_then(|l| argv::RuntimeLabel::parse(l).network);
    let networks: BTreeMap<&str, &str> = lines
        .filter_map(|l| l.split_once('\t'))
        .filter(|(_, ip)| !ip.trim().is_empty())
        .map(|(n, ip)| (n.trim(), ip.trim()))
        .collect();
    let (network, address) = match &wanted {
        Some(net) => {
            let docker_name = argv::network_name(tenant, net);
            let ip = networks.get(docker_name.as_str()).ok_or_else(|| {
                ProviderError::Stopped(format!("{sandbox_id} has no address on network {net:?}"))
            })?;
            (net.clone(), ip.to_string())
        }
        None => match networks.iter().next() {
            Some((_, ip)) => (String::new(), ip.to_string()),
            None => {
                return Err(ProviderError::Stopped(format!(
                    "{sandbox_id} has no network address (network none)"
                )))
            }
        },
    };
    Ok(NetworkAddress { address, network })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "sandboxd-0123456789abcdef0123456789abcdef";

    fn inspected(labels: &str, state: &str, networks: &[(&str, &str)]) -> String {
        let lines: String = networks.iter().map(|(n, ip)| format!("{n}\t{ip}\n")).collect();
        format!("{labels}\t{state}\n{lines}")
    }

    #[test]
    fn the_address_comes_from_one_inspect() {
        let owned = r#"{"sandboxd.sandbox":"1"}"#;
        let bridge = inspected(owned, "running", &[("bridge", "172.17.0.5")]);
        assert_eq!(
            address_of(ID, &bridge).unwrap(),
            NetworkAddress { address: "172.17.0.5".into(), network: String::new() }
        );
        let lab = argv::network_name(Some("red"), "lab");
        let labels = serde_json::json!({
            "sandboxd.sandbox": "1",
            "sandboxd.tenant": "red",
            "sandboxd.runtime": r#"{"network":"lab"}"#,
        });
        let on_lab =
            inspected(&labels.to_string(), "running", &[("bridge", "172.17.0.5"), (&lab, "10.0.0.7")]);
        assert_eq!(
            address_of(ID, &on_lab).unwrap(),
            NetworkAddress { address: "10.0.0.7".into(), network: "lab".into() }
        );
        let off_lab = inspected(&labels.to_string(), "running", &[("bridge", "172.17.0.5")]);
        assert!(matches!(address_of(ID, &off_lab), Err(ProviderError::Stopped(_))));
        assert!(matches!(address_of(ID, &inspected(owned, "running", &[])), Err(ProviderError::Stopped(_))));
        assert!(matches!(address_of(ID, &inspected(owned, "exited", &[])), Err(ProviderError::Stopped(_))));
        let stranger = inspected("null", "running", &[("bridge", "172.17.0.9")]);
        assert!(matches!(address_of(ID, &stranger), Err(ProviderError::SandboxNotFound(_))));
    }
}
