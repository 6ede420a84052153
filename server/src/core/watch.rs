//! Lifecycle events of sandboxes, neutral of any backend: what `Watch` streams.
//!
//! A backend publishes into one [`EventHub`] (the Docker one from the `docker events` stream it
//! already follows); every watcher subscribes to it. The hub is a bounded broadcast: a watcher
//! that falls behind it loses its place and is ended, so no watcher can make the server buffer
//! without bound. Removals carry who or why: whoever removes a sandbox on purpose notes the
//! reason first ([`EventHub::expect_removal`]), and the backend attaches it when the removal is
//! seen; a removal nobody announced was made outside this service.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;

use crate::core::inventory::SandboxSummary;
use crate::core::spec::SandboxStatus;

/// Events the hub holds for its slowest subscriber; one further behind is ended.
pub const HUB_CAPACITY: usize = 4096;

/// Most announced removal reasons kept (a removal that never happened must not grow it).
const REASON_MEMORY: usize = 4096;

/// What happened (`SandboxEventKind` on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Created,
    Ready,
    Paused,
    Resumed,
    Stopped,
    LeaseExpired,
    Removed,
    Existing,
    /// Checkpointed to disk and stopped (`Hibernate`).
    Hibernated,
}

impl EventKind {
    /// The sandbox's state after an event of this kind (what `statuses` filters on).
    pub fn status_after(self) -> SandboxStatus {
        match self {
            EventKind::Created => SandboxStatus::Starting,
            EventKind::Ready | EventKind::Resumed | EventKind::Existing => SandboxStatus::Running,
            EventKind::Paused => SandboxStatus::Paused,
            EventKind::Hibernated => SandboxStatus::Hibernated,
            EventKind::Stopped | EventKind::LeaseExpired | EventKind::Removed => SandboxStatus::Stopped,
        }
    }
}

/// One event: the sandbox as far as the event tells, and its container's labels (for the
/// tenant and label filters).
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxEvent {
    pub kind: EventKind,
    pub sandbox: SandboxSummary,
    /// The sandbox's tenant (`sandboxd.tenant`), if any.
    pub tenant: Option<String>,
    pub time_unix_ms: i64,
    pub exit_code: Option<i32>,
    pub oom_killed: bool,
    pub reason: String,
    /// STOPPED and REMOVED: why it ended when its owner did not end it (OOM_KILLED, or
    /// SANDBOX_GONE when stopped or removed from outside).
    pub failure_kind: Option<crate::core::failure::FailureKind>,
}

impl SandboxEvent {
    /// Whether a watcher asking for `labels` (all must match), `statuses` (any; empty: all)
    /// and seeing only `tenant`'s sandboxes (`None`: all) wants this event.
    pub fn matches(
        &self,
        labels: &BTreeMap<String, String>,
        statuses: &[SandboxStatus],
        tenant: Option<&str>,
    ) -> bool {
        if let Some(tenant) = tenant {
            if self.tenant.as_deref() != Some(tenant) {
                return false;
            }
        }
        let status =
            if self.kind == EventKind::Existing { self.sandbox.status } else { self.kind.status_after() };
        labels.iter().all(|(k, v)| self.sandbox.metadata.get(k) == Some(v))
            && (statuses.is_empty() || statuses.contains(&status))
    }
}

/// The one fan-out point between a backend's event source and every watcher.
pub struct EventHub {
    tx: broadcast::Sender<Arc<SandboxEvent>>,
    reasons: Mutex<HashMap<String, String>>,
    /// Sandboxes whose lease the sweep ended, until their container stops or goes.
    expiring: Mutex<HashSet<String>>,
    /// Daemon events this service causes on purpose and tells otherwise (a checkpoint's stop,
    /// a restore's start), by (sandbox, docker action): what to publish instead (`None`:
    /// nothing).
    expected: Mutex<HashMap<(String, &'static str), Option<EventKind>>>,
    /// Whether the source is delivering events now (a watch begins once it is).
    up: tokio::sync::watch::Sender<bool>,
}

impl Default for EventHub {
    fn default() -> Self {
        Self::new(HUB_CAPACITY)
    }
}

impl EventHub {
    pub fn new(capacity: usize) -> Self {
        Self {
            tx: broadcast::channel(capacity.max(1)).0,
            reasons: Mutex::default(),
            expected: Mutex::default(),
            expiring: Mutex::default(),
            up: tokio::sync::watch::channel(false).0,
        }
    }

