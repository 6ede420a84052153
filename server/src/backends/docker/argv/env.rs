//! The env-aliasing security rule: a sandbox's env travels in the docker client's own
//! environment, so a key that would configure the client goes another way (an env file for
//! `docker run`, a renamed variable for `docker exec`).

use std::collections::BTreeMap;

/// Where `docker run` reads the env file of the variables that would configure the docker client
/// itself: its stdin, which a detached run does not otherwise use.
pub const ENV_FILE_STDIN: &str = "/dev/stdin";

/// Prefix of the name under which a docker-client variable travels through `docker exec`; the
/// shell in the container gives it back its own name.
pub const ENV_ALIAS_PREFIX: &str = "SANDBOXD_ENV_";

/// Whether the docker client (or the dynamic loader, the Go runtime and the config lookups under
/// it) reads `key` from its own environment. A sandbox's env travels in that environment
/// (`--env KEY`), so such a key would redirect or alter the client instead of reaching the
/// container: the daemon it talks to (`DOCKER_HOST`, `DOCKER_CONTEXT`, `DOCKER_TLS*`, proxies),
/// its config and credential helpers (`DOCKER_CONFIG`, `HOME`, `PATH`), code it loads
/// (`LD_*`), its runtime (`GO*` knobs, `TMPDIR`, TLS roots) or its telemetry (`OTEL_*`).
/// These go another way: an env file on stdin for `docker run`, a renamed variable the
/// container's shell renames back for `docker exec`.
pub fn configures_docker_client(key: &str) -> bool {
    const EXACT: &[&str] = &[
        "PATH",
        "HOME",
        "TMPDIR",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "GODEBUG",
        "GOGC",
        "GOMAXPROCS",
        "GOMEMLIMIT",
        "GOTRACEBACK",
        "GOFIPS",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "ALL_PROXY",
    ];
    const PREFIXES: &[&str] = &["DOCKER_", "LD_", "OTEL_", "BUILDKIT_", ENV_ALIAS_PREFIX];
    let upper = key.to_ascii_uppercase();
    let proxy = upper.ends_with("_PROXY") && EXACT.contains(&upper.as_str());
    EXACT.contains(&key) || proxy || PREFIXES.iter().any(|p| key.starts_with(p))
}

/// The name `--env` carries for `key` on a `docker exec`.
pub fn exec_env_name(key: &str) -> String {
    if configures_docker_client(key) {
        format!("{ENV_ALIAS_PREFIX}{key}")
    } else {
        key.to_string()
    }
}

/// Why `env` cannot travel to `docker run`/`docker exec` this way, if it cannot: a variable that
/// configures the docker client must be a shell name (the container's shell renames it back),
/// and for `docker run` a value the env file can hold (one line, not ending in CR).
pub fn check_docker_env(env: &BTreeMap<String, String>, for_run: bool) -> Result<(), String> {
    for (k, v) in env.iter().filter(|(k, _)| configures_docker_client(k)) {
        let shell_name = k.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !shell_name {
            return Err(format!(
                "{k:?} would configure the host's docker client, so it is passed another way, which needs a name of letters, digits and '_'"
            ));
        }
        if k.starts_with(ENV_ALIAS_PREFIX) {
            return Err(format!("names starting with {ENV_ALIAS_PREFIX} are reserved (got {k:?})"));
        }
        if for_run && (v.contains('\n') || v.ends_with('\r')) {
            return Err(format!(
                "the value of {k} (a variable the docker client reads, passed through an env file) must be one line not ending in CR"
            ));
        }
    }
    Ok(())
}

/// The values of a `docker run`'s env: the docker client's environment additions, and the env
/// file (`--env-file /dev/stdin`) of the keys that would configure the client itself.
pub fn run_env(env: &BTreeMap<String, String>) -> (Vec<(String, String)>, Option<Vec<u8>>) {
    let (client, plain): (Vec<_>, Vec<_>) = env.iter().partition(|(k, _)| configures_docker_client(k));
    let plain = plain.into_iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let file =
        (!client.is_empty()).then(|| client.iter().map(|(k, v)| format!("{k}={v}\n")).collect::<String>());
    (plain, file.map(String::into_bytes))
}

/// The values of a `docker exec`'s env, for the client's environment (under the names
/// `exec_env_name` gives), and the shell prefix that renames the aliased ones back inside the
/// container (empty when there are none).
pub fn exec_env(env: &BTreeMap<String, String>) -> (Vec<(String, String)>, String) {
    let values = env.iter().map(|(k, v)| (exec_env_name(k), v.clone())).collect();
    let prefix = env
        .keys()
        .filter(|k| configures_docker_client(k))
        .map(|k| format!("{k}=\"${ENV_ALIAS_PREFIX}{k}\"; export {k}; unset {ENV_ALIAS_PREFIX}{k}; "))
        .collect();
    (values, prefix)
}
