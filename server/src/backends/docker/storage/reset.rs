//! `Reset` on the Docker backend: the sandbox back to the state it was created in, in place.
//!
//! How (chosen for Engine 20.10 with fuse-overlayfs or overlay2, `disk_bound: loop` or none):
//! 1. every agent session (terminals, processes, their retained output) is closed and
//!    forgotten, and the server's own terminal sessions released;
//! 2. one root exec (builtins of any POSIX shell only, so it forks nothing it would have to
//!    spare) stops and kills every process in the sandbox except pid 1, the agent (its init and
//!    its `docker exec` channels), the exec's own ancestors and the sandbox's main process (the
//!    keep-alive or the spec's entrypoint: the agent's first child) with its descendants; it
//!    prints the sandbox's mount points;
//! 3. the container's writable layer (the driver's `UpperDir`, on the host; with a loop disk,
//!    the ext4 file mounted there) is read, never written, by this server: every entry in it
//!    is a change of the episode. An entry the image lacks is removed; one that replaces,
//!    changes or deletes (a whiteout) a path of the image is removed and the image's version,
//!    read from the image's own layers (`LowerDir`, the topmost one that has it, whiteouts and
//!    opaque directories honoured, no symlink followed), written back. Both go through the
//!    agent (file calls and uploads as root), so the overlay's view stays coherent (the layer
//!    is never touched underneath a mounted fuse-overlayfs). Mount points (volumes, the
//!    agent's directory, docker's files) and the service's bookkeeping are left alone;
//! 4. the spec's `files` are written again and volume subpaths linked again.
//!
//! The spec's env comes back by itself: it is the container's, and whatever an episode
//! exported lived in processes that are gone (or in files, rolled back). What stays: the main
//! process (a spec entrypoint is not restarted), the container's id, labels, lease, tokens,
//! network and its usage counters. gVisor's runsc keeps a sandbox's writes in its own memory
//! (`--overlay2=root:memory`), where this server cannot read them: refused there.

use std::collections::BTreeSet;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::diff::is_bookkeeping;
use super::layers::Layers;
use super::provider::DockerProvider;
use super::transport::ExecSpec;
use crate::core::fs::FileOp;
use crate::core::reset::ResetReport;
use crate::core::spec::{ExecParams, SandboxHandle, SandboxId, SandboxSpec};
use crate::error::{ProviderError, Result};

/// The most paths one reset rolls back before it gives up (a sandbox that rewrote its whole
/// image is cheaper to replace).
const MAX_PATHS: usize = 100_000;
/// How long the kill step may take.
const KILL_TIMEOUT: Duration = Duration::from_secs(30);

