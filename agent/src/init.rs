//! `sandboxd-agent init [options] [--] [argv…]`: the sandbox's keep-alive. `docker run` starts
//! the agent (under docker's `--init`, so usually not pid 1) with the command the sandbox ran
//! before (the configured keep-alive `sh -c 'while :; do sleep …; done'`, or the spec's
//! entrypoint) as `argv`. The agent:
//! - binds its socket first (before any thread or child, for the umask),
//! - starts `argv` exactly as docker would have (same environment, directory, stdio, so
//!   `docker logs` shows its output; as `--user` when given: the image's user),
//! - forwards the usual termination signals to it and exits with its exit code when it ends,
//!   so the container stops as it did when the command was the container's own process,
//! - is a child subreaper: orphans of its commands and sessions re-parent to it and are reaped
//!   by its one reaper (not left to pid 1, which would not know them),
//! - runs the readiness probe and shell detection and reports both on every connection; a spec
//!   entrypoint that ends before the sandbox was reported ready (it must live
//!   [`ENTRYPOINT_SETTLE`] first) fails the readiness, so the create fails.
//!
//! Without `argv`, or with `--keep-alive` when `argv` is the server's keep-alive command and the
//! image lacks its program (an image without a shell), the agent is the keep-alive itself;
//! SIGTERM, SIGINT, SIGHUP and SIGQUIT then end it with 128 + the signal. A spec's entrypoint is
//! never passed with `--keep-alive`: a missing entrypoint program fails the sandbox as before.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::probe::{self, Probe};
use crate::protocol::ReadyState;
use crate::reaper::reaper;
use crate::serve;
use crate::socket;
use crate::users;

/// How long a spec's entrypoint must have run before the sandbox is reported ready. The probe
/// can pass within a millisecond of the agent's start, before an entrypoint that exits at once
/// (`/bin/false`) has exited; without this window such a sandbox was reported ready and then
/// stopped. A create with an entrypoint waits at most this long after the entrypoint started
/// (the `docker run` and the server's connection usually cover part of it); the keep-alive is
/// not waited for.
pub const ENTRYPOINT_SETTLE: Duration = Duration::from_millis(250);

/// Signals passed on to the wrapped command.
const FORWARDED: [libc::c_int; 7] =
    [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT, libc::SIGUSR1, libc::SIGUSR2, libc::SIGWINCH];

/// `init`'s options.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Options {
    /// Directory of the socket (`/.sandboxd/run`).
    pub run_dir: Option<PathBuf>,
    /// Who the wrapped command runs as (the image's configured user); root when unset.
    pub user: Option<String>,
    /// The configured exec shell (`docker.exec.exec_shell`); detected when unset.
    pub shell: Option<String>,
    pub probe: Probe,
    /// `argv` is only the server's keep-alive: the agent stands in for it when its program is
    /// not in the image.
    pub keep_alive: bool,
    pub argv: Vec<String>,
}

fn millis(flag: &str, v: &str) -> Result<Duration, String> {
    v.parse::<u64>()
        .map(Duration::from_millis)
        .map_err(|_| format!("{flag} takes milliseconds (a whole number), got {v:?}"))
}

/// Parse `init`'s arguments (after `init`).
pub fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options::default();
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].as_str();
        if flag == "--" {
            o.argv = args[i + 1..].to_vec();
            break;
        }
        if !flag.starts_with("--") {
            o.argv = args[i..].to_vec();
            break;
        }
        if flag == "--keep-alive" {
            o.keep_alive = true;
            i += 1;
            continue;
        }
        let value = args.get(i + 1).ok_or_else(|| format!("{flag} needs a value"))?;
        match flag {
            "--run-dir" => o.run_dir = Some(PathBuf::from(value)),
            "--user" => o.user = Some(value.clone()),
            "--shell" => o.shell = Some(value.clone()),
            "--probe" => o.probe.command = Some(value.clone()),
            "--probe-expect" => o.probe.expected_stdout = Some(value.clone()),
            "--probe-timeout-ms" => o.probe.timeout = millis(flag, value)?,
            "--probe-deadline-ms" => o.probe.deadline = Some(millis(flag, value)?),
            "--probe-stable-count" => {
                o.probe.stable_count = value
                    .parse()
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| format!("{flag} must be >= 1, got {value:?}"))?
            }
            "--probe-stable-delay-ms" => o.probe.stable_delay = millis(flag, value)?,
            other => {
                return Err(format!(
                    "unknown option {other:?} (known: --run-dir, --user, --shell, --keep-alive, --probe, \
                     --probe-expect, --probe-timeout-ms, --probe-deadline-ms, --probe-stable-count, \
                     --probe-stable-delay-ms)"
                ))
            }
        }
        i += 2;
    }
    if o.argv.first().is_some_and(|a| a.is_empty()) {
        return Err("the wrapped command's program (after `--`) must not be empty".into());
    }
    Ok(o)
}

