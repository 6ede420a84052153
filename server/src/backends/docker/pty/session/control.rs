//! Reaching a session's processes: signals, the in-container resize, close and release. In a
//! container every step goes through the provider (`RunInContainer`) on the pid the launcher
//! recorded, once checked; local programs are reached through their process group.

use std::sync::atomic::Ordering;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};

use super::{closed_error, TerminalProcess};
use crate::backends::docker::pty::container::{
    check_recorded_pid, cleanup_command, pid_read_command, signal_command, CONTROL_TIMEOUT, PID_READ_TIMEOUT,
    ROOT_USER,
};
use crate::backends::docker::pty::PtyError;

/// Grace a local program gets between `SIGHUP` and `SIGKILL` on close.
const HUP_GRACE: Duration = Duration::from_secs(1);

/// How many times `close` reads the pid record before leaving the session's processes to the
/// container's removal (a read right after open can fail under load).
const PID_READ_ATTEMPTS_AT_CLOSE: u32 = 3;

impl TerminalProcess {
    /// The docker client resizes the container's terminal through the API on its own time,
    /// racing input typed right after. Setting the size on the session's terminal directly (as
    /// the session's user, on the verified pid) makes `resize` return once the size holds.
    /// Best effort: the client's own resize follows anyway.
    pub(super) async fn apply_size_in_container(&self, rows: u16, cols: u16) {
        let Some(container) = &self.container else { return };
        if self.closed() {
            return;
        }
        let pid = match self.recorded_pid().await {
            Ok(pid) => pid,
            Err(e) => {
                tracing::debug!(error = %e, "no verified pid: leaving the resize to the docker client");
                return;
            }
        };
        let command = crate::backends::docker::pty::container::resize_command(pid, rows, cols);
        let result = container.run(command, self.user.clone(), CONTROL_TIMEOUT).await;
        if result.return_code != 0 {
            tracing::debug!(stderr = %result.stderr_str(), "in-container resize failed");
        }
    }

    /// Deliver a signal by name (`SIGINT`, `INT`, ...; see `Signal`).
    pub async fn send_signal(&self, name: &str) -> Result<(), PtyError> {
        let signal = crate::core::spec::Signal::try_from(name)
            .map_err(|e| PtyError::Invalid { field: "signal".into(), message: e.to_string() })?;
        self.deliver(signal).await
    }

    /// Deliver `signal`: in PTY mode to the foreground process group of the session's terminal,
    /// in pipe mode to the group of the session's process. A session whose process already
    /// exited has nothing to signal.
    pub async fn deliver(&self, signal: crate::core::spec::Signal) -> Result<(), PtyError> {
        let sig_name = signal.as_str();
        if self.closed.load(Ordering::SeqCst) {
            return Err(closed_error());
        }
        if self.returncode().is_some() {
            return Ok(());
        }
        match &self.container {
            None => self.signal_local(signal),
            Some(container) => {
                let pid = self
                    .recorded_pid()
                    .await
                    .map_err(|e| PtyError::Failed(format!("cannot signal the session: {e}")))?;
                let res = container
                    .run(signal_command(pid, signal, self.mode), Some(ROOT_USER.into()), CONTROL_TIMEOUT)
                    .await;
                if res.error_type.is_some() || res.return_code != 0 {
                    let detail = res.stderr_str();
                    return Err(PtyError::Failed(format!(
                        "cannot deliver {sig_name}: {} (exit {})",
                        detail.trim(),
                        res.return_code
                    )));
                }
                Ok(())
            }
        }
    }

