//! The file calls (issue 19): list, stat, make, remove, rename and watch. Each runs on a thread
//! of its own whose filesystem credentials are the call's user (`setgroups`, `setfsgid`,
//! `setfsuid` as raw syscalls, which change only the calling thread, as knfsd does), so the
//! kernel decides what that user may do, exactly as for a command run as that user, without a
//! fork per call. Names and paths are bytes throughout: a file name need not be UTF-8.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::Metadata;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::{Arc, Mutex};

use inotify::{EventMask, Inotify, WatchMask};

use crate::channel::{Channel, Credit};
use crate::protocol::{Event, FailureKind, FsChange, FsChangeKind, FsEntry, FsKind, Request};
use crate::users::{self, ExecUser};

/// Entries per `Entries` frame, and the bytes after which a batch is sent early.
const BATCH_ENTRIES: usize = 512;
const BATCH_BYTES: usize = 256 * 1024;
/// Deepest `ListDir`.
pub const MAX_DEPTH: u32 = 64;
/// How often a watch looks at its stop flag while the directory is quiet.
const WATCH_POLL_MS: i32 = 200;
/// How long a move's first half waits for its second before it counts as a removal.
const MOVE_PAIR_MS: i32 = 20;

/// A failure as the server receives it.
pub type FsError = (FailureKind, String);

/// File calls in flight by (connection, request id): their credit (ListDir batches spend it)
/// doubles as the stop flag `Kill` and the connection's end set.
static RUNNING: Mutex<Option<Running>> = Mutex::new(None);

/// By (connection, request id).
type Running = HashMap<(u64, u64), Arc<Credit>>;

fn register(conn: u64, id: u64) -> Arc<Credit> {
    let credit = Credit::new();
    if let Ok(mut r) = RUNNING.lock() {
        r.get_or_insert_with(HashMap::new).insert((conn, id), credit.clone());
    }
    credit
}

fn unregister(conn: u64, id: u64) {
    if let Ok(mut r) = RUNNING.lock() {
        if let Some(r) = r.as_mut() {
            r.remove(&(conn, id));
        }
    }
}

/// The credit of a file call in flight, for the server's `Credit` frames.
pub fn credit_of(conn: u64, id: u64) -> Option<Arc<Credit>> {
    RUNNING.lock().ok()?.as_ref()?.get(&(conn, id)).cloned()
}

/// `Kill` for a file call: a listing stops at its next batch, a watch within `WATCH_POLL_MS`.
/// Returns whether `id` was one.
pub fn stop(conn: u64, id: u64) -> bool {
    credit_of(conn, id).map(|c| c.close()).is_some()
}

/// The connection ended: stop every file call it started.
pub fn connection_ended(conn: u64) {
    if let Ok(r) = RUNNING.lock() {
        for ((c, _), credit) in r.iter().flatten() {
            if *c == conn {
                credit.close();
            }
        }
    }
}

/// Serve a file call on a thread of its own as its user; its answer (and any failure) goes to
/// `channel` under `id`.
pub fn handle(conn: u64, channel: Channel, id: u64, request: Request) {
    let credit = register(conn, id);
    std::thread::spawn(move || {
        let result = serve(&channel, id, request, &credit);
        unregister(conn, id);
        if let Err((kind, message)) = result {
            channel.send(id, &Event::Failed { kind, message });
        }
    });
}

fn user_of(request: &Request) -> Option<&str> {
    match request {
        Request::ListDir { user, .. }
        | Request::Stat { user, .. }
        | Request::MakeDir { user, .. }
        | Request::Remove { user, .. }
        | Request::Rename { user, .. }
        | Request::WatchDir { user, .. } => user.as_deref().filter(|u| !u.is_empty()),
        _ => None,
    }
}

