//! Telling a docker runtime failure (daemon down, container gone or stopped) from a command's
//! own failure, by the docker client's stderr: the only signal the CLI gives.

/// Lines the docker client prints when it could not run the command at all.
pub const RUNTIME_ERROR_MARKERS: [&str; 5] = [
    "no such container",
    "is not running",
    "is not paused",
    "cannot connect to the docker daemon",
    "error response from daemon",
];

const MISSING_CONTAINER_MARKERS: [&str; 2] = ["no such container", "no such object"];
const DAEMON_UNREACHABLE_MARKERS: [&str; 5] = [
    "cannot connect to the docker daemon",
    "is the docker daemon running",
    "connect: connection refused",
    // The daemon went away with the request in flight.
    "error during connect",
    "connect: no such file or directory",
];

/// The client failed before or instead of running the command.
pub fn is_runtime_failure(stderr: &str) -> bool {
    contains_any(stderr, &RUNTIME_ERROR_MARKERS)
}

/// Whether a `docker exec` that ended with `code` and `stderr` may have failed in docker itself:
/// one of the codes the client uses for its own failures (1, 125, 126, 127) and docker's error
/// line last on stderr. Only a hint: the caller confirms with `inspect`, since a command can
/// print anything and exit with any code.
///
/// A command killed by a signal (code > 128) is a suspect too: the container may have stopped
/// (or its daemon gone) under it.
pub fn looks_like_docker_failure(code: i32, stderr: &str) -> bool {
    let last = stderr.lines().map(str::trim).rfind(|l| !l.is_empty()).unwrap_or_default();
    (matches!(code, 1 | 125 | 126 | 127) && is_runtime_failure(last)) || code > 128
}

/// The directory `docker exec -w` named does not exist: the OCI runtime's `chdir to cwd
/// ("/x") ... no such file or directory` (exit 126). Returns that directory.
pub fn missing_cwd(code: i32, stderr: &str) -> Option<String> {
    if code != 126 || !stderr.contains("no such file or directory") {
        return None;
    }
    let rest = &stderr[stderr.find("chdir to cwd (\"")? + "chdir to cwd (\"".len()..];
    Some(rest[..rest.find("\")")?].to_string())
}

/// The named container does not exist.
pub fn is_missing_container(stderr: &str) -> bool {
    contains_any(stderr, &MISSING_CONTAINER_MARKERS)
}

/// The daemon itself could not be reached.
pub fn is_daemon_unreachable(stderr: &str) -> bool {
    contains_any(stderr, &DAEMON_UNREACHABLE_MARKERS)
}

/// A same-name conflict from `docker run`.
pub fn is_name_conflict(stderr: &str) -> bool {
    let low = stderr.to_ascii_lowercase();
    low.contains("conflict") && low.contains("already in use")
}

/// The daemon refused an exec because the container is frozen (`docker pause`).
pub fn is_paused_container(stderr: &str) -> bool {
    stderr.to_ascii_lowercase().contains("is paused, unpause the container")
}

/// `docker pause` of a container that is paused already.
pub fn is_already_paused(stderr: &str) -> bool {
    stderr.to_ascii_lowercase().contains("is already paused")
}

/// `docker unpause` of a container that is not paused.
pub fn is_not_paused(stderr: &str) -> bool {
    stderr.to_ascii_lowercase().contains("is not paused")
}

/// `docker pause`/`commit` of a container that is not running.
pub fn is_not_running(stderr: &str) -> bool {
    stderr.to_ascii_lowercase().contains("is not running")
}

/// `docker rmi` refused because a container (running or not) still uses the image.
pub fn is_image_in_use(stderr: &str) -> bool {
    let low = stderr.to_ascii_lowercase();
    low.contains("conflict") && (low.contains("is using its referenced image") || low.contains("being used"))
}

/// `docker image inspect`/`rmi` of an image the daemon does not have.
pub fn is_missing_image_ref(stderr: &str) -> bool {
    let low = stderr.to_ascii_lowercase();
    low.contains("no such image") || low.contains("no such object")
}

/// `docker run` failed because the image is not on the daemon and could not be pulled.
pub fn is_missing_image(stderr: &str) -> bool {
    let low = stderr.to_ascii_lowercase();
    low.contains("unable to find image")
        || low.contains("no such image")
        || low.contains("pull access denied")
}

/// Docker's own error line out of a client's stderr: the last `Error…`/`docker: Error…` line,
/// else the last non-empty line that is not a usage hint (`Run 'docker … --help'`).
pub fn error_line(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .filter(|l| !(l.contains("--help") && (l.starts_with("Run '") || l.starts_with("See '"))))
        .collect();
    let is_error = |l: &&&str| {
        let low = l.to_ascii_lowercase();
        low.starts_with("error") || low.starts_with("docker: error")
    };
    lines.iter().rev().find(is_error).or(lines.last()).map(|l| l.to_string()).unwrap_or_default()
}

fn contains_any(text: &str, markers: &[&str]) -> bool {
    let low = text.to_ascii_lowercase();
    markers.iter().any(|m| low.contains(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_cwd_is_named() {
        let oci = "OCI runtime exec failed: exec failed: unable to start container process: chdir to cwd (\"/nope\") set in config.json failed: no such file or directory: unknown";
        assert_eq!(missing_cwd(126, oci).as_deref(), Some("/nope"));
        assert_eq!(missing_cwd(1, oci), None, "only the runtime's own exit code");
    }

    #[test]
    fn classifies_client_messages() {
        assert!(is_runtime_failure("Error response from daemon: Container abc is not running"));
        assert!(is_runtime_failure("Error: No such container: sandboxd-1"));
        assert!(is_runtime_failure(
            "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"
        ));
        assert!(!is_runtime_failure("ls: /nope: No such file or directory"));
        assert!(is_missing_container("Error: No such object: sandboxd-x"));
        assert!(is_daemon_unreachable("Cannot connect to the Docker daemon at unix:///x"));
        assert!(is_daemon_unreachable(
            "error during connect: Post \"http://%2Fvar%2Frun%2Fdocker.sock/v1.41/containers/create\": EOF"
        ));
        assert!(is_name_conflict(
            "docker: Error response from daemon: Conflict. The container name \"/x\" is already in use by container"
        ));
        assert!(is_missing_image("Unable to find image 'nope:latest' locally"));
        assert!(looks_like_docker_failure(1, "Error response from daemon: Container x is not running\n"));
        assert!(
            !looks_like_docker_failure(3, "Error response from daemon: fake\n"),
            "exit 3 is the command's"
        );
        assert!(!looks_like_docker_failure(1, "Error response from daemon: x\nthe command's last words\n"));
        assert!(looks_like_docker_failure(137, ""), "killed under a stopping container: ask inspect");
        assert_eq!(error_line("docker: Error response from daemon: No such image: x\n\nRun 'docker run --help' for more information\n"), "docker: Error response from daemon: No such image: x");
        assert!(is_paused_container(
            "Error response from daemon: Container sandboxd-x is paused, unpause the container before exec"
        ));
        assert!(!is_paused_container("the job is paused"));
        assert!(is_already_paused("Error response from daemon: Container 12ab is already paused"));
        assert!(is_not_paused("Error response from daemon: Container 12ab is not paused"));
        assert!(is_image_in_use(
            "Error response from daemon: conflict: unable to remove repository reference \"sandboxd-snapshot:ab\" (must force) - container bd7dab99c29e is using its referenced image b059912c92d8"
        ));
        assert!(is_missing_image_ref("Error: No such image: sandboxd-snapshot:ab"));
    }
}