    fn signal_local(&self, signal: crate::core::spec::Signal) -> Result<(), PtyError> {
        let sig_name = signal.as_str();
        let sig = Signal::try_from(signal.number())
            .map_err(|e| PtyError::Failed(format!("cannot deliver {sig_name}: {e}")))?;
        let master = self.master.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(master) = master {
            // The terminal's foreground group belongs to this session's terminal, which keeps
            // its number reserved.
            if let Ok(pgrp) = nix::unistd::tcgetpgrp(master.get_ref()) {
                if pgrp.as_raw() > 0 {
                    return killpg(pgrp, sig)
                        .map_err(|e| PtyError::Failed(format!("cannot deliver {sig_name}: {e}")));
                }
            }
        }
        match self.child.signal_group(sig) {
            Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
            Err(e) => Err(PtyError::Failed(format!("cannot deliver {sig_name}: {e}"))),
        }
    }

    /// The pid the launcher recorded, read as the session's user and checked; read again until
    /// a read succeeds.
    async fn recorded_pid(&self) -> Result<u32, String> {
        // A verdict on the record (its pid, or why it is refused) is final and kept; a read that
        // did not run (timeout, daemon) is not, so a later signal or close asks again.
        self.recorded_pid
            .get_or_try_init(|| async {
                let container = self.container.as_ref().ok_or("the session has no container")?;
                let first = self.pid_files.first().ok_or("the session has no pid record")?;
                let fallback = self.pid_files.get(1).unwrap_or(first);
                let res = container
                    .run(pid_read_command(first, fallback, &self.id), self.user.clone(), PID_READ_TIMEOUT)
                    .await;
                if let Some(kind) = res.error_type {
                    return Err(format!(
                        "reading the pid record failed ({}): {}",
                        kind.as_str(),
                        res.stderr_str().trim()
                    ));
                }
                Ok(check_recorded_pid(&res.stdout_str(), self.mode, &self.id))
            })
            .await?
            .clone()
    }

    /// Idempotent: end the session's processes, stop the client, drop the pid records. In a
    /// container: `SIGHUP` to the recorded pid's group, up to a second, then `SIGKILL` to its
    /// whole session (best effort; a session that already exited only has its records removed).
    /// Local programs: the same on the local process group.
    pub async fn close(&self) -> Result<(), PtyError> {
        self.close_result.get_or_init(|| self.close_inner()).await.clone()
    }

    async fn close_inner(&self) -> Result<(), PtyError> {
        self.closed.store(true, Ordering::SeqCst);
        let running = self.returncode().is_none();
        match &self.container {
            Some(container) => {
                let mut pid = None;
                if running {
                    for attempt in 1..=PID_READ_ATTEMPTS_AT_CLOSE {
                        match self.recorded_pid().await {
                            Ok(found) => {
                                pid = Some(found);
                                break;
                            }
                            Err(e) if attempt == PID_READ_ATTEMPTS_AT_CLOSE => {
                                tracing::warn!(session = %self.id, error = %e, "session pid not trusted; left to the container's removal");
                            }
                            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                        }
                    }
                }
                if pid.is_some() || !self.pid_files.is_empty() {
                    let files: Vec<&str> = self.pid_files.iter().map(String::as_str).collect();
                    let res = container
                        .run(cleanup_command(pid, &files), Some(ROOT_USER.into()), CONTROL_TIMEOUT)
                        .await;
                    if res.error_type.is_some() || res.return_code != 0 {
                        tracing::debug!(session = %self.id, stderr = %res.stderr_str(), "session cleanup failed (best effort)");
                    }
                }
            }
            None => {
                if running {
                    let _ = self.child.signal_group(Signal::SIGHUP);
                    let _ = tokio::time::timeout(HUP_GRACE, self.outcome()).await;
                }
                let _ = self.child.signal_group(Signal::SIGKILL);
            }
        }
        self.release().await;
        Ok(())
    }

    /// Release the session when its container is going away: no in-container cleanup.
    pub async fn abandon(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let _ = self.close_result.set(Ok(()));
        self.release().await;
    }

    /// Stop the client and release the descriptors. A write waiting for room fails first and
    /// leaves before the descriptor is dropped, so nothing touches its number afterwards.
    async fn release(&self) {
        self.released.send_replace(true);
        let _ = self.child.signal(Signal::SIGKILL);
        self.input.lock().await.take();
        self.master.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}
