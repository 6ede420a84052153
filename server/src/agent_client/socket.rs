//! Reaching a sandbox's agent on its unix socket, `<run dir>/agent.sock`, where the run
//! directory is a host directory this server made (0700) and bind-mounted into the sandbox at
//! `/.sandboxd/run`. Whatever runs as root in the sandbox can change what is in that directory,
//! so nothing there is trusted:
//! - the directory is opened without following a link (`O_NOFOLLOW|O_DIRECTORY`) and must be
//!   a directory owned by this server's user with no access for anyone else;
//! - the socket is opened through that descriptor with `O_PATH|O_NOFOLLOW` (a planted link is
//!   the link itself, never its target) and must be a socket owned by root; the connect goes
//!   through `/proc/self/fd/<that descriptor>`, so a path swapped after the check is never used;
//! - the peer (`SO_PEERCRED`) must be root and run in this sandbox's container (its
//!   `/proc/<pid>/cgroup` names the container's id), checked before a byte is sent.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The socket's name in its run directory (the agent's `socket::SOCKET_NAME`).
pub use sandboxd_agent::socket::SOCKET_NAME;

/// Where the run directory is mounted in every sandbox.
pub const RUN_DIR_IN_SANDBOX: &str = "/.sandboxd/run";

/// Why the socket could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// Nothing to connect to (yet): no directory, no socket, or nobody listening.
    #[error("{0}")]
    Absent(String),
    /// Something there is not what this server made or expects: never used.
    #[error("{0}")]
    Refused(String),
    /// It listens but its queue of connections is full (an agent that stopped accepting, or
    /// anything else root in the sandbox put there): this call does without it.
    #[error("{0}")]
    Busy(String),
}

fn cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path holds a NUL byte"))
}

fn fstat(fd: &OwnedFd) -> io::Result<libc::stat> {
    // SAFETY: fstat writes one stat into our zeroed buffer.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd.as_raw_fd(), &mut st) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(st)
    }
}

fn absent_or(e: io::Error, what: String) -> SocketError {
    match e.raw_os_error() {
        Some(libc::ENOENT) => SocketError::Absent(format!("{what}: {e}")),
        _ => SocketError::Refused(format!("{what}: {e}")),
    }
}

/// Open the run directory `dir` (never through a link) and check it is ours and private.
pub fn open_run_dir(dir: &Path) -> Result<OwnedFd, SocketError> {
    let c = cstring(dir).map_err(|e| SocketError::Refused(e.to_string()))?;
    // SAFETY: open on a valid C string; the descriptor is owned at once.
    let fd = unsafe {
        libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(absent_or(e, format!("run directory {} (a link is never followed)", dir.display())));
    }
    // SAFETY: a descriptor we just opened.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let st = fstat(&fd).map_err(|e| SocketError::Refused(e.to_string()))?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if st.st_uid != me || st.st_mode & 0o077 != 0 {
        return Err(SocketError::Refused(format!(
            "run directory {} is owned by uid {} with mode {:o}; only uid {me} with 0700 is used",
            dir.display(),
            st.st_uid,
            st.st_mode & 0o7777
        )));
    }
    Ok(fd)
}

/// The socket in the verified directory `dirfd`, as an `O_PATH` descriptor of the socket
/// itself (a link there is refused, not followed).
fn open_socket_inode(dirfd: &OwnedFd, dir: &Path) -> Result<OwnedFd, SocketError> {
    let name = CString::new(SOCKET_NAME).expect("no NUL");
    // SAFETY: openat on our directory descriptor; O_PATH|O_NOFOLLOW opens a link as itself.
    let fd = unsafe {
        libc::openat(dirfd.as_raw_fd(), name.as_ptr(), libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
    };
    let path = dir.join(SOCKET_NAME);
    if fd < 0 {
        return Err(absent_or(io::Error::last_os_error(), format!("agent socket {}", path.display())));
    }
    // SAFETY: a descriptor we just opened.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let st = fstat(&fd).map_err(|e| SocketError::Refused(e.to_string()))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(SocketError::Refused(format!(
            "{} is not a socket (mode {:o}); a link or anything else there is never followed",
            path.display(),
            st.st_mode
        )));
    }
    if st.st_uid != 0 {
        return Err(SocketError::Refused(format!(
            "{} is owned by uid {}, not root",
            path.display(),
            st.st_uid
        )));
    }
    Ok(fd)
}

/// `SO_PEERCRED` of a connected socket: (pid, uid).
fn peer(stream: &std::os::unix::net::UnixStream) -> io::Result<(i32, u32)> {
    let mut cred = libc::ucred { pid: 0, uid: u32::MAX, gid: u32::MAX };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED writes one ucred into our buffer.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((cred.pid, cred.uid))
}

/// Whether a `/proc/<pid>/cgroup` text puts the process in container `id` (cgroupfs:
/// `…/docker/<id>`, systemd: `…/docker-<id>.scope`, or below either).
pub fn cgroup_names_container(cgroup: &str, id: &str) -> bool {
    if id.len() < 12 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return false;
    }
    let scope = format!("docker-{id}.scope");
    cgroup.lines().any(|line| {
        let path = line.splitn(3, ':').nth(2).unwrap_or("");
        path.split('/').any(|part| part == id || part == scope)
    })
}

