//! Loop disk files formatted before any create asks for one, so a create's disk bound costs a
//! rename and a mount instead of `mkfs.ext4` on its path (≈ 30–40 ms on this project's
//! machine). A small stock per size lives under `<state_dir>/disks/stock/<bytes>/`: ready files
//! `<uuid>.img`, empty sparse ext4 (a few MiB on the host each), and files being formatted under
//! `making/`, held (`held_files.rs`) by the server formatting them.
//!
//! A create claims a ready file by renaming it to its own `disks/<container id>.img`: only one
//! rename of a path succeeds, so servers sharing the state directory never take the same file.
//! It then reads the container's small writable layer directory (what `mkfs.ext4 -d` would
//! copy), mounts the file over it and writes that back in. A layer that is not small and plain
//! (more entries, larger files, anything but directories, files and links, extended
//! attributes) is formatted the old way. The stock is refilled in the background after each
//! claim and at each sweep; a file whose formatting died with its server is removed by the
//! next sweep, and the stock outlives restarts (it is what a restart would make again).

use std::collections::HashSet;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::held_files::{self, Held};

/// Ready files kept per size.
pub const STOCK_PER_SIZE: usize = 4;

/// Most entries, and bytes per file, of a layer copied into a stock file.
const MAX_ENTRIES: usize = 256;
const MAX_FILE_BYTES: u64 = 1 << 20;

/// The stock of one state directory.
#[derive(Debug, Clone)]
pub struct DiskStock {
    root: PathBuf,
    /// Sizes this process is refilling now (one refill per size at a time).
    refilling: Arc<Mutex<HashSet<u64>>>,
    /// Files this process took from the stock.
    claims: Arc<AtomicU64>,
}

impl DiskStock {
    /// The stock under `disks_dir/stock`.
    pub fn new(disks_dir: &Path) -> Self {
        Self { root: disks_dir.join("stock"), refilling: Arc::default(), claims: Arc::default() }
    }

    fn size_dir(&self, bytes: u64) -> PathBuf {
        self.root.join(bytes.to_string())
    }

    fn ready(&self, bytes: u64) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(self.size_dir(bytes)) else { return Vec::new() };
        entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "img") && p.is_file())
            .collect()
    }

    /// Take a ready file of `bytes` as `to`. `false`: none is ready (or another server took the
    /// last ones first).
    pub fn claim(&self, bytes: u64, to: &Path) -> bool {
        let claimed = self.ready(bytes).iter().any(|file| std::fs::rename(file, to).is_ok());
        if claimed {
            self.claims.fetch_add(1, Ordering::Relaxed);
        }
        claimed
    }

    /// How many files this process took from the stock.
    pub fn claims(&self) -> u64 {
        self.claims.load(Ordering::Relaxed)
    }

    /// Bring the stock of `bytes` up to [`STOCK_PER_SIZE`] in the background (a no-op while this
    /// process refills that size already, or outside a runtime).
    pub fn refill(&self, bytes: u64) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        if !self.refilling.lock().is_ok_and(|mut set| set.insert(bytes)) {
            return;
        }
        let stock = self.clone();
        runtime.spawn(async move {
            while stock.ready(bytes).len() < STOCK_PER_SIZE {
                if let Err(e) = stock.make_one(bytes).await {
                    tracing::warn!(bytes, error = %e, "cannot format a disk file for the stock");
                    break;
                }
            }
            if let Ok(mut set) = stock.refilling.lock() {
                set.remove(&bytes);
            }
        });
    }

    /// Format one file of `bytes` under `making/` (held meanwhile), then put it in the stock.
    async fn make_one(&self, bytes: u64) -> Result<(), String> {
        let name = format!("{}.img", uuid::Uuid::new_v4().simple());
        let making = self.size_dir(bytes).join("making").join(&name);
        let held = Held::create(&making, b"").map_err(|e| format!("{}: {e}", making.display()))?;
        let made = async {
            let file =
                std::fs::OpenOptions::new().write(true).open(held.path()).map_err(|e| e.to_string())?;
            file.set_len(bytes).map_err(|e| e.to_string())?;
            drop(file);
            let path = held.path().to_string_lossy().to_string();
            super::loop_mount::format(&path, None).await
        }
        .await;
        if let Err(e) = made {
            held.finish();
            return Err(e);
        }
        match held.rename(&self.size_dir(bytes).join(&name)) {
            Ok(ready) => {
                ready.release();
                Ok(())
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// The sweep's part: files whose formatting died with its server go.
    pub fn prune_abandoned(&self) {
        let Ok(sizes) = std::fs::read_dir(&self.root) else { return };
        for size in sizes.flatten() {
            for held in held_files::unheld(&size.path().join("making"), Duration::from_secs(60)) {
                held.finish();
            }
        }
    }
}

/// One entry of a layer directory, as read before a disk is mounted over it.
#[derive(Debug)]
struct Entry {
    rel: PathBuf,
    kind: Kind,
    mode: u32,
    uid: u32,
    gid: u32,
}

#[derive(Debug)]
enum Kind {
    Dir,
    File(Vec<u8>),
    Link(PathBuf),
}

/// Read `layer` (the root's own attributes first), or `None` when it is not small and plain.
fn read_layer(layer: &Path) -> Option<Vec<Entry>> {
    let mut entries = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        let path = layer.join(&rel);
        let meta = std::fs::symlink_metadata(&path).ok()?;
        if has_xattrs(&path)? {
            return None;
        }
        let kind = if meta.is_dir() {
            for child in std::fs::read_dir(&path).ok()? {
                pending.push(rel.join(child.ok()?.file_name()));
            }
            Kind::Dir
        } else if meta.is_file() && meta.len() <= MAX_FILE_BYTES {
            Kind::File(std::fs::read(&path).ok()?)
        } else if meta.file_type().is_symlink() {
            Kind::Link(std::fs::read_link(&path).ok()?)
        } else {
            return None;
        };
        entries.push(Entry { rel, kind, mode: meta.mode() & 0o7777, uid: meta.uid(), gid: meta.gid() });
        if entries.len() > MAX_ENTRIES {
            return None;
        }
    }
    Some(entries)
}

/// Whether `path` has extended attributes (not copied here); `None` when it cannot be told.
fn has_xattrs(path: &Path) -> Option<bool> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: a null buffer of size 0 asks only for the size of the list.
    let n = unsafe { libc::llistxattr(c.as_ptr(), std::ptr::null_mut(), 0) };
    match n {
        0 => Some(false),
        n if n > 0 => Some(true),
        _ if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOTSUP) => Some(false),
        _ => None,
    }
}

