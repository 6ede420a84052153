//! The OCI runtime on a docker command line: `docker run --runtime=<daemon name>` with the
//! offered name as a label, and `docker info`'s runtimes. Names reach here only through
//! `config::is_runtime_name` / `is_daemon_runtime_name` (the offers are checked at load), and
//! each travels as one `--flag=value` word, so none can read as a flag of its own.

use super::*;
use crate::backends::docker::labels::OCI_RUNTIME_LABEL;

/// `--runtime=<daemon name> --label sandboxd.oci_runtime=<name>`, spliced into `docker run`.
pub fn oci_runtime_run_args(name: &str, daemon_name: &str) -> Vec<String> {
    vec![format!("--runtime={daemon_name}"), s("--label"), format!("{OCI_RUNTIME_LABEL}={name}")]
}

/// `docker info --format {{json .Runtimes}}`: the runtimes the daemon has registered.
pub fn daemon_runtimes_args() -> Vec<String> {
    vec![s("info"), s("--format"), s("{{json .Runtimes}}")]
}

/// The names in `docker info`'s `{"runc": {...}, "runsc": {...}}`, sorted; `None` when it is
/// not that.
pub fn parse_daemon_runtimes(stdout: &str) -> Option<Vec<String>> {
    let map: std::collections::BTreeMap<String, serde_json::Value> =
        serde_json::from_str(stdout.trim()).ok()?;
    Some(map.into_keys().collect())
}

/// The argument by which a daemon's runtime registered through `scripts/sandboxd-runsc` names
/// the directory where the server asks it to restore a container (`runsc_direct.rs`).
pub const RESTORE_DIR_ARG: &str = "--sandboxd-restore-dir=";

/// The restore directory runtime `daemon_name` was registered with in `docker info`'s runtimes
/// (`"runtimeArgs": ["--sandboxd-restore-dir=/…", …]`); `None` when it has none (an absolute
/// path only).
pub fn parse_restore_dir(stdout: &str, daemon_name: &str) -> Option<std::path::PathBuf> {
    let map: std::collections::BTreeMap<String, serde_json::Value> =
        serde_json::from_str(stdout.trim()).ok()?;
    map.get(daemon_name)?
        .get("runtimeArgs")?
        .as_array()?
        .iter()
        .filter_map(|a| a.as_str()?.strip_prefix(RESTORE_DIR_ARG))
        .map(std::path::PathBuf::from)
        .find(|p| p.is_absolute())
}

/// `docker inspect`: a container's full id and the daemon runtime it runs on, tab-separated.
pub fn id_and_runtime_args(name: &str) -> Vec<String> {
    vec![
        s("inspect"),
        s("--type"),
        s("container"),
        s("--format"),
        s("{{.Id}}\t{{.HostConfig.Runtime}}"),
        s(name),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_is_one_word_and_a_label() {
        assert_eq!(
            oci_runtime_run_args("gvisor", "runsc"),
            ["--runtime=runsc", "--label", "sandboxd.oci_runtime=gvisor"]
        );
        assert_eq!(daemon_runtimes_args(), ["info", "--format", "{{json .Runtimes}}"]);
    }

    #[test]
    fn daemon_runtimes_are_read_from_docker_info() {
        let out = r#"{"io.containerd.runc.v2":{"path":"runc"},"runc":{"path":"runc"},"runsc":{"path":"/usr/bin/runsc","runtimeArgs":["--platform=ptrace"]}}"#;
        assert_eq!(parse_daemon_runtimes(out).unwrap(), ["io.containerd.runc.v2", "runc", "runsc"]);
        assert!(parse_daemon_runtimes("map[runc:{}]").is_none());
    }

    #[test]
    fn the_restore_dir_is_the_wrappers_argument() {
        let out = r#"{"runc":{"path":"runc"},"runsc":{"path":"/x/sandboxd-runsc","runtimeArgs":["--sandboxd-restore-dir=/d/r","--network=none"]},"plain":{"path":"/usr/bin/runsc","runtimeArgs":["--network=none"]},"rel":{"path":"w","runtimeArgs":["--sandboxd-restore-dir=r"]}}"#;
        assert_eq!(parse_restore_dir(out, "runsc"), Some(std::path::PathBuf::from("/d/r")));
        assert_eq!(parse_restore_dir(out, "plain"), None);
        assert_eq!(parse_restore_dir(out, "runc"), None);
        assert_eq!(parse_restore_dir(out, "rel"), None);
        assert_eq!(parse_restore_dir(out, "missing"), None);
        assert_eq!(parse_restore_dir("not json", "runsc"), None);
    }
}
