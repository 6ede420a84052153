//! The file calls' neutral types (ListDir, Stat, MakeDir, Remove, Rename, WatchDir): what
//! crosses the backend seam. The entry and event shapes are the agent protocol's plain structs
//! (no Docker words in them), re-exported under the service's names; paths are bytes, since a
//! Linux file name need not be UTF-8.

use crate::error::{ProviderError, Result};

pub use sandboxd_agent::protocol::{
    FsChange as FileEvent, FsChangeKind as FileEventKind, FsEntry as FileEntry, FsKind as FileKind,
};

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

    #[test]
    fn paths_are_checked() {
        assert!(check_path("path", b"/a b\n\xff").is_ok());
        let e = check_path("path", b"rel").unwrap_err().to_string();
        assert!(e.contains("path") && e.contains("rel"), "{e}");
        assert!(check_path("source", b"").is_err());
        assert!(check_path("path", b"/a\0").is_err());
    }
}
