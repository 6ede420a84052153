//! Provider configuration: the `docker.create`, `docker.exec` and `docker.probe` sections of
//! NeMo Gym's `docker.yaml`, with the same fields, defaults and validation, loaded from YAML or JSON.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

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

/// A configuration value that is out of range, naming the field and what is allowed.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{field}: {message}")]
pub struct ConfigError {
    pub field: String,
    pub message: String,
}

impl ConfigError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: field.into(), message: message.into() }
    }
}

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
    /// default. Those in `runtime::NEVER_ADDED` (NET_ADMIN, SYS_ADMIN, …) are refused here.
    pub allowed_cap_add: Vec<String>,
}

impl Default for DockerCreateConfig {
    fn default() -> Self {
        Self {
            keepalive_shell: DEFAULT_KEEPALIVE_SHELL.into(),
            keepalive_cmd: DEFAULT_KEEPALIVE_CMD.into(),
            start_timeout: Some(Duration::from_secs(600)),
            use_init: true,
            network: None,
            read_only: false,
            cap_drop: Vec::new(),
            security_opt: Vec::new(),
            pids_limit: None,
            extra_run_args: Vec::new(),
            apply_resource_limits: true,
            publish_host: "127.0.0.1".into(),
            transport_retries: 2,
            transport_retry_delay: Duration::from_secs(1),
            pull_policy: "missing".into(),
            allowed_cap_add: Vec::new(),
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
}

impl DockerConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.create.validate()?;
        self.exec.validate()?;
        self.probe.validate()
    }

    /// Parse the `docker` section of `{"docker": {...}, "server": {...}}` and validate it.
    pub fn from_json_value(root: &serde_json::Value) -> Result<Self, ConfigError> {
        Ok(FileConfig::from_json_value(root)?.docker)
    }

    /// Load and validate a JSON file shaped like NeMo Gym's `docker.yaml`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        Ok(FileConfig::load(path)?.docker)
    }
}

/// Default bound on the snapshots that exist at once.
pub const DEFAULT_MAX_SNAPSHOTS: u32 = 100;
/// Default age past which an unreferenced snapshot is removed: one day.
pub const DEFAULT_SNAPSHOT_TTL: Duration = Duration::from_secs(86_400);

/// The `server` section: what clients may ask for. Everything defaults to the safe choice.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSection {
    /// Let clients pass `provider_options.volumes` (host bind mounts).
    pub allow_client_volumes: bool,
    /// Let clients pass `provider_options.run_args` (arbitrary `docker run` flags).
    pub allow_client_run_args: bool,
    /// Cap on any lease (`spec.ttl_s`, `SetTimeout`); `null`: no cap.
    #[serde(rename = "max_ttl_s", deserialize_with = "seconds::optional")]
    pub max_ttl: Option<Duration>,
    /// Lease of a sandbox created without `ttl_s`; `null`: it lives until `Close`.
    #[serde(rename = "default_ttl_s", deserialize_with = "seconds::optional")]
    pub default_ttl: Option<Duration>,
    /// Where leases moved by `SetTimeout` are kept, so a restarted server finds them;
    /// `null`: the default state directory ([`default_state_dir`]).
    pub state_dir: Option<PathBuf>,
    /// Time between two sweeps (expired leases, abandoned creates).
    #[serde(rename = "sweep_interval_s", deserialize_with = "seconds::required")]
    pub sweep_interval: Duration,
    /// Bound on a whole create (run, probe, files); a create still running then fails and
    /// removes its container, and the sweep removes any unfinished create older than this.
    #[serde(rename = "create_timeout_s", deserialize_with = "seconds::required")]
    pub create_timeout: Duration,
    /// Limits on what clients can open (RESOURCE_EXHAUSTED past them).
    pub limits: Limits,
    /// Snapshots that may exist at once; `Snapshot` and `Fork` beyond it are RESOURCE_EXHAUSTED.
    pub max_snapshots: u32,
    /// A snapshot no sandbox uses is removed this long after it was taken; `null` keeps it
    /// until `DeleteSnapshot`.
    #[serde(rename = "snapshot_ttl_s", deserialize_with = "seconds::optional")]
    pub snapshot_ttl: Option<Duration>,
    /// Capability tokens and tenants (`server.auth`).
    pub auth: AuthSection,
    /// Where the audit log goes: a file path, `stderr`, or `null` (no audit log).
    pub audit: Option<String>,
    /// Time between two pings of the Docker daemon; health is NOT_SERVING while it fails.
    #[serde(rename = "health_probe_interval_s", deserialize_with = "seconds::required")]
    pub health_probe_interval: Duration,
    /// What `--metrics-listen` exports beyond the server's own metrics (`server.metrics`).
    pub metrics: MetricsSection,
    /// Terminal sessions (`server.pty`).
    pub pty: PtySection,
}

