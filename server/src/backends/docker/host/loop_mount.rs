//! The host tools under a loop disk (`disk.rs`, `disk_stock.rs`, `closing.rs`): format an ext4
//! file, mount it through a loop device, unmount it lazily; nothing here knows a sandbox.

use std::path::{Path, PathBuf};

/// Make an ext4 file system of the whole file `image`, with `content`'s files in it.
pub async fn format(image: &str, content: Option<&str>) -> std::result::Result<(), String> {
    let options = "lazy_itable_init=1,lazy_journal_init=1";
    let mut args = vec!["-q", "-F", "-m", "0", "-E", options];
    if let Some(dir) = content {
        args.extend(["-d", dir]);
    }
    args.push(image);
    run_tool("mkfs.ext4", &args).await
}

/// Mount the ext4 file `image` on `dir` through a loop device (freed with the last unmount).
pub async fn mount_loop(image: &Path, dir: &Path) -> std::result::Result<(), String> {
    run_tool("mount", &["-o", "loop,noatime", &image.to_string_lossy(), &dir.to_string_lossy()]).await
}

/// Lazily unmount the loop disk from `layer` (container `name`'s), if one is mounted there, and
/// unlink its file: found from the mount itself (the loop device's backing file), so whichever
/// server removes the sandbox (a replica, a restarted server) takes the file of the server that
/// made it. The loop device keeps the unlinked file until the overlay above it goes.
pub async fn detach_layer(name: &str, layer: &Path) {
    if is_mount_point(layer) {
        let file = loop_backing_file(layer);
        let layer = layer.to_string_lossy().to_string();
        if let Err(e) = run_tool("umount", &["-l", &layer]).await {
            tracing::warn!(sandbox_id = %name, error = %e, "could not detach a loop disk");
            return;
        }
        if let Some(file) = file.filter(|f| is_disk_file(f)) {
            if let Err(e) = std::fs::remove_file(&file) {
                tracing::debug!(file = %file.display(), error = %e, "disk file already gone");
            }
        }
    }
}

/// The file behind the loop device mounted at `dir` (`/proc/self/mountinfo`'s source, then
/// `/sys/block/loopN/loop/backing_file`).
fn loop_backing_file(dir: &Path) -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = dir.to_string_lossy();
    let line = info.lines().rev().find(|l| l.split(' ').nth(4) == Some(want.as_ref()))?;
    let source = line.split(" - ").nth(1)?.split(' ').nth(1)?;
    let device = source.strip_prefix("/dev/")?;
    let backing = std::fs::read_to_string(format!("/sys/block/{device}/loop/backing_file")).ok()?;
    Some(PathBuf::from(backing.trim().trim_end_matches(" (deleted)")))
}

/// A disk file this service makes: `…/disks/<hex container id>.img`.
fn is_disk_file(file: &Path) -> bool {
    let stem_hex = file
        .file_stem()
        .and_then(|s| s.to_str())
        .is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit()));
    stem_hex
        && file.extension().is_some_and(|e| e == "img")
        && file.parent().and_then(|p| p.file_name()).is_some_and(|d| d == "disks")
}

/// Whether `dir` is a mount point (`/proc/self/mountinfo`'s fifth field).
pub fn is_mount_point(dir: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return false };
    let want = dir.to_string_lossy();
    info.lines().any(|l| l.split(' ').nth(4) == Some(want.as_ref()))
}

/// Run a host tool; its stderr on failure.
async fn run_tool(program: &str, args: &[&str]) -> std::result::Result<(), String> {
    let out = tokio::process::Command::new(super::host_tools::program(program))
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{program}: {}", String::from_utf8_lossy(&out.stderr).trim()))
    }
}
