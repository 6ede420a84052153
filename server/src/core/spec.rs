//! Provider-neutral types: what a sandbox is asked to be (`SandboxSpec`), what running a command
//! returns (`ExecResult`), and the lifecycle states. Validation lives here so every entry point
//! (gRPC, JSON, Rust callers) refuses the same bad input with the same message.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::ProviderError;

pub use sandboxd_proto::contract::{
    ExecErrorType, ExecResult, ExecUsage, PtySpec, SandboxDescriptor, SandboxStatus, Signal, TerminalMode,
    SANDBOX_RUNTIME_RETURN_CODE,
};

/// A sandbox id as this service issues them (`sandboxd-` + 32 lower-case hex digits), checked
/// once where a request enters. Any other shape cannot name a sandbox of ours.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SandboxId(String);

/// What every sandbox id starts with.
pub const SANDBOX_ID_PREFIX: &str = "sandboxd-";

impl SandboxId {
    /// A fresh random id.
    pub fn generate() -> Self {
        Self(format!("{SANDBOX_ID_PREFIX}{}", uuid::Uuid::new_v4().simple()))
    }

    /// `field` names the request field in the error: empty is `InvalidArgument`; any other
    /// shape is `SandboxNotFound` (it cannot be one of ours, and saying more would help a prober).
    pub fn parse(field: &str, id: &str) -> Result<Self, ProviderError> {
        if id.is_empty() {
            return Err(ProviderError::invalid(field, "is required"));
        }
        if Self::has_valid_shape(id) {
            Ok(Self(id.to_string()))
        } else {
            Err(ProviderError::SandboxNotFound(id.into()))
        }
    }

    /// Whether `id` has the shape of an id this service issues.
    pub fn has_valid_shape(id: &str) -> bool {
        id.strip_prefix(SANDBOX_ID_PREFIX).is_some_and(|hex| {
            hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for SandboxId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for SandboxId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// A live sandbox as this process knows it. Everything here can be rediscovered from the
/// sandbox, so any replica can rebuild it from the id alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxHandle {
    pub sandbox_id: String,
    pub image: String,
    /// `<shell> -c` runs every command.
    pub shell: String,
    /// Ports declared at create (the endpoint check).
    pub ports: Vec<u16>,
    pub workdir: Option<String>,
    /// `spec.metadata`, as stored on the container's labels.
    pub metadata: BTreeMap<String, String>,
    /// The tenant it belongs to (`sandboxd.tenant`); `None`: the operator's.
    pub tenant: Option<String>,
    /// The OCI runtime it runs on (`runc`, `runsc`, …); `None`: not recorded.
    pub runtime: Option<String>,
}

impl SandboxHandle {
    /// Its id as a checked value (handles are only built for ids of the right shape).
    pub fn id(&self) -> SandboxId {
        SandboxId(self.sandbox_id.clone())
    }
}

/// Options of one exec beyond the command.
#[derive(Debug, Clone, Default)]
pub struct ExecParams {
    pub cwd: Option<String>,
    pub env: BTreeMap<String, String>,
    pub timeout: Option<std::time::Duration>,
    pub user: Option<String>,
    pub stdin: Option<Vec<u8>>,
}

impl ExecParams {
    /// The one argument check of an exec (every engine, buffered or streamed): `command` and
    /// these options, refused with the field named; the normalised user.
    pub fn check(&self, command: &str) -> Result<Option<User>, ProviderError> {
        if command.trim().is_empty() {
            return Err(ProviderError::invalid("command", "must not be empty"));
        }
        if command.contains('\0') {
            return Err(ProviderError::invalid("command", "must not contain NUL bytes"));
        }
        if let Some(cwd) = &self.cwd {
            validate_abs_path("cwd", cwd)?;
        }
        validate_env("env", &self.env)?;
        let user = self.user.as_deref().map(|u| User::parse("user", u)).transpose()?;
        if self.timeout.is_some_and(|t| t.is_zero()) {
            return Err(ProviderError::invalid("timeout_s", "must be > 0"));
        }
        Ok(user)
    }
}

/// The one argument check of a terminal (`PtySpec` is the contract's type, so the check is a
/// trait of ours).
pub trait TerminalCheck {
    /// Refused with the field named; the normalised user.
    fn check(&self) -> Result<Option<User>, ProviderError>;
}

impl TerminalCheck for PtySpec {
    fn check(&self) -> Result<Option<User>, ProviderError> {
        if self.rows == 0 || self.cols == 0 {
            return Err(ProviderError::invalid("rows/cols", "must be > 0"));
        }
        if let Some(cwd) = &self.cwd {
            validate_abs_path("cwd", cwd)?;
        }
        validate_env("env", &self.env)?;
        if self.command.as_deref().is_some_and(|c| c.contains('\0')) {
            return Err(ProviderError::invalid("command", "must not contain NUL bytes"));
        }
        self.user.as_deref().map(|u| User::parse("user", u)).transpose()
    }
}

/// How a published port is reached from the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxEndpoint {
    /// Absolute URL (scheme and host required).
    pub endpoint: String,
    pub headers: BTreeMap<String, String>,
}

/// Resource limits; unknown keys in JSON are refused with the allowed ones named.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxResources {
    pub cpu: Option<f64>,
    pub memory_mib: Option<u64>,
    pub disk_gib: Option<u64>,
    pub gpu: Option<u32>,
    pub gpu_type: Option<String>,
}

/// The largest disk bound a spec may ask for (64 TiB).
pub const MAX_DISK_GIB: u64 = 1 << 16;

pub const RESOURCE_KEYS: [&str; 5] = ["cpu", "memory_mib", "disk_gib", "gpu", "gpu_type"];

impl SandboxResources {
    /// From a JSON object, naming unknown keys and the allowed ones.
    pub fn from_json(value: &serde_json::Value) -> Result<Self, ProviderError> {
        if let Some(map) = value.as_object() {
            let unknown: Vec<&str> =
                map.keys().map(String::as_str).filter(|k| !RESOURCE_KEYS.contains(k)).collect();
            if !unknown.is_empty() {
                return Err(ProviderError::invalid(
                    "spec.resources",
                    format!("unknown key(s) {unknown:?}; allowed: {RESOURCE_KEYS:?}"),
                ));
            }
        }
        serde_json::from_value(value.clone())
            .map_err(|e| ProviderError::invalid("spec.resources", e.to_string()))
    }