/// The `server.metrics` section.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsSection {
    /// Export each live sandbox's usage (`Stats`) as gauges labelled by `sandbox_id`. Off by
    /// default: one series per sandbox, and a cgroup read per sandbox each refresh.
    pub per_sandbox: bool,
    /// Time between two refreshes of the per-sandbox gauges.
    #[serde(rename = "per_sandbox_interval_s", deserialize_with = "seconds::required")]
    pub per_sandbox_interval: Duration,
}

impl Default for MetricsSection {
    fn default() -> Self {
        Self { per_sandbox: false, per_sandbox_interval: Duration::from_secs(10) }
    }
}

/// The `server.pty` section: what the sandbox's agent keeps of each terminal session.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PtySection {
    /// Output bytes retained per session for `PtyAttach.since` replays (a ring: the oldest
    /// go first).
    pub retain_bytes: u64,
}

/// Default output retained per terminal session: 1 MiB.
pub const DEFAULT_PTY_RETAIN_BYTES: u64 = 1 << 20;
/// Most output a session may retain (the agent's own bound).
pub const MAX_PTY_RETAIN_BYTES: u64 = 64 << 20;

impl Default for PtySection {
    fn default() -> Self {
        Self { retain_bytes: DEFAULT_PTY_RETAIN_BYTES }
    }
}

impl PtySection {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.retain_bytes == 0 || self.retain_bytes > MAX_PTY_RETAIN_BYTES {
            return Err(ConfigError::new(
                "server.pty.retain_bytes",
                format!("must be in 1..={MAX_PTY_RETAIN_BYTES} (got {})", self.retain_bytes),
            ));
        }
        Ok(())
    }
}

impl Default for ServerSection {
    fn default() -> Self {
        Self {
            allow_client_volumes: false,
            allow_client_run_args: false,
            max_ttl: None,
            default_ttl: None,
            state_dir: None,
            sweep_interval: DEFAULT_SWEEP_INTERVAL,
            create_timeout: DEFAULT_CREATE_TIMEOUT,
            limits: Limits::default(),
            max_snapshots: DEFAULT_MAX_SNAPSHOTS,
            snapshot_ttl: Some(DEFAULT_SNAPSHOT_TTL),
            health_probe_interval: DEFAULT_HEALTH_PROBE_INTERVAL,
            auth: AuthSection::default(),
            audit: None,
            metrics: MetricsSection::default(),
            pty: PtySection::default(),
        }
    }
}

/// Default time between two sweeps.
pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(5);
/// The `server.auth` section: where the signing keys and the tenants are.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthSection {
    /// `<kid> <secret>` a line, the first signs; `null`: a key made in the state directory.
    pub signing_key_file: Option<PathBuf>,
    /// Tenants with their key digests and quotas (YAML or JSON); `null`: no tenants, the
    /// single `--auth-token-file` key (or none) as before.
    pub tenants_file: Option<PathBuf>,
    /// Lifetime of the owner token `Create` returns.
    #[serde(rename = "owner_token_ttl_s", deserialize_with = "seconds::required")]
    pub owner_token_ttl: Duration,
    /// Lifetime of a `Grant` that names none.
    #[serde(rename = "grant_ttl_s", deserialize_with = "seconds::required")]
    pub grant_ttl: Duration,
}

impl Default for AuthSection {
    fn default() -> Self {
        Self {
            signing_key_file: None,
            tenants_file: None,
            owner_token_ttl: DEFAULT_OWNER_TOKEN_TTL,
            grant_ttl: DEFAULT_GRANT_TTL,
        }
    }
}

/// Default lifetime of the owner token `Create` returns: 30 days.
pub const DEFAULT_OWNER_TOKEN_TTL: Duration = Duration::from_secs(30 * 86_400);
/// Default lifetime of a grant: one hour.
pub const DEFAULT_GRANT_TTL: Duration = Duration::from_secs(3_600);

