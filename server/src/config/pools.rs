//! The `pools:` list: warm pools the server keeps filled from its start.

use serde::Deserialize;

use super::rules::ConfigError;

/// One entry of `pools:`: a warm pool of `target` ready sandboxes of `image` and `template`
/// (a `SandboxSpec` without `image`, `ttl_s` or `snapshot_id`: workdir, env, metadata,
/// resources, entrypoint, ports, ready_timeout_s, provider_options), at most `max` alive.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    pub name: String,
    pub image: String,
    /// Checked as a `SandboxSpec` when the server builds its pools (`pools[N].template.*`).
    #[serde(default)]
    pub template: serde_json::Value,
    #[serde(default)]
    pub target: u32,
    pub max: u32,
    /// A closed sandbox of the pool is reset and handed back to it instead of removed.
    #[serde(default)]
    pub recycle: bool,
}

impl PoolConfig {
    /// The shape rules (name, sizes, an image); the template's own fields are checked with the
    /// sandbox spec's rules when the server starts.
    pub fn validate(&self, index: usize) -> Result<(), ConfigError> {
        let prefix = format!("pools[{index}]");
        let refused = |(field, message): crate::core::pools::rules::Refusal| ConfigError::new(field, message);
        crate::core::pools::rules::check_name(&format!("{prefix}.name"), &self.name).map_err(refused)?;
        if self.image.is_empty() {
            return Err(ConfigError::new(format!("{prefix}.image"), "is required"));
        }
        if !(self.template.is_null() || self.template.is_object()) {
            return Err(ConfigError::new(format!("{prefix}.template"), "must be a mapping (a sandbox spec)"));
        }
        crate::core::pools::rules::check_sizes(&prefix, self.target, self.max).map_err(refused)
    }
}
