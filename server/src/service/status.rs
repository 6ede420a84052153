//! Provider errors as gRPC statuses a client can act on (the table in the README).

use tonic::{Code, Status};

use crate::error::ProviderError;

impl From<ProviderError> for Status {
    fn from(err: ProviderError) -> Self {
        let code = match &err {
            ProviderError::InvalidArgument { .. } => Code::InvalidArgument,
            ProviderError::PermissionDenied(_) => Code::PermissionDenied,
            ProviderError::SandboxNotFound(_)
            | ProviderError::FileNotFound(_)
            | ProviderError::SnapshotNotFound(_) => Code::NotFound,
            ProviderError::Create(_)
            | ProviderError::CreateVerification(_)
            | ProviderError::Stopped(_)
            | ProviderError::Paused(_)
            | ProviderError::SnapshotInUse(_)
            | ProviderError::Pty(_) => Code::FailedPrecondition,
            ProviderError::ResourceExhausted(_) => Code::ResourceExhausted,
            ProviderError::Unavailable(_) => Code::Unavailable,
            ProviderError::Timeout(_) => Code::DeadlineExceeded,
            ProviderError::Unimplemented(_) => Code::Unimplemented,
            ProviderError::Docker(_) | ProviderError::Io(_) => Code::Internal,
        };
        Status::new(code, err.to_string())
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
        ];
        for (err, code) in cases {
            assert_eq!(Status::from(err).code(), code);
        }
        let s = Status::from(ProviderError::invalid("spec.ports", "duplicate port 80"));
        assert!(s.message().contains("spec.ports"));
    }
}