    /// A new watcher's place: every event published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<SandboxEvent>> {
        self.tx.subscribe()
    }

    /// Deliver `event` to every watcher (none listening is fine).
    pub fn publish(&self, event: SandboxEvent) {
        let _ = self.tx.send(Arc::new(event));
    }

    /// The source says whether it delivers events now.
    pub fn set_up(&self, up: bool) {
        self.up.send_replace(up);
    }

    /// Waits (at most `timeout`) until the source delivers events; whether it does.
    pub async fn until_up(&self, timeout: std::time::Duration) -> bool {
        let mut up = self.up.subscribe();
        tokio::time::timeout(timeout, up.wait_for(|up| *up)).await.is_ok_and(|r| r.is_ok())
    }

    /// Resolves once the source stops delivering (a watcher then cannot know what it missed).
    pub async fn until_down(&self) {
        let mut up = self.up.subscribe();
        let _ = up.wait_for(|up| !*up).await;
    }

    /// Watchers subscribed now.
    pub fn watchers(&self) -> usize {
        self.tx.receiver_count()
    }

    /// The daemon will report `action` (`die`, `start`) of `sandbox_id` because this service
    /// does something on purpose (a checkpoint stops the container, a restore starts it):
    /// publish `instead` in its place (`None`: nothing).
    pub fn expect_event(&self, sandbox_id: &str, action: &'static str, instead: Option<EventKind>) {
        let mut expected = self.expected.lock().unwrap_or_else(|p| p.into_inner());
        if expected.len() >= REASON_MEMORY {
            expected.clear();
        }
        expected.insert((sandbox_id.to_string(), action), instead);
    }

    /// Take what an expected daemon event of `sandbox_id` becomes (`Some(None)`: nothing;
    /// `None`: it was not expected).
    pub fn take_expected(&self, sandbox_id: &str, action: &str) -> Option<Option<EventKind>> {
        let mut expected = self.expected.lock().unwrap_or_else(|p| p.into_inner());
        let key = expected.keys().find(|(id, a)| id == sandbox_id && *a == action).cloned()?;
        expected.remove(&key)
    }

    /// `sandbox_id` is about to be removed on purpose, because of `reason`: its REMOVED event
    /// says so. The first reason wins (a sweep's "lease expired" over the close it then makes).
    pub fn expect_removal(&self, sandbox_id: &str, reason: impl Into<String>) {
        let mut reasons = self.reasons.lock().unwrap_or_else(|p| p.into_inner());
        if reasons.len() >= REASON_MEMORY {
            reasons.clear();
        }
        reasons.entry(sandbox_id.to_string()).or_insert_with(|| reason.into());
    }

    /// The lease of `sandbox_id` ended and it is about to be removed: a LEASE_EXPIRED event
    /// comes before its STOPPED or REMOVED one.
    pub fn expect_expiry(&self, sandbox_id: &str) {
        let mut expiring = self.expiring.lock().unwrap_or_else(|p| p.into_inner());
        if expiring.len() >= REASON_MEMORY {
            expiring.clear();
        }
        expiring.insert(sandbox_id.to_string());
    }

    /// Whether an expiry was announced for `sandbox_id` and not yet told (taken).
    pub fn take_expiry(&self, sandbox_id: &str) -> bool {
        self.expiring.lock().unwrap_or_else(|p| p.into_inner()).remove(sandbox_id)
    }

    /// Whether a removal of `sandbox_id` was announced and has not happened yet (its STOPPED
    /// event is then this service's doing, not a failure).
    pub fn expects_removal(&self, sandbox_id: &str) -> bool {
        self.reasons.lock().unwrap_or_else(|p| p.into_inner()).contains_key(sandbox_id)
            || self.expiring.lock().unwrap_or_else(|p| p.into_inner()).contains(sandbox_id)
    }

