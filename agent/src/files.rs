//! Files for the server: uploads written beside their target and renamed into place on success
//! (an interrupted upload leaves the old file intact) by a writer thread of their own,
//! downloads streamed with credit.

use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

use crate::channel::{Channel, Credit};
use crate::protocol::{self, Event, FailureKind, Xattr};

/// A failure as the server receives it.
pub type FileError = (FailureKind, String);

fn os_error(path: &str, e: &std::io::Error) -> FileError {
    let kind = e.raw_os_error().map(FailureKind::from_errno).unwrap_or(FailureKind::Other);
    let what = match kind {
        FailureKind::NotFound => "no such file in the sandbox".to_string(),
        FailureKind::IsDirectory => "is a directory, not a file".to_string(),
        FailureKind::NotDirectory => "a parent is not a directory".to_string(),
        FailureKind::ReadOnly => "the sandbox's filesystem is read-only there".to_string(),
        _ => e.to_string(),
    };
    (kind, format!("{path}: {what}"))
}

/// An upload in progress.
pub struct Upload {
    file: Option<File>,
    temp: PathBuf,
    target: PathBuf,
    display: String,
    mode: u32,
    written: u64,
    failure: Option<FileError>,
}

/// `mkdir -p` as root with mode 0755 for each missing parent; existing ones are left alone.
fn create_parents(dir: &Path, display: &str) -> Result<(), FileError> {
    let mut current = PathBuf::from("/");
    for part in dir.components().skip(1) {
        current.push(part);
        match std::fs::metadata(&current) {
            Ok(m) if m.is_dir() => continue,
            Ok(_) => {
                return Err((FailureKind::NotDirectory, format!("{display}: a parent is not a directory")))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(os_error(display, &e)),
        }
        match std::fs::DirBuilder::new().mode(0o755).create(&current) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(os_error(display, &e)),
        }
    }
    Ok(())
}

impl Upload {
    /// Open the temporary file beside `path`, creating missing parents, with `xattrs` set (the
    /// file replaces the old one whole: attributes the old one had are gone).
    pub fn start(id: u64, path: &str, mode: u32, xattrs: &[Xattr]) -> Result<Self, FileError> {
        let target = PathBuf::from(path);
        let (Some(dir), Some(name)) = (target.parent(), target.file_name()) else {
            return Err((FailureKind::Invalid, format!("{path:?} does not name a file")));
        };
        if mode > 0o7777 {
            return Err((FailureKind::Invalid, format!("mode {mode:o} is not permission bits")));
        }
        protocol::check_xattrs(xattrs).map_err(|e| (FailureKind::Invalid, e))?;
        create_parents(dir, path)?;
        if std::fs::symlink_metadata(&target).is_ok_and(|m| m.is_dir()) {
            return Err((
                FailureKind::IsDirectory,
                format!("{path} is a directory in the sandbox, not a file"),
            ));
        }
        let temp =
            dir.join(format!(".{}.sandboxd-upload-{id}-{}", name.to_string_lossy(), std::process::id()));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&temp)
            .map_err(|e| os_error(path, &e))?;
        if let Err(e) = crate::xattrs::set_all(&file, xattrs) {
            drop(file);
            let _ = std::fs::remove_file(&temp);
            return Err(match e.raw_os_error() {
                Some(libc::EOPNOTSUPP) => (
                    FailureKind::Unsupported,
                    format!("{path}: the sandbox's filesystem keeps no extended attributes there"),
                ),
                _ => os_error(path, &e),
            });
        }
        Ok(Self { file: Some(file), temp, target, display: path.into(), mode, written: 0, failure: None })
    }

    /// Append a chunk; a write failure is kept and reported at the end.
    pub fn write(&mut self, data: &[u8]) {
        if self.failure.is_some() {
            return;
        }
        if let Some(file) = &mut self.file {
            match file.write_all(data) {
                Ok(()) => self.written += data.len() as u64,
                Err(e) => {
                    self.failure = Some(os_error(&self.display, &e));
                    self.abort();
                }
            }
        }
    }

    /// Check the length, make the file root's with its mode, and rename it over the target.
    pub fn finish(mut self, size: u64) -> Result<u64, FileError> {
        if let Some(f) = self.failure.take() {
            return Err(f);
        }
        if self.written != size {
            let n = self.written;
            self.abort();
            return Err((FailureKind::Invalid, format!("declared {size} bytes but the stream had {n}")));
        }
        let result = (|| {
            let file = self.file.take().ok_or((FailureKind::Other, "upload already closed".to_string()))?;
            std::os::unix::fs::fchown(&file, Some(0), Some(0)).map_err(|e| os_error(&self.display, &e))?;
            file.set_permissions(std::fs::Permissions::from_mode(self.mode))
                .map_err(|e| os_error(&self.display, &e))?;
            drop(file);
            std::fs::rename(&self.temp, &self.target).map_err(|e| os_error(&self.display, &e))
        })();
        if result.is_err() {
            self.abort();
        }
        result.map(|()| size)
    }

    /// Drop the partial file; the target is untouched.
    pub fn abort(&mut self) {
        self.file = None;
        let _ = std::fs::remove_file(&self.temp);
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        if self.file.is_some() {
            self.abort();
        }
    }
}

