//! Reading the docker client's stderr, the only signal the CLI gives, in one place: a failed
//! docker command becomes a typed [`DockerFailure`] where the subprocess ends (`cli.rs`), and
//! callers match on its kind. A command's own stderr (exec) is never read as docker's: exec
//! failures are decided by docker's exit status and an inspect (`engine::classify_docker_exit`).

use super::cli::CliError;
use crate::error::ProviderError;

/// Lines the docker client prints when it could not run the command at all.
const RUNTIME_ERROR_MARKERS: [&str; 5] = [
    "no such container",
    "is not running",
    "is not paused",
    "cannot connect to the docker daemon",
    "error response from daemon",
];

const DAEMON_UNREACHABLE_MARKERS: [&str; 5] = [
    "cannot connect to the docker daemon",
    "is the docker daemon running",
    "connect: connection refused",
    // The daemon went away with the request in flight.
    "error during connect",
    "connect: no such file or directory",
];

/// The connection broke with the request in flight: whether it took effect is unknown.
const INTERRUPTED_MARKERS: [&str; 5] =
    ["connection reset", "unexpected eof", "broken pipe", "i/o timeout", "context deadline exceeded"];

/// What a failed docker command reported, as far as any caller acts on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DockerFailureKind {
    /// The daemon could not be reached.
    DaemonUnreachable,
    /// The connection broke mid-request; the request may or may not have taken effect.
    Interrupted,
    /// `docker run` under a name another container has.
    NameConflict,
    /// `docker rmi` of an image a container still uses.
    ImageInUse,
    /// No container of that name.
    MissingContainer,
    /// `docker rm` of a container another caller is removing right now (a client's `Close`
    /// beside the sweep, or two `Close`s).
    RemovalInProgress,
    /// No such image on the daemon, and (for `run`) none could be pulled.
    MissingImage,
    /// The container is frozen (`docker pause`).
    Paused,
    /// `docker pause` of a container already paused.
    AlreadyPaused,
    /// `docker unpause` of a container that is not paused.
    NotPaused,
    /// The container exists but is not running.
    NotRunning,
    /// `docker cp`: no such path in the container.
    MissingPath,
    /// `docker cp`: the target is a directory.
    PathIsDirectory,
    /// `docker cp`: a parent of the path is not a directory.
    ParentNotDirectory,
    /// `docker cp`: the path is on a read-only filesystem.
    ReadOnlyPath,
    Other,
}

/// A docker command that ran and failed (non-zero exit), classified once.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{command}: {stderr}")]
pub struct DockerFailure {
    pub kind: DockerFailureKind,
    pub code: i32,
    /// `docker <subcommand> <last argument>`, for messages.
    pub command: String,
    /// The client's stderr, trimmed.
    pub stderr: String,
    /// What it printed before failing: with several names (`inspect a b`), the ones it found.
    pub stdout: Vec<u8>,
    image_command: bool,
}

impl DockerFailure {
    /// Classify a docker command (`args` without the binary) that exited with `code`.
    pub fn new(args: &[String], code: i32, stderr: &str, stdout: Vec<u8>) -> Self {
        let image_command = matches!(args.first().map(String::as_str), Some("image" | "images" | "rmi"));
        let words = if image_command && args.len() > 1 && args[0] == "image" { 2 } else { 1 };
        let mut command = String::from("docker");
        for word in args.iter().take(words) {
            command.push(' ');
            command.push_str(word);
        }
        // The target, when the last argument names one (not a flag or a format).
        let names = |a: &&String| !a.starts_with('-') && !a.contains(['{', ' ', '\t']);
        if let Some(last) = args.last().filter(|a| args.len() > words && names(a)) {
            command.push(' ');
            command.push_str(last);
        }
        let stderr = stderr.trim().to_string();
        Self { kind: kind_of(image_command, &stderr), code, command, stderr, stdout, image_command }
    }

    /// Whether every line of stderr is a failure of `kind`: a command given several names
    /// fails for the missing ones only.
    pub fn only(&self, kind: DockerFailureKind) -> bool {
        self.stderr.lines().filter(|l| !l.trim().is_empty()).all(|l| kind_of(self.image_command, l) == kind)
    }

    /// Docker's own error line, without its usage hint.
    pub fn error_line(&self) -> String {
        error_line(&self.stderr)
    }
}

/// The first kind, in this order, whose words stderr carries.
fn kind_of(image_command: bool, stderr: &str) -> DockerFailureKind {
    use DockerFailureKind::*;
    let low = stderr.to_ascii_lowercase();
    let has = |m: &str| low.contains(m);
    if has("conflict") && has("already in use") {
        NameConflict
    } else if has("conflict") && (has("is using its referenced image") || has("being used")) {
        ImageInUse
    } else if DAEMON_UNREACHABLE_MARKERS.iter().any(|m| has(m)) {
        DaemonUnreachable
    } else if INTERRUPTED_MARKERS.iter().any(|m| has(m)) {
        Interrupted
    } else if has("no such container") || (has("no such object") && !image_command) {
        MissingContainer
    } else if has("removal of container") && has("already in progress") {
        RemovalInProgress
    } else if has("unable to find image")
        || has("no such image")
        || has("pull access denied")
        || has("no such object")
    {
        MissingImage
    } else if has("is paused, unpause the container") {
        Paused
    } else if has("is already paused") {
        AlreadyPaused
    } else if has("is not paused") {
        NotPaused
    } else if has("is not running") {
        NotRunning
    } else if has("could not find the file") || has("no such file or directory") {
        MissingPath
    } else if has("cannot overwrite directory") {
        PathIsDirectory
    } else if has("not a directory") {
        ParentNotDirectory
    } else if has("read-only file system") || has("marked read-only") {
        ReadOnlyPath
    } else {
        Other
    }
}

impl CliError {
    /// The kind of docker failure, when docker ran and failed.
    pub fn kind(&self) -> Option<DockerFailureKind> {
        match self {
            CliError::Failed(f) => Some(f.kind),
            _ => None,
        }
    }
}

/// The generic mapping; callers match the kinds they give a meaning of their own first.
impl From<DockerFailure> for ProviderError {
    fn from(f: DockerFailure) -> Self {
        match f.kind {
            DockerFailureKind::DaemonUnreachable => ProviderError::Unavailable(f.stderr),
            _ => ProviderError::Docker(f.to_string()),
        }
    }
}

impl From<CliError> for ProviderError {
    fn from(e: CliError) -> Self {
        match e {
            CliError::Timeout { .. } => ProviderError::Timeout(e.to_string()),
            CliError::Spawn { .. } => ProviderError::Unavailable(e.to_string()),
            CliError::Io { source, .. } => ProviderError::Io(source),
            CliError::Failed(f) => f.into(),
        }
    }
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

/// Docker's own error line out of a client's stderr: the last `Error…`/`docker: Error…` line,
/// else the last non-empty line that is not a usage hint (`Run 'docker … --help'`).
fn error_line(stderr: &str) -> String {
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
            kind(&["inspect", "x"], "Cannot connect to the Docker daemon at unix:///x"),
            DaemonUnreachable
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