fn forwarded_set() -> libc::sigset_t {
    // SAFETY: sigset manipulation on a local.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in FORWARDED {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Run as the keep-alive; exits with the wrapped command's exit code.
pub fn run(options: Options) -> ! {
    let set = forwarded_set();
    // SAFETY: blocking signals in the only thread; every later thread inherits the mask, and
    // children reset it before execve.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
    let run_dir = options
        .run_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(socket::DEFAULT_SOCKET).parent().unwrap().to_path_buf());
    // Without its socket the sandbox still runs as before (the server falls back to
    // `docker exec`): the failure is only reported.
    let listener = match socket::listen(&run_dir) {
        Ok(l) => Some(l),
        Err(e) => {
            eprintln!("sandboxd-agent: no socket, serving nothing: {e}");
            None
        }
    };
    // Without a command the agent itself keeps the sandbox alive (an image needs no shell).
    let child = if options.argv.is_empty() {
        None
    } else if !has_program(&options.argv[0]) {
        // Said here rather than by a failed spawn: std's spawn waits for a child whose exec
        // failed, and the reaper (`wait4(-1)`) may have reaped it first.
        if !options.keep_alive {
            eprintln!("sandboxd-agent: cannot start {:?}: not found (or not executable)", options.argv[0]);
            std::process::exit(127);
        }
        eprintln!(
            "sandboxd-agent: the image has no {:?}: the agent keeps the sandbox alive itself",
            options.argv[0]
        );
        None
    } else {
        match spawn_wrapped(&options) {
            Ok(child) => Some(child),
            Err(e) => {
                eprintln!("sandboxd-agent: cannot start {:?}: {e}", options.argv[0]);
                std::process::exit(127);
            }
        }
    };
    // A spec's entrypoint (not the keep-alive) must outlive the settle window before the
    // sandbox is reported ready: one that exits at once fails the create instead.
    let settle_from = (child.is_some() && !options.keep_alive).then(Instant::now);
    let pid = child.as_ref().map(|(pid, _)| *pid);
    std::thread::spawn(move || loop {
        let mut sig = 0;
        // SAFETY: sigwait on a set of blocked signals.
        if unsafe { libc::sigwait(&set, &mut sig) } == 0 {
            match pid {
                // SAFETY: signalling our own child.
                Some(pid) => unsafe {
                    libc::kill(pid, sig);
                },
                None if sig != libc::SIGWINCH && sig != libc::SIGUSR1 && sig != libc::SIGUSR2 => {
                    std::process::exit(128 + sig)
                }
                None => {}
            }
        }
    });
    let base_env = serve::own_environment();
    {
        let env = base_env.clone();
        let options = options.clone();
        std::thread::spawn(move || {
            let path = env.iter().rev().find(|(k, _)| k == "PATH").map(|(_, v)| v.clone());
            let shell = probe::detect_shell(options.shell.as_deref(), path.as_deref());
            socket::announce(ReadyState::Pending, &shell, "");
            let (state, detail) = probe::run(&options.probe, &env);
            if let Some(from) = settle_from.filter(|_| state == ReadyState::Ready) {
                std::thread::sleep(ENTRYPOINT_SETTLE.saturating_sub(from.elapsed()));
            }
            // A no-op when the entrypoint already ended (its failure stands).
            socket::announce(state, &shell, &detail);
        });
    }
    if let Some(listener) = listener {
        std::thread::spawn(move || listener.serve(base_env));
    }
    let Some((_, exited)) = child else {
        loop {
            std::thread::park();
        }
    };
    let code = exited.recv().map(|(status, _)| crate::spawn::exit_code(status)).unwrap_or(125);
    let lived = settle_from.map(|from| from.elapsed().as_millis()).unwrap_or_default();
    socket::wrapped_ended(&format!(
        "the sandbox's entrypoint {:?} exited with code {code} after {lived} ms, before the sandbox was ready",
        options.argv[0]
    ));
    std::process::exit(code)
}

