//! The agent on a unix socket: `<dir>/agent.sock` in a directory the server bind-mounts into the
//! sandbox (`/.sandboxd/run`). The directory is verified root-owned and made 0700 through a
//! descriptor opened without following links, the socket is bound through that descriptor
//! (`/proc/self/fd/N/agent.sock`) after unlinking whatever sat there (a planted link is removed,
//! never followed) and is 0600. Every accepted connection is checked with `SO_PEERCRED` (uid 0
//! only) and then speaks the agent protocol like the stdio channel: `Hello`, then `Readiness`.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::channel::Channel;
use crate::protocol::{self, Event, ReadyState};
use crate::serve::Agent;

/// The socket's name in its directory.
pub const SOCKET_NAME: &str = "agent.sock";
/// Where `init` listens by default (the server bind-mounts the directory there).
pub const DEFAULT_SOCKET: &str = "/.sandboxd/run/agent.sock";
/// Connections served at once; more are closed at once (a restarted server reconnects, a few
/// server threads may each hold one).
pub const MAX_CONNECTIONS: usize = 64;

/// A bound socket and the verified directory it sits in.
pub struct Listener {
    listener: UnixListener,
    _dir: OwnedFd,
    pub path: PathBuf,
}

fn cpath(p: &Path) -> io::Result<std::ffi::CString> {
    std::ffi::CString::new(p.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "the socket path holds a NUL byte"))
}

fn refuse(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, what)
}

/// Create (0700) or verify `dir`: a real directory (not a link), owned by root, nobody else
/// with any access. Returns a descriptor of it.
pub fn secure_dir(dir: &Path) -> io::Result<OwnedFd> {
    let c = cpath(dir)?;
    // SAFETY: plain syscalls on a valid C string; mkdir never follows a link at the last part.
    unsafe {
        if libc::mkdir(c.as_ptr(), 0o700) != 0
            && io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST)
        {
            return Err(io::Error::other(format!(
                "cannot create {}: {}",
                dir.display(),
                io::Error::last_os_error()
            )));
        }
        let fd =
            libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC);
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(refuse(format!(
                "{} is not a directory the agent may use (a link is never followed): {e}",
                dir.display()
            )));
        }
        let fd = OwnedFd::from_raw_fd(fd);
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd.as_raw_fd(), &mut st) != 0 {
            return Err(io::Error::last_os_error());
        }
        if st.st_uid != 0 {
            return Err(refuse(format!("{} is owned by uid {}, not root", dir.display(), st.st_uid)));
        }
        if st.st_mode & 0o077 != 0 && libc::fchmod(fd.as_raw_fd(), 0o700) != 0 {
            return Err(io::Error::other(format!(
                "cannot make {} 0700: {}",
                dir.display(),
                io::Error::last_os_error()
            )));
        }
        Ok(fd)
    }
}

/// Bind `<dir>/agent.sock` (0600) in the verified directory `dir`.
pub fn listen(dir: &Path) -> io::Result<Listener> {
    let dirfd = secure_dir(dir)?;
    let name = std::ffi::CString::new(SOCKET_NAME).expect("no NUL");
    // SAFETY: unlinkat on our directory descriptor; it removes a link, never its target.
    if unsafe { libc::unlinkat(dirfd.as_raw_fd(), name.as_ptr(), 0) } != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ENOENT) {
            return Err(io::Error::new(
                e.kind(),
                format!("cannot remove the old {}: {e}", dir.join(SOCKET_NAME).display()),
            ));
        }
    }
    let through = PathBuf::from(format!("/proc/self/fd/{}/{SOCKET_NAME}", dirfd.as_raw_fd()));
    // SAFETY: umask is process-wide; `listen` runs before the agent starts any thread or child.
    let old = unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(&through);
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    let listener = bound.map_err(|e| {
        io::Error::new(e.kind(), format!("cannot bind {}: {e}", dir.join(SOCKET_NAME).display()))
    })?;
    Ok(Listener { listener, _dir: dirfd, path: dir.join(SOCKET_NAME) })
}

