//! `docker events` lines as lifecycle events for `Watch` ([`crate::core::watch`]).
//!
//! Docker puts every label of the container in an event's attributes, so each event carries
//! the sandbox's metadata, tenant, ports and lease with no inspect. A create shows up twice:
//! its container is made under the creating name (CREATED, under the id it will have) and is
//! renamed to its id once probed and seeded (READY). `die` is STOPPED, with the exit code and
//! the `oom` event docker sends just before it; `destroy` is REMOVED, with the reason whoever
//! removed it on purpose announced, else "removed outside this service". A lease the sweep
//! ends is announced too, and becomes LEASE_EXPIRED just before the container stops or goes.

use std::collections::{BTreeMap, HashSet};

use super::argv::{CREATING_NAME_PREFIX, PORTS_LABEL};
use super::labels::metadata_from_labels;
use crate::core::failure::FailureKind;
use crate::core::inventory::SandboxSummary;
use crate::core::watch::{EventHub, EventKind, SandboxEvent};

/// Reason of a removal nobody announced.
pub const REMOVED_OUTSIDE: &str = "removed outside this service";
/// Reason of a create's container that went before its create completed.
pub const CREATE_UNFINISHED: &str = "its create did not complete";

/// What one follower remembers between lines: containers the kernel OOM-killed, whose `die`
/// is next.
#[derive(Default)]
pub struct Follower {
    oom: HashSet<String>,
}

impl Follower {
    /// Publish what one `docker events` line means for watchers (most lines mean nothing).
    pub fn line(&mut self, hub: &EventHub, line: &str) {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else { return };
        let Some(action) = event.get("Action").or_else(|| event.get("status")).and_then(|a| a.as_str())
        else {
            return;
        };
        let Some(attributes) = event.pointer("/Actor/Attributes").and_then(|a| a.as_object()) else { return };
        let attributes: BTreeMap<String, String> =
            attributes.iter().filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string()))).collect();
        let Some(name) = attributes.get("name").map(|n| n.trim_start_matches('/').to_string()) else {
            return;
        };
        let time_unix_ms = event
            .get("timeNano")
            .and_then(|t| t.as_i64())
            .map(|ns| ns / 1_000_000)
            .or_else(|| event.get("time").and_then(|t| t.as_i64()).map(|s| s * 1000))
            .unwrap_or_else(crate::core::watch::now_ms);
        let creating = name.strip_prefix(CREATING_NAME_PREFIX).map(|hex| format!("sandboxd-{hex}"));
        // A Swarm task's container (cluster mode) is `<service>.<slot>.<task>`, never renamed: its
        // service is the sandbox. Its create is the sandbox's CREATED; READY is told by the node
        // whose create completed (`backends/swarm/create.rs`), once the files are written.
        let task_of = attributes
            .get(super::labels::SERVICE_NAME_LABEL)
            .filter(|s| crate::core::spec::SandboxId::has_valid_shape(s))
            .cloned();
        let closing = super::argv::sandbox_of_closing(&name);
        let sandbox_id = task_of
            .clone()
            .or_else(|| creating.clone())
            .or_else(|| closing.clone())
            .unwrap_or_else(|| name.clone());
        if !crate::core::spec::SandboxId::has_valid_shape(&sandbox_id) {
            return;
        }
        let make = |kind: EventKind| SandboxEvent {
            kind,
            sandbox: summary(&sandbox_id, &attributes, kind),
            tenant: attributes.get(crate::auth::TENANT_LABEL).cloned(),
            time_unix_ms,
            exit_code: None,
            oom_killed: false,
            reason: String::new(),
            failure_kind: None,
        };
        let expiry = |hub: &EventHub| {
            if hub.take_expiry(&sandbox_id) {
                hub.publish(SandboxEvent { reason: "lease expired".into(), ..make(EventKind::LeaseExpired) });
            }
        };
        if let Some(instead) = hub.take_expected(&sandbox_id, action) {
            if let Some(kind) = instead {
                hub.publish(make(kind));
            }
            return;
        }
        match (action, creating.is_some()) {
            ("create", _) if task_of.is_some() => hub.publish(make(EventKind::Created)),
            ("create", true) => hub.publish(make(EventKind::Created)),
            // A close's rename (`closing.rs`): nothing new for watchers.
            ("rename", false) if closing.is_some() => {}
            ("rename", false) => {
                // A create's last step (from its creating name); any container renamed to an id
                // (a pooled one handed out, say) becomes usable under it the same way.
                let renamed =
                    attributes.get("oldName").is_some_and(|old| old.trim_start_matches('/') != name);
                if renamed {
                    hub.publish(make(EventKind::Ready));
                }
            }
            ("pause", false) => hub.publish(make(EventKind::Paused)),
            ("unpause", false) => hub.publish(make(EventKind::Resumed)),
            ("oom", _) => {
                if self.oom.len() > 4096 {
                    self.oom.clear();
                }
                self.oom.insert(name);
            }
            ("die", false) => {
                // Not a failure when this service is removing it (a close, an expired lease).
                let on_purpose = hub.expects_removal(&sandbox_id);
                expiry(hub);
                let oom_killed = self.oom.remove(&name);
                let exit_code = attributes.get("exitCode").and_then(|c| c.parse().ok());
                let failure_kind = match (on_purpose, oom_killed) {
                    (true, _) => None,
                    (false, true) => Some(FailureKind::OomKilled),
                    (false, false) => Some(FailureKind::SandboxGone),
                };
                hub.publish(SandboxEvent { exit_code, oom_killed, failure_kind, ..make(EventKind::Stopped) });
            }
            ("die", true) => {
                self.oom.remove(&name);
            }
            ("destroy", creating) => {
                expiry(hub);
                let fallback = if creating { CREATE_UNFINISHED } else { REMOVED_OUTSIDE };
                let announced = hub.take_reason(&sandbox_id);
                let failure_kind = (announced.is_none() && !creating).then_some(FailureKind::SandboxGone);
                let reason = announced.unwrap_or_else(|| fallback.to_string());
                hub.publish(SandboxEvent { reason, failure_kind, ..make(EventKind::Removed) });
            }
            _ => {}
        }
    }
}

