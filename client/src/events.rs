//! [`Client::watch`] (lifecycle events of the sandboxes a server owns, as they happen) and
//! [`Client::stats`] / [`Client::stats_stream`] (one sandbox's resource usage now, or every
//! interval). Dropping a [`WatchStream`] cancels
//! the call.

use std::collections::HashMap;

use crate::client::Client;
use crate::error::{ClientError, Result};
use crate::inventory::{status_to_proto, SandboxInfo};
use crate::proto;
use crate::sandbox::{Sandbox, SandboxStatus};

/// One reading of a sandbox's usage: the wire message (cumulative counters, `read_at_unix_ns`).
pub type SandboxStats = proto::StatsResponse;

/// What [`Client::watch`] asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchOptions {
    /// Only sandboxes carrying every one of these labels.
    pub labels: HashMap<String, String>,
    /// Only events after which the sandbox is in one of these states; empty means any.
    pub statuses: Vec<SandboxStatus>,
    /// First an [`EventKind::Existing`] event per sandbox that matches now.
    pub include_existing: bool,
}

/// What happened to a sandbox (`SandboxEventKind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    Created,
    Ready,
    Paused,
    Resumed,
    Stopped,
    LeaseExpired,
    Removed,
    Existing,
    /// A kind this client does not know (a newer server).
    Unknown(i32),
}

impl EventKind {
    fn from_wire(value: i32) -> EventKind {
        use proto::SandboxEventKind as K;
        match K::try_from(value) {
            Ok(K::Created) => EventKind::Created,
            Ok(K::Ready) => EventKind::Ready,
            Ok(K::Paused) => EventKind::Paused,
            Ok(K::Resumed) => EventKind::Resumed,
            Ok(K::Stopped) => EventKind::Stopped,
            Ok(K::LeaseExpired) => EventKind::LeaseExpired,
            Ok(K::Removed) => EventKind::Removed,
            Ok(K::Existing) => EventKind::Existing,
            _ => EventKind::Unknown(value),
        }
    }

    /// Lower-case name as `sandboxctl events` prints it (`lease-expired`).
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Created => "created",
            EventKind::Ready => "ready",
            EventKind::Paused => "paused",
            EventKind::Resumed => "resumed",
            EventKind::Stopped => "stopped",
            EventKind::LeaseExpired => "lease-expired",
            EventKind::Removed => "removed",
            EventKind::Existing => "existing",
            EventKind::Unknown(_) => "unknown",
        }
    }
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One lifecycle event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxEvent {
    pub kind: EventKind,
    pub sandbox_id: String,
    /// The sandbox as far as the event tells (`status`: its state after the event).
    pub sandbox: Option<SandboxInfo>,
    /// Milliseconds since the Unix epoch.
    pub time_unix_ms: i64,
    /// STOPPED: the main process's exit code.
    pub exit_code: Option<i32>,
    /// STOPPED: ended by the kernel's OOM killer.
    pub oom_killed: bool,
    /// REMOVED, LEASE_EXPIRED: who or why.
    pub reason: String,
    /// STOPPED, REMOVED: why it ended when its owner did not end it (OOM_KILLED,
    /// SANDBOX_GONE).
    pub failure_kind: Option<crate::FailureKind>,
}

/// The events of one `Watch` call, in order.
pub struct WatchStream {
    inner: tonic::Streaming<proto::WatchResponse>,
}

impl WatchStream {
    /// The next event; `None` when the server ended the watch cleanly. A watcher that fell
    /// behind gets `RESOURCE_EXHAUSTED`: watch again with `include_existing`.
    pub async fn next(&mut self) -> Result<Option<SandboxEvent>> {
        let Some(response) = self.inner.message().await? else { return Ok(None) };
        let event =
            response.event.ok_or_else(|| ClientError::Protocol("a WatchResponse without event".into()))?;
        Ok(Some(SandboxEvent {
            kind: EventKind::from_wire(event.kind),
            sandbox_id: event.sandbox_id,
            sandbox: event.sandbox.map(SandboxInfo::from_proto).transpose()?,
            time_unix_ms: event.time_unix_ms,
            exit_code: event.exit_code,
            oom_killed: event.oom_killed,
            failure_kind: crate::FailureKind::from_wire(event.failure_kind),
            reason: event.reason,
        }))
    }
}

impl Client {
    /// Lifecycle events of the sandboxes the server owns (`Watch`), until dropped.
    pub async fn watch(&self, options: WatchOptions) -> Result<WatchStream> {
        let request = proto::WatchRequest {
            labels: options.labels,
            statuses: options.statuses.into_iter().map(|s| status_to_proto(s) as i32).collect(),
            include_existing: options.include_existing,
        };
        let inner = self.raw().watch(request).await?.into_inner();
        Ok(WatchStream { inner })
    }

    /// Sandbox `sandbox_id`'s resource usage now (`Stats`).
    pub async fn stats(&self, sandbox_id: impl Into<String>) -> Result<SandboxStats> {
        let request = proto::StatsRequest { sandbox_id: sandbox_id.into() };
        Ok(self.raw().stats(request).await?.into_inner())
    }
}

/// The readings of one `StatsStream` call.
pub struct StatsStream {
    inner: tonic::Streaming<proto::StatsResponse>,
}

impl StatsStream {
    /// The next reading; `None` once the sandbox stopped or went (or the server shut down).
    pub async fn next(&mut self) -> Result<Option<SandboxStats>> {
        Ok(self.inner.message().await?)
    }
}

impl Client {
    /// Sandbox `sandbox_id`'s usage every `interval` (0.1 s to an hour; zero: one second)
    /// until dropped (`StatsStream`).
    pub async fn stats_stream(
        &self,
        sandbox_id: impl Into<String>,
        interval: std::time::Duration,
    ) -> Result<StatsStream> {
        let request =
            proto::StatsStreamRequest { sandbox_id: sandbox_id.into(), interval_s: interval.as_secs_f64() };
        let inner = self.raw().stats_stream(request).await?.into_inner();
        Ok(StatsStream { inner })
    }
}

impl Sandbox {
    /// This sandbox's resource usage now (`Stats`).
    pub async fn stats(&self) -> Result<SandboxStats> {
        self.ensure_live()?;
        self.client().stats(self.id()).await
    }
}
