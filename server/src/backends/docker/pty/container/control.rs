//! In-container control: reading and checking the pid record, and the signal, resize and
//! cleanup commands run on the pid it names (see the module above for why the record is only a
//! hint).

use std::time::Duration;

use super::{session_marker, shell_quote};
use crate::backends::docker::pty::TerminalMode;
use crate::core::spec::Signal;

/// The parent pid, in the container's pid namespace, of a process `docker exec` injected.
pub const EXEC_PARENT_PID: u32 = 0;
/// Timeout of the exec that reads the pid record (the read itself waits at most two seconds).
pub const PID_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the pid read looks for the record, 0.1 s apart: two seconds in all.
pub const PID_READ_TRIES: u32 = 20;
/// At most this many bytes of the record are read.
pub const PID_RECORD_MAX: usize = 32;
/// Timeout of the signal and cleanup execs.
pub const CONTROL_TIMEOUT: Duration = Duration::from_secs(30);
/// The user the signal and cleanup execs run as (uid 0 works without an `/etc/passwd`).
pub const ROOT_USER: &str = "0";
/// The first word of the line the pid read prints for a record it could read.
pub const RECORD_TAG: &str = "sandboxd-pid";
/// The first word of the line the pid read prints when it refuses the record.
pub const REFUSED_TAG: &str = "sandboxd-pid-refused";

/// Reads the pid record once, as the session's user, and prints one line for
/// `check_recorded_pid`: `sandboxd-pid PID PPID SID MARKER` (`-` for what it could not read;
/// MARKER is the environment entry that matched this session's marker), or
/// `sandboxd-pid-refused REASON`.
///
/// It waits up to two seconds for the launcher to write the record (the first file, else the
/// fallback). A record that is a link or not a regular file (a FIFO, a device) is refused at
/// once, without being opened; a regular one is opened read-write (so a FIFO swapped in after
/// the test cannot block the open), checked again on that pinned descriptor, and at most 32
/// bytes of it are read. Anything but a plain number is refused before it reaches a path.
pub fn pid_read_command(pid_file: &str, fallback: &str, session_id: &str) -> String {
    format!(
        "f={f}; g={g}; m={m}; r=; n=0; \
         rd() {{ if [ -h \"$1\" ] || {{ [ -e \"$1\" ] && [ ! -f \"$1\" ]; }}; then \
         echo '{refused} not-a-regular-file'; exit 0; fi; [ -f \"$1\" ] || return 1; \
         r=$({{ [ -f /proc/self/fd/3 ] && head -c {max} <&3; }} 3<>\"$1\" 2>/dev/null); \
         [ -n \"$r\" ]; }}; \
         while :; do rd \"$f\" && break; rd \"$g\" && break; n=$((n+1)); \
         [ \"$n\" -ge {tries} ] && {{ echo '{refused} no-record'; exit 0; }}; sleep 0.1; done; \
         case $r in ''|*[!0-9]*) echo '{refused} not-a-pid'; exit 0;; esac; \
         s=; read -r s 2>/dev/null </proc/\"$r\"/stat; s=${{s##*) }}; set -- $s; \
         e=$(tr '\\0' '\\n' 2>/dev/null </proc/\"$r\"/environ | grep -xF -e \"$m\" 2>/dev/null); \
         echo \"{tag} $r ${{2:--}} ${{4:--}} ${{e:--}}\"",
        f = shell_quote(pid_file),
        g = shell_quote(fallback),
        m = shell_quote(&session_marker(session_id)),
        refused = REFUSED_TAG,
        tag = RECORD_TAG,
        max = PID_RECORD_MAX,
        tries = PID_READ_TRIES,
    )
}

/// The pid `pid_read_command` printed, once it is safe to signal as root; otherwise why not.
pub fn check_recorded_pid(record: &str, mode: TerminalMode, session_id: &str) -> Result<u32, String> {
    check_recorded_pid_with_parent(record, mode, session_id, EXEC_PARENT_PID)
}