    pub fn validate(&self) -> Result<(), ProviderError> {
        if let Some(cpu) = self.cpu {
            if !(cpu > 0.0 && cpu.is_finite()) {
                return Err(ProviderError::invalid("spec.resources.cpu", format!("must be > 0 (got {cpu})")));
            }
        }
        if self.memory_mib == Some(0) {
            return Err(ProviderError::invalid("spec.resources.memory_mib", "must be > 0"));
        }
        if let Some(gib) = self.disk_gib.filter(|g| !(1..=MAX_DISK_GIB).contains(g)) {
            return Err(ProviderError::invalid(
                "spec.resources.disk_gib",
                format!("must be in 1..={MAX_DISK_GIB} (got {gib})"),
            ));
        }
        Ok(())
    }
}

/// Docker-specific options a client may ask for (only when the operator allows them).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderOptions {
    #[serde(default)]
    pub volumes: Vec<String>,
    #[serde(default)]
    pub run_args: Vec<String>,
}

/// What to start (serialized as a cluster's pool template is kept: the fields skipped here are
/// never a template's, but `files`, which that record keeps beside it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxSpec {
    pub image: String,
    pub ttl_s: Option<f64>,
    pub ready_timeout_s: Option<f64>,
    pub workdir: Option<String>,
    pub env: BTreeMap<String, String>,
    /// Absolute path -> content, written after start.
    #[serde(skip)]
    pub files: BTreeMap<String, Vec<u8>>,
    pub metadata: BTreeMap<String, String>,
    pub resources: SandboxResources,
    pub entrypoint: Option<Vec<String>>,
    pub ports: Vec<u16>,
    pub provider_options: ProviderOptions,
    /// Start from this snapshot (its image) instead of `image`.
    pub snapshot_id: Option<String>,
    /// A network this service owns, shared by the tenant's sandboxes naming it (`runtime`).
    pub network: Option<String>,
    /// Capabilities to add, each allowed by the operator (`create.allowed_cap_add`).
    pub cap_add: Vec<String>,
    /// Size of `/dev/shm` in bytes.
    pub shm_size_bytes: Option<u64>,
    /// Named volumes this service owns, mounted in the sandbox.
    pub volumes: Vec<crate::core::runtime::VolumeMount>,
    /// The OCI runtime by the name the server offers (`docker.runtimes`); `None`: the server's
    /// default, the tenant's binding, or a snapshot's own.
    pub runtime: Option<String>,
    /// The tenant the sandbox is made for, labelled at `docker run`; set by the server from
    /// the caller's key, never from a request or a config file.
    #[serde(skip)]
    pub tenant: Option<String>,
    /// The egress plan enforced from the moment the container runs (the spec's policy or the
    /// server's default, domains resolved); `None`: nothing enforced. Set by the service.
    #[serde(skip)]
    pub egress: Option<crate::egress::EgressPlan>,
    /// Set only by the warm pools (`crate::core::pools`) for a sandbox they start ahead of a claim:
    /// labelled as that pool's, so `List` hides it until claimed and its starter's next start
    /// finds it. Never from a request or a config file.
    #[serde(skip)]
    pub pool_member: Option<PoolMember>,
    /// A shell command run once the sandbox is ready and its files are written, before the
    /// create returns; a failure or a hang fails the create (and removes the sandbox).
    pub setup: Option<String>,
    /// Bound on `setup`; past it the create fails with SETUP_TIMEOUT.
    pub setup_timeout_s: Option<f64>,
}

