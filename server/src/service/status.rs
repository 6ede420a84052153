//! Provider errors as gRPC statuses a client can act on (the table in docs/status-codes.md), each with
//! its failure kind where one applies (`crate::core::failure`).

use tonic::{Code, Status};

use crate::error::ProviderError;

impl From<ProviderError> for Status {
    fn from(err: ProviderError) -> Self {
        let code = match &err {
            ProviderError::InvalidArgument { .. } => Code::InvalidArgument,
            ProviderError::PermissionDenied(_) => Code::PermissionDenied,
            ProviderError::SandboxNotFound(_)
            | ProviderError::FileNotFound(_)
            | ProviderError::SnapshotNotFound(_)
            | ProviderError::SessionNotFound(_) => Code::NotFound,
            ProviderError::Create(_)
            | ProviderError::CreateVerification(_)
            | ProviderError::ReadyTimeout(_)
            | ProviderError::SetupTimeout(_)
            | ProviderError::Stopped(_)
            | ProviderError::Paused(_)
            | ProviderError::SnapshotInUse(_)
            | ProviderError::InUse(_)
            | ProviderError::Pty(_)
            | ProviderError::SessionHeld(_) => Code::FailedPrecondition,
            ProviderError::OutOfRange(_) => Code::OutOfRange,
            ProviderError::Unimplemented(_) => Code::Unimplemented,
            ProviderError::AlreadyExists(_) => Code::AlreadyExists,
            ProviderError::ResourceExhausted(_) | ProviderError::Busy { .. } => Code::ResourceExhausted,
            ProviderError::Unavailable(_) => Code::Unavailable,
            ProviderError::Timeout(_) | ProviderError::CreateTimeout(_) => Code::DeadlineExceeded,
            ProviderError::Docker(_) | ProviderError::Io(_) => Code::Internal,
            ProviderError::FailedPrecondition(_) => Code::FailedPrecondition,
            ProviderError::ProcessNotFound(_) => Code::NotFound,
            ProviderError::Aborted(_) => Code::Aborted,
        };
        // The kind travels as a `google.rpc.ErrorInfo` detail (crate::core::failure).
        let kind = crate::core::failure::kind_of(&err);
        match &err {
            ProviderError::Busy { retry_after, .. } => {
                crate::core::failure::status_retry_after(code, err.to_string(), kind, *retry_after)
            }
            _ => crate::core::failure::status(code, err.to_string(), kind),
        }
    }
}

/// A request field that is missing or malformed.
pub fn invalid(field: &str, message: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("invalid {field}: {message}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes() {
        let cases = [
            (ProviderError::invalid("spec.image", "is required"), Code::InvalidArgument),
            (ProviderError::SandboxNotFound("x".into()), Code::NotFound),
            (ProviderError::FileNotFound("x".into()), Code::NotFound),
            (ProviderError::Create("x".into()), Code::FailedPrecondition),
            (ProviderError::CreateVerification("x".into()), Code::FailedPrecondition),
            (ProviderError::Stopped("x".into()), Code::FailedPrecondition),
            (ProviderError::Unavailable("x".into()), Code::Unavailable),
            (ProviderError::Timeout("x".into()), Code::DeadlineExceeded),
            (ProviderError::PermissionDenied("x".into()), Code::PermissionDenied),
            (ProviderError::Docker("x".into()), Code::Internal),
            (ProviderError::Paused("x".into()), Code::FailedPrecondition),
            (ProviderError::SnapshotNotFound("x".into()), Code::NotFound),
            (ProviderError::SnapshotInUse("x".into()), Code::FailedPrecondition),
            (ProviderError::ResourceExhausted("x".into()), Code::ResourceExhausted),
            (ProviderError::SessionNotFound("x".into()), Code::NotFound),
            (ProviderError::SessionHeld("x".into()), Code::FailedPrecondition),
            (ProviderError::OutOfRange("x".into()), Code::OutOfRange),
            (ProviderError::Unimplemented("x".into()), Code::Unimplemented),
            (ProviderError::FailedPrecondition("x".into()), Code::FailedPrecondition),
            (ProviderError::ProcessNotFound("x".into()), Code::NotFound),
            (ProviderError::Aborted("x".into()), Code::Aborted),
            (ProviderError::AlreadyExists("x".into()), Code::AlreadyExists),
            (ProviderError::ReadyTimeout("x".into()), Code::FailedPrecondition),
            (ProviderError::CreateTimeout("x".into()), Code::DeadlineExceeded),
        ];
        for (err, code) in cases {
            assert_eq!(Status::from(err).code(), code);
        }
        let s = Status::from(ProviderError::invalid("spec.ports", "duplicate port 80"));
        assert!(s.message().contains("spec.ports"));
    }
}