fn serve(channel: &Channel, id: u64, request: Request, credit: &Credit) -> Result<(), FsError> {
    let user = users::Files::read().resolve(user_of(&request)).map_err(|e| (FailureKind::User, e))?;
    become_user(&user)?;
    match request {
        Request::ListDir { path, depth, include_hidden, .. } => {
            checked(&path)?;
            list_dir(channel, id, &path, depth, include_hidden, credit)?;
            channel.send(id, &Event::Done);
        }
        Request::Stat { path, follow_links, .. } => {
            checked(&path)?;
            let p = Path::new(OsStr::from_bytes(&path));
            let meta = if follow_links { std::fs::metadata(p) } else { std::fs::symlink_metadata(p) }
                .map_err(|e| os_error(&path, &e))?;
            channel.send(id, &Event::Entries(vec![entry_of(&path, &meta)]));
        }
        Request::MakeDir { path, parents, mode, .. } => {
            checked(&path)?;
            make_dir(&path, parents, mode)?;
            channel.send(id, &Event::Done);
        }
        Request::Remove { path, recursive, .. } => {
            checked(&path)?;
            remove(&path, recursive)?;
            channel.send(id, &Event::Done);
        }
        Request::Rename { source, destination, overwrite, .. } => {
            checked(&source)?;
            checked(&destination)?;
            rename(&source, &destination, overwrite)?;
            channel.send(id, &Event::Done);
        }
        Request::WatchDir { path, recursive, .. } => {
            checked(&path)?;
            watch(channel, id, &path, recursive, credit)?;
        }
        _ => return Err((FailureKind::Invalid, "not a file call".into())),
    }
    Ok(())
}

/// The path as the messages show it (lossy for bytes that are not UTF-8).
fn shown(path: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(path))
}

/// Absolute and without NUL (the server checks first; the agent trusts nobody).
fn checked(path: &[u8]) -> Result<(), FsError> {
    if path.first() != Some(&b'/') {
        return Err((FailureKind::Invalid, format!("path {} is not absolute", shown(path))));
    }
    if path.contains(&0) {
        return Err((FailureKind::Invalid, format!("path {} contains a NUL byte", shown(path))));
    }
    Ok(())
}

/// The failure kind of an errno from a file call.
pub fn kind_of(errno: i32) -> FailureKind {
    match errno {
        libc::ENOENT => FailureKind::NotFound,
        libc::EEXIST => FailureKind::AlreadyExists,
        libc::EACCES | libc::EPERM => FailureKind::Permission,
        libc::ENOTDIR => FailureKind::NotDirectory,
        libc::EISDIR => FailureKind::IsDirectory,
        libc::ENOTEMPTY => FailureKind::NotEmpty,
        libc::EXDEV => FailureKind::CrossDevice,
        libc::EROFS => FailureKind::ReadOnly,
        libc::EINVAL | libc::ENAMETOOLONG | libc::ELOOP => FailureKind::Invalid,
        libc::ENOSPC | libc::EMFILE | libc::ENFILE => FailureKind::Overflow,
        _ => FailureKind::Other,
    }
}

fn os_error(path: &[u8], e: &std::io::Error) -> FsError {
    let kind = e.raw_os_error().map(kind_of).unwrap_or(FailureKind::Other);
    let what = match kind {
        FailureKind::NotFound => "no such file or directory".to_string(),
        FailureKind::AlreadyExists => "already exists".to_string(),
        FailureKind::Permission => "permission denied".to_string(),
        FailureKind::NotDirectory => "not a directory (or a parent is not)".to_string(),
        FailureKind::IsDirectory => "is a directory".to_string(),
        FailureKind::NotEmpty => "directory not empty".to_string(),
        FailureKind::CrossDevice => "source and destination are on different filesystems".to_string(),
        FailureKind::ReadOnly => "the filesystem is read-only there".to_string(),
        _ => e.to_string(),
    };
    (kind, format!("{}: {what}", shown(path)))
}

