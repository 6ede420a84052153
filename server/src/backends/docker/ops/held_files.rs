//! Files in the state directory that say "a server is working on this": held with an exclusive
//! `flock` by the server doing the work, so several servers sharing the state directory never
//! do one piece of work twice at once, and a file nobody holds is work whose server died (the
//! kernel drops a dead process's locks): any server may take it over. Used for closes whose
//! removal runs in the background (`closing.rs`) and for disk files being formatted
//! (`disk_stock.rs`).

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A file this process holds the lock of; the lock goes with the value.
#[derive(Debug)]
pub struct Held {
    path: PathBuf,
    file: File,
}

fn try_lock(file: &File) -> bool {
    // SAFETY: flock on an fd this process owns.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

impl Held {
    /// Write `content` to `path` and hold it: made under a dot-name first, locked, then renamed
    /// into place, so no other server ever sees it unheld while this one works.
    pub fn create(path: &Path, content: &[u8]) -> std::io::Result<Held> {
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("held");
        let temp = dir.join(format!(".{name}.{}", uuid::Uuid::new_v4().simple()));
        let mut file = File::create(&temp)?;
        if !try_lock(&file) {
            let _ = std::fs::remove_file(&temp);
            return Err(std::io::Error::other(format!("cannot lock {}", temp.display())));
        }
        let written = file.write_all(content).and_then(|_| std::fs::rename(&temp, path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temp);
            return Err(e);
        }
        Ok(Held { path: path.to_path_buf(), file })
    }

    /// Take over `path` when nobody holds it and it is still the file at that path (not one
    /// its holder removed as this opened it). `None`: someone works on it, or it is gone.
    pub fn take_over(path: &Path) -> Option<Held> {
        let file = File::open(path).ok()?;
        if !try_lock(&file) {
            return None;
        }
        let (opened, now) = (file.metadata().ok()?, std::fs::metadata(path).ok()?);
        (opened.ino() == now.ino() && opened.dev() == now.dev())
            .then(|| Held { path: path.to_path_buf(), file })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How long ago the file was last written (`None`: unknown).
    pub fn age(&self) -> Option<std::time::Duration> {
        std::fs::metadata(&self.path).and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok())
    }

    /// The file's content as written.
    pub fn read(&self) -> std::io::Result<Vec<u8>> {
        std::fs::read(&self.path)
    }

    /// Move the held file to `to` (still held): a claim others cannot make twice, since only
    /// one rename of a path succeeds.
    pub fn rename(mut self, to: &Path) -> std::io::Result<Held> {
        std::fs::rename(&self.path, to)?;
        self.path = to.to_path_buf();
        Ok(self)
    }

    /// The work is done: the file goes, then the lock.
    pub fn finish(self) {
        if let Err(e) = std::fs::remove_file(&self.path) {
            tracing::debug!(file = %self.path.display(), error = %e, "held file already gone");
        }
        drop(self.file);
    }

    /// Keep the file and let it go (someone else may take it over).
    pub fn release(self) -> PathBuf {
        self.path
    }
}

/// The files of `dir` nobody holds, dot-files left by a creation that died older than
/// `stale_after` removed on the way.
pub fn unheld(dir: &Path, stale_after: std::time::Duration) -> Vec<Held> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let dot = entry.file_name().to_string_lossy().starts_with('.');
        if !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let Some(held) = Held::take_over(&path) else { continue };
        if !dot {
            found.push(held);
            continue;
        }
        if held.age().is_some_and(|age| age > stale_after) {
            held.finish();
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_file_is_taken_over_only_once_its_holder_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("work");
        let held = Held::create(&path, b"x").unwrap();
        assert!(Held::take_over(&path).is_none(), "a held file was taken over");
        assert!(unheld(dir.path(), std::time::Duration::ZERO).is_empty());
        let path = held.release();
        let again = Held::take_over(&path).expect("an unheld file is taken over");
        assert_eq!(again.read().unwrap(), b"x");
        again.finish();
        assert!(!path.exists());
    }
}
