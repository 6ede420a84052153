//! Why a call or a command failed, as a trainer branches on it (`FailureKind`): the generated
//! enum, its `ErrorInfo` reason, and the two facts the README's table gives for each kind.

pub use crate::v1::FailureKind;

/// The `google.rpc.ErrorInfo.domain` of every failure kind the server attaches to a status.
pub const FAILURE_DOMAIN: &str = "sandboxd";

impl FailureKind {
    /// Every kind that names a failure (not `Unspecified`), in wire order.
    pub const ALL: [FailureKind; 15] = [
        FailureKind::Timeout,
        FailureKind::OomKilled,
        FailureKind::SandboxGone,
        FailureKind::SandboxPaused,
        FailureKind::AgentLost,
        FailureKind::DaemonUnavailable,
        FailureKind::NodeLost,
        FailureKind::CreateTimeout,
        FailureKind::Capacity,
        FailureKind::Quota,
        FailureKind::CreateFailed,
        FailureKind::ExecRefused,
        FailureKind::Internal,
        FailureKind::StartupTimeout,
        FailureKind::SetupTimeout,
    ];

    /// The `ErrorInfo.reason` and metric label: the proto name without `FAILURE_KIND_`
    /// (`OOM_KILLED`).
    pub fn reason(self) -> &'static str {
        let name = self.as_str_name();
        name.strip_prefix("FAILURE_KIND_").unwrap_or(name)
    }

    /// From an `ErrorInfo.reason` (with or without the `FAILURE_KIND_` prefix); `None` for a
    /// reason this version does not know.
    pub fn from_reason(reason: &str) -> Option<Self> {
        let full = if reason.starts_with("FAILURE_KIND_") {
            reason.to_string()
        } else {
            format!("FAILURE_KIND_{reason}")
        };
        FailureKind::from_str_name(&full).filter(|k| *k != FailureKind::Unspecified)
    }

    /// From the wire value of a result's field: `None` for UNSPECIFIED (no failure); a value
    /// this version does not know reads as `Internal` (it is still a failure).
    pub fn from_wire(value: i32) -> Option<Self> {
        match FailureKind::try_from(value) {
            Ok(FailureKind::Unspecified) => None,
            Ok(kind) => Some(kind),
            Err(_) if value == 0 => None,
            Err(_) => Some(FailureKind::Internal),
        }
    }

    /// The wire value of an optional kind (0 for none).
    pub fn to_wire(kind: Option<Self>) -> i32 {
        kind.map_or(0, |k| k as i32)
    }

    /// Whether the task itself caused it (count the rollout), as opposed to the
    /// infrastructure or the caller (mask it from the loss).
    pub fn is_task_fault(self) -> bool {
        matches!(self, FailureKind::Timeout | FailureKind::OomKilled | FailureKind::SetupTimeout)
    }

    /// Whether calling again (a new sandbox for a lost one) is safe: the failed call left
    /// nothing half-done that a retry would duplicate.
    pub fn is_retry_safe(self) -> bool {
        !matches!(self, FailureKind::ExecRefused | FailureKind::Internal | FailureKind::CreateFailed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_round_trip() {
        for kind in FailureKind::ALL {
            assert!(!kind.reason().starts_with("FAILURE_KIND_"));
            assert_eq!(FailureKind::from_reason(kind.reason()), Some(kind));
            assert_eq!(FailureKind::from_reason(kind.as_str_name()), Some(kind));
            assert_eq!(FailureKind::from_wire(FailureKind::to_wire(Some(kind))), Some(kind));
        }
        assert_eq!(FailureKind::OomKilled.reason(), "OOM_KILLED");
        assert_eq!(FailureKind::from_wire(0), None);
        assert_eq!(FailureKind::from_wire(999), Some(FailureKind::Internal));
        assert_eq!(FailureKind::from_reason("UNSPECIFIED"), None);
        assert_eq!(FailureKind::from_reason("NOPE"), None);
    }
}
