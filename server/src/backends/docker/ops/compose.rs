//! NeMo Gym's Compose helpers: `pull_policy` and service options as `docker run` arguments.

use std::collections::BTreeMap;

use super::argv;
use super::provider::DockerProvider;
use crate::core::spec::ProviderOptions;
use crate::error::{ProviderError, Result};

impl DockerProvider {
    /// Compose's `pull_policy` as run args.
    pub fn pull_policy_options(policy: &str) -> Result<ProviderOptions> {
        let run_args =
            argv::pull_policy_args(policy).map_err(|m| ProviderError::invalid("pull_policy", m))?;
        Ok(ProviderOptions { volumes: Vec::new(), run_args })
    }

    /// Compose service options (`tmpfs`, `ulimits`, `sysctls`, `security_opt`) as run args.
    pub fn service_options(
        tmpfs: &[String],
        ulimits: &BTreeMap<String, String>,
        sysctls: &BTreeMap<String, String>,
        security_opt: &[String],
    ) -> ProviderOptions {
        ProviderOptions {
            volumes: Vec::new(),
            run_args: argv::service_option_args(tmpfs, ulimits, sysctls, security_opt),
        }
    }
}
