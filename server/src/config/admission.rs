//! The `server.admission` section: how many sandboxes start at once on this host and how the
//! creates beyond that wait (`crate::core::admission`).

use std::time::Duration;

use serde::Deserialize;

use super::rules::{within_client_bound, ConfigError};
use super::seconds;

/// `server.admission`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdmissionSection {
    /// Sandboxes starting at once on this host (creates and pool refills); `null`: four per
    /// CPU core, at least four.
    pub max_starting: Option<u32>,
    /// Creates that may wait for a start slot; the next is refused at once (CAPACITY).
    pub max_waiting: u32,
    /// The longest a create whose call has no deadline waits for a start slot.
    #[serde(rename = "max_wait_s", deserialize_with = "seconds::required")]
    pub max_wait: Duration,
    /// How long a start is assumed to take until one has been measured.
    #[serde(rename = "first_start_estimate_s", deserialize_with = "seconds::required")]
    pub first_start_estimate: Duration,
}

impl Default for AdmissionSection {
    fn default() -> Self {
        Self {
            max_starting: None,
            max_waiting: 10_000,
            max_wait: Duration::from_secs(60),
            first_start_estimate: Duration::from_secs(1),
        }
    }
}

impl AdmissionSection {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_starting == Some(0) {
            return Err(ConfigError::new("server.admission.max_starting", "must be >= 1 or null (got 0)"));
        }
        if self.max_waiting == 0 {
            return Err(ConfigError::new("server.admission.max_waiting", "must be >= 1 (got 0)"));
        }
        within_client_bound("server.admission.max_wait_s", Some(self.max_wait))?;
        within_client_bound("server.admission.first_start_estimate_s", Some(self.first_start_estimate))
    }
}