/// Which pool a sandbox started ahead of a claim belongs to, and which server (state
/// directory) started it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolMember {
    pub pool: String,
    pub owner: String,
}

impl SandboxSpec {
    pub fn new(image: impl Into<String>) -> Self {
        Self { image: image.into(), ..Self::default() }
    }

    /// Refuse what Docker would misread or what could smuggle flags into a command line.
    pub fn validate(&self) -> Result<(), ProviderError> {
        match &self.snapshot_id {
            None if self.image.is_empty() => {
                return Err(ProviderError::invalid(
                    "spec.image",
                    "is required unless spec.snapshot_id is set",
                ))
            }
            None => validate_image(&self.image)?,
            Some(_) if !self.image.is_empty() => {
                return Err(ProviderError::invalid(
                    "spec.image",
                    "spec.image and spec.snapshot_id are exclusive: set one of them",
                ))
            }
            Some(_) => {}
        }
        positive("spec.ttl_s", self.ttl_s)?;
        positive("spec.ready_timeout_s", self.ready_timeout_s)?;
        positive("spec.setup_timeout_s", self.setup_timeout_s)?;
        if matches!(&self.setup, Some(c) if c.trim().is_empty() || c.contains('\0')) {
            return Err(ProviderError::invalid(
                "spec.setup",
                "must be a non-empty shell command without NUL bytes",
            ));
        }
        if self.setup_timeout_s.is_some() && self.setup.is_none() {
            return Err(ProviderError::invalid(
                "spec.setup_timeout_s",
                "needs spec.setup (the command it bounds)",
            ));
        }
        if let Some(dir) = &self.workdir {
            validate_abs_path("spec.workdir", dir)?;
        }
        validate_env("spec.env", &self.env)?;
        for path in self.files.keys() {
            validate_abs_path("spec.files", path)?;
        }
        self.resources.validate()?;
        if let Some(ep) = &self.entrypoint {
            if ep.is_empty() || ep[0].is_empty() {
                return Err(ProviderError::invalid(
                    "spec.entrypoint",
                    "must name a program as its first element",
                ));
            }
            if ep.iter().any(|a| a.contains('\0')) {
                return Err(ProviderError::invalid("spec.entrypoint", "must not contain NUL bytes"));
            }
        }
        validate_ports(&self.ports)?;
        crate::core::metadata::validate_metadata("spec.metadata", &self.metadata)?;
        crate::core::runtime::validate(
            self.network.as_deref(),
            &self.cap_add,
            self.shm_size_bytes,
            self.resources.memory_mib,
            &self.volumes,
        )?;
        if let Some(runtime) = &self.runtime {
            if !crate::config::is_runtime_name(runtime) {
                return Err(ProviderError::invalid(
                    "spec.runtime",
                    format!("{runtime:?} is not a runtime name (1-64 of a-z 0-9 . _ -, for example runsc)"),
                ));
            }
        }
        if let Some(flag) = self
            .provider_options
            .run_args
            .iter()
            .find(|a| a.as_str() == "--runtime" || a.starts_with("--runtime="))
        {
            return Err(ProviderError::invalid(
                "spec.provider_options.run_args",
                format!("{flag:?}: the runtime is chosen by spec.runtime, never by a docker flag"),
            ));
        }
        if let Some(flag) = crate::egress::net_admin_flag(&self.provider_options.run_args) {
            return Err(ProviderError::invalid(
                "spec.provider_options.run_args",
                format!("{flag:?} would let the sandbox change its own network rules (CAP_NET_ADMIN); never allowed"),
            ));
        }
        Ok(())
    }
}

