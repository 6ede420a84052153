//! Failure kinds on the service's side: which kind a provider error is (the one mapping, used
//! by `From<ProviderError> for Status`), and a status that carries its kind as a
//! `google.rpc.ErrorInfo` detail (domain `sandboxd`, reason the kind's name without
//! `FAILURE_KIND_`), plus a `google.rpc.RetryInfo` where a retry should wait.

use std::collections::HashMap;
use std::time::Duration;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

pub use sandboxd_proto::contract::{FailureKind, FAILURE_DOMAIN};

use crate::error::ProviderError;

/// How long a caller refused for capacity or quota should wait before asking again.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The kind of a provider error; `None` for the caller's own mistakes (a bad argument, a
/// missing file, a permission) that are no failure of the task or the infrastructure.
pub fn kind_of(err: &ProviderError) -> Option<FailureKind> {
    Some(match err {
        ProviderError::SandboxNotFound(_) | ProviderError::Stopped(_) => FailureKind::SandboxGone,
        ProviderError::Paused(_) => FailureKind::SandboxPaused,
        // The readiness probe never passed: the image's (or its probe's) doing.
        ProviderError::ReadyTimeout(_) => FailureKind::CreateTimeout,
        // The create's deadline passed while the sandbox was still starting: the host's.
        ProviderError::CreateTimeout(_) => FailureKind::StartupTimeout,
        ProviderError::SetupTimeout(_) => FailureKind::SetupTimeout,
        ProviderError::Create(_) | ProviderError::CreateVerification(_) => FailureKind::CreateFailed,
        // A docker call that could not reach the daemon or got no answer in time.
        ProviderError::Unavailable(_) | ProviderError::Timeout(_) => FailureKind::DaemonUnavailable,
        ProviderError::ResourceExhausted(_) | ProviderError::Busy { .. } => FailureKind::Capacity,
        ProviderError::Docker(_) | ProviderError::Io(_) | ProviderError::Pty(_) => FailureKind::Internal,
        ProviderError::InvalidArgument { .. }
        | ProviderError::PermissionDenied(_)
        | ProviderError::FileNotFound(_)
        | ProviderError::SnapshotNotFound(_)
        | ProviderError::SnapshotInUse(_)
        | ProviderError::InUse(_)
        | ProviderError::AlreadyExists(_)
        | ProviderError::SessionNotFound(_)
        | ProviderError::SessionHeld(_)
        | ProviderError::OutOfRange(_)
        | ProviderError::Unimplemented(_)
        | ProviderError::FailedPrecondition(_)
        | ProviderError::ProcessNotFound(_)
        | ProviderError::Aborted(_) => return None,
    })
}

/// A status of `code` carrying `kind` (counted in the `failures` metric); CAPACITY, QUOTA and
/// DAEMON_UNAVAILABLE (the service's own trouble: a daemon away, a network gone under a call)
/// also carry a retry delay.
pub fn status(code: Code, message: impl Into<String>, kind: Option<FailureKind>) -> Status {
    status_retry_after(code, message, kind, RETRY_AFTER)
}

/// As [`status`], a CAPACITY or QUOTA refusal asking the caller to wait `retry_after` (an
/// estimate of when there is room: the admission queue's, a budget's refill).
pub fn status_retry_after(
    code: Code,
    message: impl Into<String>,
    kind: Option<FailureKind>,
    retry_after: Duration,
) -> Status {
    let Some(kind) = kind else {
        return Status::new(code, message);
    };
    crate::metrics::global().failure(kind);
    let mut details = ErrorDetails::with_error_info(kind.reason(), FAILURE_DOMAIN, HashMap::new());
    if matches!(kind, FailureKind::Capacity | FailureKind::Quota | FailureKind::DaemonUnavailable) {
        details.set_retry_info(Some(retry_after));
    }
    Status::with_error_details(code, message, details)
}

/// The retry delay a status asks for (`google.rpc.RetryInfo`), if any.
pub fn retry_after_of(status: &Status) -> Option<Duration> {
    status.get_details_retry_info()?.retry_delay
}

/// The kind a status carries, if any (what a relayed or client-side status says).
pub fn kind_of_status(status: &Status) -> Option<FailureKind> {
    let info = status.get_details_error_info()?;
    (info.domain == FAILURE_DOMAIN).then(|| FailureKind::from_reason(&info.reason)).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_carry_their_kind() {
        let s = Status::from(ProviderError::Paused("sbx".into()));
        assert_eq!(s.code(), Code::FailedPrecondition);
        assert_eq!(kind_of_status(&s), Some(FailureKind::SandboxPaused));
        let info = s.get_details_error_info().expect("an ErrorInfo");
        assert_eq!((info.reason.as_str(), info.domain.as_str()), ("SANDBOX_PAUSED", "sandboxd"));
        assert!(s.get_details_retry_info().is_none());

        let s = Status::from(ProviderError::ResourceExhausted("no room".into()));
        assert_eq!(kind_of_status(&s), Some(FailureKind::Capacity));
        assert_eq!(s.get_details_retry_info().and_then(|r| r.retry_delay), Some(RETRY_AFTER));

        // The service's own trouble (a network removed under a create): UNAVAILABLE, retry.
        let s = Status::from(ProviderError::Unavailable("network sandboxd-net-x not found".into()));
        assert_eq!((s.code(), kind_of_status(&s)), (Code::Unavailable, Some(FailureKind::DaemonUnavailable)));
        assert_eq!(s.get_details_retry_info().and_then(|r| r.retry_delay), Some(RETRY_AFTER));

        let s = Status::from(ProviderError::invalid("spec.image", "is required"));
        assert_eq!(kind_of_status(&s), None);
        assert!(s.details().is_empty());
    }

    #[test]
    fn every_error_of_the_infrastructure_has_a_kind() {
        let cases = [
            (ProviderError::SandboxNotFound("x".into()), FailureKind::SandboxGone),
            (ProviderError::Stopped("x".into()), FailureKind::SandboxGone),
            (ProviderError::ReadyTimeout("x".into()), FailureKind::CreateTimeout),
            (ProviderError::CreateTimeout("x".into()), FailureKind::StartupTimeout),
            (ProviderError::SetupTimeout("x".into()), FailureKind::SetupTimeout),
            (ProviderError::Unavailable("x".into()), FailureKind::DaemonUnavailable),
            (ProviderError::Timeout("x".into()), FailureKind::DaemonUnavailable),
            (ProviderError::Create("x".into()), FailureKind::CreateFailed),
            (ProviderError::Docker("x".into()), FailureKind::Internal),
        ];
        for (err, kind) in cases {
            assert_eq!(kind_of(&err), Some(kind), "{err}");
        }
    }
}