/// Take on `user`'s filesystem identity on this thread only. Root stays root.
fn become_user(user: &ExecUser) -> Result<(), FsError> {
    if user.uid == 0 && user.gid == 0 {
        return Ok(());
    }
    let groups: Vec<libc::gid_t> = user.groups.clone();
    // SAFETY: raw credential syscalls on the calling thread; `groups` outlives the call.
    unsafe {
        if libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) != 0 {
            let e = std::io::Error::last_os_error();
            return Err((FailureKind::User, format!("cannot take the groups of uid {}: {e}", user.uid)));
        }
        libc::syscall(libc::SYS_setfsgid, user.gid as libc::c_long);
        libc::syscall(libc::SYS_setfsuid, user.uid as libc::c_long);
        // An invalid id changes nothing and returns the current one: the check that both took.
        let gid = libc::syscall(libc::SYS_setfsgid, -1 as libc::c_long) as u32;
        let uid = libc::syscall(libc::SYS_setfsuid, -1 as libc::c_long) as u32;
        // gVisor (release 2022-12-19) has no setfsuid/setfsgid: there the thread's effective
        // ids instead (raw syscalls change only this thread, which ends with the call).
        if (uid != user.uid || gid != user.gid)
            && libc::syscall(
                libc::SYS_setresgid,
                -1 as libc::c_long,
                user.gid as libc::c_long,
                -1 as libc::c_long,
            ) == 0
            && libc::syscall(
                libc::SYS_setresuid,
                -1 as libc::c_long,
                user.uid as libc::c_long,
                -1 as libc::c_long,
            ) == 0
        {
            return Ok(());
        }
        if uid != user.uid || gid != user.gid {
            return Err((
                FailureKind::User,
                format!("cannot act as uid {} gid {} (the agent has {uid}:{gid})", user.uid, user.gid),
            ));
        }
    }
    Ok(())
}

fn file_kind(meta: &Metadata) -> FsKind {
    let t = meta.file_type();
    if t.is_symlink() {
        FsKind::Symlink
    } else if t.is_dir() {
        FsKind::Dir
    } else if t.is_file() {
        FsKind::File
    } else {
        FsKind::Other
    }
}

/// The entry of `path` from its metadata (a link's target read when it is one).
fn entry_of(path: &[u8], meta: &Metadata) -> FsEntry {
    let p = Path::new(OsStr::from_bytes(path));
    let name = p.file_name().map(|n| n.as_bytes().to_vec()).unwrap_or_else(|| path.to_vec());
    let kind = file_kind(meta);
    let link_target = if kind == FsKind::Symlink {
        std::fs::read_link(p).map(|t| t.into_os_string().into_vec()).unwrap_or_default()
    } else {
        Vec::new()
    };
    FsEntry {
        name,
        path: path.to_vec(),
        kind,
        size: meta.len(),
        mode: meta.mode() & 0o7777,
        uid: meta.uid(),
        gid: meta.gid(),
        mtime_ms: meta.mtime().saturating_mul(1000).saturating_add(meta.mtime_nsec() / 1_000_000),
        // Links cannot carry `user.` attributes; anything else's are read through its path.
        xattrs: if kind == FsKind::Symlink { Vec::new() } else { crate::xattrs::read_user(path) },
        link_target,
    }
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = dir.to_vec();
    if p.last() != Some(&b'/') {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

/// Entries batched into frames, paced by the request's credit.
struct Batches<'a> {
    channel: &'a Channel,
    id: u64,
    credit: &'a Credit,
    batch: Vec<FsEntry>,
    bytes: usize,
}

impl Batches<'_> {
    /// Queue one entry; false once the call was stopped.
    fn push(&mut self, e: FsEntry) -> bool {
        let xattrs: usize = e.xattrs.iter().map(|x| 8 + x.name.len() + x.value.len()).sum();
        self.bytes += 45 + e.name.len() + e.path.len() + e.link_target.len() + xattrs;
        self.batch.push(e);
        if self.batch.len() >= BATCH_ENTRIES || self.bytes >= BATCH_BYTES {
            return self.flush();
        }
        true
    }

    fn flush(&mut self) -> bool {
        if self.batch.is_empty() {
            return !self.credit.is_closed();
        }
        if !self.credit.spend(self.bytes) {
            return false;
        }
        self.channel.send(self.id, &Event::Entries(std::mem::take(&mut self.batch)));
        self.bytes = 0;
        !self.channel.is_broken()
    }
}

fn list_dir(
    channel: &Channel,
    id: u64,
    path: &[u8],
    depth: u32,
    include_hidden: bool,
    credit: &Credit,
) -> Result<(), FsError> {
    if depth > MAX_DEPTH {
        return Err((FailureKind::Invalid, format!("depth {depth} is more than {MAX_DEPTH}")));
    }
    // The root must be a readable directory; below it, what cannot be read is skipped.
    let children = read_sorted(path, include_hidden).map_err(|e| os_error(path, &e))?;
    let mut out = Batches { channel, id, credit, batch: Vec::new(), bytes: 0 };
    if walk(&mut out, path, children, depth.max(1), include_hidden) {
        out.flush();
    }
    Ok(())
}

