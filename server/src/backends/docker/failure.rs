//! How a docker command fails, typed once: [`CliError`] (the client could not run, timed out,
//! or docker ran and failed) and [`DockerFailure`], docker's stderr classified into a
//! [`DockerFailureKind`] where the subprocess ends (`cli.rs`). Callers match on the kind.
//! Its own file so `cli.rs` (which makes these) and `classify.rs` (which reads an exec's
//! output) need not import each other.

use std::time::Duration;

use crate::error::ProviderError;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The docker binary could not be started.
    #[error("cannot start {command}: {source}")]
    Spawn { command: String, source: std::io::Error },
    /// The command ran past its timeout; its process group was killed.
    #[error("docker command timed out after {after:?}: {command}")]
    Timeout { after: Duration, command: String },
    #[error("i/o with {command}: {source}")]
    Io { command: String, source: std::io::Error },
    /// Docker ran and failed (non-zero exit): what it said, classified.
    #[error(transparent)]
    Failed(#[from] DockerFailure),
}

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
    /// The network a container is (to be) on is gone, or two networks have its name: the
    /// service's own network, removed or doubled under it (never the caller's doing).
    NetworkGone,
    /// `docker network rm` of a network Docker counts endpoints on.
    NetworkInUse,
    /// The host (or a sandbox's bounded disk) has no space left.
    NoSpace,
    /// `docker network create`: the daemon's address pools have no subnet left.
    AddressPoolsExhausted,
    /// `docker network create --subnet`: another network has (part of) that subnet.
    SubnetTaken,
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
    // The daemon answered: a connection it failed to make itself (a registry's, on a pull) says
    // nothing of the connection to it.
    let daemon_answered = has("error response from daemon");
    if has("conflict") && has("already in use") {
        NameConflict
    } else if has("conflict") && (has("is using its referenced image") || has("being used")) {
        ImageInUse
    } else if !daemon_answered && DAEMON_UNREACHABLE_MARKERS.iter().any(|m| has(m)) {
        DaemonUnreachable
    } else if !daemon_answered && INTERRUPTED_MARKERS.iter().any(|m| has(m)) {
        Interrupted
    } else if has("network") && (has(" not found") || has("is ambiguous")) {
        NetworkGone
    } else if has("has active endpoints") {
        NetworkInUse
    } else if has("no space left on device") {
        NoSpace
    } else if has("could not find an available, non-overlapping") {
        AddressPoolsExhausted
    } else if has("overlaps with other one") {
        SubnetTaken
    } else if has("no such container") || (has("no such object") && !image_command) {
        MissingContainer
    } else if (has("removal of container") && has("already in progress"))
        // The daemon's kill is still under way (seen closing a paused gVisor sandbox: "cannot
        // remove - container … PID … is zombie and can not be killed"): a later `rm` succeeds.
        || (has("cannot remove") && has("is zombie"))
    {
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
            // The service's own network went away under the call: retrying makes it again.
            DockerFailureKind::NetworkGone => {
                ProviderError::Unavailable(format!("{}: {}", f.command, f.error_line()))
            }
            DockerFailureKind::NoSpace | DockerFailureKind::AddressPoolsExhausted => {
                ProviderError::ResourceExhausted(format!("{}: {}", f.command, f.error_line()))
            }
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

/// Docker's own error line out of a client's stderr: the daemon's reasons (`Error response from
/// daemon: …`; `docker start` follows them with a bare "failed to start containers"), else the
/// last `Error…`/`docker: Error…` line, else the last non-empty line that is not a usage hint
/// (`Run 'docker … --help'`).
fn error_line(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .filter(|l| !(l.contains("--help") && (l.starts_with("Run '") || l.starts_with("See '"))))
        .collect();
    let reasons: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.to_ascii_lowercase().contains("error response from daemon"))
        .collect();
    if !reasons.is_empty() {
        return reasons.join("; ");
    }
    let is_error = |l: &&&str| {
        let low = l.to_ascii_lowercase();
        low.starts_with("error") || low.starts_with("docker: error")
    };
    lines.iter().rev().find(is_error).or(lines.last()).map(|l| l.to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(args: &[&str], stderr: &str) -> DockerFailure {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        DockerFailure::new(&args, 1, stderr, Vec::new())
    }

    // Each stderr below is what Engine 20.10 and docker CLI 28 printed on this project's machine.

    #[test]
    fn a_vanished_network_keeps_the_daemons_line_and_is_the_services_fault() {
        let start = failed(
            &["start", "sandboxd-creating-ab"],
            "Error response from daemon: network sandboxd-net-default not found\nError: failed to start containers: sandboxd-creating-ab",
        );
        assert_eq!(start.kind, DockerFailureKind::NetworkGone);
        assert_eq!(start.error_line(), "Error response from daemon: network sandboxd-net-default not found");
        let run = failed(
            &["run", "-d", "img"],
            "docker: Error response from daemon: network walls-nonexistent not found\n\nRun 'docker run --help' for more information",
        );
        assert_eq!(run.kind, DockerFailureKind::NetworkGone);
        assert!(run.error_line().ends_with("network walls-nonexistent not found"), "{}", run.error_line());
        let doubled = failed(
            &["run", "-d", "img"],
            "docker: Error response from daemon: network walls-dup is ambiguous (2 matches found on name)\n\nRun 'docker run --help' for more information",
        );
        assert_eq!(doubled.kind, DockerFailureKind::NetworkGone);
        let err = ProviderError::from(start);
        assert!(
            matches!(&err, ProviderError::Unavailable(m) if m.contains("network sandboxd-net-default not found")),
            "{err:?}"
        );
    }

    #[test]
    fn a_full_disk_and_exhausted_address_pools_are_capacity() {
        let full = failed(
            &["run", "-d", "img"],
            "docker: Error response from daemon: mkdir /var/lib/docker/overlay2/x-init: no space left on device.\nSee 'docker run --help'.",
        );
        assert_eq!(full.kind, DockerFailureKind::NoSpace);
        assert!(
            matches!(ProviderError::from(full), ProviderError::ResourceExhausted(m) if m.contains("no space left on device"))
        );
        let pools = failed(
            &["network", "create", "n"],
            "Error response from daemon: could not find an available, non-overlapping IPv4 address pool among the defaults to assign to the network",
        );
        assert_eq!(pools.kind, DockerFailureKind::AddressPoolsExhausted);
        let taken = failed(
            &["network", "create", "--subnet", "10.213.0.0/25", "n"],
            "Error response from daemon: Pool overlaps with other one on this address space",
        );
        assert_eq!(taken.kind, DockerFailureKind::SubnetTaken);
        let in_use = failed(
            &["network", "rm", "n"],
            "Error response from daemon: error while removing network: network n id 1352527613b0 has active endpoints",
        );
        assert_eq!(in_use.kind, DockerFailureKind::NetworkInUse);
    }

    #[test]
    fn the_reason_line_is_the_daemons_not_the_clients_summary() {
        assert_eq!(
            error_line("Error response from daemon: a\nError response from daemon: b\nError: failed to start containers: x"),
            "Error response from daemon: a; Error response from daemon: b"
        );
        assert_eq!(error_line("Error: No such object: x"), "Error: No such object: x");
        assert_eq!(error_line("something\nRun 'docker run --help' for more information"), "something");
    }
}
