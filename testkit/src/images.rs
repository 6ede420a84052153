//! Test images built from nothing (no registry on the test machines).
//!
//! Every image is a `docker import` of a root filesystem tar written here: Debian's static
//! busybox (`busybox-static`, `/bin/busybox`) with a symlink per applet in `/bin`, plus
//! Debian's `bash-static` as `/bin/bash` and/or Debian's dynamically linked `dash` as `/bin/sh`
//! depending on the image (the `noshell` image has none of them: no program at all).
//! `/usr/bin` is a symlink to `/bin` (so `/usr/bin/env` works); `/sbin`, `/usr/sbin` and
//! `/usr/local/bin` are empty directories.
//!
//! Images carry the label `sandboxd.test-image=<BUILD_VERSION>`; [`ensure_images`] and
//! [`ensure`] build only the images that are missing or carry another version, under a host
//! file lock (`flock` on `/tmp/sandboxd-test-images.lock`), so several test binaries may call
//! them at once. Bump [`BUILD_VERSION`] whenever a recipe changes.

use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;

/// Busybox only: `sh` is busybox ash, no bash. `/tmp` is 1777; `/etc/passwd` has root, nobody.
pub const BUSYBOX: &str = "sandboxd-test/busybox:1";
/// Busybox plus `/bin/bash` (Debian's bash-static).
pub const BASH: &str = "sandboxd-test/bash:1";
/// `/bin/sh` is Debian's dash (with its libc and loader), busybox applets for the rest. No bash.
pub const DASH: &str = "sandboxd-test/dash:1";
/// Busybox + bash; default `USER sandbox` (uid 1000, gid 1000, home `/home/sandbox`).
pub const NONROOT: &str = "sandboxd-test/nonroot:1";
/// Busybox without any `/tmp` directory, meant for `docker run --read-only`.
pub const READONLY: &str = "sandboxd-test/readonly:1";
/// No program at all (no shell, no busybox): the directories, `/tmp` and `/etc/passwd` only.
/// A sandbox of it runs programs by path (the agent's own `/.sandboxd/agent`).
pub const NOSHELL: &str = "sandboxd-test/noshell:1";

/// Every test image tag, in build order.
pub const ALL: [&str; 6] = [BUSYBOX, BASH, DASH, NONROOT, READONLY, NOSHELL];

/// Value of the `sandboxd.test-image` label; bump it when a recipe below changes.
pub const BUILD_VERSION: &str = "2026.11-r3";
/// Name of the version label.
pub const VERSION_LABEL: &str = "sandboxd.test-image";

const LOCK_PATH: &str = "/tmp/sandboxd-test-images.lock";
const BUSYBOX_HOST: &str = "/bin/busybox";
const BASH_HOST: &str = "/bin/bash-static";
const DASH_HOST: &str = "/bin/dash";
const PATH_ENV: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Fixed mtime for every tar entry (the content, not the clock, defines an image).
const MTIME: u64 = 1_700_000_000;

/// Tags known to be current in this process (saves the `docker image inspect`).
static READY: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());

#[derive(Clone, Copy, Debug)]
struct Recipe {
    tag: &'static str,
    busybox: bool,
    bash: bool,
    dash: bool,
    nonroot: bool,
    tmp: bool,
}

const RECIPES: [Recipe; 6] = [
    Recipe { tag: BUSYBOX, busybox: true, bash: false, dash: false, nonroot: false, tmp: true },
    Recipe { tag: BASH, busybox: true, bash: true, dash: false, nonroot: false, tmp: true },
    Recipe { tag: DASH, busybox: true, bash: false, dash: true, nonroot: false, tmp: true },
    Recipe { tag: NONROOT, busybox: true, bash: true, dash: false, nonroot: true, tmp: true },
    Recipe { tag: READONLY, busybox: true, bash: false, dash: false, nonroot: false, tmp: false },
    Recipe { tag: NOSHELL, busybox: false, bash: false, dash: false, nonroot: false, tmp: true },
];

