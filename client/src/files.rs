//! The file calls by sandbox id: [`Client::list_dir`], [`Client::stat`], [`Client::make_dir`],
//! [`Client::remove`], [`Client::rename`], [`Client::watch_dir`]. Paths are `Path`s and come
//! back as bytes (`FileEntry::path_buf` gives a `PathBuf`): a name that is not UTF-8
//! round-trips exactly.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::client::Client;
use crate::error::{ClientError, Result};
use crate::proto;

/// What kind of thing a path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileType {
    File,
    Dir,
    Symlink,
    Other,
}

/// One path in the sandbox (lstat, or stat with `follow_links`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    /// The last component, as bytes.
    pub name: Vec<u8>,
    /// The absolute path, as bytes.
    pub path: Vec<u8>,
    pub file_type: FileType,
    pub size: u64,
    /// `st_mode & 0o7777`.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Last modification, milliseconds since the Unix epoch.
    pub mtime_ms: i64,
    /// A link's target as stored (empty for anything else).
    pub link_target: Vec<u8>,
}

impl FileEntry {
    /// The path as a `PathBuf` (exact, whatever its bytes).
    pub fn path_buf(&self) -> PathBuf {
        PathBuf::from(OsStr::from_bytes(&self.path))
    }

    /// The name for display (bytes that are not UTF-8 replaced).
    pub fn name_lossy(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }
}

impl From<proto::FileEntry> for FileEntry {
    fn from(e: proto::FileEntry) -> Self {
        let file_type = match proto::FileType::try_from(e.r#type) {
            Ok(proto::FileType::File) => FileType::File,
            Ok(proto::FileType::Dir) => FileType::Dir,
            Ok(proto::FileType::Symlink) => FileType::Symlink,
            _ => FileType::Other,
        };
        Self {
            name: e.name,
            path: e.path,
            file_type,
            size: e.size,
            mode: e.mode,
            uid: e.uid,
            gid: e.gid,
            mtime_ms: e.mtime,
            link_target: e.link_target,
        }
    }
}

/// What happened to a path below a watched directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileEventType {
    Create,
    Modify,
    Remove,
    Rename,
}

/// One change seen by [`Client::watch_dir`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEvent {
    pub event_type: FileEventType,
    /// The path (the new one for a rename), as bytes.
    pub path: Vec<u8>,
    /// For a rename: where it was.
    pub old_path: Vec<u8>,
    pub is_dir: bool,
}

