//! The test images (testkit/src/images.rs) checked with real `docker run`s.
//! Needs a reachable Docker daemon: these tests fail, never skip, without one.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use testkit::images::{self, BASH, BUSYBOX, DASH, NONROOT, NOSHELL, READONLY};

const RUN_TIMEOUT: Duration = Duration::from_secs(60);

fn setup() {
    images::host_has_docker().unwrap_or_else(|e| panic!("{e}"));
    images::ensure_images().unwrap_or_else(|e| panic!("building test images: {e}"));
}

/// Removes the container by name when dropped (after a panic or a timeout; with `--rm` a
/// container that exited normally is already gone).
struct ContainerGuard(String);

impl Drop for ContainerGuard {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["rm", "-f", &self.0])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// `docker run --rm --label sandboxd.test=1 --name <unique> [docker_args] <image> sh -c <script>`.
fn run(image: &str, docker_args: &[&str], script: &str) -> Run {
    let name = format!("sandboxd-test-images-{}", uuid::Uuid::new_v4().simple());
    let guard = ContainerGuard(name.clone());
    let mut child = Command::new("docker")
        .args(["run", "--rm", "--label", "sandboxd.test=1", "--name", &name])
        .args(docker_args)
        .args([image, "sh", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn docker run");
    let deadline = Instant::now() + RUN_TIMEOUT;
    loop {
        if child.try_wait().expect("wait docker run").is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            drop(guard);
            panic!("docker run {image} {script:?} timed out after {RUN_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let Output { status, stdout, stderr } = child.wait_with_output().expect("docker run output");
    std::mem::forget(guard); // exited: --rm removed it
    Run {
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

fn run_ok(image: &str, docker_args: &[&str], script: &str) -> String {
    let r = run(image, docker_args, script);
    assert_eq!(
        r.code, 0,
        "{image}: `{script}` exited {}\nstdout: {}\nstderr: {}",
        r.code, r.stdout, r.stderr
    );
    r.stdout
}

#[test]
fn ensure_is_idempotent_and_fast_when_built() {
    setup();
    let t = Instant::now();
    images::ensure_images().unwrap();
    for tag in images::ALL {
        images::ensure(tag).unwrap();
    }
    assert!(t.elapsed() < Duration::from_secs(1), "warm ensure took {:?}", t.elapsed());
    let err = images::ensure("sandboxd-test/nope:1").unwrap_err();
    assert!(err.contains("unknown test image"), "{err}");
}

#[test]
fn busybox_image_has_sh_but_no_bash() {
    setup();
    let r = run(BUSYBOX, &[], "command -v bash");
    assert_ne!(r.code, 0, "bash found in {BUSYBOX}: {}", r.stdout);
    let out = run_ok(
        BUSYBOX,
        &[],
        "echo sh-ok; readlink /bin/sh; stat -c %a /tmp; /usr/bin/env true && echo env-ok; \
         cut -d: -f1 /etc/passwd | tr '\\n' ' '; echo; id -u",
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines, ["sh-ok", "busybox", "1777", "env-ok", "root nobody ", "0"], "{out}");
}

#[test]
fn bash_image_has_bash() {
    setup();
    let out = run_ok(
        BASH,
        &[],
        "command -v bash >/dev/null && echo found; /bin/bash -c 'echo ${BASH_VERSION%%.*}'",
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines, ["found", "5"], "{out}");
}

#[test]
fn dash_image_sh_is_dash_without_bash() {
    setup();
    let r = run(DASH, &[], "command -v bash");
    assert_ne!(r.code, 0, "bash found in {DASH}: {}", r.stdout);
    // dash's builtin echo expands backslash escapes; busybox ash and bash do not.
    let out = run_ok(
        DASH,
        &[],
        "readlink /bin/sh; echo 'a\\tb'; echo hi | cat | head -n1; stty -a </dev/null >/dev/null 2>&1; \
         sleep 0.01 && ps >/dev/null && rm -f /tmp/nothing && echo applets-ok",
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines, ["dash", "a\tb", "hi", "applets-ok"], "{out}");
}

#[test]
fn nonroot_image_runs_as_uid_1000() {
    setup();
    let out = run_ok(
        NONROOT,
        &[],
        "id -u; id -g; id -un; echo $HOME; stat -c %u:%g /home/sandbox; \
         touch $HOME/f && echo home-writable; test -x /bin/bash && echo has-bash",
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        ["1000", "1000", "sandbox", "/home/sandbox", "1000:1000", "home-writable", "has-bash"],
        "{out}"
    );
    let groups = run_ok(NONROOT, &[], "cut -d: -f1 /etc/group | tr '\\n' ' '");
    assert_eq!(groups.trim(), "root sandbox nogroup");
}

#[test]
fn readonly_image_has_no_tmp_and_shm_is_writable() {
    setup();
    let out = run_ok(
        READONLY,
        &["--read-only"],
        "test -e /tmp && echo has-tmp; echo x > /dev/shm/f && cat /dev/shm/f; \
         touch /probe 2>/dev/null && echo root-writable; echo done",
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines, ["x", "done"], "{out}");
}

#[test]
fn noshell_image_has_no_program_at_all() {
    setup();
    // `docker run IMAGE sh -c …` cannot start: there is no `sh` (docker's 127).
    let r = run(NOSHELL, &[], "true");
    assert_eq!(r.code, 127, "{NOSHELL} started sh: {} {}", r.stdout, r.stderr);
    // Busybox's own static binary mounted in runs there, and sees no other program.
    let out = Command::new("docker")
        .args(["run", "--rm", "--label", "sandboxd.test=1", "-v", "/bin/busybox:/busybox:ro"])
        .args([NOSHELL, "/busybox", "sh", "-c", "ls /bin | wc -l; stat -c %a /tmp; cat /etc/passwd | wc -l"])
        .output()
        .expect("docker run");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    assert_eq!(lines, ["0", "1777", "2"], "{text} {}", String::from_utf8_lossy(&out.stderr));
}