/// Chunks an upload's writer may hold before the connection's reader waits for the disk.
const WRITE_QUEUE: usize = 16;

/// What the connection's reader hands an upload's writer.
enum WriteOp {
    Data(Vec<u8>),
    /// `PutEnd`: check the length, land the file, answer.
    End(u64),
}

/// An upload written by a thread of its own: the connection's reader hands it chunks and only
/// waits on the disk when [`WRITE_QUEUE`] chunks already wait, so the disk and the socket work
/// at once; the writer sends the answer (`PutDone` or the failure) when the upload ends.
pub struct UploadWriter {
    ops: mpsc::SyncSender<WriteOp>,
    aborted: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl UploadWriter {
    /// Hand `upload` (request `id`) to its writer thread, which answers on `channel`.
    pub fn spawn(upload: Upload, channel: Channel, id: u64) -> Self {
        let (ops, queue) = mpsc::sync_channel(WRITE_QUEUE);
        let aborted = Arc::new(AtomicBool::new(false));
        let stop = aborted.clone();
        let thread = std::thread::spawn(move || {
            let mut upload = upload;
            for op in queue {
                match op {
                    WriteOp::Data(data) if !stop.load(Ordering::SeqCst) => upload.write(&data),
                    WriteOp::Data(_) => {}
                    WriteOp::End(_) if stop.load(Ordering::SeqCst) => break,
                    WriteOp::End(size) => {
                        let event = match upload.finish(size) {
                            Ok(size) => Event::PutDone { size },
                            Err((kind, message)) => Event::Failed { kind, message },
                        };
                        channel.send(id, &event);
                        return;
                    }
                }
            }
            // Aborted, or the connection ended first: dropping the upload removes its file.
        });
        Self { ops, aborted, thread }
    }

    /// A sender of this upload's chunks (the map's lock need not be held while it waits).
    pub fn chunks(&self) -> UploadChunks {
        UploadChunks(self.ops.clone())
    }

    /// `PutEnd`: the writer lands the file once every chunk before it is written.
    pub fn end(self, size: u64) {
        let _ = self.ops.send(WriteOp::End(size));
    }

    /// Drop the partial file (the chunks still queued are skipped) before returning, so a
    /// request after the abort never sees it; the target is untouched.
    pub fn abort(self) {
        self.aborted.store(true, Ordering::SeqCst);
        drop(self.ops);
        let _ = self.thread.join();
    }
}

/// Hands chunks to one upload's writer.
pub struct UploadChunks(mpsc::SyncSender<WriteOp>);

impl UploadChunks {
    /// Queue a chunk, waiting while the writer's queue is full.
    pub fn write(&self, data: Vec<u8>) {
        let _ = self.0.send(WriteOp::Data(data));
    }
}

/// Open a regular file for reading (a symlink is followed); its size.
pub fn open_for_download(path: &str) -> Result<(File, u64), FileError> {
    let c = CString::new(Path::new(path).as_os_str().as_bytes())
        .map_err(|_| (FailureKind::Invalid, "path must not contain NUL".to_string()))?;
    // O_NONBLOCK: opening a FIFO must not hang; regular files ignore it.
    // SAFETY: valid C string; the fd is owned by the File below.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK) };
    if fd < 0 {
        return Err(os_error(path, &std::io::Error::last_os_error()));
    }
    // SAFETY: fresh fd we own.
    let file = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let meta = file.metadata().map_err(|e| os_error(path, &e))?;
    if meta.is_dir() {
        return Err((FailureKind::IsDirectory, format!("{path} is a directory, not a file")));
    }
    if !meta.is_file() {
        return Err((
            FailureKind::NotRegular,
            format!("{path} is not a regular file (mode {:o})", meta.mode()),
        ));
    }
    Ok((file, meta.len()))
}

/// Read up to `buf.len()` bytes, retrying interrupted reads.
pub fn read_chunk(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match file.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Stream `path` to request `id` (`GetStart`, `GetData` within `credit`, `GetEnd`, or `Failed`).
pub fn download(channel: &Channel, id: u64, path: &str, credit: &Credit) {
    let fail = |(kind, message): FileError| channel.send(id, &Event::Failed { kind, message });
    let (mut file, size) = match open_for_download(path) {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    channel.send(id, &Event::GetStart { size });
    let mut buf = vec![0u8; protocol::MAX_CHUNK];
    loop {
        match read_chunk(&mut file, &mut buf) {
            Ok(0) => return channel.send(id, &Event::GetEnd),
            Ok(n) => {
                if !credit.spend(n) {
                    return;
                }
                channel.send(id, &Event::GetData(buf[..n].to_vec()));
            }
            Err(e) => {
                let kind = e.raw_os_error().map(FailureKind::from_errno).unwrap_or(FailureKind::Other);
                return fail((kind, format!("{path}: {e}")));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upload_lands_atomically_and_abort_keeps_the_old_file() {
        let dir = tempfile_dir();
        let target = dir.join("a/b/file.txt");
        let path = target.to_str().unwrap();
        let mut up = Upload::start(1, path, 0o640, &[]).unwrap();
        up.write(b"hello");
        assert!(!target.exists(), "nothing at the target before the end");
        assert_eq!(up.finish(5).unwrap(), 5);
        assert_eq!(std::fs::read(&target).unwrap(), b"hello");
        assert_eq!(std::fs::metadata(&target).unwrap().permissions().mode() & 0o7777, 0o640);

        let mut partial = Upload::start(2, path, 0o644, &[]).unwrap();
        partial.write(b"new content");
        drop(partial);
        assert_eq!(std::fs::read(&target).unwrap(), b"hello", "an interrupted upload leaves the old file");

        let mut short = Upload::start(3, path, 0o644, &[]).unwrap();
        short.write(b"abc");
        let (kind, msg) = short.finish(4).unwrap_err();
        assert_eq!(kind, FailureKind::Invalid, "{msg}");
        assert_eq!(std::fs::read(&target).unwrap(), b"hello");
        let leftovers: Vec<_> = std::fs::read_dir(target.parent().unwrap()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file is left behind");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_upload_sets_its_attributes_and_a_bad_one_writes_nothing() {
        let dir = tempfile_dir();
        let target = dir.join("meta.txt");
        let path = target.to_str().unwrap();
        let attrs = [Xattr { name: b"user.e2b.author".to_vec(), value: b"mish".to_vec() }];
        let mut up = Upload::start(1, path, 0o644, &attrs).unwrap();
        up.write(b"x");
        up.finish(1).unwrap();
        assert_eq!(crate::xattrs::read_user(path.as_bytes()), attrs);
        // Overwritten without attributes: the new file has none.
        let mut again = Upload::start(2, path, 0o644, &[]).unwrap();
        again.write(b"y");
        again.finish(1).unwrap();
        assert!(crate::xattrs::read_user(path.as_bytes()).is_empty());
        let bad = [Xattr { name: b"trusted.x".to_vec(), value: b"1".to_vec() }];
        let err = Upload::start(3, path, 0o644, &bad).err().unwrap();
        assert_eq!(err.0, FailureKind::Invalid, "{}", err.1);
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, [std::ffi::OsString::from("meta.txt")], "a refused upload leaves nothing");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn errors_are_classified() {
        let dir = tempfile_dir();
        let file = dir.join("f");
        std::fs::write(&file, b"x").unwrap();
        let below_file = file.join("child");
        let err = Upload::start(1, below_file.to_str().unwrap(), 0o644, &[]).err().unwrap();
        assert_eq!(err.0, FailureKind::NotDirectory, "{}", err.1);
        let err = Upload::start(1, dir.to_str().unwrap(), 0o644, &[]).err().unwrap();
        assert_eq!(err.0, FailureKind::IsDirectory, "{}", err.1);
        assert_eq!(open_for_download(dir.to_str().unwrap()).unwrap_err().0, FailureKind::IsDirectory);
        let missing = dir.join("missing");
        assert_eq!(open_for_download(missing.to_str().unwrap()).unwrap_err().0, FailureKind::NotFound);
        assert_eq!(open_for_download(file.to_str().unwrap()).unwrap().1, 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "sandboxd-agent-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