/// Connect to the agent of container `container_id` through its run directory `dir`.
pub fn connect(dir: &Path, container_id: &str) -> Result<std::os::unix::net::UnixStream, SocketError> {
    let dirfd = open_run_dir(dir)?;
    let inode = open_socket_inode(&dirfd, dir)?;
    let stream = connect_without_waiting(&inode).map_err(|e| {
        let what = format!("connect to {}", dir.join(SOCKET_NAME).display());
        match e.raw_os_error() {
            Some(libc::ECONNREFUSED) | Some(libc::ENOENT) => SocketError::Absent(format!("{what}: {e}")),
            Some(libc::EAGAIN) | Some(libc::EINPROGRESS) => {
                SocketError::Busy(format!("{what}: its queue of connections is full ({e})"))
            }
            _ => SocketError::Refused(format!("{what}: {e}")),
        }
    })?;
    let (pid, uid) = peer(&stream).map_err(|e| SocketError::Refused(format!("the peer is unknown: {e}")))?;
    if uid != 0 {
        return Err(SocketError::Refused(format!("the socket's peer runs as uid {uid}, not root")));
    }
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    if !cgroup_names_container(&cgroup, container_id) {
        return Err(SocketError::Refused(format!(
            "the socket's peer (host pid {pid}) does not run in container {container_id}"
        )));
    }
    Ok(stream)
}

/// Whether something listens on `dir`'s socket (reached as `connect` reaches it, never through
/// a link); the connection is closed at once.
pub fn answers(dir: &Path) -> bool {
    let Ok(dirfd) = open_run_dir(dir) else { return false };
    let Ok(inode) = open_socket_inode(&dirfd, dir) else { return false };
    connect_without_waiting(&inode).is_ok()
}

/// A non-blocking connect to the socket `inode` (through `/proc/self/fd`): a blocking one waits
/// as long as the listener's queue is full, which whoever listens there decides (root in the
/// sandbox can put a socket that never accepts in place of the agent's), and would hold one of
/// the server's runtime threads for that long. The stream is returned non-blocking.
fn connect_without_waiting(inode: &OwnedFd) -> io::Result<std::os::unix::net::UnixStream> {
    let through = PathBuf::from(format!("/proc/self/fd/{}", inode.as_raw_fd()));
    let address = socket2::SockAddr::unix(&through)?;
    let socket =
        socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM.nonblocking().cloexec(), None)?;
    // A unix socket connects at once or fails with EAGAIN: it never completes later.
    socket.connect(&address)?;
    Ok(std::os::unix::net::UnixStream::from(OwnedFd::from(socket)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "c6bd0bc0d7ac0cae01d1c8aaaee583b5d04056b3c8eafbfc6cdf1e061693548d";

    #[test]
    fn the_cgroup_must_name_the_container() {
        assert!(cgroup_names_container(&format!("0::/docker/{ID}\n"), ID));
        assert!(cgroup_names_container(&format!("1:cpu:/docker/{ID}/sub\n"), ID));
        assert!(cgroup_names_container(&format!("0::/system.slice/docker-{ID}.scope\n"), ID));
        assert!(!cgroup_names_container("0::/docker/0123456789abcdef\n", ID));
        assert!(!cgroup_names_container("0::/user.slice\n", ID));
        assert!(!cgroup_names_container(&format!("0::/docker/{ID}x\n"), ID));
        assert!(!cgroup_names_container("0::/docker/\n", ""), "an empty id names nothing");
    }

    #[test]
    fn a_link_or_a_loose_directory_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("run");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(matches!(connect(&dir, ID), Err(SocketError::Absent(_))), "no socket yet");
        // A listening socket owned by us (root in the test run) but not in the container.
        let listener = std::os::unix::net::UnixListener::bind(base.path().join("other.sock")).unwrap();
        std::os::unix::fs::symlink(base.path().join("other.sock"), dir.join(SOCKET_NAME)).unwrap();
        let err = connect(&dir, ID).unwrap_err();
        assert!(matches!(err, SocketError::Refused(ref m) if m.contains("not a socket")), "{err}");
        std::fs::remove_file(dir.join(SOCKET_NAME)).unwrap();
        let _real = std::os::unix::net::UnixListener::bind(dir.join(SOCKET_NAME)).unwrap();
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let err = connect(&dir, ID).unwrap_err();
            assert!(
                matches!(err, SocketError::Refused(ref m) if m.contains("does not run in container")),
                "{err}"
            );
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = connect(&dir, ID).unwrap_err();
        assert!(matches!(err, SocketError::Refused(ref m) if m.contains("0700")), "{err}");
        let linked = base.path().join("linked");
        std::os::unix::fs::symlink(&dir, &linked).unwrap();
        assert!(matches!(connect(&linked, ID), Err(SocketError::Refused(_))));
        drop(listener);
    }

    /// A socket that listens but never accepts (its queue full) is `Busy` at once: the connect
    /// never waits for whoever listens there.
    #[test]
    fn a_listener_that_never_accepts_is_busy_not_waited_for() {
        use std::os::unix::fs::PermissionsExt;
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return; // the socket must be root's; the suites run as root (docs/testing.md)
        }
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("run");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let listener = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None).unwrap();
        listener.bind(&socket2::SockAddr::unix(dir.join(SOCKET_NAME)).unwrap()).unwrap();
        listener.listen(0).unwrap();
        // Fill its queue as a sandbox's process could.
        let mut queued = Vec::new();
        loop {
            let inode = open_socket_inode(&open_run_dir(&dir).unwrap(), &dir).unwrap();
            match connect_without_waiting(&inode) {
                Ok(stream) => queued.push(stream),
                Err(e) => {
                    assert_eq!(e.raw_os_error(), Some(libc::EAGAIN), "{e}");
                    break;
                }
            }
            assert!(queued.len() < 64, "a queue of backlog 0 took {} connections", queued.len());
        }
        assert!(!queued.is_empty(), "the queue took no connection at all");
        let err = connect(&dir, ID).unwrap_err();
        assert!(matches!(err, SocketError::Busy(ref m) if m.contains("queue")), "{err}");
        assert!(!answers(&dir), "a full queue does not answer");
        drop(queued);
    }
}