/// Default time between two pings of the Docker daemon (the health probe).
pub const DEFAULT_HEALTH_PROBE_INTERVAL: Duration = Duration::from_secs(2);
/// Default bound on a whole create.
pub const DEFAULT_CREATE_TIMEOUT: Duration = Duration::from_secs(900);
/// The longest duration a client may send (`ttl_s`, `ready_timeout_s`, `timeout_s`): one year.
pub const MAX_CLIENT_SECONDS: f64 = 31_536_000.0;

impl ServerSection {
    pub fn validate(&self) -> Result<(), ConfigError> {
        nonzero("server.max_ttl_s", self.max_ttl)?;
        nonzero("server.default_ttl_s", self.default_ttl)?;
        if let (Some(default), Some(max)) = (self.default_ttl, self.max_ttl) {
            if default > max {
                return Err(ConfigError::new(
                    "server.default_ttl_s",
                    format!(
                        "must be <= server.max_ttl_s ({}) (got {})",
                        max.as_secs_f64(),
                        default.as_secs_f64()
                    ),
                ));
            }
        }
        for (field, v) in [
            ("server.max_ttl_s", self.max_ttl),
            ("server.default_ttl_s", self.default_ttl),
            ("server.sweep_interval_s", Some(self.sweep_interval)),
            ("server.create_timeout_s", Some(self.create_timeout)),
            ("server.health_probe_interval_s", Some(self.health_probe_interval)),
        ] {
            within_client_bound(field, v)?;
        }
        if matches!(&self.state_dir, Some(d) if d.as_os_str().is_empty()) {
            return Err(ConfigError::new("server.state_dir", "must be null (default) or a directory"));
        }
        if self.max_snapshots < 1 {
            return Err(ConfigError::new("server.max_snapshots", "must be >= 1 (got 0)"));
        }
        nonzero("server.snapshot_ttl_s", self.snapshot_ttl)?;
        nonzero("server.health_probe_interval_s", Some(self.health_probe_interval))?;
        within_client_bound(
            "server.metrics.per_sandbox_interval_s",
            Some(self.metrics.per_sandbox_interval),
        )?;
        nonzero("server.metrics.per_sandbox_interval_s", Some(self.metrics.per_sandbox_interval))?;
        nonzero("server.auth.owner_token_ttl_s", Some(self.auth.owner_token_ttl))?;
        nonzero("server.auth.grant_ttl_s", Some(self.auth.grant_ttl))?;
        if matches!(&self.audit, Some(a) if a.is_empty()) {
            return Err(ConfigError::new("server.audit", "must be null, \"stderr\" or a file path"));
        }
        self.pty.validate()?;
        self.limits.validate()
    }

    /// `state_dir`, or the default state directory.
    pub fn state_dir(&self) -> PathBuf {
        self.state_dir.clone().unwrap_or_else(default_state_dir)
    }
}

/// Where this server keeps what it writes to the host (moved leases, the agent binary) when the
/// config names no directory: `$XDG_STATE_HOME/sandboxd`, else `~/.local/state/sandboxd`, else
/// `/var/lib/sandboxd`. One rule, so the two never land in different places by accident.
pub fn default_state_dir() -> PathBuf {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(state) = env("XDG_STATE_HOME") {
        return state.join("sandboxd");
    }
    if let Some(home) = env("HOME") {
        return home.join(".local/state/sandboxd");
    }
    PathBuf::from("/var/lib/sandboxd")
}

