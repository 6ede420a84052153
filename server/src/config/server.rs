//! The `server` section: what clients may ask for (leases, snapshots, limits), where state is
//! kept, auth, audit, metrics and terminal sessions. Everything defaults to the safe choice.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::rules::{nonzero, within_client_bound, ConfigError};
use super::seconds;

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
    /// Lease of a sandbox created without `ttl_s` (an hour by default, so a forgotten sandbox
    /// ends); `null`: it lives until `Close`.
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
    /// The E2B-compatible endpoint (`server.e2b`; off unless `listen` is set).
    pub e2b: super::E2bSection,
    /// The web console (`server.console`; off unless `listen` is set).
    pub console: super::ConsoleSection,
    /// OpenTelemetry traces (`server.tracing`); off unless an endpoint is set.
    pub tracing: super::TracingSection,
    /// Creates under a burst (`server.admission`): start slots and the fair queue.
    pub admission: super::AdmissionSection,
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

/// `server.default_ttl_s` unless configured: a sandbox nobody closes ends within the hour.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(3600);

impl Default for ServerSection {
    fn default() -> Self {
        Self {
            allow_client_volumes: false,
            allow_client_run_args: false,
            max_ttl: None,
            default_ttl: Some(DEFAULT_LEASE),
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
            e2b: super::E2bSection::default(),
            console: super::ConsoleSection::default(),
            tracing: super::TracingSection::default(),
            admission: super::AdmissionSection::default(),
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

impl ServerSection {
    pub fn validate(&self) -> Result<(), ConfigError> {
        nonzero("server.max_ttl_s", self.max_ttl)?;
        nonzero("server.default_ttl_s", self.default_ttl)?;
        if let (Some(default), Some(max)) = (self.default_ttl, self.max_ttl) {
            // The shipped default yields to an operator's lower cap (the lease policy caps it);
            // a default the operator chose must fit the cap it chose.
            if default > max && default != DEFAULT_LEASE {
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
        self.e2b.validate()?;
        self.tracing.validate()?;
        self.admission.validate()?;
        self.limits.validate()
    }

    /// `state_dir`, or the default state directory.
    pub fn state_dir(&self) -> PathBuf {
        self.state_dir.clone().unwrap_or_else(default_state_dir)
    }
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
