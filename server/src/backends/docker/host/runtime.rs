//! A spec's runtime requirements on Docker: the operator's policy (allowed capabilities, a
//! `none` network), the service's own networks and named volumes (made on first use, checked
//! to be ours, made again when found gone; a network no sandbox used for `network_idle_s`
//! removed by the sweep, never on a close), volume subpaths linked in the sandbox, and a
//! sandbox's address (`NetworkAddress`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::argv;
use super::failure::{CliError, DockerFailureKind};
use super::provider::DockerProvider;
use super::state::ContainerState;
use super::subnets::{self, SubnetPool};
use super::transport::ExecSpec;
use crate::core::runtime::{unscoped_name, NetworkAddress, VolumeInfo, NEVER_ADDED};
use crate::core::spec::{ExecParams, SandboxId, SandboxSpec};
use crate::error::{ProviderError, Result};

impl DockerProvider {
    /// The operator's policy over `spec`'s requirements, before anything is made: each added
    /// capability allowed (and never one of `NEVER_ADDED`), no network where the operator said
    /// `none`.
    pub(in crate::backends::docker) fn check_runtime_policy(&self, spec: &SandboxSpec) -> Result<()> {
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
    pub(in crate::backends::docker) async fn prepare_runtime(&self, spec: &SandboxSpec) -> Result<()> {
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
    pub(in crate::backends::docker) async fn link_subpaths(
        &self,
        name: &str,
        spec: &SandboxSpec,
    ) -> Result<()> {
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

    /// The service network a create of `spec` uses is there. Made (or found, and checked to
    /// be ours) under the gate the first time this server uses it; after that a create trusts
    /// it until Docker says it is gone (`remake_network`): any server may remove an empty one
    /// (the sweep, `prune_networks_due`), so what this server saw is only a hint.
    pub(in crate::backends::docker) async fn join_network(&self, spec: &SandboxSpec) -> Result<()> {
        let Some(network) = &spec.network else { return Ok(()) };
        let name = argv::network_name(spec.tenant.as_deref(), network);
        if self.network_known(&name) {
            return Ok(());
        }
        let _gate = self.network_gate.lock().await;
        if self.network_known(&name) {
            return Ok(());
        }
        self.make_network(&name, spec.tenant.as_deref(), network).await?;
        if let Ok(mut known) = self.networks.lock() {
            known.insert(name);
        }
        Ok(())
    }

    /// A create found `spec`'s network gone (another server's sweep removed it) or doubled
    /// (two servers made it at once): forgotten, and made again, so the create goes on.
    pub(in crate::backends::docker) async fn remake_network(&self, spec: &SandboxSpec) -> Result<()> {
        if let (Some(network), Ok(mut known)) = (&spec.network, self.networks.lock()) {
            known.remove(&argv::network_name(spec.tenant.as_deref(), network));
        }
        tracing::info!(network = ?spec.network, tenant = ?spec.tenant, "the service network is gone or doubled: made again");
        self.join_network(spec).await
    }

    fn network_known(&self, name: &str) -> bool {
        self.networks.lock().is_ok_and(|known| known.contains(name))
    }

    /// Make network `name` idempotently, by Docker's facts: exactly one network of that name,
    /// ours. Concurrent `docker network create`s of one name (two servers) can make two on
    /// Engine 20.10, and every later use is then "ambiguous": all but the lowest id are removed
    /// (Docker refuses to remove one a container is on).
    async fn make_network(&self, name: &str, tenant: Option<&str>, network: &str) -> Result<()> {
        const TRIES: usize = 5;
        let labels = self.resource_labels(tenant);
        let mut last = String::new();
        // The subnet of the name's own start is tried first without reading every network's
        // (1.7 s with 200 networks here); taken, the daemon's networks are read.
        let mut read_used = false;
        for _ in 0..TRIES {
            let out = self.control(argv::network_ids_args(name)).await?;
            let mut ids: Vec<String> = out.stdout_text().split_whitespace().map(String::from).collect();
            ids.sort();
            match ids.len() {
                // By id: another server's sweep may remove it meanwhile (then: again).
                1 => match self.labels_of("network", &ids[0]).await? {
                    None => continue,
                    Some(found) if has_all(&found, &labels) => return Ok(()),
                    Some(_) => {
                        return Err(ProviderError::PermissionDenied(format!(
                            "spec.network: the network {name} exists but was not made by this service"
                        )))
                    }
                },
                0 => {}
                _ => {
                    for extra in &ids[1..] {
                        if let Err(e) = self.control(argv::resource_rm_args("network", extra)).await {
                            tracing::debug!(network = %name, id = %extra, error = %e, "a doubled network stays (in use)");
                        }
                    }
                    continue;
                }
            }
            let mut create = argv::network_create_args(name, &labels);
            let operator = argv::operator_labels(&self.config.create.extra_run_args);
            if tenant.is_none() && network == argv::isolated_network_name(&operator) {
                create.splice(
                    create.len() - 1..create.len() - 1,
                    [String::from("--opt"), argv::NO_ICC_OPTION.into()],
                );
            }
            if let Some(pool) = SubnetPool::from_config(&self.config.create) {
                let used = if read_used { self.used_subnets().await? } else { Vec::new() };
                let subnet = pool.pick(name, &used).ok_or_else(|| {
                    ProviderError::ResourceExhausted(format!(
                        "network {name}: docker.create.tenant_subnets ({}) has no /{} left for another network ({} networks): widen docker.create.tenant_subnets or raise docker.create.tenant_subnet_prefix",
                        self.config.create.tenant_subnets.as_deref().unwrap_or_default(),
                        self.config.create.tenant_subnet_prefix,
                        pool.capacity()
                    ))
                })?;
                create = argv::with_subnet(create, &subnet.to_string());
            }
            match self.control(create).await {
                // Looked at again: another server may have made one of the name at once.
                Ok(_) => {}
                Err(CliError::Failed(f)) if f.stderr.contains("already exists") => {}
                // Another network took that subnet first: picked again from Docker's facts.
                Err(CliError::Failed(f)) if f.kind == DockerFailureKind::SubnetTaken => {
                    last = f.error_line();
                    read_used = true;
                }
                Err(CliError::Failed(f)) if f.kind == DockerFailureKind::AddressPoolsExhausted => {
                    return Err(ProviderError::ResourceExhausted(format!(
                        "network {name}: the Docker daemon has no address pool left for another network ({}): set docker.create.tenant_subnets to a private IPv4 range to carve the service's networks from (or add default-address-pools to the daemon's configuration)",
                        f.error_line()
                    )))
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(ProviderError::Unavailable(format!(
            "network {name}: not made after {TRIES} tries (others made or removed networks at the same time){}",
            if last.is_empty() { String::new() } else { format!(": {last}") }
        )))
    }

    /// Every subnet the daemon's networks hold (IPv4): one Engine API listing where the daemon
    /// is local, else (or when that fails) the CLI's inspect of every network.
    async fn used_subnets(&self) -> Result<Vec<ipnet::Ipv4Net>> {
        if let Some(api) = &self.engine_api {
            match api.subnets().await {
                Ok(found) => return Ok(subnets::parse_used(&found.join(" "))),
                Err(e) => tracing::debug!(error = %e, "the networks' subnets by the CLI instead"),
            }
        }
        let ids = self.control(argv::all_network_ids_args()).await?;
        let ids: Vec<String> = ids.stdout_text().split_whitespace().map(String::from).collect();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        match self.control(argv::network_subnets_args(&ids)).await {
            Ok(out) => Ok(subnets::parse_used(&out.stdout_text())),
            // A network removed between the two calls: the others were printed.
            Err(CliError::Failed(f)) => Ok(subnets::parse_used(&String::from_utf8_lossy(&f.stdout))),
            Err(e) => Err(e.into()),
        }
    }

    /// The sweep's part: this deployment's networks that no sandbox of any server is on (in
    /// any state: a created container holds no endpoint yet) for `docker.create.network_idle_s`
    /// are removed. Docker refuses to remove a network with endpoints; a create that loses
    /// its network to this anyway makes it again (`remake_network`).
    pub(in crate::backends::docker) async fn prune_networks_due(&self) {
        let idle = self.config.create.network_idle;
        let every = (idle / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
        let now = crate::core::lease::now_ms();
        if now - self.networks_pruned_ms.load(Ordering::Relaxed) < every.as_millis() as i64 {
            return;
        }
        self.networks_pruned_ms.store(now, Ordering::Relaxed);
        let operator = argv::operator_labels(&self.config.create.extra_run_args);
        let Ok(ours) =
            self.control(argv::labelled_networks_args(&argv::resource_labels(None, &operator))).await
        else {
            return;
        };
        let Ok(used) = self.control(argv::sandbox_networks_args()).await else { return };
        let used: HashSet<String> =
            used.stdout_text().lines().flat_map(|l| l.split(',')).map(|n| n.trim().to_string()).collect();
        let held = self.networks_held_by_docker.lock().map(|h| h.clone()).unwrap_or_default();
        let ours: Vec<String> =
            ours.stdout_text().split_whitespace().filter(|n| !held.contains(*n)).map(String::from).collect();
        let due = match self.idle_networks.lock() {
            Ok(mut since) => idle_due(&mut since, &ours, &used, now, idle),
            Err(_) => return,
        };
        for name in due {
            let _gate = self.network_gate.lock().await;
            if let Ok(mut known) = self.networks.lock() {
                known.remove(&name);
            }
            match self.control(argv::resource_rm_args("network", &name)).await {
                Ok(_) => {
                    tracing::info!(network = %name, "removed a network no sandbox used for network_idle_s")
                }
                Err(e)
                    if e.kind() == Some(DockerFailureKind::NetworkInUse)
                        && self.holds_no_container(&name).await =>
                {
                    tracing::warn!(
                        network = %name,
                        error = %e,
                        "Docker refuses to remove this network though no container is on it: it counts an endpoint \
                         nobody holds (moby/moby#42119, Docker Engine 20.10); the network works and stays until the \
                         daemon restarts, and the sweep no longer asks"
                    );
                    if let Ok(mut held) = self.networks_held_by_docker.lock() {
                        held.insert(name);
                    }
                }
                Err(e) => tracing::debug!(network = %name, error = %e, "network kept (in use, or gone)"),
            }
        }
    }

    /// Whether Docker shows no container on network `name` (any state), asked after it
    /// refused the removal for "active endpoints".
    async fn holds_no_container(&self, name: &str) -> bool {
        matches!(self.control(argv::network_containers_args(name)).await,
            Ok(out) if out.stdout_text().trim() == "0")
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
        // A sandbox closed a moment ago holds the volume until its background removal ends
        // (`closing.rs`).
        let count = self
            .looked_at_after_removals(
                || self.volume_users(&docker_name),
                |count| matches!(count, Ok(n) if *n > 0),
            )
            .await?;
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

    /// How many containers mount the Docker volume `docker_name`.
    async fn volume_users(&self, docker_name: &str) -> Result<usize> {
        let users = self.control(argv::containers_using_volume_args(docker_name)).await?;
        Ok(String::from_utf8_lossy(&users.stdout).lines().filter(|l| !l.trim().is_empty()).count())
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
            Err(CliError::Failed(f))
                if f.stderr.to_ascii_lowercase().contains("no such")
                    || f.kind == DockerFailureKind::NetworkGone =>
            {
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    fn control_timeout_or_default(&self) -> std::time::Duration {
        self.control_timeout().unwrap_or(std::time::Duration::from_secs(30))
    }
}

/// Which of `ours` have had no sandbox on them (`used`) for `idle`, by when each was first seen
/// empty (`since`, updated: a used network is forgotten, an empty one noted).
fn idle_due(
    since: &mut HashMap<String, i64>,
    ours: &[String],
    used: &HashSet<String>,
    now: i64,
    idle: Duration,
) -> Vec<String> {
    since.retain(|name, _| ours.contains(name) && !used.contains(name));
    let mut due = Vec::new();
    for name in ours.iter().filter(|n| !used.contains(*n)) {
        let first = *since.entry(name.clone()).or_insert(now);
        if now - first >= idle.as_millis() as i64 {
            due.push(name.clone());
            since.remove(name);
        }
    }
    due
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
    fn a_network_goes_only_after_being_empty_for_its_idle_time() {
        let idle = Duration::from_secs(10);
        let ours: Vec<String> = ["a", "b", "c"].map(String::from).into();
        let mut since = HashMap::new();
        let used: HashSet<String> = ["b".to_string()].into();
        assert!(idle_due(&mut since, &ours, &used, 0, idle).is_empty(), "first seen empty");
        assert_eq!(since.len(), 2);
        assert!(idle_due(&mut since, &ours, &used, 9_999, idle).is_empty());
        // `a` was used in between: its clock starts again.
        let a_used: HashSet<String> = ["a".to_string(), "b".to_string()].into();
        assert!(idle_due(&mut since, &ours, &a_used, 9_999, idle).is_empty());
        assert_eq!(idle_due(&mut since, &ours, &used, 10_000, idle), ["c"]);
        assert!(idle_due(&mut since, &ours, &used, 19_999, idle).is_empty());
        assert_eq!(idle_due(&mut since, &ours, &used, 20_000, idle), ["a"]);
        // Networks that are no longer there are forgotten.
        assert!(idle_due(&mut since, &[], &used, 30_000, idle).is_empty() && since.is_empty());
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