/// Ports must be 1..=65535 without duplicates.
pub fn validate_ports(ports: &[u16]) -> Result<(), ProviderError> {
    let mut seen = std::collections::BTreeSet::new();
    for &p in ports {
        if p == 0 {
            return Err(ProviderError::invalid("spec.ports", "ports must be in 1..=65535 (got 0)"));
        }
        if !seen.insert(p) {
            return Err(ProviderError::invalid("spec.ports", format!("duplicate port {p}")));
        }
    }
    Ok(())
}

/// An image reference: non-empty, no leading `-` (it is a positional argument of `docker run`),
/// no whitespace or control characters. A `docker://` prefix is accepted and dropped.
pub fn validate_image(image: &str) -> Result<(), ProviderError> {
    if image.is_empty() {
        return Err(ProviderError::invalid("spec.image", "is required"));
    }
    if image.starts_with('-') {
        return Err(ProviderError::invalid("spec.image", "must not start with '-'"));
    }
    if image.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ProviderError::invalid(
            "spec.image",
            "must not contain whitespace or control characters",
        ));
    }
    Ok(())
}

/// The image name as Docker knows it (`docker://` dropped).
pub fn normalize_image(image: &str) -> &str {
    image.strip_prefix("docker://").unwrap_or(image)
}

pub fn validate_abs_path(field: &str, path: &str) -> Result<(), ProviderError> {
    if !path.starts_with('/') {
        return Err(ProviderError::invalid(field, format!("must be an absolute path (got {path:?})")));
    }
    if path.contains('\0') {
        return Err(ProviderError::invalid(field, "must not contain NUL bytes"));
    }
    Ok(())
}

/// Keys must be non-empty without `=`; neither keys nor values may hold NUL.
pub fn validate_env(field: &str, env: &BTreeMap<String, String>) -> Result<(), ProviderError> {
    for (k, v) in env {
        if k.is_empty() || k.contains('=') || k.contains('\0') {
            return Err(ProviderError::invalid(
                field,
                format!("invalid variable name {k:?}: non-empty, no '=' or NUL"),
            ));
        }
        if v.contains('\0') {
            return Err(ProviderError::invalid(field, format!("value of {k} must not contain NUL")));
        }
    }
    Ok(())
}

/// The user a command runs as, checked once where a request enters: a name or uid (never
/// something `docker` would read as a flag), with `root` spelled `0`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User(String);

impl User {
    /// `user` as sent in `field`; an empty name, a leading `-`, whitespace or control characters
    /// are INVALID_ARGUMENT.
    pub fn parse(field: &str, user: &str) -> Result<Self, ProviderError> {
        if user.is_empty()
            || user.starts_with('-')
            || user.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(ProviderError::invalid(field, format!("must be a user name or uid (got {user:?})")));
        }
        Ok(Self(if user == "root" || user == "0" { "0".into() } else { user.into() }))
    }
}

