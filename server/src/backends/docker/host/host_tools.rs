//! The host programs the walls run: `mkfs.ext4`, `mount` and `umount` for the loop disk
//! (`disk.rs`), `nsenter` and `nft` for egress rules (`egress.rs`). Found on `PATH`, then where
//! Debian installs them (`/usr/sbin`, `/sbin`, …): root's non-login shells and some service
//! managers start the server with a `PATH` that lacks `/usr/sbin`. What the configured walls
//! need is checked when the server starts ([`check`]), so a server that starts can create.

use std::path::{Path, PathBuf};

use crate::config::{DiskBound, DockerCreateConfig};

/// Where a program not on `PATH` is looked for, in this order.
pub const FALLBACK_DIRS: [&str; 6] =
    ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"];

/// The loop disk's programs (`docker.create.disk_bound: loop`) and their Debian packages.
pub const LOOP_DISK_TOOLS: [(&str, &str); 3] =
    [("mkfs.ext4", "e2fsprogs"), ("mount", "mount"), ("umount", "mount")];

/// The egress rules' programs (a network policy) and their Debian packages.
pub const EGRESS_TOOLS: [(&str, &str); 2] = [("nsenter", "util-linux"), ("nft", "nftables")];

/// `program`'s path: the first executable file of that name on `PATH`, then in
/// [`FALLBACK_DIRS`].
pub fn find(program: &str) -> Option<PathBuf> {
    find_in(program, std::env::var_os("PATH").as_deref().map(Path::new))
}

fn find_in(program: &str, path: Option<&Path>) -> Option<PathBuf> {
    let on_path = path.map(|p| std::env::split_paths(p.as_os_str()).collect::<Vec<_>>()).unwrap_or_default();
    on_path
        .into_iter()
        .chain(FALLBACK_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

/// What to run for `program`: its path when found, else the bare name (whose spawn error then
/// names it).
pub fn program(program: &str) -> PathBuf {
    find(program).unwrap_or_else(|| PathBuf::from(program))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The programs `create` needs, each with the setting that needs it.
pub fn needed(
    create: &DockerCreateConfig,
    egress_by_default: bool,
) -> Vec<(&'static str, &'static str, &'static str)> {
    let mut tools = Vec::new();
    if create.disk_bound == DiskBound::Loop && create.apply_resource_limits {
        tools.extend(LOOP_DISK_TOOLS.iter().map(|(t, p)| (*t, *p, "docker.create.disk_bound")));
    }
    if egress_by_default {
        tools.extend(EGRESS_TOOLS.iter().map(|(t, p)| (*t, *p, "network.default_policy")));
    }
    tools
}

/// Every program the configured walls need is there, or the first missing one named with its
/// package and the setting that needs it.
pub fn check(create: &DockerCreateConfig, egress_by_default: bool) -> Result<(), String> {
    check_with(create, egress_by_default, find)
}

fn check_with(
    create: &DockerCreateConfig,
    egress_by_default: bool,
    find: impl Fn(&str) -> Option<PathBuf>,
) -> Result<(), String> {
    for (tool, package, setting) in needed(create, egress_by_default) {
        if find(tool).is_none() {
            return Err(format!(
                "{setting}: needs the host program {tool} (Debian package {package}), found neither on PATH nor in {}: install it, or change {setting}",
                FALLBACK_DIRS.join(", ")
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_off_path_is_found_where_debian_installs_it() {
        // `sh` is in /bin or /usr/bin on every Debian; an empty PATH still finds it.
        let sh = find_in("sh", Some(Path::new(""))).expect("sh in a fallback directory");
        assert!(sh.is_absolute() && sh.ends_with("sh"), "{sh:?}");
        let dir = tempfile::tempdir().unwrap();
        let own = dir.path().join("sh");
        std::fs::write(&own, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(find_in("sh", Some(dir.path())), Some(own.clone()), "PATH comes first");
        std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_ne!(find_in("sh", Some(dir.path())), Some(own), "a file that cannot run is skipped");
        assert_eq!(find_in("no-such-program-sandboxd", None), None);
    }

    #[test]
    fn only_the_configured_walls_need_their_programs() {
        let cfg = DockerCreateConfig::default();
        let names = |cfg: &DockerCreateConfig, egress| {
            needed(cfg, egress).into_iter().map(|(t, _, _)| t).collect::<Vec<_>>()
        };
        assert_eq!(names(&cfg, false), ["mkfs.ext4", "mount", "umount"]);
        assert_eq!(names(&cfg, true), ["mkfs.ext4", "mount", "umount", "nsenter", "nft"]);
        let storage = DockerCreateConfig { disk_bound: DiskBound::StorageOpt, ..cfg.clone() };
        assert!(names(&storage, false).is_empty());
        let none = |_: &str| None;
        let err = check_with(&cfg, false, none).unwrap_err();
        assert!(
            err.starts_with(
                "docker.create.disk_bound: needs the host program mkfs.ext4 (Debian package e2fsprogs)"
            ),
            "{err}"
        );
        assert!(check_with(&storage, false, none).is_ok());
        let err = check_with(&storage, true, none).unwrap_err();
        assert!(err.starts_with("network.default_policy: needs the host program nsenter"), "{err}");
        assert!(check_with(&cfg, true, |t| Some(PathBuf::from(format!("/x/{t}")))).is_ok());
    }
}
