//! Crash recovery and lease enforcement: remove what this service owns and nobody can use.
//!
//! One `docker ps` lists every owned container that carries lease labels. Two kinds go:
//! - a create that never completed: still under its `sandboxd-creating-` name after its create
//!   deadline (its server was killed mid-create, or its removal failed);
//! - a sandbox past its lease: the moved lease in the state directory if any, else the label.
//!
//! A completed sandbox (renamed to its id) within its lease is never touched, nor is any
//! container without the ownership label, nor one without the operator's own labels (the
//! `--label` flags of `create.extra_run_args`): deployments labelled apart sweep apart.

use std::time::Duration;

use super::argv;
use super::provider::DockerProvider;
use crate::error::Result;
use crate::lease::{self, LeaseStore, SweepReason, SweepReport};

/// Margin past a create's deadline before the sweep calls it abandoned (clock skew between
/// the create's own timer and the sweep's; the create removes itself at its deadline).
const CREATE_GRACE_MS: i64 = 5_000;

/// Lease files older than this whose sandbox no longer exists are pruned.
const PRUNE_AFTER: Duration = Duration::from_secs(300);

/// One owned container as the sweep lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Listed {
    name: String,
    expires_ms: Option<i64>,
    create_deadline_ms: Option<i64>,
}

impl DockerProvider {
    /// One sweep: list, decide, remove (each removal logged with its reason).
    pub async fn sweep(&self, leases: &LeaseStore) -> Result<SweepReport> {
        let out = self.control(argv::sweep_list_args(&self.config.create)).await?;
        let listed = parse_listing(&out.stdout_text());
        let now = lease::now_ms();
        // Containers destroyed since the last sweep, by anyone: their caches go now, and the
        // caller forgets them too.
        let mut report = SweepReport { gone: self.prune_gone(), ..SweepReport::default() };
        for item in &listed {
            let decision = decide(item, now, |id| leases.get(id));
            match decision {
                Decision::Keep { expires_ms } => {
                    if let Some(at) = expires_ms {
                        report.next_expiry_ms = Some(report.next_expiry_ms.map_or(at, |n| n.min(at)));
                    }
                }
                Decision::Remove(reason) => {
                    if reason == SweepReason::LeaseExpired {
                        let hub = self.states.hub();
                        hub.expect_expiry(&item.name);
                        hub.expect_removal(&item.name, "lease expired");
                    }
                    let removed = match reason {
                        SweepReason::CreateAbandoned => self.remove_abandoned(&item.name).await,
                        SweepReason::LeaseExpired | SweepReason::TaskEnded => {
                            self.remove_by_id(&item.name).await
                        }
                    };
                    match removed {
                        Ok(()) => {
                            leases.remove(&item.name);
                            tracing::info!(sandbox_id = %item.name, reason = reason.as_str(), "sweep removed a container");
                            report.removed.push((item.name.clone(), reason));
                        }
                        Err(e) => {
                            tracing::warn!(sandbox_id = %item.name, reason = reason.as_str(), error = %e, "sweep could not remove a container");
                        }
                    }
                }
            }
        }
        // Forget moved leases of sandboxes that are gone (closed, or removed elsewhere).
        for id in leases.ids_older_than(PRUNE_AFTER) {
            if crate::spec::SandboxId::has_valid_shape(&id) && !listed.iter().any(|l| l.name == id) {
                leases.remove(&id);
            }
        }
        Ok(report)
    }

    async fn remove_abandoned(&self, name: &str) -> Result<()> {
        Ok(self.remove_container(name).await?)
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Decision {
    Keep { expires_ms: Option<i64> },
    Remove(SweepReason),
}

/// The rule, pure: creating-named containers go after their deadline (plus a grace), sandboxes
/// after their lease (moved lease first, else label). Names of any other shape are kept.
fn decide(item: &Listed, now_ms: i64, moved: impl Fn(&str) -> Option<i64>) -> Decision {
    if item.name.starts_with(argv::CREATING_NAME_PREFIX) {
        return match item.create_deadline_ms {
            Some(deadline) if now_ms > deadline.saturating_add(CREATE_GRACE_MS) => {
                Decision::Remove(SweepReason::CreateAbandoned)
            }
            _ => Decision::Keep { expires_ms: None },
        };
    }
    if !crate::spec::SandboxId::has_valid_shape(&item.name) {
        return Decision::Keep { expires_ms: None };
    }
    match moved(&item.name).or(item.expires_ms) {
        Some(at) if now_ms >= at => Decision::Remove(SweepReason::LeaseExpired),
        expires_ms => Decision::Keep { expires_ms },
    }
}

fn parse_listing(text: &str) -> Vec<Listed> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let mut parts = line.split('\t');
            let name = parts.next().unwrap_or_default().trim().to_string();
            let mut num = || parts.next().and_then(|v| v.trim().parse::<i64>().ok());
            let expires_ms = num();
            let create_deadline_ms = num();
            Listed { name, expires_ms, create_deadline_ms }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "sandboxd-0123456789abcdef0123456789abcdef";

    fn item(name: &str, expires: Option<i64>, deadline: Option<i64>) -> Listed {
        Listed { name: name.into(), expires_ms: expires, create_deadline_ms: deadline }
    }

    #[test]
    fn listing_parses_empty_labels_as_none() {
        let text = format!("{ID}\t\t1000\nsandboxd-creating-ab\t5\t<no value>\n");
        assert_eq!(
            parse_listing(&text),
            vec![item(ID, None, Some(1000)), item("sandboxd-creating-ab", Some(5), None)]
        );
    }

    #[test]
    fn completed_sandboxes_stay_within_their_lease() {
        let none = |_: &str| None;
        assert_eq!(decide(&item(ID, None, Some(0)), 10_000_000, none), Decision::Keep { expires_ms: None });
        assert_eq!(
            decide(&item(ID, Some(2000), Some(0)), 1000, none),
            Decision::Keep { expires_ms: Some(2000) }
        );
        assert_eq!(
            decide(&item(ID, Some(2000), Some(0)), 2000, none),
            Decision::Remove(SweepReason::LeaseExpired)
        );
    }

    #[test]
    fn a_moved_lease_wins_over_the_label() {
        let moved = |_: &str| Some(9000);
        assert_eq!(
            decide(&item(ID, Some(2000), None), 5000, moved),
            Decision::Keep { expires_ms: Some(9000) }
        );
        let shortened = |_: &str| Some(100);
        assert_eq!(
            decide(&item(ID, None, None), 5000, shortened),
            Decision::Remove(SweepReason::LeaseExpired)
        );
    }

    #[test]
    fn abandoned_creates_go_only_after_deadline_and_grace() {
        let name = "sandboxd-creating-0123456789abcdef0123456789abcdef";
        let none = |_: &str| None;
        assert_eq!(
            decide(&item(name, None, Some(1000)), 1000 + CREATE_GRACE_MS, none),
            Decision::Keep { expires_ms: None }
        );
        assert_eq!(
            decide(&item(name, None, Some(1000)), 1001 + CREATE_GRACE_MS, none),
            Decision::Remove(SweepReason::CreateAbandoned)
        );
        assert_eq!(
            decide(&item("someone-else", Some(0), Some(0)), i64::MAX, none),
            Decision::Keep { expires_ms: None }
        );
    }
}
