//! Host plumbing of a session: the client process under a fresh pseudo-terminal (PTY mode) or on
//! plain pipes (pipe mode), non-blocking reads and writes of its descriptors, and the client's
//! exit.
//!
//! PTY mode: the master is opened close-on-exec and non-blocking, the terminal is put in raw
//! mode and sized before the client starts (so what is written early waits unchanged), and the
//! client becomes session leader with the slave as its controlling terminal (`setsid` and
//! `TIOCSCTTY`), which is what makes a `TIOCSWINSZ` reach it as `SIGWINCH`. The client's own
//! stderr is a separate pipe. Every copy of the slave is dropped in this process right after the
//! spawn, so the master reports EOF (`EIO`) once the client and its children closed theirs.
//!
//! The client is reaped here, under the same lock that guards every signal sent to its pid or
//! group, so a signal never reaches a process that merely got the same number later.

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::termios::{cfmakeraw, tcgetattr, tcsetattr, SetArg};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::watch;

use super::PtyError;

/// Bytes read from a descriptor at a time.
pub(crate) const READ_CHUNK: usize = 64 * 1024;

/// The descriptors of a freshly spawned client, all non-blocking and close-on-exec.
pub(crate) struct Spawned {
    pub child: ChildProc,
    /// PTY mode: the master, both the client's input and its output.
    pub master: Option<OwnedFd>,
    /// Pipe mode: the client's stdin and stdout.
    pub stdin: Option<OwnedFd>,
    pub stdout: Option<OwnedFd>,
    /// The client's own stderr (in pipe mode also the program's).
    pub stderr: OwnedFd,
}

/// Start `argv` under a fresh pty sized `rows` x `cols` (in raw mode), or on pipes.
pub(crate) fn spawn_process(
    argv: &[String],
    env: &[(String, String)],
    use_pty: bool,
    rows: u16,
    cols: u16,
) -> Result<Spawned, PtyError> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| PtyError::Invalid { field: "argv".into(), message: "is empty".into() })?;
    let mut cmd = Command::new(program);
    cmd.args(args).envs(env.iter().map(|(k, v)| (k, v)));
    // A server started in the background inherits SIGINT ignored: the client must not.
    crate::backends::docker::cli::reset_signal_dispositions(&mut cmd);
    let mut master = None;
    if use_pty {
        let (m, slave) = open_pty(rows, cols)?;
        let slave_in = slave.try_clone().map_err(|e| spawn_error("cannot duplicate the pty slave", e))?;
        cmd.stdin(Stdio::from(slave_in)).stdout(Stdio::from(slave));
        master = Some(m);
    } else {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
    }
    cmd.stderr(Stdio::piped());
    // SAFETY: the hook only calls async-signal-safe functions (setsid, ioctl) and allocates
    // nothing but an `io::Error` from errno on failure.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if use_pty && libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let spawned = cmd.spawn();
    // The command holds the parent's copies of the slave: without dropping them the master
    // would never report EOF.
    drop(cmd);
    let mut child = spawned.map_err(|e| spawn_error(&format!("cannot start {program:?}"), e))?;
    let pid = i32::try_from(child.id()).map_err(|_| PtyError::Spawn("child pid out of range".into()))?;
    let child_proc = ChildProc::new(pid);
    let take = |fd: Option<OwnedFd>| -> Result<Option<OwnedFd>, PtyError> {
        match fd {
            Some(fd) => {
                set_nonblocking(&fd)?;
                Ok(Some(fd))
            }
            None => Ok(None),
        }
    };
    let stdin = take(child.stdin.take().map(OwnedFd::from))?;
    let stdout = take(child.stdout.take().map(OwnedFd::from))?;
    let stderr = take(child.stderr.take().map(OwnedFd::from))?
        .ok_or_else(|| PtyError::Spawn("the client has no stderr pipe".into()))?;
    Ok(Spawned { child: child_proc, master, stdin, stdout, stderr })
}

fn spawn_error(what: &str, e: impl std::fmt::Display) -> PtyError {
    PtyError::Spawn(format!("{what}: {e}"))
}