/// `check_recorded_pid` with the parent a process `docker exec` started must have (0 in a
/// container; tests run the commands on the host, where the parent is the test).
pub(crate) fn check_recorded_pid_with_parent(
    record: &str,
    mode: TerminalMode,
    session_id: &str,
    parent: u32,
) -> Result<u32, String> {
    let line = record
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with(RECORD_TAG))
        .ok_or_else(|| format!("no pid record was read (got {:?})", truncate(record.trim(), 200)))?;
    if let Some(reason) = line.strip_prefix(REFUSED_TAG) {
        return Err(format!("the pid record was refused: {}", reason.trim()));
    }
    let mut fields = line.splitn(5, ' ');
    let (_tag, pid, ppid, sid, marker) =
        (fields.next(), fields.next(), fields.next(), fields.next(), fields.next());
    if _tag != Some(RECORD_TAG) {
        return Err(format!("malformed pid record line {:?}", truncate(line, 200)));
    }
    let pid: u32 = pid
        .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| format!("the pid record holds no pid: {:?}", truncate(line, 200)))?;
    if pid <= 1 {
        return Err(format!("the recorded pid {pid} is not a session's process"));
    }
    if marker != Some(session_marker(session_id).as_str()) {
        return Err(format!("process {pid} does not carry this session's marker"));
    }
    let ppid: Option<u32> = ppid.and_then(|p| p.parse().ok());
    if ppid != Some(parent) {
        return Err(format!(
            "process {pid} was not started by docker exec (parent {}, expected {parent})",
            ppid.map_or_else(|| "unknown".to_string(), |p| p.to_string())
        ));
    }
    if mode == TerminalMode::Pty {
        let sid: Option<u32> = sid.and_then(|s| s.parse().ok());
        if sid != Some(pid) {
            return Err(format!("process {pid} does not lead its session"));
        }
    }
    Ok(pid)
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Delivers `signal` as root to the checked `pid`'s session: in PTY
/// mode to the foreground process group of its terminal (what a key press reaches; the pid's own
/// group when the terminal has none), else to the pid's group. Nothing is sent once `pid` is no
/// longer a process `docker exec` injected (it exited and the number went to another process).
pub fn signal_command(pid: u32, signal: Signal, mode: TerminalMode) -> String {
    signal_command_with_parent(pid, signal, mode, EXEC_PARENT_PID)
}

pub(crate) fn signal_command_with_parent(
    pid: u32,
    signal: Signal,
    mode: TerminalMode,
    parent: u32,
) -> String {
    let name = signal.short_name();
    let target = match mode {
        TerminalMode::Pty => "t=${6:-0}; case $t in ''|*[!0-9]*|0) t=$p;; esac; ",
        TerminalMode::Pipe => "t=$p; ",
    };
    format!(
        "p={pid}; s=; read -r s 2>/dev/null </proc/$p/stat || exit 0; s=${{s##*) }}; set -- $s; \
         [ \"$2\" = {parent} ] || exit 0; {target}kill -{name} -\"$t\""
    )
}

/// Sets the size of the session's terminal (the verified pid's stdin) from inside, so the
/// size holds before `resize` returns. Runs as the session's user (its own process's fds need no
/// ptrace capability) and only while the pid's parent is still outside the container.
pub fn resize_command(pid: u32, rows: u16, cols: u16) -> String {
    format!(
        "p={pid}; read -r st </proc/$p/stat || exit 1; st=${{st##*) }}; set -- $st; \
[ \"$2\" = 0 ] || exit 1; stty rows {rows} cols {cols} </proc/$p/fd/0"
    )
}

/// Ends a session's processes as root: the pid files go; when `pid` (checked) is given, `SIGHUP`
/// to its group and to it (a shell relays it to its jobs), up to a second for it to leave, then
/// `SIGKILL` to every process of its session (session id, field 6 of `/proc/*/stat`, equal to
/// `pid`). Best effort: it always exits 0.
pub fn cleanup_command(pid: Option<u32>, pid_files: &[&str]) -> String {
    cleanup_command_with_parent(pid, pid_files, EXEC_PARENT_PID)
}

