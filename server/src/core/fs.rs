//! The file calls' neutral types (ListDir, Stat, MakeDir, Remove, Rename, WatchDir): what
//! crosses the backend seam. The entry and event shapes are the agent protocol's plain structs
//! (no Docker words in them), re-exported under the service's names; paths are bytes, since a
//! Linux file name need not be UTF-8.

use crate::error::{ProviderError, Result};

pub use sandboxd_agent::protocol::{
    FsChange as FileEvent, FsChangeKind as FileEventKind, FsEntry as FileEntry, FsKind as FileKind, Xattr,
};

/// An upload's extended attributes from the wire (`UploadHeader.xattrs`), held to the agent
/// protocol's rules (`check_xattrs`: `user.` names of at most 255 bytes, values of at most
/// 64 KiB, at most 64), INVALID_ARGUMENT naming `field` otherwise.
pub fn check_xattrs<'a>(
    field: &str,
    xattrs: impl IntoIterator<Item = (&'a String, &'a Vec<u8>)>,
) -> Result<Vec<Xattr>> {
    let out: Vec<Xattr> = xattrs
        .into_iter()
        .map(|(name, value)| Xattr { name: name.as_bytes().to_vec(), value: value.clone() })
        .collect();
    sandboxd_agent::protocol::check_xattrs(&out).map_err(|why| ProviderError::invalid(field, why))?;
    Ok(out)
}

/// Deepest `ListDir` (the agent's own limit).
pub const MAX_DEPTH: u32 = 64;

/// Batches of a listing, in order; an error ends it.
pub type EntryStream = tokio::sync::mpsc::Receiver<Result<Vec<FileEntry>>>;

/// Changes below a watched directory; an error (RESOURCE_EXHAUSTED for a watcher that fell
/// behind) ends it, and so does the directory's own removal (the stream just ends).
pub type WatchStream = tokio::sync::mpsc::Receiver<Result<FileEvent>>;

/// What `ListDir` lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListDirQuery {
    pub path: Vec<u8>,
    /// 1 and up (0 is taken as 1 at the boundary).
    pub depth: u32,
    pub include_hidden: bool,
}

/// A change the caller asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileOp {
    MakeDir { path: Vec<u8>, parents: bool, mode: u32 },
    Remove { path: Vec<u8>, recursive: bool },
    Rename { source: Vec<u8>, destination: Vec<u8>, overwrite: bool },
}

/// A path as messages show it.
pub fn shown(path: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(path))
}

/// `path` (sent in `field`) is absolute and has no NUL: INVALID_ARGUMENT naming both otherwise.
pub fn check_path(field: &str, path: &[u8]) -> Result<()> {
    if path.first() != Some(&b'/') {
        return Err(ProviderError::invalid(field, format!("must be an absolute path (got {})", shown(path))));
    }
    if path.contains(&0) {
        return Err(ProviderError::invalid(field, format!("must not contain NUL (got {})", shown(path))));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandboxd_agent::protocol::{MAX_XATTRS, MAX_XATTR_VALUE};

    #[test]
    fn paths_are_checked() {
        assert!(check_path("path", b"/a b\n\xff").is_ok());
        let e = check_path("path", b"rel").unwrap_err().to_string();
        assert!(e.contains("path") && e.contains("rel"), "{e}");
        assert!(check_path("source", b"").is_err());
        assert!(check_path("path", b"/a\0").is_err());
    }

    #[test]
    fn only_user_attributes_within_linux_bounds_pass() {
        let attrs = |pairs: &[(&str, &[u8])]| -> std::collections::HashMap<String, Vec<u8>> {
            pairs.iter().map(|(n, v)| (n.to_string(), v.to_vec())).collect()
        };
        let ok = check_xattrs("xattrs", &attrs(&[("user.e2b.author", b"mish")])).unwrap();
        assert_eq!(ok, [Xattr { name: b"user.e2b.author".to_vec(), value: b"mish".to_vec() }]);
        for bad in ["trusted.x", "security.selinux", "user.", "USER.x"] {
            let e = check_xattrs("xattrs", &attrs(&[(bad, b"1")])).unwrap_err().to_string();
            assert!(e.contains("xattrs") && e.contains(bad), "{e}");
        }
        let long = format!("user.{}", "n".repeat(251));
        assert!(check_xattrs("xattrs", &attrs(&[(&long, b"1")])).is_err());
        let big = vec![0u8; MAX_XATTR_VALUE + 1];
        assert!(check_xattrs("xattrs", &attrs(&[("user.big", &big)]))
            .unwrap_err()
            .to_string()
            .contains("at most"));
        let many: std::collections::HashMap<String, Vec<u8>> =
            (0..=MAX_XATTRS).map(|i| (format!("user.k{i}"), vec![])).collect();
        assert!(check_xattrs("xattrs", &many).is_err());
    }
}
