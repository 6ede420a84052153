//! `cp -r`: a directory tree travels as one tar stream. Packed and unpacked here with the `tar`
//! crate, in the sandbox with its own `tar` (see `cp.rs`). Links stay links, and a link that
//! points out of the tree is refused, both ways: what comes out of a sandbox is untrusted, so
//! an entry with an absolute path or `..`, a device or a fifo is refused too, and set-id bits
//! are dropped (the rwx bits are kept).

use std::io::{Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

use crate::error::CtlError;

/// Whether a link at `rel` (a path inside the tree) to `target` resolves outside the tree,
/// read lexically (`..` climbs from the link's directory; an absolute target always leaves).
pub fn escapes(rel: &Path, target: &Path) -> bool {
    let mut depth: usize = 0;
    let parent = rel.parent().unwrap_or(Path::new(""));
    for part in parent.components().chain(target.components()) {
        match part {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return true,
            },
            Component::RootDir | Component::Prefix(_) => return true,
        }
    }
    false
}

/// A path inside the tree: relative, no `..`.
fn inside(path: &Path) -> bool {
    path.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// The tree at `root` as a tar archive in an anonymous temp file, rewound; and its entries.
pub fn pack(root: &Path) -> Result<(std::fs::File, u64), CtlError> {
    let spool =
        tempfile::tempfile().map_err(|e| CtlError::local(format!("a temp file for the archive: {e}")))?;
    let mut builder = tar::Builder::new(spool);
    builder.follow_symlinks(false);
    let fail = |path: &Path, e: std::io::Error| CtlError::local(format!("{}: {e}", path.display()));
    builder.append_dir(".", root).map_err(|e| fail(root, e))?;
    let mut entries = 1;
    let mut pending = vec![PathBuf::new()];
    while let Some(dir) = pending.pop() {
        let mut children: Vec<_> = std::fs::read_dir(root.join(&dir))
            .map_err(|e| fail(&root.join(&dir), e))?
            .collect::<Result<_, _>>()
            .map_err(|e| fail(&root.join(&dir), e))?;
        children.sort_by_key(|c| c.file_name());
        for child in children {
            let (path, rel) = (child.path(), dir.join(child.file_name()));
            let kind = std::fs::symlink_metadata(&path).map_err(|e| fail(&path, e))?.file_type();
            if kind.is_dir() {
                builder.append_dir(&rel, &path).map_err(|e| fail(&path, e))?;
                pending.push(rel);
            } else if kind.is_symlink() {
                let target = std::fs::read_link(&path).map_err(|e| fail(&path, e))?;
                if escapes(&rel, &target) {
                    return Err(CtlError::local(format!(
                        "{} -> {} points out of the tree; refusing to copy it",
                        path.display(),
                        target.display()
                    )));
                }
                builder.append_path_with_name(&path, &rel).map_err(|e| fail(&path, e))?;
            } else if kind.is_file() {
                builder.append_path_with_name(&path, &rel).map_err(|e| fail(&path, e))?;
            } else {
                return Err(CtlError::local(format!(
                    "{} is not a regular file, directory or link; refusing to copy it",
                    path.display()
                )));
            }
            entries += 1;
        }
    }
    let mut spool = builder.into_inner().map_err(|e| CtlError::local(format!("packing the tree: {e}")))?;
    spool.seek(SeekFrom::Start(0))?;
    Ok((spool, entries))
}

/// Unpacks `archive` (untrusted) into the new directory `dest`: into a hidden sibling first,
/// renamed into place when every entry passed, removed otherwise. Returns the entry count.
pub fn unpack(archive: std::fs::File, dest: &Path) -> Result<u64, CtlError> {
    if dest.symlink_metadata().is_ok() {
        return Err(CtlError::local(format!("{} already exists", dest.display())));
    }
    let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "tree".into());
    let part = dest.with_file_name(format!(".{name}.sandboxctl-part"));
    std::fs::create_dir(&part).map_err(|e| CtlError::local(format!("{}: {e}", part.display())))?;
    let outcome = unpack_into(archive, &part).and_then(|n| {
        std::fs::rename(&part, dest).map_err(|e| CtlError::local(format!("{}: {e}", dest.display())))?;
        Ok(n)
    });
    if outcome.is_err() {
        let _ = std::fs::remove_dir_all(&part);
    }
    outcome
}

