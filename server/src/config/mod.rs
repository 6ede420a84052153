//! The config file (`{"docker": {...}, "server": {...}, "network", "pools", "cluster"}`, YAML or
//! JSON): NeMo Gym's `docker.yaml` sections with the same fields, defaults and validation, and
//! the service's own.
//!
//! One file per section (`docker.rs`, `server.rs`, `network.rs`, `pools.rs`, `cluster.rs`);
//! durations are seconds in the file and `Duration` from parsing on (`seconds.rs`), with the
//! `ConfigError` and the range rules the sections share in `rules.rs`.

use std::path::Path;

use serde::Deserialize;

mod admission;
mod cluster;
mod console;
mod docker;
mod e2b;
mod network;
mod otel;
mod pools;
mod rules;
mod runtimes;
pub mod seconds;
mod server;

pub use admission::AdmissionSection;
pub use cluster::*;
pub use console::ConsoleSection;
pub use docker::*;
pub use e2b::E2bSection;
pub use network::*;
pub use otel::*;
pub use pools::*;
pub use rules::{ConfigError, MAX_CLIENT_SECONDS};
pub use runtimes::*;
pub use server::*;

/// The whole config file: `{"docker": {...}, "server": {...}}`; any other key is an error.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FileConfig {
    pub docker: DockerConfig,
    pub server: ServerSection,
    /// Egress policy (`network`).
    pub network: NetworkSection,
    /// Warm pools the server keeps filled from its start (`pools:`, a list).
    pub pools: Vec<PoolConfig>,
    pub cluster: ClusterSection,
}

impl DockerConfig {
    /// Parse the `docker` section of `{"docker": {...}, "server": {...}}` and validate it.
    pub fn from_json_value(root: &serde_json::Value) -> Result<Self, ConfigError> {
        Ok(FileConfig::from_json_value(root)?.docker)
    }

    /// Load and validate a JSON file shaped like NeMo Gym's `docker.yaml`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        Ok(FileConfig::load(path)?.docker)
    }
}

impl FileConfig {
    /// From the parsed file. A value of the wrong type is named by its path
    /// (`docker.create.pids_limit`), which `serde_path_to_error` tracks for us.
    pub fn from_json_value(root: &serde_json::Value) -> Result<Self, ConfigError> {
        let mut config: FileConfig = serde_path_to_error::deserialize(root.clone()).map_err(|e| {
            let path = e.path().to_string();
            let message = e.into_inner().to_string();
            let field = if path == "." || path.is_empty() {
                "config".to_string()
            } else if message.starts_with("invalid value") {
                // A value out of range is named as `validate` names it (the docker section's
                // fields as in the seed's `docker.yaml`, relative to it); a wrong type by its path.
                path.strip_prefix("docker.").unwrap_or(&path).to_string()
            } else {
                path
            };
            ConfigError::new(field, message)
        })?;
        config.docker = config.docker.checked()?;
        config.server.validate()?;
        config.network.validate(&config.docker.create)?;
        for (i, pool) in config.pools.iter().enumerate() {
            pool.validate(i)?;
            if config.pools[..i].iter().any(|p| p.name == pool.name) {
                return Err(ConfigError::new(
                    format!("pools[{i}].name"),
                    format!("{:?} is defined twice", pool.name),
                ));
            }
        }
        config.cluster.validate()?;
        Ok(config)
    }

    /// Loads a JSON or YAML file (NeMo Gym's `docker.yaml` as is; same keys either way). YAML
    /// is chosen by a `.yaml`/`.yml` extension, else by content that does not start with `{`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new("config", format!("cannot read {}: {e}", path.display())))?;
        Self::from_text(&text, is_yaml(path, &text))
    }

    /// Parses config text as YAML or JSON.
    pub fn from_text(text: &str, yaml: bool) -> Result<Self, ConfigError> {
        let root: serde_json::Value = if yaml {
            // An empty YAML document is an empty config.
            serde_yaml::from_str::<Option<serde_json::Value>>(text)
                .map_err(|e| ConfigError::new("config", format!("not valid YAML: {e}")))?
                .unwrap_or_else(|| serde_json::json!({}))
        } else {
            serde_json::from_str(text)
                .map_err(|e| ConfigError::new("config", format!("not valid JSON: {e}")))?
        };
        Self::from_json_value(&root)
    }
}

fn is_yaml(path: &Path, text: &str) -> bool {
    match path.extension().and_then(|e| e.to_str()) {
        Some("yaml" | "yml") => true,
        Some("json") => false,
        _ => !text.trim_start().starts_with('{'),
    }
}

#[cfg(test)]
mod tests;
