//! Starting one command: `fork` a shim (a child subreaper, so everything the command starts
//! stays below it), which starts the command itself (vfork-style, sharing the shim's memory
//! until `execve`) in its own process group, as the resolved
//! user, in its directory, with its three pipes. Everything is prepared before `fork`: between
//! `fork` and `execve` only async-signal-safe system calls run (the agent is multi-threaded).

use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, RawFd};

use crate::protocol::FailureKind;
use crate::users::ExecUser;

/// Commands longer than this travel through a memfd: the kernel caps one argv string at 128 KiB.
pub const INLINE_COMMAND_LIMIT: usize = 64 * 1024;
/// Where the long command's memfd sits in the shell (`<shell> -c '. /proc/self/fd/4'`).
const SCRIPT_FD: RawFd = 4;
/// The exec-error pipe in the command child (close-on-exec: EOF means `execve` succeeded).
pub(crate) const ERROR_FD: RawFd = 3;

/// Which step of the child failed (sent with errno over the error pipe).
pub(crate) const STAGE_FORK: u32 = 1;
pub(crate) const STAGE_USER: u32 = 2;
pub(crate) const STAGE_CWD: u32 = 3;
pub(crate) const STAGE_EXEC: u32 = 4;

/// A command ready to start: every C string built, so the child only makes system calls.
pub struct Prepared {
    program: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    cwd: Option<CString>,
    user: ExecUser,
    script: Option<File>,
    stdin: bool,
}

/// A started command: the shim's pid and the agent's ends of the pipes.
pub struct Spawned {
    pub shim: libc::pid_t,
    pub stdin: Option<File>,
    pub stdout: File,
    pub stderr: File,
}

/// Why a command could not start.
pub type SpawnError = (FailureKind, String);

fn cstring(field: &str, s: impl Into<Vec<u8>>) -> Result<CString, SpawnError> {
    CString::new(s).map_err(|_| (FailureKind::Invalid, format!("{field} must not contain NUL bytes")))
}

/// Find `name` in `path` as `execvp` would; a name with a `/` is used as it is.
pub fn find_program(name: &str, path: Option<&str>) -> Option<String> {
    if name.contains('/') {
        return Some(name.to_string());
    }
    let path = path.unwrap_or("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    path.split(':').filter(|d| !d.is_empty()).map(|d| format!("{d}/{name}")).find(|candidate| {
        let Ok(c) = CString::new(candidate.as_bytes()) else { return false };
        // SAFETY: valid C string; access(2) only reads it.
        unsafe { libc::access(c.as_ptr(), libc::X_OK) == 0 }
    })
}

impl Prepared {
    /// `<shell> -c <command>` with `env` (complete, in order) as `user` in `cwd`.
    pub fn new(
        shell: &str,
        command: &[u8],
        env: &[(String, String)],
        cwd: Option<&str>,
        user: ExecUser,
        stdin: bool,
    ) -> Result<Self, SpawnError> {
        if shell.is_empty() {
            return Err((FailureKind::Invalid, "the shell must not be empty".into()));
        }
        let path = env.iter().rev().find(|(k, _)| k == "PATH").map(|(_, v)| v.as_str());
        let program = find_program(shell, path).ok_or_else(|| {
            (FailureKind::NotFound, format!("the shell {shell:?} is not in the sandbox's PATH"))
        })?;
        let (script_arg, script) = if command.len() > INLINE_COMMAND_LIMIT {
            (format!(". /proc/self/fd/{SCRIPT_FD}").into_bytes(), Some(memfd_with(command)?))
        } else {
            (command.to_vec(), None)
        };
        Ok(Self {
            program: cstring("shell", program)?,
            argv: vec![cstring("shell", shell)?, cstring("command", "-c")?, cstring("command", script_arg)?],
            envp: env.iter().map(|(k, v)| cstring("env", format!("{k}={v}"))).collect::<Result<_, _>>()?,
            cwd: cwd.map(|c| cstring("cwd", c)).transpose()?,
            user,
            script,
            stdin,
        })
    }
}

fn memfd_with(command: &[u8]) -> Result<File, SpawnError> {
    let name = c"sandboxd-command";
    // SAFETY: valid C string; the fd is owned by the File below.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err((FailureKind::Other, format!("memfd_create: {}", std::io::Error::last_os_error())));
    }
    // SAFETY: a fresh fd we own.
    let mut file = unsafe { File::from_raw_fd(fd) };
    file.write_all(command).map_err(|e| (FailureKind::Other, format!("writing the command: {e}")))?;
    Ok(file)
}

