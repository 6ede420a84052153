//! The `docker` section: how containers are created (`docker.create`), how commands run
//! (`docker.exec`) and the readiness probe (`docker.probe`), with the seed's fields, defaults and
//! checks; and which capabilities an operator may allow.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::rules::{nonzero, ConfigError};
use super::seconds;
use super::server::default_state_dir;

/// Readiness probe run in every new container.
pub const READY_PROBE_COMMAND: &str = "printf docker-sandbox-ready";
/// What the probe must print.
pub const READY_PROBE_EXPECTED: &str = "docker-sandbox-ready";
/// The keep-alive's shell (the image ENTRYPOINT is overridden with it).
pub const DEFAULT_KEEPALIVE_SHELL: &str = "/bin/sh";
/// The keep-alive loop: sleeps forever without busy-waiting.
pub const DEFAULT_KEEPALIVE_CMD: &str = "while :; do sleep 2147483647; done";

/// Default bound on one exec's stdout (and on its stderr): 16 MiB.
pub const DEFAULT_MAX_OUTPUT_BYTES: i64 = 16 << 20;
/// The largest bound: an exec's answer must fit one 64 MiB gRPC message.
pub const MAX_OUTPUT_BYTES_LIMIT: i64 = 30 << 20;

/// How containers are created (`docker.create`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DockerCreateConfig {
    pub keepalive_shell: String,
    pub keepalive_cmd: String,
    /// Bound on one `docker run`; `null` waits forever.
    #[serde(rename = "start_timeout_s", deserialize_with = "seconds::optional")]
    pub start_timeout: Option<Duration>,
    pub use_init: bool,
    /// `None`: the default bridge; `"none"`: no network; else a named network.
    pub network: Option<String>,
    pub read_only: bool,
    pub cap_drop: Vec<String>,
    pub security_opt: Vec<String>,
    pub pids_limit: Option<i64>,
    /// Operator-chosen `docker run` flags, added to every create.
    pub extra_run_args: Vec<String>,
    pub apply_resource_limits: bool,
    /// Host address published ports bind to; must be an IP address.
    pub publish_host: String,
    /// How many times an ambiguous `docker run` (timeout, transport error) is retried.
    pub transport_retries: i64,
    #[serde(rename = "transport_retry_delay_s", deserialize_with = "seconds::required")]
    pub transport_retry_delay: Duration,
    /// When `docker run` pulls the image: `missing` (Docker's and Compose's default), `never`
    /// (shared deployments: only images already on the daemon), `always`.
    pub pull_policy: String,
    /// Capabilities a sandbox may ask for in `spec.cap_add` (for example `SYS_PTRACE`); none by
    /// default. Those in `NEVER_ADDED` (NET_ADMIN, SYS_ADMIN, …) are refused here; the names
    /// are held in Docker's spelling once checked ([`DockerConfig::checked`]).
    pub allowed_cap_add: Vec<String>,
    /// The OCI runtime of a sandbox whose spec names none (one of `docker.runtimes`).
    pub runtime: String,
    /// A sandbox without `spec.network` (and no `create.network`) joins its tenant's own
    /// bridge network (`sandboxd-net-<tenant>.default`), never Docker's shared default bridge.
    pub tenant_network: bool,
    /// `--security-opt no-new-privileges` on every sandbox (setuid binaries gain nothing).
    pub no_new_privileges: bool,
    /// The caps of a sandbox whose spec names none (`null`: unbounded).
    pub default_cpu: Option<f64>,
    pub default_memory_mib: Option<u64>,
    pub default_disk_gib: Option<u64>,
    /// How a disk bound is enforced (`disk.rs`): `loop` (a sized ext4 file under the writable
    /// layer), `storage_opt` (`--storage-opt size=`), `refuse` (a disk bound is refused).
    pub disk_bound: DiskBound,
    /// An IPv4 range the service's networks (a tenant's bridge, `spec.network`s) take their
    /// subnets from, `tenant_subnet_prefix` each (`null`: the daemon's default address pools,
    /// about 30 bridges on a stock daemon). Local bridges on this host only.
    pub tenant_subnets: Option<String>,
    /// The prefix length of each subnet carved from `tenant_subnets` (24: 253 sandboxes).
    pub tenant_subnet_prefix: u8,
    /// A service network with no container for this long is removed by the sweep (never on
    /// a close: another server may be about to use it).
    #[serde(rename = "network_idle_s", deserialize_with = "seconds::required")]
    pub network_idle: Duration,
}

