//! Starting a session's program: with a pty allocated here in the sandbox (`posix_openpt` on
//! `/dev/ptmx`, sized before the program starts, the program's controlling terminal) or with
//! three pipes. Either way the program leads a session of its own (`setsid`), so its process
//! group is the session's and a signal or a close reaches everything it started there.
//! Everything is prepared before `fork`; the child makes only system calls.

use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::fd::{FromRawFd, RawFd};

use crate::protocol::{FailureKind, WindowSize};
use crate::spawn::{self, SpawnError};
use crate::users::ExecUser;

/// The agent's ends of a started session.
pub enum Ends {
    /// The pty master (output and input).
    Pty(File),
    Pipes {
        stdin: File,
        stdout: File,
        stderr: File,
    },
}

/// A program ready to start.
pub struct Program {
    pub path: CString,
    pub argv: Vec<CString>,
    pub envp: Vec<CString>,
    pub cwd: Option<CString>,
    pub user: ExecUser,
}

fn cstring(field: &str, s: impl Into<Vec<u8>>) -> Result<CString, SpawnError> {
    CString::new(s).map_err(|_| (FailureKind::Invalid, format!("{field} must not contain NUL bytes")))
}

impl Program {
    pub fn new(
        argv: &[String],
        env: &[(String, String)],
        cwd: Option<&str>,
        user: ExecUser,
    ) -> Result<Self, SpawnError> {
        let first = argv.first().filter(|a| !a.is_empty()).ok_or_else(|| {
            (
                FailureKind::Invalid,
                "argv must name a program (its first element is empty or missing)".to_string(),
            )
        })?;
        let path_env = env.iter().rev().find(|(k, _)| k == "PATH").map(|(_, v)| v.as_str());
        let path = spawn::find_program(first, path_env).ok_or_else(|| {
            (FailureKind::NotFound, format!("the program {first:?} is not in the sandbox's PATH"))
        })?;
        Ok(Self {
            path: cstring("argv", path)?,
            argv: argv.iter().map(|a| cstring("argv", a.as_bytes())).collect::<Result<_, _>>()?,
            envp: env.iter().map(|(k, v)| cstring("env", format!("{k}={v}"))).collect::<Result<_, _>>()?,
            cwd: cwd.map(|c| cstring("cwd", c)).transpose()?,
            user,
        })
    }
}

fn os_error(what: &str) -> SpawnError {
    (FailureKind::Other, format!("{what}: {}", std::io::Error::last_os_error()))
}

/// A new pty: the master (close-on-exec) and the slave (close-on-exec, not our terminal).
fn open_pty(size: WindowSize) -> Result<(RawFd, RawFd), SpawnError> {
    // SAFETY: plain pty syscalls on fds we own; ptsname_r writes into our buffer.
    unsafe {
        let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        if master < 0 {
            return Err(os_error("posix_openpt"));
        }
        let mut name = [0 as libc::c_char; 128];
        if libc::grantpt(master) != 0
            || libc::unlockpt(master) != 0
            || libc::ptsname_r(master, name.as_mut_ptr(), name.len()) != 0
        {
            let e = os_error("allocating the pty");
            libc::close(master);
            return Err(e);
        }
        let slave = libc::open(name.as_ptr(), libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        if slave < 0 {
            let e = os_error("opening the pty's slave");
            libc::close(master);
            return Err(e);
        }
        if let Err(e) = set_size(master, size) {
            libc::close(master);
            libc::close(slave);
            return Err((FailureKind::Other, format!("sizing the pty: {e}")));
        }
        Ok((master, slave))
    }
}

/// `TIOCSWINSZ` on a pty master: the kernel sends SIGWINCH to the foreground process group.
pub fn set_size(master: RawFd, size: WindowSize) -> std::io::Result<()> {
    let ws = libc::winsize { ws_row: size.rows, ws_col: size.cols, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCSWINSZ reads one winsize.
    if unsafe { libc::ioctl(master, libc::TIOCSWINSZ, &ws) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The foreground process group of the pty (the job the user sees), if any.
pub fn foreground_group(master: RawFd) -> Option<libc::pid_t> {
    // SAFETY: TIOCGPGRP writes one pid_t.
    let mut pgrp: libc::pid_t = 0;
    (unsafe { libc::ioctl(master, libc::TIOCGPGRP, &mut pgrp) } == 0 && pgrp > 0).then_some(pgrp)
}

/// The process group, other than the leader's own, of the newest process in session `leader`
/// (`/proc/*/stat`): the job an interactive shell put in the foreground, where the kernel
/// cannot say (gVisor answers TIOCGPGRP on a master with ENOTTY and shows no `tpgid`). `None`
/// when the session has no other group (a shell without job control, or no job running).
pub fn newest_job_in_session(leader: libc::pid_t) -> Option<libc::pid_t> {
    let mut newest: Option<(u64, libc::pid_t)> = None;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(stat) = entry
            .file_name()
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        else {
            continue;
        };
        if let Some((pgrp, session, start)) = parse_stat(&stat) {
            if session == leader && pgrp != leader && newest.is_none_or(|(t, _)| start >= t) {
                newest = Some((start, pgrp));
            }
        }
    }
    newest.map(|(_, pgrp)| pgrp)
}

/// `(pgrp, session, starttime)` of a `/proc/<pid>/stat` line; fields after the command's
/// closing parenthesis (the command may hold spaces and parentheses).
fn parse_stat(stat: &str) -> Option<(libc::pid_t, libc::pid_t, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // state ppid pgrp session … starttime is the 20th after the parenthesis.
    Some((fields.get(2)?.parse().ok()?, fields.get(3)?.parse().ok()?, fields.get(19)?.parse().ok()?))
}

fn pipe() -> Result<(RawFd, RawFd), SpawnError> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(os_error("pipe"));
    }
    // Above 2, so the child's dup2 onto 0..=3 never overwrites a source.
    let high = |fd: RawFd| unsafe {
        let moved = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10);
        libc::close(fd);
        moved
    };
    let (r, w) = (high(fds[0]), high(fds[1]));
    if r < 0 || w < 0 {
        return Err(os_error("fcntl"));
    }
    Ok((r, w))
}