type Wrapped = (libc::pid_t, std::sync::mpsc::Receiver<crate::reaper::Status>);

/// Whether `program` can be started here (found in the agent's `PATH`, as `execvp` would).
fn has_program(program: &str) -> bool {
    let path = std::env::var("PATH").ok();
    crate::spawn::find_program(program, path.as_deref()).is_some_and(|found| {
        let Ok(c) = std::ffi::CString::new(found) else { return false };
        // SAFETY: valid C string; access(2) only reads it.
        unsafe { libc::access(c.as_ptr(), libc::X_OK) == 0 }
    })
}

/// Start the wrapped command with the agent's own stdio, environment and directory.
fn spawn_wrapped(options: &Options) -> Result<Wrapped, String> {
    let mut command = std::process::Command::new(&options.argv[0]);
    command.args(&options.argv[1..]);
    let mut user = None;
    if let Some(spec) = options.user.as_deref().filter(|u| !u.is_empty()) {
        let files = users::Files::read();
        let resolved = files.resolve(Some(spec))?;
        // `docker run -u 0` gave the agent root's HOME; the image's user gets its own, as
        // `docker run` would have given it (a HOME the image's env sets stays).
        let root_home = files.resolve(None).map(|u| u.home).unwrap_or_else(|_| "/root".into());
        match std::env::var("HOME") {
            Ok(home) if home != root_home => {}
            _ => {
                command.env("HOME", &resolved.home);
            }
        }
        user = Some(resolved);
    }
    // SAFETY: only async-signal-safe calls on memory prepared before the fork.
    unsafe {
        command.pre_exec(move || {
            crate::spawn::reset_signals();
            crate::spawn::prefer_for_oom_kill();
            if let Some(u) = &user {
                if libc::setgroups(u.groups.len(), u.groups.as_ptr()) != 0
                    && *libc::__errno_location() != libc::EPERM
                {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::setgid(u.gid) != 0 || libc::setuid(u.uid) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    reaper().spawn_registered(|register| {
        let child = command.spawn().map_err(|e| e.to_string())?;
        register(child.id() as libc::pid_t);
        Ok::<_, String>(child.id() as libc::pid_t)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options_then_the_wrapped_argv() {
        let o = parse(&args(&[
            "--run-dir",
            "/r",
            "--probe",
            "printf ok",
            "--probe-expect",
            "ok",
            "--probe-deadline-ms",
            "1500",
            "--",
            "/bin/sh",
            "-c",
            "x",
        ]))
        .unwrap();
        assert_eq!(o.run_dir, Some(PathBuf::from("/r")));
        assert_eq!(o.probe.command.as_deref(), Some("printf ok"));
        assert_eq!(o.probe.deadline, Some(Duration::from_millis(1500)));
        assert_eq!(o.argv, args(&["/bin/sh", "-c", "x"]));
        // The wrapped argv may itself hold `--` flags.
        assert_eq!(parse(&args(&["--", "app", "--port", "1"])).unwrap().argv, args(&["app", "--port", "1"]));
        assert_eq!(parse(&args(&["app", "--x"])).unwrap().argv, args(&["app", "--x"]));
        let o = parse(&args(&["--keep-alive", "--shell", "sh", "--", "/bin/sh", "-c", "k"])).unwrap();
        assert!(o.keep_alive && o.shell.as_deref() == Some("sh"));
        assert_eq!(o.argv, args(&["/bin/sh", "-c", "k"]));
        assert!(!parse(&args(&["--", "app"])).unwrap().keep_alive);
    }

    #[test]
    fn bad_options_name_the_flag() {
        assert!(parse(&args(&["--", ""])).unwrap_err().contains("must not be empty"));
        assert_eq!(parse(&args(&["--probe", "true"])).unwrap().argv, Vec::<String>::new());
        assert!(parse(&args(&["--probe-timeout-ms", "soon", "--", "x"]))
            .unwrap_err()
            .contains("--probe-timeout-ms"));
        assert!(parse(&args(&["--probe-stable-count", "0", "--", "x"]))
            .unwrap_err()
            .contains("--probe-stable-count"));
        assert!(parse(&args(&["--bogus", "1", "--", "x"])).unwrap_err().contains("--bogus"));
        assert!(parse(&args(&["--user"])).unwrap_err().contains("--user needs a value"));
    }
}
