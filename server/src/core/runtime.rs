//! What a sandbox needs from its runtime beyond an image (NeMo Gym's runtime requirements,
//! networking and shared storage): a network and named volumes this service owns, added
//! capabilities and the size of `/dev/shm`. The rules any backend applies to them live here;
//! how a backend provides them (Docker networks and volumes) lives behind the seam.

use serde::{Deserialize, Serialize};

use crate::error::ProviderError;

/// The longest network or volume name a client may give.
pub const MAX_NAME_LEN: usize = 32;

/// The smallest `/dev/shm` a sandbox may ask for: below it programs fail in odd ways.
pub const MIN_SHM_SIZE_BYTES: u64 = 1 << 20;

/// Where volumes shown through a `subpath` are mounted; a sandbox's `target` is a link into it.
pub const VOLUMES_DIR_IN_SANDBOX: &str = "/.sandboxd/volumes";

pub use crate::config::NEVER_ADDED;

/// A sandbox's address on a network (`NetworkAddress`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkAddress {
    pub address: String,
    /// The spec's network name; empty for the daemon's network.
    pub network: String,
}

/// One of this service's named volumes (`ListVolumes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeInfo {
    pub name: String,
    pub created_at_unix_ms: i64,
}

/// A named volume of this service mounted in a sandbox (also as a sandbox's runtime label
/// keeps it, so a fork's children mount the same).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeMount {
    pub name: String,
    pub target: String,
    #[serde(default)]
    pub read_only: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subpath: Option<String>,
}

/// A network or volume name: 1..=32 of `a-z 0-9 _ -`, starting with a letter or digit, so it
/// can never be read as a flag, a path or another tenant's name (tenants are joined with `.`).
pub fn validate_name(field: &str, name: &str) -> Result<(), ProviderError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        && name.as_bytes()[0].is_ascii_alphanumeric();
    if ok {
        Ok(())
    } else {
        Err(ProviderError::invalid(
            field,
            format!(
                "{name:?}: 1 to {MAX_NAME_LEN} of lower-case letters, digits, '_' or '-', starting with a letter or digit"
            ),
        ))
    }
}

/// A capability as Docker spells it (`SYS_PTRACE`), from `SYS_PTRACE`, `sys_ptrace` or
/// `CAP_SYS_PTRACE`; anything but letters, digits and `_` is INVALID_ARGUMENT.
pub fn capability(field: &str, name: &str) -> Result<String, ProviderError> {
    crate::config::capability_name(name).ok_or_else(|| {
        ProviderError::invalid(field, format!("{name:?} is not a capability name (for example SYS_PTRACE)"))
    })
}

/// The checks that need no policy: names, paths and sizes.
pub fn validate(
    network: Option<&str>,
    cap_add: &[String],
    shm_size_bytes: Option<u64>,
    memory_mib: Option<u64>,
    volumes: &[VolumeMount],
) -> Result<(), ProviderError> {
    if let Some(network) = network {
        validate_name("spec.network", network)?;
    }
    for cap in cap_add {
        capability("spec.cap_add", cap)?;
    }
    if let Some(size) = shm_size_bytes {
        if size < MIN_SHM_SIZE_BYTES {
            return Err(ProviderError::invalid(
                "spec.shm_size_bytes",
                format!("must be at least {MIN_SHM_SIZE_BYTES} (1 MiB; got {size})"),
            ));
        }
        if let Some(mib) = memory_mib {
            if size > mib.saturating_mul(1 << 20) {
                return Err(ProviderError::invalid(
                    "spec.shm_size_bytes",
                    format!("{size} is more than the memory limit (spec.resources.memory_mib = {mib})"),
                ));
            }
        }
    }
    let mut targets = std::collections::BTreeSet::new();
    for (i, volume) in volumes.iter().enumerate() {
        validate_name(&format!("spec.volumes[{i}].name"), &volume.name)?;
        let field = format!("spec.volumes[{i}].target");
        validate_target(&field, &volume.target)?;
        if !targets.insert(volume.target.trim_end_matches('/')) {
            return Err(ProviderError::invalid(
                field,
                format!("{:?} is the target of two volumes", volume.target),
            ));
        }
        if let Some(sub) = &volume.subpath {
            validate_subpath(&format!("spec.volumes[{i}].subpath"), sub)?;
        }
    }
    Ok(())
}

/// A mount target: absolute, normal components only, no `,` (Docker's `--mount` separator:
/// it would smuggle mount options), not `/` and not under the agent's `/.sandboxd`.
fn validate_target(field: &str, target: &str) -> Result<(), ProviderError> {
    let bad = |why: &str| Err(ProviderError::invalid(field, format!("{target:?}: {why}")));
    if !target.starts_with('/') {
        return bad("must be an absolute path");
    }
    if target.contains(',') || target.contains('\0') || target.chars().any(char::is_control) {
        return bad("must not contain ',', NUL or control characters");
    }
    let parts: Vec<&str> = target.split('/').filter(|p| !p.is_empty()).collect();
    if parts.is_empty() {
        return bad("must not be /");
    }
    if parts.iter().any(|p| *p == "." || *p == "..") {
        return bad("must not contain '.' or '..' components");
    }
    if parts[0] == ".sandboxd" {
        return bad("/.sandboxd belongs to the sandbox's agent");
    }
    Ok(())
}

