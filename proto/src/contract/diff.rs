//! A changed path (`Diff`): its kind and the entry, and their wire mapping.

/// How a path changed since a sandbox started (or since its snapshot).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DiffKind {
    /// Created.
    Added,
    /// Modified (content, metadata, or a directory's entries).
    Changed,
    /// Removed.
    Deleted,
}

/// One changed path (`DiffEntry`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DiffEntry {
    /// The absolute path in the sandbox.
    pub path: String,
    /// How it changed.
    pub kind: DiffKind,
}

/// A `DiffEntry` on the wire without a kind this contract knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("diff entry {0:?} without a kind")]
pub struct DiffEntryWithoutKind(pub String);

impl TryFrom<crate::v1::DiffEntry> for DiffEntry {
    type Error = DiffEntryWithoutKind;

    fn try_from(e: crate::v1::DiffEntry) -> Result<Self, Self::Error> {
        let kind = match crate::v1::DiffKind::try_from(e.kind) {
            Ok(crate::v1::DiffKind::Added) => DiffKind::Added,
            Ok(crate::v1::DiffKind::Changed) => DiffKind::Changed,
            Ok(crate::v1::DiffKind::Deleted) => DiffKind::Deleted,
            _ => return Err(DiffEntryWithoutKind(e.path)),
        };
        Ok(DiffEntry { path: e.path, kind })
    }
}

impl From<DiffEntry> for crate::v1::DiffEntry {
    fn from(e: DiffEntry) -> Self {
        let kind = match e.kind {
            DiffKind::Added => crate::v1::DiffKind::Added,
            DiffKind::Changed => crate::v1::DiffKind::Changed,
            DiffKind::Deleted => crate::v1::DiffKind::Deleted,
        };
        crate::v1::DiffEntry { path: e.path, kind: kind as i32 }
    }
}
