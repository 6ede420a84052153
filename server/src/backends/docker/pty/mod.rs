//! The docker implementation's terminals: one `docker exec -i[t]` client per session, run under
//! a host pseudo-terminal (PTY mode) or on pipes (pipe mode). See `spawner` for the host plumbing and
//! `container` for the in-container launcher, pid record and signal/cleanup commands.

pub mod container;
pub mod open;
pub mod session;
mod spawner;

pub use container::{fallback_pid_file_for, launcher_argv, pid_file_for, session_marker, SESSION_ENV};
pub use session::{spawn, SpawnOptions, TerminalProcess};

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::core::spec::ExecResult;
pub use crate::core::terminal::{PtyError, TerminalMode};

/// Runs one `-c` command line (the argument of the image's shell `-c`) in the session's
/// container, as `user`, under its own timeout: how the session reads its pid record and
/// delivers signals and cleanup. `user: None` means the exec's default user (no `--user`): the pid
/// record is read as the session's user, which is `None` when the session has no explicit user;
/// the signal and cleanup commands pass `Some("0")` (root by uid, valid without `/etc/passwd`).
pub trait RunInContainer: Send + Sync + 'static {
    fn run<'a>(
        &'a self,
        command: String,
        user: Option<String>,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = ExecResult> + Send + 'a>>;

    /// Whether the container still runs: tells a session cut off by its container's removal
    /// from a program that exited on its own. The default assumes it does.
    fn running(&self) -> Pin<Box<dyn Future<Output = bool> + Send + '_>> {
        Box::pin(async { true })
    }
}