/// Write `entries` under `root` (the mounted disk), parents before children.
fn write_layer(root: &Path, entries: &[Entry]) -> std::io::Result<()> {
    for entry in entries {
        let path = root.join(&entry.rel);
        match &entry.kind {
            Kind::Dir if entry.rel.as_os_str().is_empty() => {}
            Kind::Dir => std::fs::create_dir(&path)?,
            Kind::File(bytes) => std::fs::write(&path, bytes)?,
            Kind::Link(target) => std::os::unix::fs::symlink(target, &path)?,
        }
        std::os::unix::fs::lchown(&path, Some(entry.uid), Some(entry.gid))?;
        if !matches!(entry.kind, Kind::Link(_)) {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(entry.mode))?;
        }
    }
    Ok(())
}

/// Mount the stock file `image` over `layer`, carrying the layer's content onto it: what
/// `mkfs.ext4 -d layer` then a mount would give. `Ok(false)`: the layer is not one this can
/// carry (nothing was mounted).
pub async fn mount_over(image: &Path, layer: &Path) -> Result<bool, String> {
    let Some(entries) = read_layer(layer) else { return Ok(false) };
    super::loop_mount::mount_loop(image, layer).await?;
    if let Err(e) = write_layer(layer, &entries) {
        super::loop_mount::detach_layer("a create", layer).await;
        return Err(format!("cannot carry the layer onto its disk: {e}"));
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_claimed_once() {
        let dir = tempfile::tempdir().unwrap();
        let stock = DiskStock::new(dir.path());
        std::fs::create_dir_all(stock.size_dir(7)).unwrap();
        std::fs::write(stock.size_dir(7).join("a.img"), b"").unwrap();
        let (one, two) = (dir.path().join("one.img"), dir.path().join("two.img"));
        assert!(stock.claim(7, &one));
        assert!(!stock.claim(7, &two), "the one stock file was claimed twice");
        assert!(one.exists() && !two.exists());
    }

    #[test]
    fn a_small_plain_layer_is_read_and_written_back_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let layer = dir.path().join("layer");
        std::fs::create_dir_all(layer.join("work/work")).unwrap();
        std::fs::create_dir_all(layer.join("diff")).unwrap();
        std::fs::write(layer.join("link"), b"ABC").unwrap();
        std::fs::set_permissions(layer.join("work/work"), std::fs::Permissions::from_mode(0o700)).unwrap();
        let entries = read_layer(&layer).expect("a plain layer");
        let copy = dir.path().join("copy");
        std::fs::create_dir(&copy).unwrap();
        write_layer(&copy, &entries).unwrap();
        assert_eq!(std::fs::read(copy.join("link")).unwrap(), b"ABC");
        assert!(copy.join("diff").is_dir());
        assert_eq!(std::fs::metadata(copy.join("work/work")).unwrap().mode() & 0o777, 0o700);
        std::fs::write(layer.join("big"), vec![0u8; (MAX_FILE_BYTES + 1) as usize]).unwrap();
        assert!(read_layer(&layer).is_none(), "a large file was carried");
    }
}