/// How `resources.disk_gib` (or `create.default_disk_gib`) is enforced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiskBound {
    /// The container's writable layer lives on a loop-mounted ext4 file of the bound's size
    /// (any storage driver; the server must run as root beside a local daemon).
    #[default]
    Loop,
    /// `docker run --storage-opt size=` (overlay2 on xfs with `pquota`, btrfs, zfs).
    StorageOpt,
    /// No bound can be enforced here: a spec with a disk bound is refused.
    Refuse,
}

/// Capabilities dropped by default: Docker's default set keeps these, no sandbox needs them
/// (raw sockets spoof packets, device nodes, file capabilities, chroot escapes, audit log).
pub const DEFAULT_CAP_DROP: &[&str] =
    &["AUDIT_WRITE", "MKNOD", "NET_RAW", "SETFCAP", "SETPCAP", "SYS_CHROOT"];

impl Default for DockerCreateConfig {
    fn default() -> Self {
        Self {
            keepalive_shell: DEFAULT_KEEPALIVE_SHELL.into(),
            keepalive_cmd: DEFAULT_KEEPALIVE_CMD.into(),
            start_timeout: Some(Duration::from_secs(600)),
            use_init: true,
            network: None,
            read_only: false,
            cap_drop: DEFAULT_CAP_DROP.iter().map(|c| c.to_string()).collect(),
            security_opt: Vec::new(),
            pids_limit: Some(4096),
            extra_run_args: Vec::new(),
            apply_resource_limits: true,
            publish_host: "127.0.0.1".into(),
            transport_retries: 2,
            transport_retry_delay: Duration::from_secs(1),
            pull_policy: "missing".into(),
            allowed_cap_add: Vec::new(),
            runtime: super::runtimes::DEFAULT_RUNTIME.into(),
            tenant_network: true,
            no_new_privileges: true,
            default_cpu: Some(2.0),
            default_memory_mib: Some(4096),
            default_disk_gib: Some(10),
            disk_bound: DiskBound::Loop,
            tenant_subnets: None,
            tenant_subnet_prefix: 24,
            network_idle: Duration::from_secs(600),
        }
    }
}

impl DockerCreateConfig {
    /// The checks of the seed's `__post_init__`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        nonzero("create.start_timeout_s", self.start_timeout)?;
        if let Some(limit) = self.pids_limit {
            if limit <= 0 {
                return Err(ConfigError::new("create.pids_limit", format!("must be > 0 (got {limit})")));
            }
        }
        if let Some(cpu) = self.default_cpu {
            if !(cpu.is_finite() && cpu > 0.0) {
                return Err(ConfigError::new(
                    "create.default_cpu",
                    format!("must be > 0 or null (got {cpu})"),
                ));
            }
        }
        for (key, value) in [
            ("create.default_memory_mib", self.default_memory_mib),
            ("create.default_disk_gib", self.default_disk_gib),
        ] {
            if value == Some(0) {
                return Err(ConfigError::new(key, "must be > 0 or null (got 0)"));
            }
        }
        if self.disk_bound == DiskBound::Refuse && self.default_disk_gib.is_some() {
            return Err(ConfigError::new(
                "create.default_disk_gib",
                "must be null when create.disk_bound is refuse (no bound can be enforced)",
            ));
        }
        if let Some(range) = &self.tenant_subnets {
            let pool: ipnet::Ipv4Net = range.parse().map_err(|_| {
                ConfigError::new(
                    "create.tenant_subnets",
                    format!("must be an IPv4 range such as 10.128.0.0/14, or null (got {range:?})"),
                )
            })?;
            if self.tenant_subnet_prefix < pool.prefix_len() || self.tenant_subnet_prefix > 29 {
                return Err(ConfigError::new(
                    "create.tenant_subnet_prefix",
                    format!(
                        "must be between the range's own prefix ({}) and 29 (got {})",
                        pool.prefix_len(),
                        self.tenant_subnet_prefix
                    ),
                ));
            }
        }
        if self.publish_host.parse::<IpAddr>().is_err() {
            return Err(ConfigError::new(
                "create.publish_host",
                format!("must be an IPv4 or IPv6 address (got {:?})", self.publish_host),
            ));
        }
        if self.transport_retries < 0 {
            return Err(ConfigError::new(
                "create.transport_retries",
                format!("must be >= 0 (got {})", self.transport_retries),
            ));
        }
        if !["missing", "never", "always"].contains(&self.pull_policy.as_str()) {
            return Err(ConfigError::new(
                "create.pull_policy",
                format!("must be one of missing, never, always (got {:?})", self.pull_policy),
            ));
        }
        if let Some(flag) =
            self.extra_run_args.iter().find(|a| a.as_str() == "--runtime" || a.starts_with("--runtime="))
        {
            return Err(ConfigError::new(
                "create.extra_run_args",
                format!("{flag:?}: set the runtime with create.runtime and docker.runtimes instead"),
            ));
        }
        if self.keepalive_shell.is_empty() {
            return Err(ConfigError::new("create.keepalive_shell", "must be a non-empty path"));
        }
        if self.keepalive_cmd.is_empty() {
            return Err(ConfigError::new("create.keepalive_cmd", "must be a non-empty command"));
        }
        for cap in &self.allowed_cap_add {
            let name = capability_name(cap).ok_or_else(|| {
                ConfigError::new(
                    "create.allowed_cap_add",
                    format!("{cap:?} is not a capability name (for example SYS_PTRACE)"),
                )
            })?;
            if NEVER_ADDED.contains(&name.as_str()) {
                return Err(ConfigError::new(
                    "create.allowed_cap_add",
                    format!("{name} is never given to a sandbox (it would undo its isolation)"),
                ));
            }
        }
        Ok(())
    }
}