/// A directory's entries with their lstat, hidden ones left out unless asked for, sorted by
/// name.
fn read_sorted(dir: &[u8], include_hidden: bool) -> std::io::Result<Vec<(Vec<u8>, Metadata)>> {
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(Path::new(OsStr::from_bytes(dir)))? {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name().into_vec();
        if !include_hidden && name.first() == Some(&b'.') {
            continue;
        }
        // Gone since the read (a race with the sandbox): left out.
        if let Ok(meta) = entry.metadata() {
            entries.push((name, meta));
        }
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(entries)
}

/// Depth first; false once stopped.
fn walk(
    out: &mut Batches<'_>,
    dir: &[u8],
    children: Vec<(Vec<u8>, Metadata)>,
    levels: u32,
    include_hidden: bool,
) -> bool {
    for (name, meta) in children {
        let path = join(dir, &name);
        let is_dir = meta.file_type().is_dir();
        if !out.push(entry_of(&path, &meta)) {
            return false;
        }
        if is_dir && levels > 1 {
            if let Ok(below) = read_sorted(&path, include_hidden) {
                if !walk(out, &path, below, levels - 1, include_hidden) {
                    return false;
                }
            }
        }
    }
    true
}

fn make_dir(path: &[u8], parents: bool, mode: u32) -> Result<(), FsError> {
    if mode > 0o7777 {
        return Err((FailureKind::Invalid, format!("mode {mode:o} is more than 07777")));
    }
    let mode = if mode == 0 { 0o755 } else { mode };
    let p = Path::new(OsStr::from_bytes(path));
    if parents {
        if let Some(parent) = p.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(parent)
                .map_err(|e| os_error(parent.as_os_str().as_bytes(), &e))?;
        }
    }
    match std::fs::DirBuilder::new().mode(0o700).create(p) {
        Ok(()) => {}
        Err(e) if parents && e.kind() == std::io::ErrorKind::AlreadyExists => {
            return match std::fs::metadata(p) {
                Ok(m) if m.is_dir() => Ok(()),
                _ => Err(os_error(path, &e)),
            };
        }
        Err(e) => return Err(os_error(path, &e)),
    }
    // The exact mode, umask or not (made 0700 first, so nobody else had it meanwhile).
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).map_err(|e| os_error(path, &e))
}

fn remove(path: &[u8], recursive: bool) -> Result<(), FsError> {
    let p = Path::new(OsStr::from_bytes(path));
    if p.parent().is_none() {
        return Err((FailureKind::Invalid, "refusing to remove \"/\"".into()));
    }
    let meta = std::fs::symlink_metadata(p).map_err(|e| os_error(path, &e))?;
    // `/..`, `/./` and the like name the root too.
    if meta.is_dir() && std::fs::canonicalize(p).is_ok_and(|c| c.parent().is_none()) {
        return Err((FailureKind::Invalid, format!("refusing to remove {} (it is \"/\")", shown(path))));
    }
    let result = if !meta.is_dir() {
        std::fs::remove_file(p)
    } else if recursive {
        // std's remove_dir_all works below an open directory (openat/unlinkat, links never
        // followed), so a tree changing meanwhile cannot redirect it.
        std::fs::remove_dir_all(p)
    } else {
        std::fs::remove_dir(p)
    };
    result.map_err(|e| os_error(path, &e))
}