pub(crate) fn cleanup_command_with_parent(pid: Option<u32>, pid_files: &[&str], parent: u32) -> String {
    let mut cmd = String::new();
    if !pid_files.is_empty() {
        let files: Vec<String> = pid_files.iter().map(|f| shell_quote(f)).collect();
        cmd.push_str(&format!("rm -f -- {} 2>/dev/null; ", files.join(" ")));
    }
    if let Some(pid) = pid {
        cmd.push_str(&format!(
            "p={pid}; s=; if read -r s 2>/dev/null </proc/$p/stat; then s=${{s##*) }}; set -- $s; \
             if [ \"$2\" = {parent} ]; then kill -HUP -\"$p\" \"$p\" 2>/dev/null; \
             n=0; while [ \"$n\" -lt 10 ] && [ -e /proc/$p/stat ]; do sleep 0.1; n=$((n+1)); done; fi; fi; \
             for d in /proc/[0-9]*; do s=; read -r s 2>/dev/null <\"$d/stat\" || continue; s=${{s##*) }}; \
             set -- $s; [ \"$4\" = \"$p\" ] && kill -KILL \"${{d#/proc/}}\" 2>/dev/null; done; "
        ));
    }
    cmd.push_str("exit 0");
    cmd
}

#[cfg(test)]
mod tests {
    use super::super::launcher::launcher_script;
    use super::super::tests::{record_paths, run_sh, session_leader, shells, tmpdir, wait_gone};
    use super::super::SESSION_ENV;
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    use std::time::Instant;

    fn read_record(shell: &[&str], f: &str, g: &str, id: &str) -> (String, Duration) {
        let start = Instant::now();
        let out = run_sh(shell, &pid_read_command(f, g, id), &[]);
        (String::from_utf8_lossy(&out.stdout).into_owned(), start.elapsed())
    }