/// Capabilities no sandbox gets, whatever the operator's allow-list says: each undoes the
/// isolation sandboxd promises (egress rules, the mount namespace, the host's kernel, raw
/// devices, file handles outside the container's root).
pub const NEVER_ADDED: &[&str] = &[
    "ALL",
    "NET_ADMIN",
    "SYS_ADMIN",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_BOOT",
    "SYS_TIME",
    "DAC_READ_SEARCH",
    "MAC_ADMIN",
    "MAC_OVERRIDE",
    "BPF",
    "PERFMON",
    "SYSLOG",
];

/// A capability as Docker spells it (`SYS_PTRACE`) from `SYS_PTRACE`, `sys_ptrace` or
/// `CAP_SYS_PTRACE`; `None` for anything but letters, digits and `_`.
pub fn capability_name(name: &str) -> Option<String> {
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    let ok =
        !bare.is_empty() && bare.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    ok.then(|| bare.to_string())
}

/// How a command reaches the sandbox (`exec.engine`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecEngineKind {
    /// The resident agent in the sandbox (one persistent channel per sandbox); `docker exec`
    /// where it cannot run.
    #[default]
    Agent,
    /// One `docker exec` per command.
    Docker,
}

/// How the agent engine reaches a new sandbox's agent (`exec.transport`). Sandboxes made
/// either way are served either way: one with a socket on it, one without through its channel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecTransport {
    /// The agent is the sandbox's keep-alive and answers on a root-only unix socket in a host
    /// directory bind-mounted into the sandbox (a local daemon and a root server); the channel
    /// where that cannot work.
    #[default]
    Socket,
    /// One persistent `docker exec -i` channel per sandbox: no host directory is mounted.
    Channel,
}

/// How commands run (`docker.exec`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DockerExecConfig {
    /// Timeout of an exec that names none; `null` waits forever.
    #[serde(rename = "default_timeout_s", deserialize_with = "seconds::optional")]
    pub default_timeout: Option<Duration>,
    /// Operator-chosen `docker exec` flags, added to every exec.
    pub extra_exec_args: Vec<String>,
    /// How many `docker exec` clients of client commands may run at once.
    pub concurrency: i64,
    /// How many creates (`docker run` and, on the docker engine, their readiness probes) may
    /// run at once; their own pool, so a create never waits behind client execs.
    pub create_concurrency: i64,
    /// How many control commands (inspect, rm, port, the PTY pid reads and cleanup) may run at
    /// once; they have their own pool so they never wait behind execs or transfers.
    pub control_concurrency: i64,
    /// How many file transfers (`docker cp`) may run at once.
    pub transfer_concurrency: i64,
    /// `<shell> -c <cmd>`; `None` detects bash, else sh.
    pub exec_shell: Option<String>,
    /// sandboxd's own bound on what one exec returns, per stream (stdout, stderr): a command
    /// that floods its output keeps running, its excess is dropped and said so on stderr.
    pub max_output_bytes: i64,
    /// `"agent"` (default) or `"docker"`.
    pub engine: ExecEngineKind,
    /// On the agent engine: `"socket"` (default) or `"channel"`.
    pub transport: ExecTransport,
    /// Host directory the agent binary is written to and bind-mounted from; `null`: the
    /// default state directory ([`default_state_dir`]).
    pub agent_dir: Option<String>,
}