/// A directory inside a volume: relative, normal components only, no `,`.
fn validate_subpath(field: &str, sub: &str) -> Result<(), ProviderError> {
    let parts: Vec<&str> = sub.split('/').filter(|p| !p.is_empty()).collect();
    if sub.starts_with('/')
        || parts.is_empty()
        || parts.iter().any(|p| *p == "." || *p == "..")
        || sub.contains(',')
        || sub.chars().any(char::is_control)
    {
        return Err(ProviderError::invalid(
            field,
            format!("{sub:?}: a relative path inside the volume, without '..', ',' or control characters"),
        ));
    }
    Ok(())
}

/// The name under which a backend keeps a client's network or volume `name`: the tenant's
/// name joined with `.` (which neither a tenant nor a client name may contain), so two
/// tenants naming `shared` never meet.
pub fn scoped_name(prefix: &str, tenant: Option<&str>, name: &str) -> String {
    match tenant {
        Some(t) => format!("{prefix}{t}.{name}"),
        None => format!("{prefix}{name}"),
    }
}

/// The client's name back from a scoped one, when it belongs to `tenant`.
pub fn unscoped_name<'a>(prefix: &str, tenant: Option<&str>, scoped: &'a str) -> Option<&'a str> {
    let rest = scoped.strip_prefix(prefix)?;
    match tenant {
        Some(t) => rest.strip_prefix(t)?.strip_prefix('.'),
        None => (!rest.contains('.')).then_some(rest),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn volume(name: &str, target: &str) -> VolumeMount {
        VolumeMount { name: name.into(), target: target.into(), ..Default::default() }
    }

    #[test]
    fn names_are_short_lower_case_words() {
        for ok in ["a", "shared-1", "x_y", "0abc"] {
            assert!(validate_name("n", ok).is_ok(), "{ok}");
        }
        for bad in ["", "-x", "_x", "A", "a.b", "a/b", "a b", &"x".repeat(33)] {
            let err = validate_name("spec.network", bad).unwrap_err().to_string();
            assert!(err.contains("spec.network"), "{bad}: {err}");
        }
    }

    #[test]
    fn capabilities_are_normalised_and_checked() {
        assert_eq!(capability("c", "CAP_SYS_PTRACE").unwrap(), "SYS_PTRACE");
        assert_eq!(capability("c", "sys_ptrace").unwrap(), "SYS_PTRACE");
        for bad in ["", "--privileged", "SYS PTRACE", "CAP_"] {
            assert!(
                capability("spec.cap_add", bad).unwrap_err().to_string().contains("spec.cap_add"),
                "{bad}"
            );
        }
    }

    #[test]
    fn targets_and_subpaths_cannot_smuggle_options_or_escape() {
        for bad in ["rel", "/", "/a,readonly=false", "/a/../b", "/.sandboxd/run", "/a\nb"] {
            let err = validate(None, &[], None, None, &[volume("v", bad)]).unwrap_err().to_string();
            assert!(err.contains("spec.volumes[0].target"), "{bad}: {err}");
        }
        let two = [volume("v", "/data"), volume("w", "/data/")];
        assert!(validate(None, &[], None, None, &two).unwrap_err().to_string().contains("two volumes"));
        for bad in ["/abs", "..", "a/../..", "a,b", ""] {
            let v = VolumeMount { subpath: Some(bad.into()), ..volume("v", "/data") };
            let err = validate(None, &[], None, None, &[v]).unwrap_err().to_string();
            assert!(err.contains("spec.volumes[0].subpath"), "{bad}: {err}");
        }
        let ok = VolumeMount { subpath: Some("tasks/1".into()), ..volume("v", "/data") };
        assert!(validate(Some("net"), &["SYS_PTRACE".into()], Some(1 << 26), Some(256), &[ok]).is_ok());
    }

    #[test]
    fn shm_is_at_least_a_mebibyte_and_within_memory() {
        assert!(validate(None, &[], Some(1000), None, &[])
            .unwrap_err()
            .to_string()
            .contains("spec.shm_size_bytes"));
        let err = validate(None, &[], Some(512 << 20), Some(256), &[]).unwrap_err().to_string();
        assert!(err.contains("memory_mib"), "{err}");
    }

    #[test]
    fn scoped_names_keep_tenants_apart() {
        assert_eq!(scoped_name("p-", Some("team-a"), "shared"), "p-team-a.shared");
        assert_eq!(scoped_name("p-", None, "shared"), "p-shared");
        assert_eq!(unscoped_name("p-", Some("team-a"), "p-team-a.shared"), Some("shared"));
        assert_eq!(unscoped_name("p-", Some("team-b"), "p-team-a.shared"), None);
        assert_eq!(unscoped_name("p-", None, "p-team-a.shared"), None);
        assert_eq!(unscoped_name("p-", None, "p-shared"), Some("shared"));
    }
}
