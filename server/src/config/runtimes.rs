//! The OCI runtimes a server offers (`docker.runtimes`) and its default (`docker.create.runtime`):
//! a sandbox runs on `runc` (the host's kernel) or on a runtime such as gVisor's `runsc` the
//! daemon has registered, chosen per sandbox (`SandboxSpec.runtime`), pool and tenant.

use serde::Deserialize;

use super::rules::ConfigError;
use super::ExecTransport;

/// The runtime every server offers unless configured otherwise.
pub const DEFAULT_RUNTIME: &str = "runc";

/// One runtime the server offers.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeOffer {
    /// The name clients ask for (`SandboxSpec.runtime`, `tenants[].runtime`) and `List` shows.
    pub name: String,
    /// The name the Docker daemon knows it by (`docker info`'s Runtimes, `docker run
    /// --runtime`); unset: `name`.
    #[serde(default)]
    pub daemon_name: Option<String>,
    /// How the agent of a sandbox on this runtime is reached; unset: `docker.exec.transport`.
    /// A gVisor daemon registered without `--host-uds=create` needs `channel`: the agent's
    /// socket would exist only inside the sandbox.
    #[serde(default)]
    pub transport: Option<ExecTransport>,
    /// Whether sandboxes on it can be checkpointed (live snapshots, live forks, hibernation):
    /// gVisor's `runsc` registered with `--network=none` (gVisor refuses to checkpoint a sandbox
    /// on the host's network stack) on a daemon started with `"experimental": true`.
    #[serde(default)]
    pub checkpoint: bool,
}

impl RuntimeOffer {
    pub fn new(name: &str) -> Self {
        Self { name: name.into(), daemon_name: None, transport: None, checkpoint: false }
    }

    /// The name `docker run --runtime` takes.
    pub fn daemon_name(&self) -> &str {
        self.daemon_name.as_deref().unwrap_or(&self.name)
    }
}

/// `docker.runtimes`: the list, `[{name: runc}]` by default.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Runtimes(pub Vec<RuntimeOffer>);

impl Default for Runtimes {
    fn default() -> Self {
        Self(vec![RuntimeOffer::new(DEFAULT_RUNTIME)])
    }
}

/// A runtime name as a client or the file gives it: 1-64 of `a-z 0-9 . _ -`, starting with a
/// letter or digit (so it can never read as a flag on a docker command line).
pub fn is_runtime_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
}

/// A daemon's runtime name (`docker info`): 1-128 of `A-Z a-z 0-9 . _ -`, starting with a
/// letter or digit.
pub fn is_daemon_runtime_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

impl Runtimes {
    /// The offer named `name`.
    pub fn get(&self, name: &str) -> Option<&RuntimeOffer> {
        self.0.iter().find(|r| r.name == name)
    }

    /// The offered runtimes that can checkpoint.
    pub fn checkpointing(&self) -> std::collections::BTreeSet<String> {
        self.0.iter().filter(|r| r.checkpoint).map(|r| r.name.clone()).collect()
    }

    /// The names of the offered runtimes that can checkpoint, comma-separated.
    pub fn checkpoint_names(&self) -> String {
        self.0.iter().filter(|r| r.checkpoint).map(|r| r.name.as_str()).collect::<Vec<_>>().join(", ")
    }

    /// The offered names, comma-separated (for messages).
    pub fn names(&self) -> String {
        self.0.iter().map(|r| r.name.as_str()).collect::<Vec<_>>().join(", ")
    }

    /// Names well-formed and unique, at least one, and `default` among them.
    pub fn validate(&self, default: &str) -> Result<(), ConfigError> {
        if self.0.is_empty() {
            return Err(ConfigError::new("runtimes", "must offer at least one runtime (for example runc)"));
        }
        for (i, offer) in self.0.iter().enumerate() {
            if !is_runtime_name(&offer.name) {
                return Err(ConfigError::new(
                    format!("runtimes[{i}].name"),
                    format!("{:?}: 1-64 of a-z 0-9 . _ -, starting with a letter or digit", offer.name),
                ));
            }
            if !is_daemon_runtime_name(offer.daemon_name()) {
                return Err(ConfigError::new(
                    format!("runtimes[{i}].daemon_name"),
                    format!(
                        "{:?}: 1-128 of A-Z a-z 0-9 . _ -, starting with a letter or digit",
                        offer.daemon_name()
                    ),
                ));
            }
            if self.0[..i].iter().any(|o| o.name == offer.name) {
                return Err(ConfigError::new(
                    format!("runtimes[{i}].name"),
                    format!("{:?} appears twice", offer.name),
                ));
            }
        }
        if self.get(default).is_none() {
            return Err(ConfigError::new(
                "create.runtime",
                format!("{default:?} is not offered by docker.runtimes (offered: {})", self.names()),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_could_read_as_flags_or_paths_are_refused() {
        for good in ["runc", "runsc", "gvisor-ptrace", "kata.v2", "r1"] {
            assert!(is_runtime_name(good), "{good}");
        }
        for bad in ["", "-runc", "--privileged", "run c", "RUNSC", "a/b", ".x", &"r".repeat(65)] {
            assert!(!is_runtime_name(bad), "{bad:?}");
        }
        assert!(is_daemon_runtime_name("io.containerd.runsc.v1") && !is_daemon_runtime_name("-x"));
    }

    #[test]
    fn the_default_must_be_offered_and_names_unique() {
        assert!(Runtimes::default().validate("runc").is_ok());
        let err = Runtimes::default().validate("runsc").unwrap_err().to_string();
        assert!(err.contains("create.runtime") && err.contains("offered: runc"), "{err}");
        let twice = Runtimes(vec![RuntimeOffer::new("runc"), RuntimeOffer::new("runc")]);
        assert!(twice.validate("runc").unwrap_err().to_string().contains("runtimes[1].name"));
        let bad = Runtimes(vec![RuntimeOffer {
            name: "runsc".into(),
            daemon_name: Some("--privileged".into()),
            transport: None,
            checkpoint: false,
        }]);
        assert!(bad.validate("runsc").unwrap_err().to_string().contains("runtimes[0].daemon_name"));
        assert!(Runtimes(vec![]).validate("runc").is_err());
    }
}