/// A close-on-exec pipe whose ends sit at fd 10 or above, so the child's `dup2` onto 0..=4
/// never overwrites a source.
fn pipe() -> Result<(RawFd, RawFd), SpawnError> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err((FailureKind::Other, format!("pipe: {}", std::io::Error::last_os_error())));
    }
    Ok((high(fds[0])?, high(fds[1])?))
}

fn high(fd: RawFd) -> Result<RawFd, SpawnError> {
    // SAFETY: fd is ours; F_DUPFD_CLOEXEC returns a new fd >= 10.
    let moved = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10) };
    // SAFETY: closing the original we own.
    unsafe { libc::close(fd) };
    if moved < 0 {
        return Err((FailureKind::Other, format!("fcntl: {}", std::io::Error::last_os_error())));
    }
    Ok(moved)
}

pub(crate) fn close_from(first: RawFd) {
    // SAFETY: close_range(2) on fds of this (forked) process; falls back to the fds
    // /proc/self/fd lists, then to a bounded loop.
    unsafe {
        if libc::syscall(libc::SYS_close_range, first as libc::c_uint, libc::c_uint::MAX, 0) != 0
            && !close_listed_from(first)
        {
            for fd in first..4096 {
                libc::close(fd);
            }
        }
    }
}

/// Close every fd from `first` on that `/proc/self/fd` lists, with raw syscalls only (no
/// allocation: async-signal-safe after a fork). gVisor (release 2022-12-19) has no
/// `close_range`, and 4,093 `close` calls cost it ~190 ms under ptrace, twice per exec;
/// listing costs a few calls. `false` when the directory cannot be read.
unsafe fn close_listed_from(first: RawFd) -> bool {
    let dir = libc::open(c"/proc/self/fd".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC);
    if dir < 0 {
        return false;
    }
    let mut buf = [0u8; 4096];
    // Closing while listing may skip entries: list again until a pass closes nothing.
    loop {
        let mut closed = false;
        libc::lseek(dir, 0, libc::SEEK_SET);
        loop {
            let n = libc::syscall(libc::SYS_getdents64, dir, buf.as_mut_ptr(), buf.len());
            if n <= 0 {
                break;
            }
            let mut at = 0usize;
            while at + 19 < n as usize {
                // struct linux_dirent64: ino u64, off i64, reclen u16, type u8, name.
                let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
                if reclen == 0 {
                    break;
                }
                let mut fd: i64 = 0;
                let mut digits = 0;
                for &b in &buf[at + 19..(at + reclen).min(n as usize)] {
                    if !b.is_ascii_digit() {
                        break;
                    }
                    fd = fd * 10 + i64::from(b - b'0');
                    digits += 1;
                }
                if digits > 0 && fd >= i64::from(first) && fd != i64::from(dir) && fd <= i64::from(i32::MAX) {
                    libc::close(fd as RawFd);
                    closed = true;
                }
                at += reclen;
            }
        }
        if !closed {
            break;
        }
    }
    libc::close(dir);
    true
}

/// Write `(stage, errno)` to the error pipe and end the child. Async-signal-safe.
pub(crate) unsafe fn fail_child(stage: u32) -> ! {
    let errno = *libc::__errno_location() as u32;
    let mut msg = [0u8; 8];
    msg[..4].copy_from_slice(&stage.to_le_bytes());
    msg[4..].copy_from_slice(&errno.to_le_bytes());
    libc::write(ERROR_FD, msg.as_ptr().cast(), msg.len());
    libc::_exit(127)
}

/// Unblock every signal and restore default dispositions (in a child, before `execve`: the
/// agent blocks the signals it forwards). Async-signal-safe.
pub(crate) unsafe fn reset_signals() {
    let mut empty: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut empty);
    libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    for sig in 1..32 {
        if sig != libc::SIGKILL && sig != libc::SIGSTOP {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
}

/// What a command the agent starts adds to its OOM score (`/proc/self/oom_score_adj`).
/// When a sandbox's processes use up its memory cap, the kernel kills the largest by score:
/// this makes the commands (whose memory it is) go before the agent and its shims, which
/// are small but whose loss would end every call in flight (AGENT_LOST instead of the
/// command's own OOM_KILLED). It also puts them before the host's services when the host
/// runs short. Raising one's score needs no privilege; lowering it would.
pub(crate) const COMMAND_OOM_SCORE_ADJ: &[u8] = b"500";

/// Make the calling process (a child between `fork` and `execve`) the OOM killer's first
/// choice. Before the switch to the command's user: a non-root process cannot write its own
/// `/proc/self` files once `setuid` made it non-dumpable. Best effort (a kernel without the
/// file changes nothing); async-signal-safe.
pub(crate) unsafe fn prefer_for_oom_kill() {
    let fd = libc::open(c"/proc/self/oom_score_adj".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
    if fd >= 0 {
        libc::write(fd, COMMAND_OOM_SCORE_ADJ.as_ptr().cast(), COMMAND_OOM_SCORE_ADJ.len());
        libc::close(fd);
    }
}

/// The exit code a shell would report for a wait status.
pub fn exit_code(status: libc::c_int) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        125
    }
}