fn unpack_into(archive: std::fs::File, part: &Path) -> Result<u64, CtlError> {
    let bad = |what: String| CtlError::local(format!("the sandbox sent {what}; nothing was kept"));
    let mut archive = tar::Archive::new(archive);
    archive.set_preserve_permissions(false);
    archive.set_preserve_ownerships(false);
    archive.set_unpack_xattrs(false);
    let mut count = 0;
    for entry in archive.entries().map_err(|e| bad(format!("an unreadable archive ({e})")))? {
        let mut entry = entry.map_err(|e| bad(format!("an unreadable archive ({e})")))?;
        let path = entry.path().map_err(|e| bad(format!("an unreadable path ({e})")))?.into_owned();
        if !inside(&path) {
            return Err(bad(format!("an entry outside the tree: {}", path.display())));
        }
        use tar::EntryType as T;
        match entry.header().entry_type() {
            T::Regular | T::Continuous | T::Directory => {}
            T::Symlink | T::Link => {
                let target = entry.link_name().ok().flatten().map(|t| t.into_owned()).unwrap_or_default();
                // A hard link names a path in the archive; a symlink, one from its directory.
                let out = match entry.header().entry_type() {
                    T::Link => !inside(&target),
                    _ => escapes(&path, &target),
                };
                if out {
                    return Err(bad(format!(
                        "a link out of the tree: {} -> {}",
                        path.display(),
                        target.display()
                    )));
                }
            }
            T::GNULongName | T::GNULongLink | T::XHeader | T::XGlobalHeader => continue,
            other => {
                return Err(bad(format!(
                    "{} of type {other:?}, not a file, directory or link",
                    path.display()
                )))
            }
        }
        let unpacked =
            entry.unpack_in(part).map_err(|e| CtlError::local(format!("writing {}: {e}", path.display())))?;
        if !unpacked {
            return Err(bad(format!("an entry outside the tree: {}", path.display())));
        }
        count += 1;
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_that_leave_the_tree_are_told_apart() {
        assert!(!escapes(Path::new("a/link"), Path::new("../b")));
        assert!(!escapes(Path::new("a/b/link"), Path::new("./c/../../d")));
        assert!(escapes(Path::new("link"), Path::new("../x")));
        assert!(escapes(Path::new("a/link"), Path::new("../../x")));
        assert!(escapes(Path::new("a/link"), Path::new("/etc/passwd")));
        assert!(inside(Path::new("./a/b")) && !inside(Path::new("a/../../b")) && !inside(Path::new("/a")));
    }

    #[test]
    fn a_tree_round_trips_and_a_hostile_archive_leaves_nothing() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir_all(src.join("sub/empty")).unwrap();
        std::fs::write(src.join("sub/run.sh"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(src.join("sub/run.sh"), std::fs::Permissions::from_mode(0o750)).unwrap();
        std::os::unix::fs::symlink("sub/run.sh", src.join("link")).unwrap();
        let (archive, entries) = pack(&src).unwrap();
        assert_eq!(entries, 5);
        let dest = dir.path().join("dest");
        assert_eq!(unpack(archive, &dest).unwrap(), 5);
        let mode = std::fs::metadata(dest.join("sub/run.sh")).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o750);
        assert_eq!(std::fs::read_link(dest.join("link")).unwrap(), Path::new("sub/run.sh"));
        assert!(dest.join("sub/empty").is_dir());

        // A link out of the tree is refused when packing...
        std::os::unix::fs::symlink("../../outside", src.join("sub/away")).unwrap();
        let err = pack(&src).unwrap_err().to_string();
        assert!(err.contains("points out of the tree"), "{err}");
        // ...and when unpacking what a sandbox sent: nothing is kept.
        let mut hostile = tar::Builder::new(tempfile::tempfile().unwrap());
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_size(0);
        hostile.append_link(&mut header, "etc", "/etc").unwrap();
        let mut file = hostile.into_inner().unwrap();
        file.seek(SeekFrom::Start(0)).unwrap();
        let out = dir.path().join("out");
        let err = unpack(file, &out).unwrap_err().to_string();
        assert!(err.contains("a link out of the tree"), "{err}");
        assert!(!out.exists() && !dir.path().join(".out.sandboxctl-part").exists());
    }
}
