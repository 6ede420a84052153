//! When what this service owns is removed: the one rule, above the seam, as a pure function.
//!
//! A backend lists what it owns with the neutral facts the rule needs ([`Owned`], from
//! `SandboxBackend::list_owned`) and removes what it is told (`remove_owned`); it never
//! decides. [`decide`] does, `sweep.rs` runs one pass and `Lifecycle` runs the sweep. Two kinds
//! go, each with its reason ([`SweepReason`]):
//! - a create that never completed, after its create deadline (its server was killed
//!   mid-create, or its removal failed), and a sandbox that will never run again once no
//!   create protects it;
//! - a sandbox past its lease: the lease moved by `SetTimeout` if any, else the one set at create.
//!
//! A completed sandbox within its lease is never touched, nor a name of any other shape.

use crate::core::spec::SandboxId;

/// Margin past a create's deadline before an unfinished create counts as abandoned (clock skew
/// between the create's own timer and the sweep's; the create removes itself at its deadline).
pub const CREATE_GRACE_MS: i64 = 5_000;

/// Where something a backend owns stands, as far as expiry cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Its create has not completed: under way, or its server died mid-create.
    Creating,
    /// Made (running, paused or stopped).
    Made,
    /// Made, and it will never run again: what runs it ended it for good (a cluster's task
    /// that failed or was shut down).
    Ended,
}

/// One thing a backend owns, as it lists it for the sweep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owned {
    /// What the backend calls it: the sandbox id, or an unfinished create's own name.
    pub name: String,
    pub stage: Stage,
    /// The lease's end set at create, in ms since the epoch; `None`: no lease.
    pub expires_ms: Option<i64>,
    /// A create not finished by then never will be.
    pub create_deadline_ms: Option<i64>,
    /// Whether this process enforces its lease: false for a sandbox another node of a cluster
    /// serves (that node keeps its moved leases and ends it).
    pub lease_here: bool,
}

impl Owned {
    /// A made sandbox whose lease this process enforces.
    pub fn made(name: impl Into<String>, expires_ms: Option<i64>) -> Self {
        Self { name: name.into(), stage: Stage::Made, expires_ms, create_deadline_ms: None, lease_here: true }
    }
}

/// What one listing of the backend found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OwnedListing {
    pub owned: Vec<Owned>,
    /// Sandboxes destroyed since the last listing, by anyone, so the caller forgets them.
    pub gone: Vec<String>,
}

/// Why the sweep removed something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepReason {
    /// Its create never completed (the server died mid-create).
    CreateAbandoned,
    /// Its lease ended.
    LeaseExpired,
    /// What ran it ended and will never run again (cluster mode: its Swarm task ended, e.g.
    /// its node was drained, or came back after it was lost).
    TaskEnded,
}

impl SweepReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CreateAbandoned => "create never completed",
            Self::LeaseExpired => "lease expired",
            Self::TaskEnded => "its task ended",
        }
    }
}

/// What one sweep did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SweepReport {
    /// Removed sandboxes (or unfinished creates) and why.
    pub removed: Vec<(String, SweepReason)>,
    /// The earliest lease end still ahead, so the caller can wake for it.
    pub next_expiry_ms: Option<i64>,
    /// Sandboxes destroyed since the last sweep (by anyone), so the caller can forget them.
    pub gone: Vec<String>,
}

/// What the rule says about one listed thing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// It stays; its lease ends then (when it has one this process enforces).
    Keep {
        expires_ms: Option<i64>,
    },
    Remove(SweepReason),
}

/// The rule, pure: an unfinished create goes after its deadline plus [`CREATE_GRACE_MS`]; an
/// ended sandbox goes unless its create's deadline is still ahead; a sandbox goes at the end of
/// its lease (`moved`, the lease moved by `SetTimeout`, wins over the one set at create) when
/// this process enforces it. Names of any other shape are kept.
pub fn decide(item: &Owned, now_ms: i64, moved: impl Fn(&str) -> Option<i64>) -> Decision {
    match item.stage {
        Stage::Creating => {
            return match item.create_deadline_ms {
                Some(deadline) if now_ms > deadline.saturating_add(CREATE_GRACE_MS) => {
                    Decision::Remove(SweepReason::CreateAbandoned)
                }
                _ => Decision::Keep { expires_ms: None },
            };
        }
        // A create still within its deadline is its creator's to finish or remove.
        Stage::Ended if item.create_deadline_ms.is_none_or(|d| d <= now_ms) => {
            return Decision::Remove(SweepReason::TaskEnded);
        }
        Stage::Made | Stage::Ended => {}
    }
    if !item.lease_here || !SandboxId::has_valid_shape(&item.name) {
        return Decision::Keep { expires_ms: None };
    }
    match moved(&item.name).or(item.expires_ms) {
        Some(at) if now_ms >= at => Decision::Remove(SweepReason::LeaseExpired),
        expires_ms => Decision::Keep { expires_ms },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "sandboxd-0123456789abcdef0123456789abcdef";

    fn item(name: &str, expires: Option<i64>, deadline: Option<i64>) -> Owned {
        let stage = if name.starts_with("sandboxd-creating-") { Stage::Creating } else { Stage::Made };
        Owned { stage, create_deadline_ms: deadline, ..Owned::made(name, expires) }
    }

    fn none(_: &str) -> Option<i64> {
        None
    }

    #[test]
    fn completed_sandboxes_stay_within_their_lease() {
        assert_eq!(decide(&item(ID, None, Some(0)), 10_000_000, none), Decision::Keep { expires_ms: None });
        assert_eq!(
            decide(&item(ID, Some(2000), Some(0)), 1000, none),
            Decision::Keep { expires_ms: Some(2000) }
        );
        assert_eq!(
            decide(&item(ID, Some(2000), Some(0)), 2000, none),
            Decision::Remove(SweepReason::LeaseExpired)
        );
        assert_eq!(decide(&item(ID, Some(5), None), 10, none), Decision::Remove(SweepReason::LeaseExpired));
        assert_eq!(decide(&item(ID, Some(50), None), 10, none), Decision::Keep { expires_ms: Some(50) });
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
        let undated = Owned { stage: Stage::Creating, ..Owned::made(name, Some(0)) };
        assert_eq!(decide(&undated, i64::MAX, none), Decision::Keep { expires_ms: None });
    }

    #[test]
    fn an_ended_sandbox_goes_once_no_create_protects_it() {
        let ended =
            |deadline| Owned { stage: Stage::Ended, create_deadline_ms: deadline, ..Owned::made(ID, None) };
        assert_eq!(decide(&ended(None), 10, none), Decision::Remove(SweepReason::TaskEnded));
        assert_eq!(decide(&ended(Some(10)), 10, none), Decision::Remove(SweepReason::TaskEnded));
        assert_eq!(decide(&ended(Some(11)), 10, none), Decision::Keep { expires_ms: None });
        // Within its create's deadline its lease still counts.
        let leased = Owned { expires_ms: Some(5), ..ended(Some(11)) };
        assert_eq!(decide(&leased, 10, none), Decision::Remove(SweepReason::LeaseExpired));
    }

    #[test]
    fn a_lease_another_node_enforces_is_not_ours_to_end() {
        let elsewhere = Owned { lease_here: false, ..Owned::made(ID, Some(5)) };
        let moved = |_: &str| Some(1);
        assert_eq!(decide(&elsewhere, 10, moved), Decision::Keep { expires_ms: None });
        let ended = Owned { stage: Stage::Ended, ..elsewhere };
        assert_eq!(decide(&ended, 10, moved), Decision::Remove(SweepReason::TaskEnded));
    }
}