fn rename(source: &[u8], destination: &[u8], overwrite: bool) -> Result<(), FsError> {
    let from = std::ffi::CString::new(source).map_err(|_| (FailureKind::Invalid, "NUL in source".into()))?;
    let to = std::ffi::CString::new(destination)
        .map_err(|_| (FailureKind::Invalid, "NUL in destination".into()))?;
    // Source problems are named by the source, the rest by the destination.
    std::fs::symlink_metadata(Path::new(OsStr::from_bytes(source))).map_err(|e| os_error(source, &e))?;
    let flags = if overwrite { 0 } else { libc::RENAME_NOREPLACE };
    // SAFETY: valid C strings; renameat2 only reads them.
    let rc = unsafe {
        libc::syscall(libc::SYS_renameat2, libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), flags)
    };
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if !overwrite && e.raw_os_error() == Some(libc::EINVAL) {
        // A filesystem without RENAME_NOREPLACE (fuse-overlayfs): check, then rename (a race
        // with the sandbox's own processes remains there).
        if std::fs::symlink_metadata(Path::new(OsStr::from_bytes(destination))).is_ok() {
            return Err((FailureKind::AlreadyExists, format!("{}: already exists", shown(destination))));
        }
        // SAFETY: as above.
        if unsafe { libc::rename(from.as_ptr(), to.as_ptr()) } == 0 {
            return Ok(());
        }
        return Err(os_error(destination, &std::io::Error::last_os_error()));
    }
    Err(os_error(destination, &e))
}

/// What a watch asks the kernel for on each directory.
fn watch_mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::MODIFY
        | WatchMask::DELETE
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
        | WatchMask::ONLYDIR
}

/// The directories a watch follows, by watch descriptor.
struct Watched {
    inotify: Inotify,
    dirs: HashMap<i32, Vec<u8>>,
}