    #[test]
    fn pid_read_reports_the_recorded_process() {
        let me = std::process::id();
        for shell in shells() {
            let (_dir, f, g) = record_paths();
            let mut child = session_leader(Some((SESSION_ENV, "sess-1")));
            std::fs::write(&g, format!("{}\n", child.id())).unwrap();
            let (line, _) = read_record(&shell, f.to_str().unwrap(), g.to_str().unwrap(), "sess-1");
            let expected =
                format!("{RECORD_TAG} {pid} {me} {pid} SANDBOXD_PTY_SESSION=sess-1\n", pid = child.id());
            assert_eq!(line, expected, "{shell:?}");
            // The check accepts it only with the parent a docker exec'd process has.
            assert_eq!(
                check_recorded_pid_with_parent(&line, TerminalMode::Pty, "sess-1", me),
                Ok(child.id())
            );
            let err = check_recorded_pid(&line, TerminalMode::Pty, "sess-1").unwrap_err();
            assert!(err.contains("not started by docker exec"), "{err}");
            // Another session's marker is not this one's.
            let (line, _) = read_record(&shell, f.to_str().unwrap(), g.to_str().unwrap(), "sess-2");
            assert!(line.ends_with(" -\n"), "{shell:?}: {line}");
            assert!(check_recorded_pid_with_parent(&line, TerminalMode::Pipe, "sess-2", me)
                .unwrap_err()
                .contains("marker"));
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    #[test]
    fn pid_read_refuses_forged_records() {
        for shell in shells() {
            let (dir, f, g) = record_paths();
            let (fs, gs) = (f.to_str().unwrap(), g.to_str().unwrap());

            // A FIFO is refused at once (opening it for reading would block).
            nix::unistd::mkfifo(&f, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
            let (line, took) = read_record(&shell, fs, gs, "x");
            assert_eq!(line.trim(), format!("{REFUSED_TAG} not-a-regular-file"), "{shell:?}");
            assert!(took < Duration::from_secs(1), "{shell:?}: {took:?}");
            std::fs::remove_file(&f).unwrap();

            // A symlink, even to a regular file holding a pid, is refused.
            let target = dir.path().join("target");
            std::fs::write(&target, "1234\n").unwrap();
            std::os::unix::fs::symlink(&target, &f).unwrap();
            let (line, _) = read_record(&shell, fs, gs, "x");
            assert_eq!(line.trim(), format!("{REFUSED_TAG} not-a-regular-file"), "{shell:?}");
            std::fs::remove_file(&f).unwrap();

            // A directory.
            std::fs::create_dir(&f).unwrap();
            let (line, _) = read_record(&shell, fs, gs, "x");
            assert_eq!(line.trim(), format!("{REFUSED_TAG} not-a-regular-file"), "{shell:?}");
            std::fs::remove_dir(&f).unwrap();

            // Garbage never reaches a path.
            std::fs::write(&f, "../../self\n").unwrap();
            let (line, _) = read_record(&shell, fs, gs, "x");
            assert_eq!(line.trim(), format!("{REFUSED_TAG} not-a-pid"), "{shell:?}");

            // At most 32 bytes are read: a long run of digits is cut to 32 of them.
            std::fs::write(&f, "1".repeat(100)).unwrap();
            let (line, _) = read_record(&shell, fs, gs, "x");
            let pid_field = line.split(' ').nth(1).unwrap_or("");
            assert_eq!(pid_field, "1".repeat(32), "{shell:?}: {line}");
            assert!(check_recorded_pid(&line, TerminalMode::Pipe, "x").is_err());

            // No record: waits about two seconds, then says so.
            std::fs::remove_file(&f).unwrap();
            let (line, took) = read_record(&shell, fs, gs, "x");
            assert_eq!(line.trim(), format!("{REFUSED_TAG} no-record"), "{shell:?}");
            assert!(took >= Duration::from_millis(1800) && took < Duration::from_secs(5), "{took:?}");
        }
    }

    #[test]
    fn pid_read_waits_for_a_late_record() {
        let shell = shells().remove(0);
        let (_dir, f, g) = record_paths();
        let f2 = f.clone();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(500));
            std::fs::write(&f2, "4242\n").unwrap();
        });
        let (line, took) = read_record(&shell, f.to_str().unwrap(), g.to_str().unwrap(), "x");
        writer.join().unwrap();
        assert!(line.starts_with(&format!("{RECORD_TAG} 4242 ")), "{line}");
        assert!(took >= Duration::from_millis(400), "{took:?}");
    }