/// What one client or the clients together may hold at once.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// PTY sessions open on this server.
    pub max_pty_sessions: u32,
    /// PTY sessions open on one sandbox.
    pub max_pty_sessions_per_sandbox: u32,
    /// Concurrent HTTP/2 streams (calls) one connection may have open.
    pub max_streams_per_connection: u32,
    /// Largest upload without `size` (spooled to a temp file first), in bytes.
    pub max_upload_spool_bytes: u64,
    /// How long `Upload` and `Pty` wait for their first message.
    #[serde(rename = "first_message_timeout_s", deserialize_with = "seconds::required")]
    pub first_message_timeout: Duration,
    /// How long a transfer may stall (an upload whose client sends nothing, a download whose
    /// client reads nothing) before it fails and gives back its transfer permit.
    #[serde(rename = "transfer_idle_timeout_s", deserialize_with = "seconds::required")]
    pub transfer_idle_timeout: Duration,
    /// How often the server sends an HTTP/2 ping on a connection.
    #[serde(rename = "keepalive_interval_s", deserialize_with = "seconds::required")]
    pub keepalive_interval: Duration,
    /// How long a ping may go unanswered before the connection (a client whose host vanished,
    /// or a frozen client) is dropped and what its calls held is released.
    #[serde(rename = "keepalive_timeout_s", deserialize_with = "seconds::required")]
    pub keepalive_timeout: Duration,
    /// Events that may wait for one `Watch` caller; a watcher further behind (it stopped
    /// reading) is ended with RESOURCE_EXHAUSTED instead of being buffered for.
    pub watch_buffer_events: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_pty_sessions: 256,
            max_pty_sessions_per_sandbox: 16,
            max_streams_per_connection: 1024,
            max_upload_spool_bytes: 4 << 30,
            first_message_timeout: Duration::from_secs(30),
            transfer_idle_timeout: Duration::from_secs(60),
            keepalive_interval: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(20),
            watch_buffer_events: 256,
        }
    }
}

impl Limits {
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (field, v) in [
            ("server.limits.max_pty_sessions", self.max_pty_sessions),
            ("server.limits.max_pty_sessions_per_sandbox", self.max_pty_sessions_per_sandbox),
            ("server.limits.max_streams_per_connection", self.max_streams_per_connection),
            ("server.limits.watch_buffer_events", self.watch_buffer_events),
        ] {
            if v == 0 {
                return Err(ConfigError::new(field, "must be >= 1"));
            }
        }
        if self.max_upload_spool_bytes == 0 {
            return Err(ConfigError::new("server.limits.max_upload_spool_bytes", "must be >= 1"));
        }
        within_client_bound("server.limits.first_message_timeout_s", Some(self.first_message_timeout))?;
        within_client_bound("server.limits.transfer_idle_timeout_s", Some(self.transfer_idle_timeout))?;
        within_client_bound("server.limits.keepalive_interval_s", Some(self.keepalive_interval))?;
        within_client_bound("server.limits.keepalive_timeout_s", Some(self.keepalive_timeout))
    }
}

/// The whole config file: `{"docker": {...}, "server": {...}}`; any other key is an error.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FileConfig {
    pub docker: DockerConfig,
    pub server: ServerSection,
    /// Egress policy (`network`).
    pub network: NetworkSection,
    /// Warm pools the server keeps filled from its start (`pools:`, a list).
    pub pools: Vec<PoolConfig>,
    pub cluster: ClusterSection,
}

/// Default time between two resolutions of a sandbox's allowed domains.
pub const DEFAULT_DOMAIN_REFRESH: Duration = Duration::from_secs(60);

/// The `network` section: the egress policy of sandboxes that name none, and how often allowed
/// domains are resolved again.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkSection {
    /// `null`: a sandbox without `spec.network_policy` may reach everything (as before egress
    /// policies existed).
    pub default_policy: Option<crate::egress::NetworkPolicy>,
    #[serde(rename = "domain_refresh_s", deserialize_with = "seconds::required")]
    pub domain_refresh: Duration,
}

impl Default for NetworkSection {
    fn default() -> Self {
        Self { default_policy: None, domain_refresh: DEFAULT_DOMAIN_REFRESH }
    }
}

impl NetworkSection {
    pub fn validate(&self, docker: &DockerCreateConfig) -> Result<(), ConfigError> {
        if self.domain_refresh.is_zero() {
            return Err(ConfigError::new("network.domain_refresh_s", "must be > 0 (got 0)"));
        }
        if let Some(policy) = &self.default_policy {
            policy.check("network.default_policy").map_err(|e| ConfigError::new(e.field, e.message))?;
            if let Some(why) = crate::egress::unenforceable_network(docker.network.as_deref()) {
                return Err(ConfigError::new("network.default_policy", why));
            }
        }
        if let Some(flag) = crate::egress::net_admin_flag(&docker.extra_run_args) {
            return Err(ConfigError::new(
                "docker.create.extra_run_args",
                format!("{flag:?} would let a sandbox change its own network rules (CAP_NET_ADMIN); sandboxd never grants it"),
            ));
        }
        Ok(())
    }
}