/// A fresh pty pair: the master non-blocking, both ends close-on-exec, the terminal raw and
/// sized `rows` x `cols`.
fn open_pty(rows: u16, cols: u16) -> Result<(OwnedFd, OwnedFd), PtyError> {
    let flags = OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
    let master = nix::pty::posix_openpt(flags).map_err(|e| spawn_error("posix_openpt", e))?;
    nix::pty::grantpt(&master).map_err(|e| spawn_error("grantpt", e))?;
    nix::pty::unlockpt(&master).map_err(|e| spawn_error("unlockpt", e))?;
    let name = nix::pty::ptsname_r(&master).map_err(|e| spawn_error("ptsname", e))?;
    let slave = nix::fcntl::open(
        name.as_str(),
        OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| spawn_error(&format!("cannot open {name}"), e))?;
    let master = OwnedFd::from(master);
    let mut termios = tcgetattr(&slave).map_err(|e| spawn_error("tcgetattr", e))?;
    cfmakeraw(&mut termios);
    tcsetattr(&slave, SetArg::TCSANOW, &termios).map_err(|e| spawn_error("tcsetattr", e))?;
    set_winsize(&master, rows, cols).map_err(|e| spawn_error("TIOCSWINSZ", e))?;
    Ok((master, slave))
}

/// Set the terminal size of the pty behind `fd` (the master).
pub(crate) fn set_winsize(fd: &impl AsFd, rows: u16, cols: u16) -> io::Result<()> {
    let ws = libc::winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCSWINSZ reads one `winsize` from the pointer, which outlives the call.
    let rc = unsafe { libc::ioctl(fd.as_fd().as_raw_fd(), libc::TIOCSWINSZ as _, &ws) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn set_nonblocking(fd: &OwnedFd) -> Result<(), PtyError> {
    let flags = fcntl(fd, FcntlArg::F_GETFL).map_err(|e| spawn_error("fcntl", e))?;
    let flags = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
    fcntl(fd, FcntlArg::F_SETFL(flags)).map_err(|e| spawn_error("fcntl", e))?;
    Ok(())
}

/// One chunk (at most `READ_CHUNK` bytes) from a non-blocking descriptor; empty at EOF. A pty
/// master reports `EIO` once every slave closed: that is EOF too.
///
/// A pty hands out at most one line-discipline buffer (4 KiB) per read, so the chunk is filled
/// with every read that does not block: one wakeup and one message per 64 KiB, not per 4 KiB.
/// `buf` is the caller's scratch space (at most `READ_CHUNK` of it is used): only what was
/// read is copied out.
pub(crate) async fn read_chunk(fd: &AsyncFd<OwnedFd>, buf: &mut [u8]) -> io::Result<Vec<u8>> {
    let mut filled = 0;
    loop {
        let mut guard = fd.readable().await?;
        loop {
            match guard.try_io(|inner| {
                nix::unistd::read(inner.get_ref(), &mut buf[filled..]).map_err(io::Error::from)
            }) {
                Ok(Ok(0)) => {
                    return Ok(buf[..filled].to_vec());
                }
                Ok(Ok(n)) => {
                    filled += n;
                    if filled == buf.len() {
                        return Ok(buf.to_vec());
                    }
                }
                // What was read goes out first; the next read sees EIO again and reports EOF.
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => {
                    return Ok(buf[..filled].to_vec());
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(e)) if filled > 0 => {
                    tracing::debug!(error = %e, "read failed after a partial chunk");
                    return Ok(buf[..filled].to_vec());
                }
                Ok(Err(e)) => return Err(e),
                Err(_would_block) if filled > 0 => {
                    return Ok(buf[..filled].to_vec());
                }
                Err(_would_block) => {
                    tokio::task::coop::consume_budget().await;
                    break;
                }
            }
        }
    }
}

/// The error a write gets when the session released its descriptors while it waited.
pub(crate) fn released_error() -> PtyError {
    PtyError::Failed("the session was closed while a write was waiting".into())
}

/// Write all of `data` to a non-blocking descriptor, waiting (without blocking the runtime) for
/// room while the pty or pipe buffer is full. Once `released` turns true the write stops with an
/// error and never touches `fd` again.
pub(crate) async fn write_all(
    fd: &AsyncFd<OwnedFd>,
    mut data: &[u8],
    released: &mut watch::Receiver<bool>,
) -> Result<(), PtyError> {
    while !data.is_empty() {
        if *released.borrow() {
            return Err(released_error());
        }
        let mut guard = tokio::select! {
            biased;
            _ = released.wait_for(|r| *r) => return Err(released_error()),
            ready = fd.writable() => ready.map_err(|e| PtyError::Failed(format!("write failed: {e}")))?,
        };
        match guard.try_io(|inner| nix::unistd::write(inner.get_ref(), data).map_err(io::Error::from)) {
            Ok(Ok(n)) => data = &data[n..],
            Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
            Ok(Err(e)) => return Err(PtyError::Failed(format!("write failed: {e}"))),
            Err(_would_block) => {
                // A pty master whose slaves all closed reports a hang-up, which the reactor keeps
                // reporting as "ready" while every write would block: nothing will ever read
                // what is left, so the write fails instead of spinning.
                if guard.ready().is_write_closed() {
                    return Err(PtyError::Failed("write failed: the terminal was closed".into()));
                }
                // Readiness without coop budget: yield now and then so a spurious readiness can
                // never starve the runtime.
                tokio::task::coop::consume_budget().await;
            }
        }
    }
    Ok(())
}

/// Wrap a descriptor for the runtime's reactor.
pub(crate) fn async_fd(fd: OwnedFd, interest: Interest) -> Result<AsyncFd<OwnedFd>, PtyError> {
    register(fd, interest).map_err(|e| spawn_error("cannot register the descriptor", e))
}

fn register(fd: OwnedFd, interest: Interest) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: the `AsyncFd` takes ownership of the `OwnedFd`, which stays open and refers to the
    // same file description until the `AsyncFd` is dropped; nothing else closes it.
    unsafe { AsyncFd::register_with_interest(fd, interest) }.map_err(io::Error::from)
}

/// The local client process: its pid, and its exit once reaped.
pub(crate) struct ChildProc {
    pid: i32,
    /// `Some(code)` once reaped (exit code, or 128 + signal number). Every signal to the pid or
    /// its group is sent while holding this lock and only while it is `None`.
    state: Mutex<Option<i32>>,
}

impl ChildProc {
    fn new(pid: i32) -> Self {
        Self { pid, state: Mutex::new(None) }
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<i32>> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The exit code once the client was reaped.
    pub fn code(&self) -> Option<i32> {
        *self.lock()
    }

    /// Signal the client itself; a no-op once it was reaped.
    pub fn signal(&self, sig: Signal) -> nix::Result<()> {
        let state = self.lock();
        if state.is_some() {
            return Ok(());
        }
        kill(Pid::from_raw(self.pid), sig)
    }

    /// Signal the client's process group (it leads a session of its own). After the client was
    /// reaped the group number stays reserved as long as any member lives, so the group is still
    /// signalled (ESRCH when it is empty).
    pub fn signal_group(&self, sig: Signal) -> nix::Result<()> {
        let _state = self.lock();
        killpg(Pid::from_raw(self.pid), sig)
    }

    /// Reap the client if it exited; its code.
    fn try_reap(&self) -> Option<i32> {
        let mut state = self.lock();
        if let Some(code) = *state {
            return Some(code);
        }
        let code = match waitpid(Pid::from_raw(self.pid), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(_, code)) => code,
            Ok(WaitStatus::Signaled(_, sig, _)) => 128 + sig as i32,
            Ok(_) => return None,
            Err(nix::errno::Errno::EINTR) => return None,
            // ECHILD: someone else reaped it; the code is lost.
            Err(_) => -1,
        };
        *state = Some(code);
        Some(code)
    }

    /// Wait for the client to exit and reap it: readiness of a pidfd when the kernel has them,
    /// else a short poll.
    pub async fn wait(&self) -> i32 {
        if let Some(code) = self.try_reap() {
            return code;
        }
        if let Some(pidfd) = pidfd_open(self.pid) {
            if let Ok(afd) = register(pidfd, Interest::READABLE) {
                loop {
                    if let Some(code) = self.try_reap() {
                        return code;
                    }
                    match afd.readable().await {
                        Ok(mut guard) => {
                            if let Some(code) = self.try_reap() {
                                return code;
                            }
                            guard.clear_ready();
                        }
                        Err(_) => break,
                    }
                }
            }
        }
        loop {
            if let Some(code) = self.try_reap() {
                return code;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return None;
    }
    let fd = i32::try_from(fd).ok()?;
    // SAFETY: the kernel just returned this descriptor (close-on-exec by default) and nothing else
    // owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}