impl Watched {
    /// Watch `dir` and, with `recursive`, every directory below it (links not followed). A
    /// subdirectory that cannot be watched (gone, unreadable) is skipped; running out of
    /// watches is an error.
    fn add_tree(&mut self, dir: &[u8], recursive: bool, top: bool) -> Result<(), FsError> {
        let mask = if top { watch_mask() } else { watch_mask() | WatchMask::DONT_FOLLOW };
        match self.inotify.watches().add(OsStr::from_bytes(dir), mask) {
            Ok(wd) => {
                self.dirs.insert(wd.get_watch_descriptor_id(), dir.to_vec());
            }
            Err(e) if top || e.raw_os_error() == Some(libc::ENOSPC) => {
                let (kind, message) = os_error(dir, &e);
                return Err(if e.raw_os_error() == Some(libc::ENOSPC) {
                    (FailureKind::Overflow, format!("{message} (the sandbox's inotify watch limit)"))
                } else {
                    (kind, message)
                });
            }
            Err(_) => return Ok(()),
        }
        if recursive {
            if let Ok(children) = read_sorted(dir, true) {
                for (name, meta) in children {
                    if meta.file_type().is_dir() {
                        self.add_tree(&join(dir, &name), true, false)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// A directory moved from `old` to `new`: the watches below it follow.
    fn moved(&mut self, old: &[u8], new: &[u8]) {
        for path in self.dirs.values_mut() {
            if path.as_slice() == old || (path.starts_with(old) && path.get(old.len()) == Some(&b'/')) {
                let mut p = new.to_vec();
                p.extend_from_slice(&path[old.len()..]);
                *path = p;
            }
        }
    }

    /// A directory left the watch: stop following it and what is below it.
    fn forget(&mut self, old: &[u8]) {
        let gone: Vec<i32> = self
            .dirs
            .iter()
            .filter(|(_, p)| p.as_slice() == old || (p.starts_with(old) && p.get(old.len()) == Some(&b'/')))
            .map(|(wd, _)| *wd)
            .collect();
        for wd in gone {
            self.dirs.remove(&wd);
        }
    }
}

fn watch(channel: &Channel, id: u64, path: &[u8], recursive: bool, credit: &Credit) -> Result<(), FsError> {
    let inotify = Inotify::init().map_err(|e| (FailureKind::Other, format!("inotify: {e}")))?;
    let mut w = Watched { inotify, dirs: HashMap::new() };
    w.add_tree(path, recursive, true)?;
    let root = w.dirs.iter().find(|(_, p)| p.as_slice() == path).map_or(-1, |(wd, _)| *wd);
    channel.send(id, &Event::Watching);
    // Room for a burst: every event one read returns goes out in one write.
    let mut buf = vec![0u8; 256 * 1024];
    let fd = w.inotify.as_raw_fd();
    // A move's first half, waiting (briefly, across reads) for its second.
    let mut moving: Option<(u32, Vec<u8>, bool)> = None;
    loop {
        if credit.is_closed() || channel.is_broken() {
            return Ok(());
        }
        let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        let wait = if moving.is_some() { MOVE_PAIR_MS } else { WATCH_POLL_MS };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut pfd, 1, wait) } <= 0 {
            // No second half came: the path left the watch.
            if let Some((_, old, old_dir)) = moving.take() {
                if old_dir {
                    w.forget(&old);
                }
                channel.send(id, &Event::Change(removed(old, old_dir)));
            }
            continue;
        }
        let mut raw = Vec::new();
        match w.inotify.read_events(&mut buf) {
            Ok(events) => {
                for ev in events {
                    raw.push((
                        ev.wd.get_watch_descriptor_id(),
                        ev.mask,
                        ev.cookie,
                        ev.name.map(|n| n.as_bytes().to_vec()),
                    ));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err((FailureKind::Other, format!("reading inotify events: {e}"))),
        }
        let mut changes = Vec::new();
        let mut ended = false;
        for (wd, mask, cookie, name) in raw {
            if mask.contains(EventMask::Q_OVERFLOW) {
                return Err((
                    FailureKind::Overflow,
                    format!("{}: the kernel's event queue overflowed; events were lost", shown(path)),
                ));
            }
            if mask.contains(EventMask::IGNORED) {
                w.dirs.remove(&wd);
                ended |= wd == root;
                continue;
            }
            if mask.intersects(EventMask::DELETE_SELF | EventMask::MOVE_SELF) {
                ended |= wd == root;
                continue;
            }
            let (Some(dir), Some(name)) = (w.dirs.get(&wd).cloned(), name) else { continue };
            let full = join(&dir, &name);
            let is_dir = mask.contains(EventMask::ISDIR);
            if let Some((c, old, old_dir)) = moving.take() {
                if mask.contains(EventMask::MOVED_TO) && c == cookie {
                    if old_dir {
                        w.moved(&old, &full);
                    }
                    changes.push(FsChange { kind: FsChangeKind::Rename, path: full, old_path: old, is_dir });
                    continue;
                }
                if old_dir {
                    w.forget(&old);
                }
                changes.push(removed(old, old_dir));
            }
            if mask.contains(EventMask::MOVED_FROM) {
                moving = Some((cookie, full, is_dir));
            } else if mask.intersects(EventMask::CREATE | EventMask::MOVED_TO) {
                if is_dir && recursive {
                    w.add_tree(&full, true, false)?;
                }
                changes.push(FsChange {
                    kind: FsChangeKind::Create,
                    path: full,
                    old_path: Vec::new(),
                    is_dir,
                });
            } else if mask.contains(EventMask::MODIFY) {
                changes.push(FsChange {
                    kind: FsChangeKind::Modify,
                    path: full,
                    old_path: Vec::new(),
                    is_dir,
                });
            } else if mask.contains(EventMask::DELETE) {
                changes.push(removed(full, is_dir));
            }
        }
        if ended {
            if let Some((_, old, old_dir)) = moving.take() {
                changes.push(removed(old, old_dir));
            }
        }
        channel.send_all(id, changes.into_iter().map(Event::Change));
        if ended {
            // The watched directory itself was removed or moved away.
            channel.send(id, &Event::Done);
            return Ok(());
        }
    }
}

fn removed(path: Vec<u8>, is_dir: bool) -> FsChange {
    FsChange { kind: FsChangeKind::Remove, path, old_path: Vec::new(), is_dir }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_kinds() {
        assert_eq!(kind_of(libc::ENOENT), FailureKind::NotFound);
        assert_eq!(kind_of(libc::EEXIST), FailureKind::AlreadyExists);
        assert_eq!(kind_of(libc::ENOTEMPTY), FailureKind::NotEmpty);
        assert_eq!(kind_of(libc::EACCES), FailureKind::Permission);
        assert!(checked(b"relative").is_err());
        assert!(checked(b"/a\0b").is_err());
        assert!(checked(b"/a b\n\xff").is_ok());
    }

    #[test]
    fn join_and_names() {
        assert_eq!(join(b"/", b"a"), b"/a");
        assert_eq!(join(b"/x", b"a\xff"), b"/x/a\xff");
        let meta = std::fs::symlink_metadata("/").unwrap();
        assert_eq!(entry_of(b"/", &meta).name, b"/");
    }
}
