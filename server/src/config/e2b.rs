//! The `server.e2b` section: the optional E2B-compatible listener (`crate::e2b`), the template
//! names its `POST /sandboxes` accepts and the domain of its `<port>-<sandbox id>.<domain>`
//! host names.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::Deserialize;

use super::rules::ConfigError;

/// `server.e2b`. Without `listen` nothing is served.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct E2bSection {
    /// Address of the E2B listener (control plane and envd on one port); `null`: off.
    pub listen: Option<SocketAddr>,
    /// Template name -> image. The SDK asks for `base` unless told otherwise, so a useful
    /// configuration maps it; an unknown name is refused (404, as E2B does).
    pub templates: BTreeMap<String, String>,
    /// Domain of host-name routing (`49983-<sandbox id>.<domain>`), also returned to the SDK
    /// as the sandbox's domain; `null`: route by the `E2b-Sandbox-Id` header only.
    pub domain: Option<String>,
    /// Images E2B's template builder names (`from_image`, `from_base_image`'s `e2bdev/base`)
    /// -> the image this server builds from instead (no registry is used); unlisted names are
    /// used as they are.
    pub images: BTreeMap<String, String>,
    /// Template builds (`Template.build`, docs/templates.md).
    pub builds: E2bBuilds,
}

/// `server.e2b.builds`: the bounds of one template build.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct E2bBuilds {
    /// The whole build's time bound in seconds (steps, files, start and ready check, commit).
    pub timeout_s: u64,
    /// The build sandbox's disk bound in GiB (`resources.disk_gib`); `null`: the server's
    /// `docker.create.default_disk_gib`.
    pub disk_gib: Option<u64>,
    /// The largest file archive one copy step may upload, in MiB.
    pub max_upload_mib: u64,
}

impl Default for E2bBuilds {
    fn default() -> Self {
        Self { timeout_s: 1800, disk_gib: None, max_upload_mib: 1024 }
    }
}

impl E2bSection {
    /// Template names and images must be non-empty; an image is one docker reference (no
    /// whitespace, no leading `-`), since it reaches `docker run`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, image) in &self.templates {
            if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c == '/') {
                return Err(ConfigError::new(
                    "server.e2b.templates",
                    format!("template name {name:?} must be non-empty, without whitespace or `/`"),
                ));
            }
            if image.is_empty() || image.starts_with('-') || image.chars().any(char::is_whitespace) {
                return Err(ConfigError::new(
                    format!("server.e2b.templates.{name}"),
                    format!("image {image:?} must be one docker image reference (non-empty, no whitespace, not starting with `-`)"),
                ));
            }
        }
        for (name, image) in &self.images {
            if name.is_empty()
                || image.is_empty()
                || image.starts_with('-')
                || image.chars().any(char::is_whitespace)
            {
                return Err(ConfigError::new(
                    format!("server.e2b.images.{name}"),
                    format!("image {image:?} must be one docker image reference (non-empty, no whitespace, not starting with `-`)"),
                ));
            }
        }
        if self.builds.timeout_s == 0 || self.builds.max_upload_mib == 0 || self.builds.disk_gib == Some(0) {
            return Err(ConfigError::new(
                "server.e2b.builds",
                "timeout_s, max_upload_mib and disk_gib (when set) must be at least 1",
            ));
        }
        if let Some(domain) = &self.domain {
            let ok = !domain.is_empty()
                && domain
                    .split('.')
                    .all(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
            if !ok {
                return Err(ConfigError::new(
                    "server.e2b.domain",
                    format!("{domain:?} is not a DNS domain (labels of a-z, 0-9 and `-`, dot-separated)"),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::FileConfig;

    fn parse(server: &str) -> Result<FileConfig, String> {
        FileConfig::from_text(&format!(r#"{{"server": {{"e2b": {server}}}}}"#), false)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_section_parses_and_bad_values_name_their_field() {
        let ok =
            parse(r#"{"listen": "127.0.0.1:49982", "templates": {"base": "img:1"}, "domain": "sbx.test"}"#)
                .unwrap();
        assert_eq!(ok.server.e2b.templates["base"], "img:1");
        assert_eq!(ok.server.e2b.listen.unwrap().port(), 49982);
        assert!(parse("{}").unwrap().server.e2b.listen.is_none(), "off unless configured");

        let flag = parse(r#"{"templates": {"base": "--privileged"}}"#).unwrap_err();
        assert!(flag.contains("server.e2b.templates.base"), "{flag}");
        let space = parse(r#"{"templates": {"my base": "img"}}"#).unwrap_err();
        assert!(space.contains("server.e2b.templates"), "{space}");
        let domain = parse(r#"{"domain": "bad domain"}"#).unwrap_err();
        assert!(domain.contains("server.e2b.domain"), "{domain}");
        let unknown = parse(r#"{"port": 1}"#).unwrap_err();
        assert!(unknown.contains("port"), "{unknown}");
    }
}