    /// The reason announced for removing `sandbox_id`, taken (the removal has happened).
    pub fn take_reason(&self, sandbox_id: &str) -> Option<String> {
        self.reasons.lock().unwrap_or_else(|p| p.into_inner()).remove(sandbox_id)
    }
}

/// What one watcher asks for: every label must match, any of the statuses (empty: all), only
/// the tenant's sandboxes (`None`: every sandbox, the operator's view).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchFilter {
    pub labels: BTreeMap<String, String>,
    pub statuses: Vec<SandboxStatus>,
    pub tenant: Option<String>,
}

/// Events of the sandboxes on the other nodes of a cluster, merged into one watcher's stream
/// (see `SandboxBackend::peer_events`). A node that cannot be reached never ends it (it is
/// retried, its events meanwhile are missed); `Err` says the watcher itself fell behind on a
/// node (that node ended its stream for it), which ends the watch as falling behind the hub does.
pub type PeerEvents =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<SandboxEvent, String>> + Send>>;

/// Set on a `Watch` that another node of the cluster makes to merge this node's events: it is
/// served this node's own events only (never merged again), for `tenant` (`None`: all), which
/// the calling node authenticated. Only the cluster layer sets it, after checking the cluster
/// token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeOnly {
    pub tenant: Option<String>,
}

/// Milliseconds since the Unix epoch now.
pub fn now_ms() -> i64 {
    crate::core::lease::now_ms()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: EventKind, tenant: Option<&str>, meta: &[(&str, &str)]) -> SandboxEvent {
        SandboxEvent {
            kind,
            sandbox: SandboxSummary {
                sandbox_id: "sandboxd-0123456789abcdef0123456789abcdef".into(),
                image: "i".into(),
                status: kind.status_after(),
                created_ns: 0,
                ports: vec![],
                workdir: None,
                metadata: meta.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
                expires_at_unix_ms: None,
                reserved_millicpus: 0,
                reserved_memory_mib: 0,
                pool: None,
                tenant: tenant.map(String::from),
                runtime: None,
            },
            tenant: tenant.map(String::from),
            time_unix_ms: 0,
            exit_code: None,
            oom_killed: false,
            reason: String::new(),
            failure_kind: None,
        }
    }

    #[test]
    fn filters_by_tenant_labels_and_status_after() {
        let labels = BTreeMap::from([("run".to_string(), "r1".to_string())]);
        let e = event(EventKind::Paused, Some("a"), &[("run", "r1"), ("x", "y")]);
        assert!(e.matches(&labels, &[], None));
        assert!(e.matches(&labels, &[SandboxStatus::Paused], Some("a")));
        assert!(!e.matches(&labels, &[SandboxStatus::Running], Some("a")));
        assert!(!e.matches(&labels, &[], Some("b")));
        assert!(!event(EventKind::Paused, None, &[]).matches(&BTreeMap::new(), &[], Some("a")));
        assert!(!event(EventKind::Removed, None, &[("run", "r2")]).matches(&labels, &[], None));
    }

    #[tokio::test]
    async fn a_subscriber_that_falls_behind_learns_it() {
        let hub = EventHub::new(2);
        let mut rx = hub.subscribe();
        for _ in 0..5 {
            hub.publish(event(EventKind::Paused, None, &[]));
        }
        assert!(matches!(rx.recv().await, Err(broadcast::error::RecvError::Lagged(3))));
        hub.expect_removal("s", "lease expired");
        hub.expect_removal("s", "closed");
        assert_eq!(hub.take_reason("s").as_deref(), Some("lease expired"));
        assert_eq!(hub.take_reason("s"), None);
    }

    #[tokio::test]
    async fn watchers_learn_when_the_source_comes_up_and_goes_down() {
        let hub = EventHub::new(2);
        assert!(!hub.until_up(std::time::Duration::from_millis(10)).await);
        hub.set_up(true);
        assert!(hub.until_up(std::time::Duration::from_millis(10)).await);
        let down = tokio::time::timeout(std::time::Duration::from_millis(50), hub.until_down()).await;
        assert!(down.is_err(), "down while up");
        hub.set_up(false);
        tokio::time::timeout(std::time::Duration::from_secs(1), hub.until_down()).await.expect("down");
    }
}