    /// Busybox images have only applets: the commands must not need anything else.
    #[test]
    fn commands_work_with_busybox_applets_only() {
        let busybox = std::path::Path::new("/bin/busybox");
        if !busybox.exists() {
            return;
        }
        let me = std::process::id();
        let bin = tmpdir();
        for applet in ["head", "tr", "grep", "sleep", "rm", "stty", "cat"] {
            std::os::unix::fs::symlink(busybox, bin.path().join(applet)).unwrap();
        }
        let run = |script: &str, args: &[&str]| {
            Command::new(busybox)
                .arg("sh")
                .arg("-c")
                .arg(script)
                .args(args)
                .env_clear()
                .env("PATH", bin.path())
                .stdin(Stdio::null())
                .output()
                .expect("busybox sh")
        };
        let (_dir, f, g) = record_paths();
        let (fs, gs) = (f.to_str().unwrap(), g.to_str().unwrap());
        let out = run(&launcher_script(24, 80, true), &[fs, gs, "sh", "-c", "echo $$"]);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), std::fs::read_to_string(&f).unwrap());

        let mut child = session_leader(Some((SESSION_ENV, "bb")));
        std::fs::write(&f, format!("{}\n", child.id())).unwrap();
        let out = run(&pid_read_command(fs, gs, "bb"), &[]);
        let line = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.stderr.is_empty(), "{:?}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(
            check_recorded_pid_with_parent(&line, TerminalMode::Pty, "bb", me),
            Ok(child.id()),
            "{line}"
        );
        let out = run(&signal_command_with_parent(child.id(), Signal::Term, TerminalMode::Pty, me), &[]);
        assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
        assert!(wait_gone(&mut child, Duration::from_secs(5)));

        let mut child = session_leader(None);
        let out = run(&cleanup_command_with_parent(Some(child.id()), &[fs, gs], me), &[]);
        assert!(out.status.success(), "{out:?}");
        assert!(wait_gone(&mut child, Duration::from_secs(5)));
        assert!(!f.exists());
    }

    #[test]
    fn check_refuses_what_is_not_the_session() {
        let id = "s1";
        let ok = "sandboxd-pid 57 0 57 SANDBOXD_PTY_SESSION=s1";
        assert_eq!(check_recorded_pid(ok, TerminalMode::Pty, id), Ok(57));
        // Output around the line is ignored.
        assert_eq!(check_recorded_pid(&format!("motd\n{ok}\n"), TerminalMode::Pipe, id), Ok(57));
        for (record, mode, why) in [
            ("", TerminalMode::Pty, "no pid record"),
            ("garbage", TerminalMode::Pty, "no pid record"),
            ("sandboxd-pid-refused not-a-pid", TerminalMode::Pty, "refused"),
            ("sandboxd-pid x1 0 57 SANDBOXD_PTY_SESSION=s1", TerminalMode::Pty, "no pid"),
            ("sandboxd-pid -5 0 57 SANDBOXD_PTY_SESSION=s1", TerminalMode::Pty, "no pid"),
            ("sandboxd-pid 1 0 1 SANDBOXD_PTY_SESSION=s1", TerminalMode::Pty, "not a session"),
            ("sandboxd-pid 0 0 0 SANDBOXD_PTY_SESSION=s1", TerminalMode::Pty, "not a session"),
            ("sandboxd-pid 57 0 57 SANDBOXD_PTY_SESSION=s2", TerminalMode::Pty, "marker"),
            ("sandboxd-pid 57 0 57 SANDBOXD_PTY_SESSION=s10", TerminalMode::Pty, "marker"),
            ("sandboxd-pid 57 0 57 -", TerminalMode::Pty, "marker"),
            ("sandboxd-pid 57 12 57 SANDBOXD_PTY_SESSION=s1", TerminalMode::Pty, "parent 12"),
            ("sandboxd-pid 57 - - SANDBOXD_PTY_SESSION=s1", TerminalMode::Pty, "parent unknown"),
            ("sandboxd-pid 57 0 12 SANDBOXD_PTY_SESSION=s1", TerminalMode::Pty, "lead its session"),
        ] {
            let err = check_recorded_pid(record, mode, id).unwrap_err();
            assert!(err.contains(why), "{record:?}: {err}");
        }
        // Pipe mode does not require leading the session.
        assert_eq!(
            check_recorded_pid("sandboxd-pid 57 0 12 SANDBOXD_PTY_SESSION=s1", TerminalMode::Pipe, id),
            Ok(57)
        );
    }

    #[test]
    fn signal_command_signals_the_group_of_a_checked_pid() {
        let me = std::process::id();
        for shell in shells() {
            for sig in Signal::ALL {
                let mut child = session_leader(None);
                let cmd = signal_command_with_parent(child.id(), sig, TerminalMode::Pipe, me);
                let out = run_sh(&shell, &cmd, &[]);
                assert!(out.status.success(), "{shell:?} {sig}: {out:?}");
                assert!(out.stderr.is_empty(), "{shell:?} {sig}: {:?}", String::from_utf8_lossy(&out.stderr));
                assert!(wait_gone(&mut child, Duration::from_secs(5)), "{shell:?} {sig}: still running");
            }
            // Not a docker exec'd process (wrong parent): nothing is sent.
            let mut child = session_leader(None);
            let out = run_sh(&shell, &signal_command(child.id(), Signal::Kill, TerminalMode::Pipe), &[]);
            assert!(out.status.success());
            assert!(!wait_gone(&mut child, Duration::from_millis(300)), "{shell:?}: signalled a forged pid");
            let _ = child.kill();
            let _ = child.wait();
            // PTY mode without a terminal (tpgid -1): falls back to the pid's own group.
            let mut child = session_leader(None);
            let out = run_sh(
                &shell,
                &signal_command_with_parent(child.id(), Signal::Term, TerminalMode::Pty, me),
                &[],
            );
            assert!(out.status.success(), "{shell:?}: {out:?}");
            assert!(wait_gone(&mut child, Duration::from_secs(5)), "{shell:?}: pty fallback");
        }
    }

    /// Issue 9: a test run started in the background (`bash scripts/test.sh &`) inherits SIGINT
    /// and SIGQUIT ignored; the processes the tests spawn reset them, so the signal tests still
    /// pass. Runs this binary's signal test again under a shell that ignores both first.
    #[test]
    fn signal_tests_pass_when_the_run_inherits_sigint_ignored() {
        if std::env::var_os("SANDBOXD_INNER_SIGNAL_RUN").is_some() {
            return;
        }
        let exe = std::env::current_exe().unwrap();
        let out = Command::new("sh")
            .arg("-c")
            .arg("trap '' INT QUIT; exec \"$0\" --exact backends::docker::pty::container::control::tests::signal_command_signals_the_group_of_a_checked_pid")
            .arg(&exe)
            .env("SANDBOXD_INNER_SIGNAL_RUN", "1")
            .stdin(Stdio::null())
            .output()
            .expect("run the signal test under ignored SIGINT");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn cleanup_kills_the_whole_session_and_removes_records() {
        let me = std::process::id();
        for shell in shells() {
            let (_dir, f, g) = record_paths();
            std::fs::write(&f, "1\n").unwrap();
            std::fs::write(&g, "1\n").unwrap();
            // A session leader whose job ignores SIGHUP and moved to a group of its own.
            let mut cmd = Command::new("sh");
            cmd.arg("-c")
                .arg("trap '' HUP; (trap '' HUP; exec sleep 30) & echo $!; wait")
                .stdout(Stdio::piped());
            crate::backends::docker::cli::reset_signal_dispositions(&mut cmd);
            // SAFETY: setsid is async-signal-safe.
            unsafe {
                cmd.pre_exec(|| {
                    libc::setsid();
                    Ok(())
                });
            }
            let mut leader = cmd.spawn().unwrap();
            let mut line = String::new();
            {
                use std::io::BufRead;
                let mut r = std::io::BufReader::new(leader.stdout.take().unwrap());
                r.read_line(&mut line).unwrap();
            }
            let job: i32 = line.trim().parse().unwrap();
            let cmd = cleanup_command_with_parent(
                Some(leader.id()),
                &[f.to_str().unwrap(), g.to_str().unwrap()],
                me,
            );
            let start = Instant::now();
            let out = run_sh(&shell, &cmd, &[]);
            assert!(out.status.success(), "{shell:?}: {out:?}");
            // The leader ignored SIGHUP: the second of grace passed, then SIGKILL to the session.
            assert!(start.elapsed() >= Duration::from_millis(900), "{:?}", start.elapsed());
            assert!(wait_gone(&mut leader, Duration::from_secs(5)), "{shell:?}: leader alive");
            let start = Instant::now();
            while nix::sys::signal::kill(nix::unistd::Pid::from_raw(job), None).is_ok() {
                // The job is the leader's child: once the leader is reaped, it is re-parented.
                let stat = std::fs::read_to_string(format!("/proc/{job}/stat")).unwrap_or_default();
                if stat.contains(") Z ") || stat.is_empty() {
                    break;
                }
                assert!(start.elapsed() < Duration::from_secs(5), "{shell:?}: job {job} survived");
                std::thread::sleep(Duration::from_millis(20));
            }
            assert!(!f.exists() && !g.exists(), "{shell:?}: records left");
        }
        // Without a pid it only removes the records, and never fails.
        let cmd = cleanup_command(None, &["/nonexistent/x"]);
        for shell in shells() {
            assert!(run_sh(&shell, &cmd, &[]).status.success());
        }
    }
}