impl std::ops::Deref for User {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

/// A duration a client sends: > 0 and at most a year (a larger one is a mistake, and would
/// overflow `Duration` past 1.8e19 s).
fn positive(field: &str, value: Option<f64>) -> Result<(), ProviderError> {
    match value {
        Some(v) if !(v > 0.0 && v <= crate::config::MAX_CLIENT_SECONDS) => Err(ProviderError::invalid(
            field,
            format!("must be > 0 and <= {} seconds (got {v})", crate::config::MAX_CLIENT_SECONDS),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_resource_keys_are_named_with_allowed_ones() {
        let err = SandboxResources::from_json(&json!({"cpu": 1, "vram": 3})).unwrap_err().to_string();
        assert!(err.contains("vram") && err.contains("memory_mib"), "{err}");
        let ok = SandboxResources::from_json(&json!({"cpu": 1.5, "memory_mib": 256})).unwrap();
        assert_eq!(ok.memory_mib, Some(256));
    }

    #[test]
    fn ports_are_checked() {
        assert!(validate_ports(&[80, 8080]).is_ok());
        assert!(validate_ports(&[0]).unwrap_err().to_string().contains("1..=65535"));
        assert!(validate_ports(&[80, 80]).unwrap_err().to_string().contains("duplicate"));
        let spec: Result<SandboxSpec, _> = serde_json::from_value(json!({"image": "x", "ports": [true]}));
        assert!(spec.is_err(), "booleans are not ports");
        let spec: Result<SandboxSpec, _> = serde_json::from_value(json!({"image": "x", "ports": [70000]}));
        assert!(spec.is_err(), "ports above 65535 are refused");
    }

    #[test]
    fn spec_refuses_flag_smuggling_and_bad_values() {
        for (spec, field) in [
            (SandboxSpec::new("--privileged"), "spec.image"),
            (SandboxSpec::new(""), "spec.image"),
            (SandboxSpec { ttl_s: Some(0.0), ..SandboxSpec::new("img") }, "spec.ttl_s"),
            (SandboxSpec { ttl_s: Some(1e20), ..SandboxSpec::new("img") }, "spec.ttl_s"),
            (SandboxSpec { ready_timeout_s: Some(1e20), ..SandboxSpec::new("img") }, "spec.ready_timeout_s"),
            (
                SandboxSpec { ready_timeout_s: Some(f64::INFINITY), ..SandboxSpec::new("img") },
                "spec.ready_timeout_s",
            ),
            (SandboxSpec { workdir: Some("rel".into()), ..SandboxSpec::new("img") }, "spec.workdir"),
            (
                SandboxSpec { env: [("A=B".to_string(), "v".to_string())].into(), ..SandboxSpec::new("img") },
                "spec.env",
            ),
            (SandboxSpec { entrypoint: Some(vec![]), ..SandboxSpec::new("img") }, "spec.entrypoint"),
        ] {
            let err = spec.validate().unwrap_err();
            assert!(err.to_string().contains(field), "{err} should name {field}");
        }
        assert!(SandboxSpec::new("docker://busybox:latest").validate().is_ok());
        let both = SandboxSpec { snapshot_id: Some("s".into()), ..SandboxSpec::new("img") };
        let err = both.validate().unwrap_err().to_string();
        assert!(err.contains("spec.image") && err.contains("spec.snapshot_id"), "{err}");
        let neither = SandboxSpec::default().validate().unwrap_err().to_string();
        assert!(neither.contains("spec.image") && neither.contains("spec.snapshot_id"), "{neither}");
        assert!(SandboxSpec { snapshot_id: Some("s".into()), ..SandboxSpec::default() }.validate().is_ok());
        assert_eq!(normalize_image("docker://busybox"), "busybox");
    }

    #[test]
    fn sandbox_ids_are_checked_once() {
        let id = SandboxId::generate();
        assert_eq!(SandboxId::parse("sandbox_id", id.as_str()).unwrap(), id);
        assert!(matches!(
            SandboxId::parse("sandbox_id", ""),
            Err(ProviderError::InvalidArgument { ref field, .. }) if field == "sandbox_id"
        ));
        for bad in ["sandboxd-xyz", "other", "sandboxd-0123456789ABCDEF0123456789abcdef", "--help"] {
            assert!(
                matches!(SandboxId::parse("sandbox_id", bad), Err(ProviderError::SandboxNotFound(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn users() {
        assert_eq!(&*User::parse("user", "root").unwrap(), "0");
        assert_eq!(&*User::parse("user", "0").unwrap(), "0");
        assert_eq!(&*User::parse("user", "1000:1000").unwrap(), "1000:1000");
        assert!(User::parse("user", "--privileged").is_err());
    }
}