/// The uid of the peer (`SO_PEERCRED`).
pub fn peer_uid(fd: RawFd) -> io::Result<u32> {
    let mut cred = libc::ucred { pid: 0, uid: u32::MAX, gid: u32::MAX };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED writes one ucred into our buffer.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// What every connection's hello reports after `Hello`.
struct Readiness {
    state: ReadyState,
    shell: String,
    detail: String,
    /// Live connections, told again when the state changes.
    listeners: Vec<Channel>,
    /// The wrapped command ended: the state stays what it is now.
    ended: bool,
}

static READINESS: Mutex<Readiness> = Mutex::new(Readiness {
    state: ReadyState::Pending,
    shell: String::new(),
    detail: String::new(),
    listeners: Vec::new(),
    ended: false,
});

fn readiness_event(r: &Readiness) -> Event {
    Event::Readiness { state: r.state, shell: r.shell.clone(), detail: r.detail.clone() }
}

/// Record the probe's outcome (and the shell) and tell every connection.
pub fn announce(state: ReadyState, shell: &str, detail: &str) {
    let mut r = READINESS.lock().unwrap_or_else(|e| e.into_inner());
    if r.ended {
        return;
    }
    r.state = state;
    r.shell = shell.to_string();
    r.detail = detail.to_string();
    r.listeners.retain(|c| !c.is_broken());
    let event = readiness_event(&r);
    let listeners = r.listeners.clone();
    drop(r);
    // Outside the lock: a connection whose reader stalls must not hold up the others.
    for c in &listeners {
        c.send(0, &event);
    }
}

/// The wrapped command (the sandbox's entrypoint) ended. Before the sandbox was reported
/// ready that fails its readiness for good, with `detail`, told to every connection before the
/// agent exits (the frames stay readable after it), so a create never reports a sandbox whose
/// program already exited as ready. After it, nothing changes.
pub fn wrapped_ended(detail: &str) {
    let mut r = READINESS.lock().unwrap_or_else(|e| e.into_inner());
    if r.ended || r.state == ReadyState::Ready {
        r.ended = true;
        return;
    }
    r.ended = true;
    r.state = ReadyState::Failed;
    r.detail = detail.to_string();
    r.listeners.retain(|c| !c.is_broken());
    let event = readiness_event(&r);
    let listeners = r.listeners.clone();
    drop(r);
    for c in &listeners {
        c.send(0, &event);
    }
}

fn no_op() {}

impl Listener {
    /// Accept connections forever, each served on a thread of its own.
    pub fn serve(self, base_env: Arc<Vec<(String, String)>>) -> ! {
        let live = Arc::new(AtomicUsize::new(0));
        loop {
            let stream = match self.listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) => {
                    eprintln!("sandboxd-agent: accept on {}: {e}", self.path.display());
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    continue;
                }
            };
            match peer_uid(stream.as_raw_fd()) {
                Ok(0) => {}
                Ok(uid) => {
                    eprintln!("sandboxd-agent: refused a connection from uid {uid} (root only)");
                    continue;
                }
                Err(e) => {
                    eprintln!("sandboxd-agent: refused a connection whose peer is unknown: {e}");
                    continue;
                }
            }
            if live.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
                live.fetch_sub(1, Ordering::SeqCst);
                eprintln!("sandboxd-agent: refused a connection: {MAX_CONNECTIONS} are open");
                continue;
            }
            let (base_env, live) = (base_env.clone(), live.clone());
            std::thread::spawn(move || {
                serve_connection(stream, base_env);
                live.fetch_sub(1, Ordering::SeqCst);
            });
        }
    }
}

fn serve_connection(stream: UnixStream, base_env: Arc<Vec<(String, String)>>) {
    let Ok(writer) = stream.try_clone() else { return };
    let channel = Channel::new(File::from(OwnedFd::from(writer)), no_op);
    let agent = Agent::new(channel.clone(), base_env);
    channel.send(0, &Event::Hello { version: protocol::PROTOCOL_VERSION, pid: std::process::id() });
    {
        let mut r = READINESS.lock().unwrap_or_else(|e| e.into_inner());
        channel.send(0, &readiness_event(&r));
        r.listeners.retain(|c| !c.is_broken());
        r.listeners.push(channel.clone());
    }
    agent.run(&stream);
    agent.end();
    let _ = stream.shutdown(std::net::Shutdown::Both);
}