/// The stack the command child runs on until `execve`, in the shim's memory (a copy of the
/// agent's: no agent thread ever touches it, and each shim has its own copy).
const COMMAND_STACK_SIZE: usize = 128 * 1024;
static mut COMMAND_STACK: [u8; COMMAND_STACK_SIZE] = [0; COMMAND_STACK_SIZE];

/// What the command child needs, prepared by the shim before `clone` (in the shim's memory,
/// which the child shares until it `execve`s).
struct CommandArgs<'a> {
    p: &'a Prepared,
    in_r: RawFd,
    out_w: RawFd,
    err_w: RawFd,
    fail_w: RawFd,
    script_fd: Option<RawFd>,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    groups: *const libc::gid_t,
    ngroups: usize,
}

/// The command child (`clone(CLONE_VM | CLONE_VFORK)` of the shim): its pipes, process group,
/// signals, OOM score, user and directory, then `execve`. Only system calls on memory prepared
/// before the agent's `fork`; the credentials through raw system calls (glibc's wrappers would
/// act on the shim's thread list, whose memory this child shares).
extern "C" fn start_command(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the shim's `CommandArgs`, alive while the shim waits (CLONE_VFORK).
    unsafe {
        let a = &*(arg as *const CommandArgs);
        let p = a.p;
        libc::setpgid(0, 0);
        libc::dup2(a.in_r, 0);
        libc::dup2(a.out_w, 1);
        libc::dup2(a.err_w, 2);
        libc::dup2(a.fail_w, ERROR_FD);
        libc::fcntl(ERROR_FD, libc::F_SETFD, libc::FD_CLOEXEC);
        match a.script_fd {
            Some(fd) => {
                libc::dup2(fd, SCRIPT_FD);
                close_from(SCRIPT_FD + 1);
            }
            None => close_from(ERROR_FD + 1),
        }
        reset_signals();
        prefer_for_oom_kill();
        if libc::syscall(libc::SYS_setgroups, a.ngroups, a.groups) != 0
            && *libc::__errno_location() != libc::EPERM
        {
            fail_child(STAGE_USER);
        }
        if libc::syscall(libc::SYS_setgid, p.user.gid) != 0
            || libc::syscall(libc::SYS_setuid, p.user.uid) != 0
        {
            fail_child(STAGE_USER);
        }
        if let Some(cwd) = &p.cwd {
            if libc::chdir(cwd.as_ptr()) != 0 {
                fail_child(STAGE_CWD);
            }
        }
        libc::execve(p.program.as_ptr(), a.argv, a.envp);
        fail_child(STAGE_EXEC);
    }
}