/// The kill step: POSIX shell builtins only (read, set, case, test, kill), so no child of its
/// own is among the processes it kills. Prints `K <killed>` then `M <mount point>` lines. Run
/// after a `roots=keep|kill` line: whether other `docker exec` roots (parent pid 0: the agent's
/// channels, or with no agent the episode's own execs) are spared.
const KILL_SCRIPT: &str = r#"self=$$
keep=" 1 $self "
p=$self
while [ "$p" -gt 1 ]; do
  st=; read -r st < /proc/$p/stat 2>/dev/null || break
  set -- ${st##*) }
  p=$2; keep="$keep$p "
done
init=1
if ! [ /proc/1/exe -ef /.sandboxd/agent ]; then
  for d in /proc/[0-9]*; do
    [ "$d/exe" -ef /.sandboxd/agent ] || continue
    st=; read -r st < $d/stat 2>/dev/null || continue
    set -- ${st##*) }
    [ "$2" = 1 ] && init=${d#/proc/}
  done
fi
keep="$keep$init "
main=; best=; pairs=
for d in /proc/[0-9]*; do
  q=${d#/proc/}
  st=; read -r st < $d/stat 2>/dev/null || continue
  set -- ${st##*) }
  pairs="$pairs $q:$2"
  [ "$2" = "$init" ] || continue
  case "$keep" in *" $q "*) continue;; esac
  if [ -z "$best" ] || [ "${20}" -lt "$best" ]; then best=${20}; main=$q; fi
done
tree=" $main "
changed=1
while [ -n "$main" ] && [ $changed = 1 ]; do
  changed=0
  for pr in $pairs; do
    c=${pr%%:*}; pp=${pr#*:}
    case "$tree" in *" $c "*) continue;; esac
    case "$tree" in *" $pp "*) tree="$tree$c "; changed=1;; esac
  done
done
keep="$keep$tree"
killed=" "
for round in 1 2 3 4 5 6; do
  victims=
  for d in /proc/[0-9]*; do
    q=${d#/proc/}
    case "$keep" in *" $q "*) continue;; esac
    st=; read -r st < $d/stat 2>/dev/null || continue
    set -- ${st##*) }
    [ "$1" = Z ] && continue
    [ "$2" = 0 ] && [ "$roots" != kill ] && continue
    victims="$victims $q"
    case "$killed" in *" $q "*) ;; *) killed="$killed$q ";; esac
  done
  [ -z "$victims" ] && break
  kill -STOP $victims 2>/dev/null
  kill -KILL $victims 2>/dev/null
done
n=0
for q in $killed; do n=$((n+1)); done
echo "K $n"
while read -r a b c d mnt rest; do echo "M $mnt"; done < /proc/1/mountinfo
"#;

/// One path to write back from the image.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Restore {
    File { path: String, source: PathBuf, mode: u32 },
    Dir { path: String, mode: u32 },
    Link { path: String, target: String },
}

/// What a reset does to the root filesystem.
#[derive(Debug, Default)]
struct Plan {
    remove: Vec<String>,
    restore: Vec<Restore>,
}

impl DockerProvider {
    /// Keep what `id` is reset to beyond its image: the spec it was created from (its files
    /// and volumes). A sandbox this process did not create has none, unless the node that
    /// completed its create (cluster mode) handed it over.
    pub(crate) fn keep_baseline(&self, id: &str, spec: &SandboxSpec) {
        self.records.update(id, |r| r.baseline = Some(Arc::new(spec.clone())));
    }

    pub async fn reset(&self, id: &SandboxId) -> Result<ResetReport> {
        let handle = self.handle(id.as_str()).await?;
        let name = handle.sandbox_id.clone();
        if handle.runtime.as_deref().is_some_and(|r| r != "runc" && !r.is_empty()) {
            return Err(ProviderError::FailedPrecondition(format!(
                "sandbox {name} runs on the {:?} runtime, which keeps its root filesystem's writes in the sandbox's own memory: Reset cannot roll them back there (close it and create another)",
                handle.runtime.as_deref().unwrap_or_default()
            )));
        }
        self.refuse_if_paused(&name).await?;
        let baseline = self.records.read(&name, |r| r.baseline.clone()).flatten().ok_or_else(|| {
            ProviderError::FailedPrecondition(format!(
                "sandbox {name} was not created by this server process (a restart forgets what a sandbox was created with): Reset cannot restore its spec's files; close it and create another"
            ))
        })?;
        let layers = self.layers(&name).await?;
        // 1. Sessions (and their retained output) end and are forgotten.
        self.release_pty_sessions(&name, true).await;
        if let Some(agent) = &self.agent {
            agent.close_all_sessions(&name).await?;
        }
        // 2. Every other process of the episode.
        // Without the agent (the docker exec engine, as in cluster mode) no `docker exec` root
        // is the agent's channel: the other execs still running are the episode's too.
        let kill = format!("roots={}\n{KILL_SCRIPT}", if self.agent.is_some() { "keep" } else { "kill" });
        let params = ExecParams { timeout: Some(KILL_TIMEOUT), ..Default::default() };
        let exec =
            ExecSpec { name: &name, shell: &handle.shell, command: &kill, params: &params, user: Some("0") };
        let result = self.engine.exec(exec).await;
        if result.return_code != 0 || result.error_type.is_some() {
            return Err(ProviderError::FailedPrecondition(format!(
                "sandbox {name}: Reset's kill step failed (it needs a POSIX shell and /proc in the sandbox): exit {}, {}",
                result.return_code,
                result.stderr_str().trim()
            )));
        }
        let out = String::from_utf8_lossy(&result.stdout).to_string();
        let mut processes_killed = 0;
        let mut mounts = BTreeSet::new();
        for line in out.lines() {
            if let Some(n) = line.strip_prefix("K ") {
                processes_killed = n.trim().parse().unwrap_or(0);
            } else if let Some(m) = line.strip_prefix("M ") {
                mounts.insert(unescape_mount(m));
            }
        }
        // 3. The root filesystem's changes.
        let plan = tokio::task::spawn_blocking(move || plan(&layers, &mounts))
            .await
            .map_err(|e| ProviderError::Docker(format!("the reset's layer walk failed: {e}")))??;
        let paths_restored = (plan.remove.len() + plan.restore.len()) as u32;
        self.apply(&handle, plan).await?;
        // 4. The spec's own files and links.
        for (path, content) in &baseline.files {
            self.upload_reader(&handle, content.as_slice(), content.len() as u64, path, None, &[]).await?;
        }
        self.link_subpaths(&name, &baseline).await?;
        tracing::info!(sandbox_id = %name, paths_restored, processes_killed, "sandbox reset");
        Ok(ResetReport { paths_restored, processes_killed })
    }

    /// The container's upper and lower layer directories, as this server sees them: asked of
    /// the daemon at the sandbox's first reset, then remembered until it is closed.
    async fn layers(&self, name: &str) -> Result<Layers> {
        if let Some(layers) = self.records.read(name, |r| r.layers.clone()).flatten() {
            return Ok(layers);
        }
        let layers = self.inspect_layers(name).await?;
        self.records.update(name, |r| r.layers = Some(layers.clone()));
        Ok(layers)
    }

    async fn inspect_layers(&self, name: &str) -> Result<Layers> {
        let facts = self.layer_facts(name).await?;
        let (driver, upper, lower) = (&facts.driver, facts.upper_dir.as_str(), facts.lower_dir.as_str());
        let refuse = |why: String| {
            ProviderError::FailedPrecondition(format!(
                "sandbox {name}: Reset needs the container's layers on this server's host ({why}): a local daemon with overlay2 or fuse-overlayfs and the server as root"
            ))
        };
        if !upper.starts_with('/') || upper.contains("<no value>") {
            return Err(refuse(format!("the storage driver {driver:?} names no upper dir")));
        }
        let upper = PathBuf::from(upper);
        if !upper.is_dir() {
            return Err(refuse(format!("{} is not visible", upper.display())));
        }
        let lowers: Vec<PathBuf> = if lower.starts_with('/') {
            lower.split(':').filter(|l| !l.is_empty()).map(PathBuf::from).collect()
        } else {
            Vec::new()
        };
        if lowers.iter().any(|l| !l.is_dir()) {
            return Err(refuse("a lower layer is not visible".into()));
        }
        Ok(Layers { upper, lowers })
    }

    /// Remove what the episode added or changed, then write the image's versions back.
    async fn apply(&self, handle: &SandboxHandle, plan: Plan) -> Result<()> {
        if self.agent.is_none() {
            return self.apply_by_exec(handle, plan).await;
        }
        let root = Some(crate::core::spec::User::parse("user", "0")?);
        for path in &plan.remove {
            let op = FileOp::Remove { path: path.as_bytes().to_vec(), recursive: true };
            match self.file_op(handle, &op, root.as_ref()).await {
                Ok(()) | Err(ProviderError::FileNotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        let mut links = String::new();
        for restore in &plan.restore {
            match restore {
                Restore::Dir { path, mode } => {
                    let op = FileOp::MakeDir { path: path.as_bytes().to_vec(), parents: true, mode: *mode };
                    match self.file_op(handle, &op, root.as_ref()).await {
                        Ok(()) | Err(ProviderError::AlreadyExists(_)) => {}
                        Err(e) => return Err(e),
                    }
                }
                Restore::File { path, source, mode } => {
                    let file = tokio::fs::File::open(source).await?;
                    let size = file.metadata().await?.len();
                    let reader = tokio::io::BufReader::new(file);
                    self.upload_reader(handle, reader, size, path, Some(*mode), &[]).await?;
                }
                Restore::Link { path, target } => {
                    use super::pty::container::shell_quote as q;
                    links.push_str(&format!("ln -sfn -- {} {} || exit 1\n", q(target), q(path)));
                }
            }
        }
        if !links.is_empty() {
            let params = ExecParams { timeout: Some(KILL_TIMEOUT), ..Default::default() };
            let exec = ExecSpec {
                name: &handle.sandbox_id,
                shell: &handle.shell,
                command: &links,
                params: &params,
                user: Some("0"),
            };
            let result = self.engine.exec(exec).await;
            if result.return_code != 0 || result.error_type.is_some() {
                return Err(ProviderError::Docker(format!(
                    "sandbox {}: cannot restore the image's symbolic links: {}",
                    handle.sandbox_id,
                    result.stderr_str().trim()
                )));
            }
        }
        Ok(())
    }
}

impl DockerProvider {
    /// `apply` without the agent (the docker exec engine, as in cluster mode): removals,
    /// directories and links by root execs of shell commands (in scripts of at most
    /// [`SCRIPT_BYTES`], under the kernel's bound on one argument), files by `docker cp`.
    async fn apply_by_exec(&self, handle: &SandboxHandle, plan: Plan) -> Result<()> {
        use super::pty::container::shell_quote as q;
        let mut lines: Vec<String> = plan.remove.iter().map(|p| format!("rm -rf -- {}", q(p))).collect();
        for restore in &plan.restore {
            match restore {
                Restore::Dir { path, mode } => {
                    lines.push(format!("mkdir -p -- {p} && chmod {mode:o} -- {p}", p = q(path)));
                }
                Restore::Link { path, target } => lines.push(format!("ln -sfn -- {} {}", q(target), q(path))),
                Restore::File { .. } => {}
            }
        }
        for script in scripts(&lines) {
            self.root_script(handle, &script).await?;
        }
        // Files after their directories (made above); a link's target need not exist.
        for restore in &plan.restore {
            if let Restore::File { path, source, mode } = restore {
                let file = tokio::fs::File::open(source).await?;
                let size = file.metadata().await?.len();
                let reader = tokio::io::BufReader::new(file);
                self.upload_reader(handle, reader, size, path, Some(*mode), &[]).await?;
            }
        }
        Ok(())
    }

    /// One root exec of `script`; any failure is the reset's.
    async fn root_script(&self, handle: &SandboxHandle, script: &str) -> Result<()> {
        let params = ExecParams { timeout: Some(KILL_TIMEOUT), ..Default::default() };
        let exec = ExecSpec {
            name: &handle.sandbox_id,
            shell: &handle.shell,
            command: script,
            params: &params,
            user: Some("0"),
        };
        let result = self.engine.exec(exec).await;
        if result.return_code != 0 || result.error_type.is_some() {
            return Err(ProviderError::Docker(format!(
                "sandbox {}: the reset's roll-back failed: exit {}, {}",
                handle.sandbox_id,
                result.return_code,
                result.stderr_str().trim()
            )));
        }
        Ok(())
    }
}

/// The most bytes of one roll-back script (one `sh -c` argument; Linux bounds one at 128 KiB).
const SCRIPT_BYTES: usize = 64 * 1024;

/// `lines` joined into scripts of at most [`SCRIPT_BYTES`] (a longer line alone), each
/// stopping at its first failure.
fn scripts(lines: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::from("set -e\n");
    for line in lines {
        if current.len() + line.len() + 1 > SCRIPT_BYTES && current.len() > 7 {
            out.push(std::mem::replace(&mut current, String::from("set -e\n")));
        }
        current.push_str(line);
        current.push('\n');
    }
    if current.len() > 7 {
        out.push(current);
    }
    out
}

/// A mount point as `/proc/*/mountinfo` escapes it (`\040` for a space, …).
fn unescape_mount(field: &str) -> String {
    let bytes = field.trim().as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4].iter().all(|b| (b'0'..=b'7').contains(b))
        {
            let v = (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `meta` is an overlay whiteout (a 0:0 character device).
fn is_whiteout(meta: &std::fs::Metadata) -> bool {
    meta.file_type().is_char_device() && meta.rdev() == 0
}

/// Whether the directory `dir` (a real one) is opaque: it hides the lower layers' entries.
fn is_opaque(dir: &Path) -> bool {
    if dir.join(".wh..wh..opq").symlink_metadata().is_ok() {
        return true;
    }
    ["trusted.overlay.opaque", "user.overlay.opaque", "user.fuseoverlayfs.opaque"]
        .iter()
        .any(|name| xattr_is_y(dir, name))
}

fn xattr_is_y(path: &Path, name: &str) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let (Ok(p), Ok(n)) = (std::ffi::CString::new(path.as_os_str().as_bytes()), std::ffi::CString::new(name))
    else {
        return false;
    };
    let mut buf = [0u8; 4];
    // SAFETY: both strings are NUL-terminated and live across the call; the buffer's length is
    // passed with it.
    let n = unsafe { libc::lgetxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    n >= 1 && buf[0] == b'y'
}

/// `rel` (`a/b/c`, no leading slash) in the image: the topmost lower layer holding it, walking
/// each layer component by component without following a symbolic link (a layer whose ancestor
/// of `rel` is not a real directory does not hold it), whiteouts and opaque directories
/// honoured. `None`: the image does not have it.
fn in_image(lowers: &[PathBuf], rel: &str) -> Option<(PathBuf, std::fs::Metadata)> {
    let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
    for layer in lowers {
        let mut dir = layer.clone();
        let mut stop_below = false;
        let mut hidden = false;
        for (i, part) in parts.iter().enumerate() {
            let last = i + 1 == parts.len();
            if dir.join(format!(".wh.{part}")).symlink_metadata().is_ok() {
                hidden = true;
                break;
            }
            let here = dir.join(part);
            match here.symlink_metadata() {
                Ok(meta) if is_whiteout(&meta) => {
                    hidden = true;
                    break;
                }
                Ok(meta) if last => return Some((here, meta)),
                Ok(meta) if meta.is_dir() => {
                    if is_opaque(&here) {
                        stop_below = true;
                    }
                    dir = here;
                }
                // A file or link where the path needs a directory: the path ends in this layer.
                Ok(_) => {
                    hidden = true;
                    break;
                }
                Err(_) => break,
            }
        }
        if hidden {
            return None;
        }
        if stop_below {
            // An opaque ancestor in this layer that did not hold the path: lower ones are hidden.
            return None;
        }
    }
    None
}

/// The names under directory `rel` of the image (every layer's, whiteouts applied).
fn image_children(lowers: &[PathBuf], rel: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for layer in lowers {
        let dir = if rel.is_empty() { layer.clone() } else { layer.join(rel) };
        // The same no-symlink walk as `in_image`, cut short: a layer whose copy is not a real
        // directory gives none.
        if !dir.symlink_metadata().map(|m| m.is_dir()).unwrap_or(false) {
            continue;
        }
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.flatten() {
                let Ok(name) = entry.file_name().into_string() else { continue };
                if name.starts_with(".wh.") {
                    continue;
                }
                names.insert(name);
            }
        }
        if is_opaque(&dir) {
            break;
        }
    }
    names
}

fn join(rel: &str, name: &str) -> String {
    if rel.is_empty() {
        name.to_string()
    } else {
        format!("{rel}/{name}")
    }
}

/// Whether a mount point is at `path` or below it.
fn holds_mount(mounts: &BTreeSet<String>, path: &str) -> bool {
    mounts.iter().any(|m| super::diff::under(m, path))
}

/// The image's version of `rel` (and, for a directory, of everything below it), to write back.
fn restore_from_image(lowers: &[PathBuf], rel: &str, out: &mut Plan) -> Result<()> {
    let Some((source, meta)) = in_image(lowers, rel) else { return Ok(()) };
    let path = format!("/{rel}");
    let mode = meta.permissions().mode() & 0o7777;
    if meta.is_dir() {
        out.restore.push(Restore::Dir { path, mode });
        for name in image_children(lowers, rel) {
            if out.restore.len() > MAX_PATHS {
                return Err(too_many());
            }
            restore_from_image(lowers, &join(rel, &name), out)?;
        }
    } else if meta.file_type().is_symlink() {
        let target = std::fs::read_link(&source)?;
        out.restore.push(Restore::Link { path, target: target.to_string_lossy().into_owned() });
    } else if meta.is_file() {
        out.restore.push(Restore::File { path, source, mode });
    }
    // Devices, fifos and sockets of an image are left out.
    Ok(())
}

fn too_many() -> ProviderError {
    ProviderError::FailedPrecondition(format!(
        "the sandbox changed more than {MAX_PATHS} paths of its image: close it and create another"
    ))
}

/// Walk the upper layer: what to remove and what to write back from the image.
fn plan(layers: &Layers, mounts: &BTreeSet<String>) -> Result<Plan> {
    let mut out = Plan::default();
    walk(layers, mounts, "", &mut out)?;
    Ok(out)
}

fn walk(layers: &Layers, mounts: &BTreeSet<String>, rel: &str, out: &mut Plan) -> Result<()> {
    let dir = if rel.is_empty() { layers.upper.clone() } else { layers.upper.join(rel) };
    let Ok(entries) = std::fs::read_dir(&dir) else { return Ok(()) };
    let mut names: Vec<String> = entries.flatten().filter_map(|e| e.file_name().into_string().ok()).collect();
    names.sort();
    for name in names {
        if out.remove.len() + out.restore.len() > MAX_PATHS {
            return Err(too_many());
        }
        if name == ".wh..wh..opq" {
            continue;
        }
        if let Some(hidden) = name.strip_prefix(".wh.") {
            // A whiteout in the `.wh.` form: an image path the episode deleted.
            let child = join(rel, hidden);
            if !is_bookkeeping(&format!("/{child}")) && !holds_mount(mounts, &format!("/{child}")) {
                restore_from_image(&layers.lowers, &child, out)?;
            }
            continue;
        }
        let child = join(rel, &name);
        let abs = format!("/{child}");
        if is_bookkeeping(&abs) {
            continue;
        }
        let Ok(meta) = dir.join(&name).symlink_metadata() else { continue };
        if is_whiteout(&meta) {
            if !holds_mount(mounts, &abs) {
                restore_from_image(&layers.lowers, &child, out)?;
            }
            continue;
        }
        let image = in_image(&layers.lowers, &child);
        let image_dir = image.as_ref().is_some_and(|(_, m)| m.is_dir());
        if meta.is_dir() && (image_dir || holds_mount(mounts, &abs)) {
            if image_dir && is_opaque(&dir.join(&name)) && !holds_mount(mounts, &abs) {
                // The episode replaced an image directory wholesale.
                out.remove.push(abs);
                restore_from_image(&layers.lowers, &child, out)?;
            } else {
                walk(layers, mounts, &child, out)?;
            }
            continue;
        }
        if mounts.contains(&abs) {
            continue;
        }
        out.remove.push(abs);
        if image.is_some() {
            restore_from_image(&layers.lowers, &child, out)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roll_back_scripts_stay_under_the_argument_bound() {
        assert!(scripts(&[]).is_empty());
        let lines: Vec<String> = (0..5000).map(|i| format!("rm -rf -- '/tmp/file-number-{i}'")).collect();
        let out = scripts(&lines);
        assert!(out.len() > 1, "{} scripts", out.len());
        assert!(out.iter().all(|s| s.len() <= SCRIPT_BYTES && s.starts_with("set -e\n")));
        let joined: usize = out.iter().map(|s| s.lines().count() - 1).sum();
        assert_eq!(joined, lines.len());
    }

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape_mount("/a\\040b"), "/a b");
        assert_eq!(unescape_mount("/plain"), "/plain");
    }

    #[test]
    fn a_layer_walk_removes_additions_and_restores_changes_and_deletions() {
        let base = tempfile::tempdir().unwrap();
        let (upper, lower) = (base.path().join("upper"), base.path().join("lower"));
        for d in ["etc", "bin", "data"] {
            std::fs::create_dir_all(lower.join(d)).unwrap();
        }
        std::fs::write(lower.join("etc/motd"), b"hello").unwrap();
        std::fs::write(lower.join("bin/tool"), b"t").unwrap();
        std::fs::create_dir_all(upper.join("etc")).unwrap();
        std::fs::create_dir_all(upper.join("bin")).unwrap();
        // A volume's mount point runc made (the image lacks it): left alone.
        std::fs::create_dir_all(upper.join("vol")).unwrap();
        std::fs::write(upper.join("etc/motd"), b"changed").unwrap();
        std::fs::write(upper.join("etc/new"), b"added").unwrap();
        std::fs::write(upper.join("bin/.wh.tool"), b"").unwrap();
        std::fs::create_dir_all(upper.join(".sandboxd")).unwrap();
        let layers = Layers { upper, lowers: vec![lower.clone()] };
        let mounts: BTreeSet<String> = ["/vol".to_string()].into();
        let plan = plan(&layers, &mounts).unwrap();
        assert_eq!(plan.remove, vec!["/etc/motd".to_string(), "/etc/new".to_string()]);
        assert_eq!(
            plan.restore,
            vec![
                Restore::File { path: "/bin/tool".into(), source: lower.join("bin/tool"), mode: 0o644 },
                Restore::File { path: "/etc/motd".into(), source: lower.join("etc/motd"), mode: 0o644 },
            ]
        );
    }
}