/// One entry of `pools:`: a warm pool of `target` ready sandboxes of `image` and `template`
/// (a `SandboxSpec` without `image`, `ttl_s` or `snapshot_id`: workdir, env, metadata,
/// resources, entrypoint, ports, ready_timeout_s, provider_options), at most `max` alive.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    pub name: String,
    pub image: String,
    /// Checked as a `SandboxSpec` when the server builds its pools (`pools[N].template.*`).
    #[serde(default)]
    pub template: serde_json::Value,
    #[serde(default)]
    pub target: u32,
    pub max: u32,
}

impl PoolConfig {
    /// The shape rules (name, sizes, an image); the template's own fields are checked with the
    /// sandbox spec's rules when the server starts.
    pub fn validate(&self, index: usize) -> Result<(), ConfigError> {
        let prefix = format!("pools[{index}]");
        let refused = |(field, message): crate::pools::rules::Refusal| ConfigError::new(field, message);
        crate::pools::rules::check_name(&format!("{prefix}.name"), &self.name).map_err(refused)?;
        if self.image.is_empty() {
            return Err(ConfigError::new(format!("{prefix}.image"), "is required"));
        }
        if !(self.template.is_null() || self.template.is_object()) {
            return Err(ConfigError::new(format!("{prefix}.template"), "must be a mapping (a sandbox spec)"));
        }
        crate::pools::rules::check_sizes(&prefix, self.target, self.max).map_err(refused)
    }
}

/// How the sandboxes of this server are spread (`cluster.mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClusterMode {
    /// One Docker host: sandboxes are this daemon's containers (the default).
    #[default]
    Single,
    /// A node of a Docker Swarm: a sandbox is a one-replica service placed by Swarm, and any
    /// node answers for any sandbox by forwarding to the node it runs on.
    Swarm,
}

/// The `cluster` section: single host (default) or Docker Swarm.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterSection {
    pub mode: ClusterMode,
    /// The port every node's sandboxd listens on, at the node's Swarm address (`docker node
    /// inspect`'s `Status.Addr`); a node label `sandboxd.addr=HOST:PORT` overrides it per node.
    pub peer_port: u16,
    /// Swarm placement constraints added to every sandbox (`node.labels.sandboxes==yes`).
    pub constraints: Vec<String>,
    /// How long a node's address and state are reused before Swarm is asked again.
    #[serde(rename = "node_cache_s", deserialize_with = "seconds::required")]
    pub node_cache: Duration,
}

/// The port a sandboxd of the cluster listens on unless configured otherwise.
pub const DEFAULT_PEER_PORT: u16 = 50051;

impl Default for ClusterSection {
    fn default() -> Self {
        Self {
            mode: ClusterMode::Single,
            peer_port: DEFAULT_PEER_PORT,
            constraints: Vec::new(),
            node_cache: Duration::from_secs(1),
        }
    }
}

impl ClusterSection {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.peer_port == 0 {
            return Err(ConfigError::new("cluster.peer_port", "must be in 1..=65535 (got 0)"));
        }
        for c in &self.constraints {
            let ok = ["==", "!="].iter().any(|op| c.contains(op)) && !c.starts_with('-');
            if !ok {
                return Err(ConfigError::new(
                    "cluster.constraints",
                    format!("each must be `ATTRIBUTE==VALUE` or `ATTRIBUTE!=VALUE` (got {c:?})"),
                ));
            }
        }
        within_client_bound("cluster.node_cache_s", Some(self.node_cache))
    }
}

impl FileConfig {
    /// From the parsed file. A value of the wrong type is named by its path
    /// (`docker.create.pids_limit`), which `serde_path_to_error` tracks for us.
    pub fn from_json_value(root: &serde_json::Value) -> Result<Self, ConfigError> {
        let config: FileConfig = serde_path_to_error::deserialize(root.clone()).map_err(|e| {
            let path = e.path().to_string();
            let message = e.into_inner().to_string();
            let field = if path == "." || path.is_empty() {
                "config".to_string()
            } else if message.starts_with("invalid value") {
                // A value out of range is named as `validate` names it (the docker section's
                // fields as in the seed's `docker.yaml`, relative to it); a wrong type by its path.
                path.strip_prefix("docker.").unwrap_or(&path).to_string()
            } else {
                path
            };
            ConfigError::new(field, message)
        })?;
        config.docker.validate()?;
        config.server.validate()?;
        config.network.validate(&config.docker.create)?;
        for (i, pool) in config.pools.iter().enumerate() {
            pool.validate(i)?;
            if config.pools[..i].iter().any(|p| p.name == pool.name) {
                return Err(ConfigError::new(
                    format!("pools[{i}].name"),
                    format!("{:?} is defined twice", pool.name),
                ));
            }
        }
        config.cluster.validate()?;
        Ok(config)
    }