/// Start the command. `register` gets the shim's pid right after `fork`, before anything can
/// wait for it (the caller holds the reaper's lock across this call). Without `stdin` the
/// command's standard input is a pipe whose writer is closed at once: EOF.
pub fn spawn(p: &Prepared, register: &mut dyn FnMut(libc::pid_t)) -> Result<Spawned, SpawnError> {
    let (in_r, in_w) = pipe()?;
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let (fail_r, fail_w) = pipe()?;
    // A copy of the memfd (the original stays with `p`), closed again below.
    let script_fd = match &p.script {
        // SAFETY: duplicating an fd `p` owns.
        Some(f) => {
            match unsafe { libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(f), libc::F_DUPFD_CLOEXEC, 10) } {
                fd if fd >= 0 => Some(fd),
                _ => return Err((FailureKind::Other, format!("fcntl: {}", std::io::Error::last_os_error()))),
            }
        }
        None => None,
    };
    let argv: Vec<*const libc::c_char> =
        p.argv.iter().map(|a| a.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
    let envp: Vec<*const libc::c_char> =
        p.envp.iter().map(|a| a.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
    let groups: Vec<libc::gid_t> = p.user.groups.clone();

    // SAFETY: fork in a multi-threaded process; the children below only make system calls
    // on memory prepared above until execve or _exit.
    let shim = unsafe { libc::fork() };
    if shim < 0 {
        let e = std::io::Error::last_os_error();
        for fd in [in_r, in_w, out_r, out_w, err_r, err_w, fail_r, fail_w].into_iter().chain(script_fd) {
            unsafe { libc::close(fd) };
        }
        return Err((FailureKind::Other, format!("fork: {e}")));
    }
    if shim == 0 {
        unsafe {
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
            // The command is started vfork-style: it shares the shim's memory (no copy of the
            // agent's address space; under gVisor's ptrace platform each copy is a new stub
            // process the sentry fills) and the shim waits until it `execve`s or fails.
            let args = CommandArgs {
                p,
                in_r,
                out_w,
                err_w,
                fail_w,
                script_fd,
                argv: argv.as_ptr(),
                envp: envp.as_ptr(),
                groups: groups.as_ptr(),
                ngroups: groups.len(),
            };
            let stack = std::ptr::addr_of_mut!(COMMAND_STACK);
            // The stack grows down: its top, 16-byte aligned.
            let top = ((stack as usize + COMMAND_STACK_SIZE) & !15) as *mut libc::c_void;
            let command = libc::clone(
                start_command,
                top,
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                std::ptr::addr_of!(args) as *mut libc::c_void,
            );
            if command < 0 {
                libc::dup2(fail_w, ERROR_FD);
                fail_child(STAGE_FORK);
            }
            // The shim keeps nothing open but what the agent had on 0..=2 (null and its stderr).
            close_from(3);
            loop {
                let mut status = 0;
                let pid = libc::wait4(-1, &mut status, 0, std::ptr::null_mut());
                if pid == command {
                    libc::_exit(exit_code(status));
                }
                if pid < 0 && *libc::__errno_location() != libc::EINTR {
                    libc::_exit(125);
                }
            }
        }
    }
    register(shim);
    for fd in [in_r, out_w, err_w, fail_w].into_iter().chain(script_fd) {
        // SAFETY: the child's ends, ours to close in the parent.
        unsafe { libc::close(fd) };
    }
    // SAFETY: each fd below is ours and owned by exactly one File from here on.
    let (stdin, stdout, stderr, mut fail) = unsafe {
        (
            File::from_raw_fd(in_w),
            File::from_raw_fd(out_r),
            File::from_raw_fd(err_r),
            File::from_raw_fd(fail_r),
        )
    };
    let mut report = Vec::with_capacity(8);
    let _ = fail.read_to_end(&mut report);
    if report.len() >= 8 {
        let stage = u32::from_le_bytes(report[..4].try_into().unwrap_or_default());
        let errno = i32::from_le_bytes(report[4..8].try_into().unwrap_or_default());
        return Err(describe_failure(p, stage, errno));
    }
    Ok(Spawned { shim, stdin: p.stdin.then_some(stdin), stdout, stderr })
}

fn describe_failure(p: &Prepared, stage: u32, errno: i32) -> SpawnError {
    let os = std::io::Error::from_raw_os_error(errno);
    match stage {
        STAGE_CWD => {
            let cwd = p.cwd.as_ref().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default();
            let why = if errno == libc::ENOENT {
                "does not exist in the sandbox".to_string()
            } else {
                os.to_string()
            };
            (FailureKind::Cwd, format!("cwd {cwd:?} {why}"))
        }
        STAGE_USER => {
            (FailureKind::User, format!("cannot switch to uid {} gid {}: {os}", p.user.uid, p.user.gid))
        }
        STAGE_EXEC => {
            (FailureKind::from_errno(errno), format!("cannot run {}: {os}", p.program.to_string_lossy()))
        }
        STAGE_FORK => (FailureKind::Other, format!("fork: {os}")),
        _ => (FailureKind::Other, format!("the command did not start: {os}")),
    }
}

#[cfg(test)]
mod tests {
    /// In a forked child (whose fd table is its own): fds at and above `first` are closed,
    /// those below stay open.
    #[test]
    fn listed_fds_from_first_on_are_closed() {
        // SAFETY: the child only makes syscalls and exits.
        unsafe {
            let pid = libc::fork();
            assert!(pid >= 0);
            if pid == 0 {
                libc::dup2(0, 700);
                libc::dup2(0, 701);
                libc::dup2(0, 650);
                let listed = super::close_listed_from(700);
                let open = |fd| libc::fcntl(fd, libc::F_GETFD) != -1;
                let ok = listed && !open(700) && !open(701) && open(650);
                libc::_exit(if ok { 0 } else { 1 });
            }
            let mut status = 0;
            libc::waitpid(pid, &mut status, 0);
            assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "status {status}");
        }
    }
}
