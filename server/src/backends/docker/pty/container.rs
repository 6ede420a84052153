//! What a session runs inside the container, as pure functions: the launcher `docker exec` runs,
//! the pid-record read, its check, and the signal and cleanup commands.
//!
//! Every command is one `-c` line for the image's shell (bash, dash or busybox sh), so it stays
//! POSIX: `kill` is spelled `kill -NAME -pgid`, the one form all three accept, and `/proc/PID/stat`
//! is parsed by dropping everything up to the last `") "` (the command name may hold spaces and
//! parentheses) and splitting the rest, where `$2` is the parent pid, `$4` the session id and `$6`
//! the terminal's foreground process group (fields 4, 6 and 8 of the file).
//!
//! The pid file belongs to the session's user, who can rewrite it or replace it, so its content
//! is only a hint: the pid it names is signalled (as root) only once `check_recorded_pid`
//! accepted it, i.e. the process carries this session's marker in its environment (set by
//! `docker exec --env`, read as the session's user), its parent is outside the container
//! (`PPid` 0, true only of a process the runtime injected) and, in PTY mode, it leads its session.
//!
//! One file per job: `launcher` is what `docker exec` starts (the pid record, the size, the
//! program); `control` reads and checks the record and builds the signal, resize and cleanup
//! commands. The names both use (marker, pid files, quoting) are here.

mod control;
mod launcher;

pub use control::{
    check_recorded_pid, cleanup_command, pid_read_command, resize_command, signal_command, CONTROL_TIMEOUT,
    EXEC_PARENT_PID, PID_READ_TIMEOUT, PID_READ_TRIES, PID_RECORD_MAX, RECORD_TAG, REFUSED_TAG, ROOT_USER,
};
pub use launcher::{launcher_argv, launcher_script};

/// Environment variable carrying a session's marker (`--env`, last of the exec's env flags).
pub const SESSION_ENV: &str = "SANDBOXD_PTY_SESSION";
/// Where the launcher records its pid.
pub const PID_FILE_PREFIX: &str = "/tmp/.sandboxd-pty-";
/// Where the launcher records its pid when `/tmp` refuses the write (read-only root filesystem).
pub const FALLBACK_PID_FILE_PREFIX: &str = "/dev/shm/.sandboxd-pty-";

/// The `KEY=value` a session's `docker exec` sets in its process's environment.
pub fn session_marker(session_id: &str) -> String {
    format!("{SESSION_ENV}={session_id}")
}

/// Where the launcher records the session's pid.
pub fn pid_file_for(session_id: &str) -> String {
    format!("{PID_FILE_PREFIX}{session_id}")
}

/// Where the launcher records the pid when `pid_file_for`'s `/tmp` refuses the write.
pub fn fallback_pid_file_for(session_id: &str) -> String {
    format!("{FALLBACK_PID_FILE_PREFIX}{session_id}")
}

/// `s` as one single-quoted shell word.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::spec::Signal;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    /// The shells on this host among dash, bash and busybox sh, as argv prefixes.
    pub(super) fn shells() -> Vec<Vec<&'static str>> {
        let mut out = Vec::new();
        for (path, argv) in [
            ("/bin/dash", vec!["/bin/dash"]),
            ("/bin/bash", vec!["/bin/bash"]),
            ("/bin/busybox", vec!["/bin/busybox", "sh"]),
        ] {
            if std::path::Path::new(path).exists() {
                out.push(argv);
            }
        }
        assert!(!out.is_empty(), "no shell to test with");
        out
    }

    pub(super) fn run_sh(shell: &[&str], script: &str, args: &[&str]) -> std::process::Output {
        let mut cmd = Command::new(shell[0]);
        cmd.args(&shell[1..]).arg("-c").arg(script).args(args).stdin(Stdio::null());
        crate::backends::docker::cli::reset_signal_dispositions(&mut cmd);
        cmd.output().expect("run shell")
    }

    pub(super) fn tmpdir() -> tempfile::TempDir {
        tempfile::tempdir().expect("tempdir")
    }

    /// A fresh directory with the paths of a pid record and its fallback in it (neither made).
    pub(super) fn record_paths() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
        let dir = tmpdir();
        let (f, g) = (dir.path().join("pid"), dir.path().join("fallback"));
        (dir, f, g)
    }

    /// A `sleep` that leads its own session, with `env` set: a stand-in for the exec'd process.
    pub(super) fn session_leader(env: Option<(&str, &str)>) -> std::process::Child {
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        if let Some((k, v)) = env {
            cmd.env(k, v);
        }
        // A test run started with `&` inherits SIGINT ignored: the stand-in must not.
        crate::backends::docker::cli::reset_signal_dispositions(&mut cmd);
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        cmd.spawn().expect("spawn sleep")
    }

    pub(super) fn wait_gone(child: &mut std::process::Child, within: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < within {
            if let Ok(Some(_)) = child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    #[test]
    fn names() {
        assert_eq!(session_marker("abc"), "SANDBOXD_PTY_SESSION=abc");
        assert_eq!(pid_file_for("abc"), "/tmp/.sandboxd-pty-abc");
        assert_eq!(fallback_pid_file_for("abc"), "/dev/shm/.sandboxd-pty-abc");
        assert_eq!(shell_quote("a'b"), r"'a'\''b'");
        assert_eq!(Signal::try_from("int"), Ok(Signal::Int));
        assert_eq!(Signal::try_from("SIGKILL"), Ok(Signal::Kill));
        assert!(Signal::try_from("SIGUSR1").is_err());
        assert!(Signal::try_from("9").is_err());
    }
}
