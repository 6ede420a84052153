//! The launcher: the program a session's `docker exec` runs. It records its pid, sets its
//! terminal's size and execs the program.

/// The launcher script: `$0` is the pid file, `$1` the fallback, the rest the program.
///
/// It records its pid (which the program keeps: it is exec'd) in the pid file, else (removing a
/// partial write) in the fallback; when neither takes it, it says so on stderr and exits 1
/// instead of running an unsignallable program. In PTY mode it then sets the size of its own
/// terminal: on Engine API 1.41 `docker exec` cannot pass the console size at create and the
/// client resizes only once the program runs, so without this the program's first look at its
/// terminal could see a wrong size (a failing `stty`, e.g. a missing one, is ignored).
pub fn launcher_script(rows: u16, cols: u16, use_pty: bool) -> String {
    let mut script = String::from(
        "f=$0; g=$1; shift; \
         if { printf '%s\\n' \"$$\" >\"$f\"; } 2>/dev/null; then :; \
         elif { rm -f -- \"$f\"; printf '%s\\n' \"$$\" >\"$g\"; } 2>/dev/null; then :; \
         else echo \"sandboxd: cannot record the session pid in $f or $g; not starting the program\" >&2; \
         exit 1; fi; ",
    );
    if use_pty {
        script.push_str(&format!("{{ stty rows {rows} cols {cols}; }} >/dev/null 2>&1; "));
    }
    script.push_str("exec \"$@\"");
    script
}

/// The program `docker exec` runs: the launcher under `shell` with its pid file and the
/// fallback, then the shell itself (interactive when its stdin is a terminal, so it prompts and
/// the container's terminal echoes) or `shell -c command`.
pub fn launcher_argv(
    shell: &str,
    pid_file: &str,
    fallback: &str,
    command: Option<&str>,
    rows: u16,
    cols: u16,
    use_pty: bool,
) -> Vec<String> {
    let mut argv = vec![
        shell.to_string(),
        "-c".to_string(),
        launcher_script(rows, cols, use_pty),
        pid_file.to_string(),
        fallback.to_string(),
        shell.to_string(),
    ];
    if let Some(command) = command {
        argv.push("-c".to_string());
        argv.push(command.to_string());
    }
    argv
}

#[cfg(test)]
mod tests {
    use super::super::tests::{record_paths, run_sh, shells, tmpdir};
    use super::*;

    #[test]
    fn launcher_argv_shape() {
        let argv = launcher_argv("bash", "/tmp/a", "/dev/shm/a", None, 30, 100, true);
        assert_eq!(argv[0], "bash");
        assert_eq!(argv[1], "-c");
        assert!(argv[2].contains("stty rows 30 cols 100"));
        assert_eq!(&argv[3..], ["/tmp/a", "/dev/shm/a", "bash"]);
        let argv = launcher_argv("sh", "/tmp/a", "/dev/shm/a", Some("echo hi"), 24, 80, false);
        assert!(!argv[2].contains("stty"));
        assert_eq!(&argv[3..], ["/tmp/a", "/dev/shm/a", "sh", "-c", "echo hi"]);
    }

    #[test]
    fn launcher_records_pid_and_runs_program() {
        for shell in shells() {
            let (_dir, f, g) = record_paths();
            let script = launcher_script(24, 80, false);
            let out = run_sh(
                &shell,
                &script,
                &[
                    f.to_str().unwrap(),
                    g.to_str().unwrap(),
                    "sh",
                    "-c",
                    "echo pid=$$; echo \"$1\"",
                    "sh",
                    "a b",
                ],
            );
            assert!(out.status.success(), "{shell:?}: {out:?}");
            let stdout = String::from_utf8_lossy(&out.stdout);
            let recorded = std::fs::read_to_string(&f).expect("pid file");
            // The program runs as the launcher's pid (exec), so the record names it.
            assert_eq!(stdout, format!("pid={}\na b\n", recorded.trim()), "{shell:?}");
            assert!(!g.exists());
        }
    }

    #[test]
    fn launcher_falls_back_then_refuses() {
        for shell in shells() {
            let dir = tmpdir();
            // The first path is in a directory that does not exist: the write fails.
            let f = dir.path().join("missing/pid");
            let g = dir.path().join("fallback");
            let script = launcher_script(24, 80, true);
            let out =
                run_sh(&shell, &script, &[f.to_str().unwrap(), g.to_str().unwrap(), "sh", "-c", "echo $$"]);
            assert!(out.status.success(), "{shell:?}: {out:?}");
            let recorded = std::fs::read_to_string(&g).expect("fallback pid file");
            assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), recorded.trim(), "{shell:?}");
            // Without a terminal the stty fails silently.
            assert!(out.stderr.is_empty(), "{shell:?}: {:?}", String::from_utf8_lossy(&out.stderr));

            let g2 = dir.path().join("missing2/pid");
            let out = run_sh(
                &shell,
                &script,
                &[f.to_str().unwrap(), g2.to_str().unwrap(), "sh", "-c", "echo program-ran"],
            );
            assert_eq!(out.status.code(), Some(1), "{shell:?}");
            assert!(out.stdout.is_empty(), "{shell:?}: the program must not run");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("cannot record the session pid"), "{shell:?}: {err}");
        }
    }
}