impl TryFrom<proto::FileEvent> for FileEvent {
    type Error = ClientError;
    fn try_from(e: proto::FileEvent) -> Result<Self> {
        let event_type = match proto::FileEventType::try_from(e.r#type) {
            Ok(proto::FileEventType::Create) => FileEventType::Create,
            Ok(proto::FileEventType::Modify) => FileEventType::Modify,
            Ok(proto::FileEventType::Remove) => FileEventType::Remove,
            Ok(proto::FileEventType::Rename) => FileEventType::Rename,
            _ => return Err(ClientError::Protocol(format!("unknown file event type {}", e.r#type))),
        };
        Ok(Self { event_type, path: e.path, old_path: e.old_path, is_dir: e.is_dir })
    }
}

/// How [`Client::list_dir`] lists.
#[derive(Debug, Clone, Default)]
pub struct ListDirOptions {
    /// Levels (0 or 1: the directory's own entries).
    pub depth: u32,
    /// Also names starting with `.`.
    pub include_hidden: bool,
    /// Act as this user (else the sandbox's).
    pub user: Option<String>,
}

/// How [`Client::make_dir`] makes a directory.
#[derive(Debug, Clone, Default)]
pub struct MakeDirOptions {
    /// Missing parents too; an existing directory is then success.
    pub parents: bool,
    /// Permission bits (0: 0755).
    pub mode: u32,
    /// Act as this user (else the sandbox's); it owns the directory.
    pub user: Option<String>,
}

/// The batches of one `ListDir` call.
pub struct ListDirStream {
    inner: tonic::Streaming<proto::ListDirResponse>,
}

impl ListDirStream {
    /// The next batch; `None` at the end.
    pub async fn next_batch(&mut self) -> Result<Option<Vec<FileEntry>>> {
        Ok(self.inner.message().await?.map(|r| r.entries.into_iter().map(FileEntry::from).collect()))
    }

    /// Every entry, in order.
    pub async fn collect(mut self) -> Result<Vec<FileEntry>> {
        let mut all = Vec::new();
        while let Some(batch) = self.next_batch().await? {
            all.extend(batch);
        }
        Ok(all)
    }
}

/// A live `WatchDir`: the watch is in place once [`Client::watch_dir`] returned. Dropping it
/// ends the watch.
pub struct WatchDirStream {
    inner: tonic::Streaming<proto::WatchDirResponse>,
}

impl WatchDirStream {
    /// The next change; `None` when the watched directory went away or the server ended the
    /// stream. A watcher that fell behind gets `RESOURCE_EXHAUSTED`.
    pub async fn next(&mut self) -> Result<Option<FileEvent>> {
        loop {
            match self.inner.message().await? {
                None => return Ok(None),
                Some(proto::WatchDirResponse { event: Some(e) }) => return FileEvent::try_from(e).map(Some),
                Some(proto::WatchDirResponse { event: None }) => continue,
            }
        }
    }
}

fn bytes(path: &Path) -> Vec<u8> {
    path.as_os_str().as_bytes().to_vec()
}

fn user(user: Option<&str>) -> String {
    user.unwrap_or_default().to_string()
}

impl Client {
    /// The entries of directory `path` (`ListDir`), streamed in batches.
    pub async fn list_dir(
        &self,
        sandbox_id: impl Into<String>,
        path: impl AsRef<Path>,
        options: ListDirOptions,
    ) -> Result<ListDirStream> {
        let req = proto::ListDirRequest {
            sandbox_id: sandbox_id.into(),
            path: bytes(path.as_ref()),
            depth: options.depth,
            include_hidden: options.include_hidden,
            user: options.user.unwrap_or_default(),
        };
        Ok(ListDirStream { inner: self.raw().list_dir(req).await?.into_inner() })
    }

    /// One path's entry (`Stat`): of a link itself unless `follow_links`.
    pub async fn stat(
        &self,
        sandbox_id: impl Into<String>,
        path: impl AsRef<Path>,
        follow_links: bool,
        as_user: Option<&str>,
    ) -> Result<FileEntry> {
        let req = proto::StatRequest {
            sandbox_id: sandbox_id.into(),
            path: bytes(path.as_ref()),
            follow_links,
            user: user(as_user),
        };
        let entry = self.raw().stat(req).await?.into_inner().entry;
        entry.map(FileEntry::from).ok_or_else(|| ClientError::Protocol("a StatResponse without entry".into()))
    }

    /// Make directory `path` (`MakeDir`).
    pub async fn make_dir(
        &self,
        sandbox_id: impl Into<String>,
        path: impl AsRef<Path>,
        options: MakeDirOptions,
    ) -> Result<()> {
        let req = proto::MakeDirRequest {
            sandbox_id: sandbox_id.into(),
            path: bytes(path.as_ref()),
            parents: options.parents,
            mode: options.mode,
            user: options.user.unwrap_or_default(),
        };
        self.raw().make_dir(req).await?;
        Ok(())
    }

    /// Remove `path` (`Remove`); a directory with contents only with `recursive`.
    pub async fn remove(
        &self,
        sandbox_id: impl Into<String>,
        path: impl AsRef<Path>,
        recursive: bool,
        as_user: Option<&str>,
    ) -> Result<()> {
        let req = proto::RemoveRequest {
            sandbox_id: sandbox_id.into(),
            path: bytes(path.as_ref()),
            recursive,
            user: user(as_user),
        };
        self.raw().remove(req).await?;
        Ok(())
    }

    /// Move `source` to `destination` (`Rename`); an existing destination only with `overwrite`.
    pub async fn rename(
        &self,
        sandbox_id: impl Into<String>,
        source: impl AsRef<Path>,
        destination: impl AsRef<Path>,
        overwrite: bool,
        as_user: Option<&str>,
    ) -> Result<()> {
        let req = proto::RenameRequest {
            sandbox_id: sandbox_id.into(),
            source: bytes(source.as_ref()),
            destination: bytes(destination.as_ref()),
            overwrite,
            user: user(as_user),
        };
        self.raw().rename(req).await?;
        Ok(())
    }

    /// Watch directory `path` (`WatchDir`); returns once the watch is in place.
    pub async fn watch_dir(
        &self,
        sandbox_id: impl Into<String>,
        path: impl AsRef<Path>,
        recursive: bool,
        as_user: Option<&str>,
    ) -> Result<WatchDirStream> {
        let req = proto::WatchDirRequest {
            sandbox_id: sandbox_id.into(),
            path: bytes(path.as_ref()),
            recursive,
            user: user(as_user),
        };
        let mut inner = self.raw().watch_dir(req).await?.into_inner();
        match inner.message().await? {
            Some(proto::WatchDirResponse { event: None }) => Ok(WatchDirStream { inner }),
            Some(_) => Err(ClientError::Protocol("WatchDir's first response carried an event".into())),
            None => Err(ClientError::Protocol("WatchDir ended before the watch was in place".into())),
        }
    }
}