    /// Loads a JSON or YAML file (NeMo Gym's `docker.yaml` as is; same keys either way). YAML
    /// is chosen by a `.yaml`/`.yml` extension, else by content that does not start with `{`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new("config", format!("cannot read {}: {e}", path.display())))?;
        Self::from_text(&text, is_yaml(path, &text))
    }

    /// Parses config text as YAML or JSON.
    pub fn from_text(text: &str, yaml: bool) -> Result<Self, ConfigError> {
        let root: serde_json::Value = if yaml {
            // An empty YAML document is an empty config.
            serde_yaml::from_str::<Option<serde_json::Value>>(text)
                .map_err(|e| ConfigError::new("config", format!("not valid YAML: {e}")))?
                .unwrap_or_else(|| serde_json::json!({}))
        } else {
            serde_json::from_str(text)
                .map_err(|e| ConfigError::new("config", format!("not valid JSON: {e}")))?
        };
        Self::from_json_value(&root)
    }
}

fn is_yaml(path: &Path, text: &str) -> bool {
    match path.extension().and_then(|e| e.to_str()) {
        Some("yaml" | "yml") => true,
        Some("json") => false,
        _ => !text.trim_start().starts_with('{'),
    }
}

/// A duration that must not be zero, when set.
fn nonzero(field: &str, value: Option<Duration>) -> Result<(), ConfigError> {
    match value {
        Some(d) if d.is_zero() => Err(ConfigError::new(field, "must be > 0 (got 0)")),
        _ => Ok(()),
    }
}

/// A duration in `(0, MAX_CLIENT_SECONDS]`, when set.
fn within_client_bound(field: &str, value: Option<Duration>) -> Result<(), ConfigError> {
    match value {
        Some(d) if d.is_zero() || d.as_secs_f64() > MAX_CLIENT_SECONDS => Err(ConfigError::new(
            field,
            format!("must be > 0 and <= {MAX_CLIENT_SECONDS} (got {})", d.as_secs_f64()),
        )),
        _ => Ok(()),
    }
}

/// Config durations: written as seconds (a JSON/YAML number, the keys ending in `_s`, as in the
/// seed's `docker.yaml`), held as `Duration` from parsing on so no user converts. Negative,
/// NaN, infinite and absurd values are refused here; whether zero is allowed is `validate`'s.
pub mod seconds {
    use std::time::Duration;

    use serde::de::{Deserialize, Deserializer, Error, Unexpected};

    /// The largest config duration: a century (anything longer is a mistake, and would
    /// overflow deadline arithmetic).
    pub const MAX: f64 = 100.0 * 365.0 * 86_400.0;

    fn checked<E: Error>(value: f64) -> Result<Duration, E> {
        match Duration::try_from_secs_f64(value) {
            Ok(d) if value <= MAX => Ok(d),
            _ => Err(E::invalid_value(Unexpected::Float(value), &"seconds >= 0 and <= 3153600000")),
        }
    }