impl Default for DockerExecConfig {
    fn default() -> Self {
        Self {
            default_timeout: Some(Duration::from_secs(180)),
            extra_exec_args: Vec::new(),
            concurrency: 32,
            create_concurrency: 8,
            control_concurrency: 16,
            transfer_concurrency: 16,
            exec_shell: None,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            engine: ExecEngineKind::Agent,
            transport: ExecTransport::Socket,
            agent_dir: None,
        }
    }
}

impl DockerExecConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        nonzero("exec.default_timeout_s", self.default_timeout)?;
        for (field, n) in [
            ("exec.concurrency", self.concurrency),
            ("exec.create_concurrency", self.create_concurrency),
            ("exec.control_concurrency", self.control_concurrency),
            ("exec.transfer_concurrency", self.transfer_concurrency),
        ] {
            if n < 1 {
                return Err(ConfigError::new(field, format!("must be >= 1 (got {n})")));
            }
        }
        if !(1..=MAX_OUTPUT_BYTES_LIMIT).contains(&self.max_output_bytes) {
            return Err(ConfigError::new(
                "exec.max_output_bytes",
                format!("must be in 1..={MAX_OUTPUT_BYTES_LIMIT} (got {})", self.max_output_bytes),
            ));
        }
        if matches!(&self.agent_dir, Some(d) if !d.starts_with('/')) {
            return Err(ConfigError::new("exec.agent_dir", "must be null or an absolute host path"));
        }
        if matches!(&self.exec_shell, Some(s) if s.is_empty()) {
            return Err(ConfigError::new(
                "exec.exec_shell",
                "must be null (auto) or a non-empty shell name/path",
            ));
        }
        Ok(())
    }

    /// `agent_dir`, or the default state directory.
    pub fn agent_dir(&self) -> PathBuf {
        self.agent_dir.as_ref().map(PathBuf::from).unwrap_or_else(default_state_dir)
    }
}

/// The readiness probe (`docker.probe`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DockerProbeConfig {
    /// `None` disables the probe.
    pub command: Option<String>,
    /// `None` accepts any output of a successful probe.
    pub expected_stdout: Option<String>,
    /// Timeout of one probe exec.
    #[serde(rename = "timeout_s", deserialize_with = "seconds::required")]
    pub timeout: Duration,
    /// Overall deadline; `None` means one round of `stable_count` attempts.
    #[serde(rename = "deadline_s", deserialize_with = "seconds::optional")]
    pub deadline: Option<Duration>,
    /// Consecutive passes needed.
    pub stable_count: i64,
    #[serde(rename = "stable_delay_s", deserialize_with = "seconds::required")]
    pub stable_delay: Duration,
}

impl Default for DockerProbeConfig {
    fn default() -> Self {
        Self {
            command: Some(READY_PROBE_COMMAND.into()),
            expected_stdout: Some(READY_PROBE_EXPECTED.into()),
            timeout: Duration::from_secs(30),
            deadline: None,
            stable_count: 1,
            stable_delay: Duration::ZERO,
        }
    }
}

impl DockerProbeConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.command.is_some() {
            nonzero("probe.timeout_s", Some(self.timeout))?;
        }
        nonzero("probe.deadline_s", self.deadline)?;
        if self.stable_count < 1 {
            return Err(ConfigError::new(
                "probe.stable_count",
                format!("must be >= 1 (got {})", self.stable_count),
            ));
        }
        Ok(())
    }
}

/// The `docker` section: everything the provider is configured with.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DockerConfig {
    pub create: DockerCreateConfig,
    pub exec: DockerExecConfig,
    pub probe: DockerProbeConfig,
    /// The runtimes sandboxes may ask for (`runtimes.rs`).
    pub runtimes: super::runtimes::Runtimes,
}

impl DockerConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.create.validate()?;
        self.exec.validate()?;
        self.probe.validate()?;
        self.runtimes.validate(&self.create.runtime)
    }

    /// Validated, with `create.allowed_cap_add` in Docker's spelling (`cap_sys_ptrace` ->
    /// `SYS_PTRACE`): done once where a config enters (the file's load, a backend made from a
    /// config built in code), so the create path compares names as they are.
    pub fn checked(mut self) -> Result<Self, ConfigError> {
        self.validate()?;
        for cap in &mut self.create.allowed_cap_add {
            if let Some(name) = capability_name(cap) {
                *cap = name;
            }
        }
        Ok(self)
    }
}