/// `Ok` when `docker info` reaches a daemon; otherwise an error that says so. Integration
/// tests must fail (never skip) when this fails.
pub fn host_has_docker() -> Result<(), String> {
    let out = Command::new("docker")
        .args(["info", "--format", "{{.ServerVersion}}"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run the docker CLI ({e}); install docker and start the daemon"))?;
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || version.is_empty() {
        return Err(format!(
            "the Docker daemon is unreachable (`docker info` failed: {}). Start dockerd and \
             make sure this user may use the docker socket; these tests need a real daemon.",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// Builds every test image that is missing or outdated. Returns in well under a second when
/// all of them exist with the current [`BUILD_VERSION`] label.
pub fn ensure_images() -> Result<(), String> {
    ensure_tags(&ALL)
}

/// Builds one test image (one of the constants above) when missing or outdated.
pub fn ensure(tag: &str) -> Result<(), String> {
    let recipe = recipe(tag)?;
    ensure_tags(&[recipe.tag])
}

fn recipe(tag: &str) -> Result<Recipe, String> {
    RECIPES
        .iter()
        .copied()
        .find(|r| r.tag == tag)
        .ok_or_else(|| format!("unknown test image {tag:?}; known: {}", ALL.join(", ")))
}

fn ensure_tags(tags: &[&'static str]) -> Result<(), String> {
    // One process-wide mutex: tests of one binary run on several threads.
    let mut ready = READY.lock().unwrap_or_else(|e| e.into_inner());
    let mut todo: Vec<&'static str> = tags.iter().copied().filter(|t| !ready.contains(t)).collect();
    if todo.is_empty() {
        return Ok(());
    }
    // Fast path: one inspect for all of them.
    if all_current(&todo) {
        ready.extend(todo);
        return Ok(());
    }
    // Slow path: under the host lock (other test binaries), look again per tag and build.
    let _lock = HostLock::acquire()?;
    todo.retain(|t| !all_current(&[t]));
    let recipes: Vec<Recipe> = todo.iter().copied().map(recipe).collect::<Result<_, _>>()?;
    if !recipes.is_empty() {
        let inputs = HostInputs::load(&recipes)?;
        let results: Vec<Result<(), String>> = std::thread::scope(|s| {
            let handles: Vec<_> = recipes
                .iter()
                .map(|r| {
                    let inputs = &inputs;
                    s.spawn(move || build(r, inputs))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err("image build thread panicked".into())))
                .collect()
        });
        let errors: Vec<String> = results.into_iter().filter_map(Result::err).collect();
        if !errors.is_empty() {
            return Err(errors.join("\n"));
        }
    }
    ready.extend(tags.iter().copied());
    Ok(())
}

/// True when every tag exists locally with the current version label.
fn all_current(tags: &[&str]) -> bool {
    let format = format!("{{{{index .Config.Labels {VERSION_LABEL:?}}}}}");
    let out = Command::new("docker")
        .args(["image", "inspect", "--format", &format])
        .args(tags)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    match out {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout);
            let lines: Vec<&str> = text.lines().map(str::trim).collect();
            lines.len() == tags.len() && lines.iter().all(|l| *l == BUILD_VERSION)
        }
        _ => false,
    }
}

/// Exclusive `flock` on a file under /tmp, released on drop (or when the process dies).
struct HostLock(std::fs::File);

impl HostLock {
    fn acquire() -> Result<Self, String> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(LOCK_PATH)
            .map_err(|e| format!("cannot open lock file {LOCK_PATH}: {e}"))?;
        loop {
            // SAFETY: flock on a file descriptor we own for the lifetime of `file`.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
            if rc == 0 {
                return Ok(HostLock(file));
            }
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                return Err(format!("flock {LOCK_PATH}: {err}"));
            }
        }
    }
}

impl Drop for HostLock {
    fn drop(&mut self) {
        // SAFETY: unlocking our own descriptor; closing it would release the lock anyway.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// Host files the images are made of, read once per build.
struct HostInputs {
    busybox: Vec<u8>,
    applets: Vec<String>,
    bash: Option<Vec<u8>>,
    /// `/bin/dash` and the libraries `ldd /bin/dash` lists, by absolute path.
    dash: Option<(Vec<u8>, Vec<HostFile>)>,
}

/// A host file's absolute path and contents.
type HostFile = (String, Vec<u8>);

fn missing_host_file(path: &str, package: &str) -> String {
    format!(
        "{path} is missing on this host: install the Debian package `{package}` \
         (`apt-get install {package}`, or run scripts/install-deps.sh)"
    )
}

fn read_host(path: &str, package: &str) -> Result<Vec<u8>, String> {
    if !Path::new(path).exists() {
        return Err(missing_host_file(path, package));
    }
    std::fs::read(path).map_err(|e| format!("cannot read {path}: {e}"))
}

impl HostInputs {
    fn load(recipes: &[Recipe]) -> Result<Self, String> {
        let busybox = read_host(BUSYBOX_HOST, "busybox-static")?;
        let out = Command::new(BUSYBOX_HOST)
            .arg("--list")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {BUSYBOX_HOST} --list: {e}"))?;
        if !out.status.success() {
            return Err(format!("{BUSYBOX_HOST} --list failed: {}", String::from_utf8_lossy(&out.stderr)));
        }
        let applets: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::trim)
            .filter(|a| !a.is_empty() && *a != "busybox" && !a.contains('/'))
            .map(String::from)
            .collect();
        if !applets.iter().any(|a| a == "sh") {
            return Err(format!("{BUSYBOX_HOST} has no `sh` applet; install busybox-static"));
        }
        let bash =
            if recipes.iter().any(|r| r.bash) { Some(read_host(BASH_HOST, "bash-static")?) } else { None };
        let dash = if recipes.iter().any(|r| r.dash) {
            Some((read_host(DASH_HOST, "dash")?, dash_libraries()?))
        } else {
            None
        };
        Ok(HostInputs { busybox, applets, bash, dash })
    }
}

/// The shared objects `ldd /bin/dash` lists (libc and the loader), contents read through
/// symlinks, to be placed at the same absolute paths in the image.
fn dash_libraries() -> Result<Vec<HostFile>, String> {
    let out = Command::new("ldd")
        .arg(DASH_HOST)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `ldd {DASH_HOST}` (package libc-bin): {e}"))?;
    if !out.status.success() {
        return Err(format!("`ldd {DASH_HOST}` failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    let mut libs = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)"
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        let Some(path) = path.filter(|p| p.starts_with('/')) else {
            continue; // linux-vdso.so.1 and the like
        };
        let data = std::fs::read(path).map_err(|e| format!("cannot read {path}: {e}"))?;
        libs.push((path.to_string(), data));
    }
    if libs.is_empty() {
        return Err(format!("`ldd {DASH_HOST}` listed no libraries; is dash static?"));
    }
    Ok(libs)
}

/// A root filesystem tar under construction.
struct Rootfs {
    builder: tar::Builder<Vec<u8>>,
    dirs: BTreeSet<String>,
}

impl Rootfs {
    fn new() -> Self {
        Rootfs { builder: tar::Builder::new(Vec::new()), dirs: BTreeSet::new() }
    }

    fn header(kind: tar::EntryType, mode: u32, uid: u64, size: u64) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_uid(uid);
        h.set_gid(uid);
        h.set_mtime(MTIME);
        h.set_size(size);
        h
    }

    fn parents(&mut self, path: &str) -> Result<(), String> {
        if let Some((parent, _)) = path.rsplit_once('/') {
            if !self.dirs.contains(parent) {
                self.dir(parent, 0o755, 0)?;
            }
        }
        Ok(())
    }

    fn dir(&mut self, path: &str, mode: u32, uid: u64) -> Result<(), String> {
        self.parents(path)?;
        let mut h = Self::header(tar::EntryType::Directory, mode, uid, 0);
        self.builder
            .append_data(&mut h, format!("{path}/"), std::io::empty())
            .map_err(|e| format!("tar dir {path}: {e}"))?;
        self.dirs.insert(path.to_string());
        Ok(())
    }

    fn file(&mut self, path: &str, mode: u32, data: &[u8]) -> Result<(), String> {
        self.parents(path)?;
        let mut h = Self::header(tar::EntryType::Regular, mode, 0, data.len() as u64);
        self.builder.append_data(&mut h, path, data).map_err(|e| format!("tar file {path}: {e}"))
    }

    fn symlink(&mut self, path: &str, target: &str) -> Result<(), String> {
        self.parents(path)?;
        let mut h = Self::header(tar::EntryType::Symlink, 0o777, 0, 0);
        self.builder
            .append_link(&mut h, path, target)
            .map_err(|e| format!("tar symlink {path} -> {target}: {e}"))
    }

    fn finish(self) -> Result<Vec<u8>, String> {
        self.builder.into_inner().map_err(|e| format!("tar finish: {e}"))
    }
}

fn rootfs(r: &Recipe, inputs: &HostInputs) -> Result<Vec<u8>, String> {
    let mut fs = Rootfs::new();
    for d in ["bin", "etc", "home", "dev", "proc", "sys", "usr", "usr/local", "usr/local/bin", "var"] {
        fs.dir(d, 0o755, 0)?;
    }
    fs.dir("root", 0o700, 0)?;
    if r.tmp {
        fs.dir("tmp", 0o1777, 0)?;
        fs.dir("var/tmp", 0o1777, 0)?;
    }
    fs.symlink("usr/bin", "../bin")?;
    fs.dir("usr/sbin", 0o755, 0)?;
    fs.dir("sbin", 0o755, 0)?;

    if r.busybox {
        fs.file("bin/busybox", 0o755, &inputs.busybox)?;
        for applet in &inputs.applets {
            if applet == "sh" && r.dash {
                continue;
            }
            fs.symlink(&format!("bin/{applet}"), "busybox")?;
        }
    }
    if r.bash {
        let bash = inputs.bash.as_ref().ok_or("bash-static not loaded")?;
        fs.file("bin/bash", 0o755, bash)?;
    }
    if r.dash {
        let (dash, libs) = inputs.dash.as_ref().ok_or("dash not loaded")?;
        fs.file("bin/dash", 0o755, dash)?;
        fs.symlink("bin/sh", "dash")?;
        for (path, data) in libs {
            fs.file(path.trim_start_matches('/'), 0o755, data)?;
        }
    }

    let mut passwd = String::from("root:x:0:0:root:/root:/bin/sh\n");
    let mut group = String::from("root:x:0:\n");
    if r.nonroot {
        passwd.push_str("sandbox:x:1000:1000:sandbox:/home/sandbox:/bin/sh\n");
        group.push_str("sandbox:x:1000:\n");
        fs.dir("home/sandbox", 0o755, 1000)?;
    }
    passwd.push_str("nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n");
    group.push_str("nogroup:x:65534:\n");
    fs.file("etc/passwd", 0o644, passwd.as_bytes())?;
    fs.file("etc/group", 0o644, group.as_bytes())?;
    fs.finish()
}

fn build(r: &Recipe, inputs: &HostInputs) -> Result<(), String> {
    let tar = rootfs(r, inputs)?;
    let previous = image_id(r.tag);
    let mut cmd = Command::new("docker");
    cmd.arg("import")
        .args(["--change", &format!("ENV PATH={PATH_ENV}")])
        .args(["--change", r#"CMD ["/bin/sh"]"#]);
    if r.nonroot {
        cmd.args(["--change", "USER sandbox"]);
    }
    cmd.args(["--change", &format!("LABEL {VERSION_LABEL}={BUILD_VERSION}")])
        .args(["-", r.tag])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| format!("cannot run docker import: {e}"))?;
    let write_err = {
        let mut stdin = child.stdin.take().ok_or("docker import: no stdin")?;
        stdin.write_all(&tar).err()
    };
    let out = child.wait_with_output().map_err(|e| format!("docker import {}: {e}", r.tag))?;
    if !out.status.success() || write_err.is_some() {
        return Err(format!(
            "docker import {} failed ({}): {}{}",
            r.tag,
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            write_err.map(|e| format!(" (writing the tar: {e})")).unwrap_or_default()
        ));
    }
    if !all_current(&[r.tag]) {
        return Err(format!("docker import {} succeeded but the image is not visible", r.tag));
    }
    // An outdated build left behind untagged: remove it (best effort; a container may use it).
    if let Some(old) = previous.filter(|old| image_id(r.tag).as_ref() != Some(old)) {
        let _ = Command::new("docker")
            .args(["image", "rm", &old])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    Ok(())
}

fn image_id(tag: &str) -> Option<String> {
    let out = Command::new("docker")
        .args(["image", "inspect", "--format", "{{.Id}}", tag])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !id.is_empty()).then_some(id)
}