    pub fn required<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        checked(f64::deserialize(d)?)
    }

    /// `null` is `None`.
    pub fn optional<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Option::<f64>::deserialize(d)?.map(checked).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn load(v: serde_json::Value) -> Result<DockerConfig, ConfigError> {
        DockerConfig::from_json_value(&v)
    }

    #[test]
    fn defaults_match_the_seed() {
        let c = load(json!({})).unwrap();
        assert_eq!(c.create.start_timeout, Some(Duration::from_secs(600)));
        assert!(c.create.use_init);
        assert_eq!(c.create.publish_host, "127.0.0.1");
        assert_eq!(c.create.transport_retries, 2);
        assert_eq!(c.create.transport_retry_delay, Duration::from_secs(1));
        assert_eq!(c.exec.default_timeout, Some(Duration::from_secs(180)));
        assert_eq!(c.exec.concurrency, 32);
        assert_eq!(c.exec.engine, ExecEngineKind::Agent);
        assert_eq!(c.probe.command.as_deref(), Some(READY_PROBE_COMMAND));
        assert_eq!(c.probe.timeout, Duration::from_secs(30));
        assert_eq!(c.probe.stable_count, 1);
    }

    #[test]
    fn unknown_key_is_named() {
        let err = load(json!({"docker": {"create": {"pids_limt": 3}}})).unwrap_err();
        assert!(err.message.contains("pids_limt"), "{err}");
        let err = load(json!({"docker": {"bogus": {}}})).unwrap_err();
        assert!(err.message.contains("bogus"), "{err}");
        let err = FileConfig::from_json_value(&json!({"dockr": {}})).unwrap_err();
        assert!(err.message.contains("dockr"), "{err}");
        let err = FileConfig::from_json_value(&json!({"server": {"allow_volumes": true}})).unwrap_err();
        assert!(err.message.contains("allow_volumes"), "{err}");
    }

    #[test]
    fn post_init_validation() {
        let cases = [
            (json!({"create": {"start_timeout_s": 0}}), "create.start_timeout_s"),
            (json!({"create": {"pids_limit": 0}}), "create.pids_limit"),
            (json!({"create": {"publish_host": "localhost"}}), "create.publish_host"),
            (json!({"create": {"transport_retries": -1}}), "create.transport_retries"),
            (json!({"create": {"transport_retry_delay_s": -0.5}}), "create.transport_retry_delay_s"),
            (json!({"create": {"pull_policy": "sometimes"}}), "create.pull_policy"),
            (json!({"exec": {"default_timeout_s": -1}}), "exec.default_timeout_s"),
            (json!({"exec": {"concurrency": 0}}), "exec.concurrency"),
            (json!({"exec": {"create_concurrency": 0}}), "exec.create_concurrency"),
            (json!({"exec": {"control_concurrency": 0}}), "exec.control_concurrency"),
            (json!({"exec": {"transfer_concurrency": 0}}), "exec.transfer_concurrency"),
            (json!({"exec": {"exec_shell": ""}}), "exec.exec_shell"),
            (json!({"exec": {"max_output_bytes": 0}}), "exec.max_output_bytes"),
            (json!({"exec": {"agent_dir": "relative"}}), "exec.agent_dir"),
            (json!({"probe": {"timeout_s": 0}}), "probe.timeout_s"),
            (json!({"probe": {"deadline_s": 0}}), "probe.deadline_s"),
            (json!({"probe": {"stable_count": 0}}), "probe.stable_count"),
            (json!({"probe": {"stable_delay_s": -1}}), "probe.stable_delay_s"),
        ];
        for (docker, field) in cases {
            let err = load(json!({ "docker": docker })).unwrap_err();
            assert_eq!(err.field, field, "{docker}");
        }
    }

    #[test]
    fn durations_are_seconds_and_bad_ones_are_named() {
        let c = load(json!({"docker": {"exec": {"default_timeout_s": 1.5}, "probe": {"stable_delay_s": 0}}}))
            .unwrap();
        assert_eq!(c.exec.default_timeout, Some(Duration::from_millis(1500)));
        assert_eq!(c.probe.stable_delay, Duration::ZERO);
        for (docker, field) in [
            (json!({"exec": {"default_timeout_s": 1e300}}), "exec.default_timeout_s"),
            (json!({"probe": {"timeout_s": -0.001}}), "probe.timeout_s"),
        ] {
            let err = load(json!({ "docker": docker })).unwrap_err();
            assert_eq!(err.field, field, "{docker}");
        }
        let err = FileConfig::from_json_value(&json!({"server": {"sweep_interval_s": -1}})).unwrap_err();
        assert_eq!(err.field, "server.sweep_interval_s");
        let err = load(json!({"docker": {"exec": {"default_timeout_s": "60"}}})).unwrap_err();
        assert_eq!(err.field, "docker.exec.default_timeout_s", "a wrong type is named by its path");
    }

    #[test]
    fn a_value_of_the_wrong_type_names_its_field() {
        let err = load(json!({"docker": {"create": {"pids_limit": "many"}}})).unwrap_err();
        assert_eq!(err.field, "docker.create.pids_limit", "{err}");
        let err =
            FileConfig::from_json_value(&json!({"server": {"allow_client_volumes": "yes"}})).unwrap_err();
        assert_eq!(err.field, "server.allow_client_volumes", "{err}");
    }

    #[test]
    fn yaml_with_the_same_keys_is_accepted() {
        let yaml = "docker:\n  create:\n    pids_limit: 64\n    network: null\n  exec:\n    concurrency: 4\nserver:\n  allow_client_volumes: false\n";
        let c = FileConfig::from_text(yaml, true).unwrap();
        assert_eq!((c.docker.create.pids_limit, c.docker.exec.concurrency), (Some(64), 4));
        assert_eq!(FileConfig::from_text("", true).unwrap(), FileConfig::default());
        let err = FileConfig::from_text("docker:\n  exec:\n    concurrency: lots\n", true).unwrap_err();
        assert_eq!(err.field, "docker.exec.concurrency");
        assert!(is_yaml(Path::new("docker.yaml"), "{}") && !is_yaml(Path::new("c.json"), "a: 1"));
        assert!(is_yaml(Path::new("conf"), "docker: {}") && !is_yaml(Path::new("conf"), "{\"docker\": {}}"));
    }

    #[test]
    fn snapshot_bounds() {
        let c = FileConfig::from_json_value(&json!({})).unwrap();
        assert_eq!((c.server.max_snapshots, c.server.snapshot_ttl), (100, Some(Duration::from_secs(86_400))));
        let c = FileConfig::from_json_value(&json!({"server": {"max_snapshots": 3, "snapshot_ttl_s": null}}))
            .unwrap();
        assert_eq!((c.server.max_snapshots, c.server.snapshot_ttl), (3, None));
        for (server, field) in [
            (json!({"max_snapshots": 0}), "server.max_snapshots"),
            (json!({"snapshot_ttl_s": 0}), "server.snapshot_ttl_s"),
        ] {
            let err = FileConfig::from_json_value(&json!({ "server": server })).unwrap_err();
            assert_eq!(err.field, field);
        }
    }

    #[test]
    fn exec_engine_is_agent_or_docker() {
        assert_eq!(
            load(json!({"docker": {"exec": {"engine": "docker"}}})).unwrap().exec.engine,
            ExecEngineKind::Docker
        );
        let err = load(json!({"docker": {"exec": {"engine": "ssh"}}})).unwrap_err();
        assert!(err.message.contains("agent") && err.message.contains("docker"), "{err}");
    }

    #[test]
    fn exec_transport_is_socket_or_channel() {
        assert_eq!(load(json!({})).unwrap().exec.transport, ExecTransport::Socket);
        let c = load(json!({"docker": {"exec": {"engine": "agent", "transport": "channel"}}})).unwrap();
        assert_eq!(c.exec.transport, ExecTransport::Channel);
        let err = load(json!({"docker": {"exec": {"transport": "ssh"}}})).unwrap_err();
        assert_eq!(err.field, "docker.exec.transport");
        assert!(err.message.contains("`socket`") && err.message.contains("`channel`"), "{err:?}");
    }

    #[test]
    fn nulls_and_ipv6_are_accepted() {
        let c = load(json!({"docker": {
            "create": {"start_timeout_s": null, "publish_host": "::1", "pids_limit": 64},
            "exec": {"default_timeout_s": null, "exec_shell": "bash"},
            "probe": {"command": null, "timeout_s": 0}
        }}))
        .unwrap();
        assert_eq!(c.create.start_timeout, None);
        assert_eq!(c.exec.exec_shell.as_deref(), Some("bash"));
        assert_eq!(c.probe.command, None);
    }

    #[test]
    fn cluster_mode_defaults_to_single_and_is_checked() {
        let c = FileConfig::from_json_value(&json!({})).unwrap();
        assert_eq!(c.cluster.mode, ClusterMode::Single);
        assert_eq!(c.cluster.peer_port, DEFAULT_PEER_PORT);
        let c = FileConfig::from_json_value(
            &json!({"cluster": {"mode": "swarm", "constraints": ["node.role==manager"]}}),
        )
        .unwrap();
        assert_eq!(c.cluster.mode, ClusterMode::Swarm);
        for (cluster, field) in [
            (json!({"peer_port": 0}), "cluster.peer_port"),
            (json!({"constraints": ["--mount=x"]}), "cluster.constraints"),
            (json!({"node_cache_s": 0}), "cluster.node_cache_s"),
        ] {
            let err = FileConfig::from_json_value(&json!({ "cluster": cluster })).unwrap_err();
            assert_eq!(err.field, field, "{err}");
        }
        let err = FileConfig::from_json_value(&json!({"cluster": {"mode": "k8s"}})).unwrap_err();
        assert!(err.message.contains("swarm"), "{err}");
    }
}