/// The sandbox as an event's attributes (its labels) tell it.
fn summary(sandbox_id: &str, labels: &BTreeMap<String, String>, kind: EventKind) -> SandboxSummary {
    SandboxSummary {
        sandbox_id: sandbox_id.to_string(),
        image: labels.get("image").cloned().unwrap_or_default(),
        status: kind.status_after(),
        created_ns: labels
            .get(crate::core::lease::CREATED_LABEL)
            .and_then(|ms| ms.parse::<i128>().ok())
            .map_or(0, |ms| ms * 1_000_000),
        ports: labels
            .get(PORTS_LABEL)
            .map(|p| p.split(',').filter_map(|x| x.trim().parse().ok()).collect())
            .unwrap_or_default(),
        workdir: None,
        metadata: metadata_from_labels(labels),
        expires_at_unix_ms: labels.get(crate::core::lease::EXPIRES_LABEL).and_then(|v| v.parse().ok()),
        reserved_millicpus: 0,
        pool: labels.get(crate::backends::docker::labels::POOL_LABEL).cloned(),
        tenant: labels.get(crate::auth::TENANT_LABEL).cloned(),
        reserved_memory_mib: 0,
        runtime: labels.get(crate::backends::docker::labels::OCI_RUNTIME_LABEL).cloned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef";

    fn line(action: &str, name: &str, extra: &str) -> String {
        format!(
            r#"{{"Type":"container","Action":"{action}","Actor":{{"ID":"c","Attributes":{{"name":"{name}","image":"img","sandboxd.meta.run":"r1","sandboxd.tenant":"a"{extra}}}}},"timeNano":5000000}}"#
        )
    }

    #[test]
    fn docker_events_become_lifecycle_events() {
        let hub = EventHub::new(64);
        let mut rx = hub.subscribe();
        let mut f = Follower::default();
        let id = format!("sandboxd-{HEX}");
        let creating = format!("sandboxd-creating-{HEX}");
        f.line(&hub, &line("create", &creating, ""));
        f.line(&hub, &line("start", &creating, ""));
        f.line(&hub, &line("rename", &id, &format!(r#","oldName":"/{creating}""#)));
        f.line(&hub, &line("pause", &id, ""));
        f.line(&hub, &line("exec_start: sh", &id, ""));
        f.line(&hub, &line("oom", &id, ""));
        f.line(&hub, &line("die", &id, r#","exitCode":"137""#));
        hub.expect_removal(&id, "closed by the operator");
        f.line(&hub, &line("destroy", &id, ""));
        f.line(&hub, "not json");
        let mut got = Vec::new();
        while let Ok(e) = rx.try_recv() {
            got.push(e);
        }
        let kinds: Vec<EventKind> = got.iter().map(|e| e.kind).collect();
        use EventKind::*;
        assert_eq!(kinds, [Created, Ready, Paused, Stopped, Removed]);
        assert!(got.iter().all(|e| e.sandbox.sandbox_id == id && e.tenant.as_deref() == Some("a")));
        assert_eq!(got[0].sandbox.metadata.get("run").map(String::as_str), Some("r1"));
        assert_eq!((got[3].exit_code, got[3].oom_killed), (Some(137), true));
        assert_eq!(got[3].failure_kind, Some(FailureKind::OomKilled));
        assert_eq!(got[4].reason, "closed by the operator");
        assert_eq!(got[4].failure_kind, None, "a close is no failure");
        assert_eq!(got[4].time_unix_ms, 5);
    }

    #[test]
    fn an_end_from_outside_is_sandbox_gone() {
        let hub = EventHub::new(64);
        let mut rx = hub.subscribe();
        let mut f = Follower::default();
        let id = format!("sandboxd-{HEX}");
        f.line(&hub, &line("die", &id, r#","exitCode":"137""#));
        f.line(&hub, &line("destroy", &id, ""));
        let got: Vec<std::sync::Arc<SandboxEvent>> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        assert_eq!(got.len(), 2);
        assert!(got.iter().all(|e| e.failure_kind == Some(FailureKind::SandboxGone)), "{got:?}");
        assert_eq!(got[1].reason, REMOVED_OUTSIDE);
    }

    #[test]
    fn a_swarm_tasks_container_is_its_services_sandbox() {
        let hub = EventHub::new(64);
        let mut rx = hub.subscribe();
        let mut f = Follower::default();
        let id = format!("sandboxd-{HEX}");
        let task = format!(r#","com.docker.swarm.service.name":"{id}""#);
        let container = format!("{id}.1.x7fh2kq9");
        for action in ["create", "start", "pause", "unpause", "die", "destroy"] {
            f.line(&hub, &line(action, &container, &task));
        }
        let got: Vec<std::sync::Arc<SandboxEvent>> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        use EventKind::*;
        assert_eq!(
            got.iter().map(|e| e.kind).collect::<Vec<_>>(),
            [Created, Paused, Resumed, Stopped, Removed]
        );
        assert!(got.iter().all(|e| e.sandbox.sandbox_id == id));
    }

    #[test]
    fn an_announced_expiry_comes_before_the_stop() {
        let hub = EventHub::new(64);
        let mut rx = hub.subscribe();
        let mut f = Follower::default();
        let id = format!("sandboxd-{HEX}");
        hub.expect_expiry(&id);
        f.line(&hub, &line("die", &id, r#","exitCode":"137""#));
        f.line(&hub, &line("destroy", &id, ""));
        let kinds: Vec<EventKind> = std::iter::from_fn(|| rx.try_recv().ok()).map(|e| e.kind).collect();
        assert_eq!(kinds, [EventKind::LeaseExpired, EventKind::Stopped, EventKind::Removed]);
    }
}
