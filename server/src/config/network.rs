//! The `network` section: the default egress policy and how often allowed domains are resolved.

use std::time::Duration;

use serde::Deserialize;

use super::docker::DockerCreateConfig;
use super::rules::ConfigError;
use super::seconds;

/// Default time between two resolutions of a sandbox's allowed domains.
pub const DEFAULT_DOMAIN_REFRESH: Duration = Duration::from_secs(60);

/// The `network` section: the egress policy of sandboxes that name none, and how often allowed
/// domains are resolved again.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkSection {
    /// `null`: a sandbox without `spec.network_policy` may reach everything (as before egress
    /// policies existed).
    pub default_policy: Option<crate::egress::NetworkPolicy>,
    #[serde(rename = "domain_refresh_s", deserialize_with = "seconds::required")]
    pub domain_refresh: Duration,
}

impl Default for NetworkSection {
    fn default() -> Self {
        Self { default_policy: None, domain_refresh: DEFAULT_DOMAIN_REFRESH }
    }
}

impl NetworkSection {
    pub fn validate(&self, docker: &DockerCreateConfig) -> Result<(), ConfigError> {
        if self.domain_refresh.is_zero() {
            return Err(ConfigError::new("network.domain_refresh_s", "must be > 0 (got 0)"));
        }
        if let Some(policy) = &self.default_policy {
            policy.check("network.default_policy").map_err(|e| ConfigError::new(e.field, e.message))?;
            if let Some(why) = crate::egress::unenforceable_network(docker.network.as_deref()) {
                return Err(ConfigError::new("network.default_policy", why));
            }
        }
        if let Some(flag) = crate::egress::net_admin_flag(&docker.extra_run_args) {
            return Err(ConfigError::new(
                "docker.create.extra_run_args",
                format!("{flag:?} would let a sandbox change its own network rules (CAP_NET_ADMIN); sandboxd never grants it"),
            ));
        }
        Ok(())
    }
}
