//! What every section shares: the error naming a field, and the range rules of durations.

use std::time::Duration;

/// A configuration value that is out of range, naming the field and what is allowed.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{field}: {message}")]
pub struct ConfigError {
    pub field: String,
    pub message: String,
}

impl ConfigError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: field.into(), message: message.into() }
    }
}

/// The longest duration a client may send (`ttl_s`, `ready_timeout_s`, `timeout_s`): one year.
pub const MAX_CLIENT_SECONDS: f64 = 31_536_000.0;

/// A duration that must not be zero, when set.
pub(super) fn nonzero(field: &str, value: Option<Duration>) -> Result<(), ConfigError> {
    match value {
        Some(d) if d.is_zero() => Err(ConfigError::new(field, "must be > 0 (got 0)")),
        _ => Ok(()),
    }
}

/// A duration in `(0, MAX_CLIENT_SECONDS]`, when set.
pub(super) fn within_client_bound(field: &str, value: Option<Duration>) -> Result<(), ConfigError> {
    match value {
        Some(d) if d.is_zero() || d.as_secs_f64() > MAX_CLIENT_SECONDS => Err(ConfigError::new(
            field,
            format!("must be > 0 and <= {MAX_CLIENT_SECONDS} (got {})", d.as_secs_f64()),
        )),
        _ => Ok(()),
    }
}