/// Start `p`; `register` gets its pid right after `fork` (the caller holds the reaper's lock).
pub fn start(
    p: &Program,
    pty: Option<WindowSize>,
    register: &mut dyn FnMut(libc::pid_t),
) -> Result<(libc::pid_t, Ends), SpawnError> {
    let (fail_r, fail_w) = pipe()?;
    // (child's stdin, stdout, stderr), the agent's ends.
    let (child_fds, ours): ([RawFd; 3], Vec<RawFd>) = match pty {
        Some(size) => {
            let (master, slave) = open_pty(size)?;
            ([slave, slave, slave], vec![master])
        }
        None => {
            let (in_r, in_w) = pipe()?;
            let (out_r, out_w) = pipe()?;
            let (err_r, err_w) = pipe()?;
            ([in_r, out_w, err_w], vec![in_w, out_r, err_r])
        }
    };
    let argv: Vec<*const libc::c_char> =
        p.argv.iter().map(|a| a.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
    let envp: Vec<*const libc::c_char> =
        p.envp.iter().map(|a| a.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
    let groups = p.user.groups.clone();
    let is_pty = pty.is_some();
    // SAFETY: fork in a multi-threaded process; the child only makes system calls on memory
    // prepared above until execve or _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let e = os_error("fork");
        let mut all: Vec<RawFd> = child_fds.to_vec();
        all.dedup();
        for fd in all.into_iter().chain(ours).chain([fail_r, fail_w]) {
            unsafe { libc::close(fd) };
        }
        return Err(e);
    }
    if pid == 0 {
        unsafe {
            libc::setsid();
            if is_pty {
                libc::ioctl(child_fds[0], libc::TIOCSCTTY, 0);
            }
            libc::dup2(child_fds[0], 0);
            libc::dup2(child_fds[1], 1);
            libc::dup2(child_fds[2], 2);
            libc::dup2(fail_w, spawn::ERROR_FD);
            libc::fcntl(spawn::ERROR_FD, libc::F_SETFD, libc::FD_CLOEXEC);
            spawn::close_from(spawn::ERROR_FD + 1);
            spawn::reset_signals();
            spawn::prefer_for_oom_kill();
            if libc::setgroups(groups.len(), groups.as_ptr()) != 0 && *libc::__errno_location() != libc::EPERM
            {
                spawn::fail_child(spawn::STAGE_USER);
            }
            if libc::setgid(p.user.gid) != 0 || libc::setuid(p.user.uid) != 0 {
                spawn::fail_child(spawn::STAGE_USER);
            }
            if let Some(cwd) = &p.cwd {
                if libc::chdir(cwd.as_ptr()) != 0 {
                    spawn::fail_child(spawn::STAGE_CWD);
                }
            }
            libc::execve(p.path.as_ptr(), argv.as_ptr(), envp.as_ptr());
            spawn::fail_child(spawn::STAGE_EXEC);
        }
    }
    register(pid);
    let mut child_side: Vec<RawFd> = child_fds.to_vec();
    child_side.dedup();
    for fd in child_side.into_iter().chain([fail_w]) {
        // SAFETY: the child's ends, ours to close in the parent.
        unsafe { libc::close(fd) };
    }
    // SAFETY: each fd below is ours and owned by exactly one File from here on.
    let mut fail = unsafe { File::from_raw_fd(fail_r) };
    let ends = unsafe {
        match ours.as_slice() {
            [master] => Ends::Pty(File::from_raw_fd(*master)),
            [i, o, e] => Ends::Pipes {
                stdin: File::from_raw_fd(*i),
                stdout: File::from_raw_fd(*o),
                stderr: File::from_raw_fd(*e),
            },
            _ => unreachable!("one master or three pipes"),
        }
    };
    let mut report = Vec::with_capacity(8);
    let _ = fail.read_to_end(&mut report);
    if report.len() >= 8 {
        let stage = u32::from_le_bytes(report[..4].try_into().unwrap_or_default());
        let errno = i32::from_le_bytes(report[4..8].try_into().unwrap_or_default());
        let os = std::io::Error::from_raw_os_error(errno);
        return Err(match stage {
            spawn::STAGE_CWD => (
                FailureKind::Cwd,
                format!("cwd {:?}: {os}", p.cwd.as_ref().map(|c| c.to_string_lossy()).unwrap_or_default()),
            ),
            spawn::STAGE_USER => {
                (FailureKind::User, format!("cannot switch to uid {} gid {}: {os}", p.user.uid, p.user.gid))
            }
            _ => (FailureKind::from_errno(errno), format!("cannot run {}: {os}", p.path.to_string_lossy())),
        });
    }
    Ok((pid, ends))
}

#[cfg(test)]
mod stat_tests {
    #[test]
    fn stat_lines_with_odd_commands_parse() {
        let line = "42 (a (b) c) S 1 40 7 0 0 0 0 0 0 0 0 0 0 0 20 0 1 0 12345 10555392 593";
        assert_eq!(super::parse_stat(line), Some((40, 7, 12345)));
        assert_eq!(super::parse_stat("42 (x) S 1"), None);
    }
}
