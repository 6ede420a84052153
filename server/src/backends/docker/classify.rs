//! Reading an exec's or a terminal client's stderr for docker's own failure lines: hints only.
//! A command's own stderr is never read as docker's: exec failures are decided by docker's exit
//! status and an inspect (`classify_docker_exit`). A failed docker command of our own is typed
//! in `failure.rs`.

/// Lines the docker client prints when it could not run the command at all.
const RUNTIME_ERROR_MARKERS: [&str; 5] = [
    "no such container",
    "is not running",
    "is not paused",
    "cannot connect to the docker daemon",
    "error response from daemon",
];

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

/// The client failed before or instead of running the command (a terminal session's client:
/// its own stderr, never the program's).
pub fn is_runtime_failure(stderr: &str) -> bool {
    contains_any(stderr, &RUNTIME_ERROR_MARKERS)
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

fn contains_any(text: &str, markers: &[&str]) -> bool {
    let low = text.to_ascii_lowercase();
    markers.iter().any(|m| low.contains(m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::docker::failure::{DockerFailure, DockerFailureKind};

    #[test]
    fn a_missing_cwd_is_named() {
        let oci = "OCI runtime exec failed: exec failed: unable to start container process: chdir to cwd (\"/nope\") set in config.json failed: no such file or directory: unknown";
        assert_eq!(missing_cwd(126, oci).as_deref(), Some("/nope"));
        assert_eq!(missing_cwd(1, oci), None, "only the runtime's own exit code");
    }

    fn kind(args: &[&str], stderr: &str) -> DockerFailureKind {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        DockerFailure::new(&args, 1, stderr, Vec::new()).kind
    }

    #[test]
    fn classifies_client_messages() {
        use DockerFailureKind::*;
        assert!(is_runtime_failure("Error response from daemon: Container abc is not running"));
        assert!(is_runtime_failure("Error: No such container: sandboxd-1"));
        assert!(is_runtime_failure(
            "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"
        ));
        assert!(!is_runtime_failure("ls: /nope: No such file or directory"));
        assert_eq!(kind(&["inspect", "x"], "Error: No such object: sandboxd-x"), MissingContainer);
        assert_eq!(
            kind(
                &["rm", "-f", "x"],
                "Error response from daemon: removal of container sandboxd-x is already in progress"
            ),
            RemovalInProgress
        );
        assert_eq!(
            kind(
                &["rm", "-f", "x"],
                "Error response from daemon: Could not kill running container c906, cannot remove - container \
                 c906 PID 18429 is zombie and can not be killed. Use the --force option"
            ),
            RemovalInProgress,
            "a kill still under way is waited for"
        );
        assert_eq!(
            kind(&["inspect", "x"], "Cannot connect to the Docker daemon at unix:///x"),
            DaemonUnreachable
        );
        // The daemon answered: the connection refused was its own, to a registry.
        assert_eq!(
            kind(
                &["run", "127.0.0.1:9/img:1"],
                "Unable to find image '127.0.0.1:9/img:1' locally\ndocker: Error response from daemon: Get \
                 \"http://127.0.0.1:9/v2/\": dial tcp 127.0.0.1:9: connect: connection refused."
            ),
            MissingImage
        );
        assert_eq!(
            kind(
                &["pull", "r.example/img:1"],
                "Error response from daemon: Get \"https://r.example/v2/\": dial tcp: i/o timeout"
            ),
            Other,
            "a registry's timeout is not a broken connection to the daemon"
        );
        assert_eq!(
            kind(
                &["run"],
                "error during connect: Post \"http://%2Fvar%2Frun%2Fdocker.sock/v1.41/containers/create\": EOF"
            ),
            DaemonUnreachable
        );
        assert_eq!(
            kind(
                &["run"],
                "docker: Error response from daemon: Conflict. The container name \"/x\" is already in use by container"
            ),
            NameConflict
        );
        assert_eq!(kind(&["run"], "Unable to find image 'nope:latest' locally"), MissingImage);
        assert!(looks_like_docker_failure(1, "Error response from daemon: Container x is not running\n"));
        assert!(
            !looks_like_docker_failure(3, "Error response from daemon: fake\n"),
            "exit 3 is the command's"
        );
        assert!(!looks_like_docker_failure(1, "Error response from daemon: x\nthe command's last words\n"));
        assert!(looks_like_docker_failure(137, ""), "killed under a stopping container: ask inspect");
        let usage = "docker: Error response from daemon: No such image: x\n\nRun 'docker run --help' for more information\n";
        assert_eq!(
            DockerFailure::new(&["run".into()], 125, usage, Vec::new()).error_line(),
            "docker: Error response from daemon: No such image: x"
        );
        assert_eq!(
            kind(&["exec"], "Error response from daemon: Container sandboxd-x is paused, unpause the container before exec"),
            Paused
        );
        assert_ne!(kind(&["exec"], "the job is paused"), Paused);
        assert_eq!(
            kind(&["pause", "x"], "Error response from daemon: Container 12ab is already paused"),
            AlreadyPaused
        );
        assert_eq!(
            kind(&["unpause", "x"], "Error response from daemon: Container 12ab is not paused"),
            NotPaused
        );
        assert_eq!(
            kind(
                &["rmi", "x"],
                "Error response from daemon: conflict: unable to remove repository reference \"sandboxd-snapshot:ab\" (must force) - container bd7dab99c29e is using its referenced image b059912c92d8"
            ),
            ImageInUse
        );
        assert_eq!(
            kind(&["image", "inspect", "x"], "Error: No such image: sandboxd-snapshot:ab"),
            MissingImage
        );
        assert_eq!(
            kind(&["image", "inspect", "x"], "Error: No such object: sandboxd-snapshot:ab"),
            MissingImage
        );
    }

    #[test]
    fn a_failure_names_its_command_and_says_when_only_some_names_were_missing() {
        let args: Vec<String> = ["inspect", "--type", "container", "a", "b"].map(String::from).to_vec();
        let f =
            DockerFailure::new(&args, 1, "Error: No such object: a\nError: No such object: b\n", Vec::new());
        assert_eq!(f.command, "docker inspect b");
        assert!(f.only(DockerFailureKind::MissingContainer));
        let f = DockerFailure::new(&args, 1, "Error: No such object: a\nsomething else\n", Vec::new());
        assert!(!f.only(DockerFailureKind::MissingContainer));
    }
}
