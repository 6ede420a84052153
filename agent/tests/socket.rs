//! The agent on its socket, on the host (as root): who may connect, what it never follows, the
//! hello, and the session table (terminals and processes) driven from several connections.

mod common;

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{pty, wait_for_socket, Conn};
use sandboxd_agent::protocol::{
    DetachReason, Event, FailureKind, ReadyState, Request, SessionStart, WindowSize, DETACH_NEVER,
};

/// `sandboxd-agent listen` on a fresh directory, killed on drop.
struct Listening {
    child: Child,
    _tmp: tempfile::TempDir,
    dir: PathBuf,
}

impl Listening {
    fn start() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run");
        Self::start_in(tmp, dir)
    }

    fn start_in(tmp: tempfile::TempDir, dir: PathBuf) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_sandboxd-agent"))
            .args(["listen", "--run-dir"])
            .arg(&dir)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let l = Self { child, _tmp: tmp, dir };
        wait_for_socket(&l.socket());
        l
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("agent.sock")
    }

    fn connect(&self) -> Conn {
        Conn::connect(&self.socket()).unwrap()
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Connect to `socket` from a forked child running as uid/gid 65534; what the child saw:
/// `Err(errno)` of connect, or `Ok(bytes it could read)`.
fn connect_as_nobody(socket: &Path) -> Result<usize, i32> {
    let path = std::ffi::CString::new(socket.as_os_str().as_encoded_bytes()).unwrap();
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (i, b) in path.as_bytes().iter().enumerate() {
        addr.sun_path[i] = *b as libc::c_char;
    }
    let mut fds = [0; 2];
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child makes only system calls, then _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        unsafe {
            let result: i64;
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(65534) != 0
                || libc::setuid(65534) != 0
            {
                result = -10_000;
            } else {
                let s = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
                if libc::connect(
                    s,
                    (&addr as *const libc::sockaddr_un).cast(),
                    std::mem::size_of::<libc::sockaddr_un>() as u32,
                ) != 0
                {
                    result = -(*libc::__errno_location() as i64);
                } else {
                    let tv = libc::timeval { tv_sec: 3, tv_usec: 0 };
                    libc::setsockopt(
                        s,
                        libc::SOL_SOCKET,
                        libc::SO_RCVTIMEO,
                        (&tv as *const libc::timeval).cast(),
                        std::mem::size_of::<libc::timeval>() as u32,
                    );
                    let mut buf = [0u8; 256];
                    let mut total = 0i64;
                    loop {
                        let n = libc::read(s, buf.as_mut_ptr().cast(), buf.len());
                        if n <= 0 {
                            break;
                        }
                        total += n as i64;
                    }
                    result = total;
                }
            }
            libc::write(fds[1], (&result as *const i64).cast(), 8);
            libc::_exit(0);
        }
    }
    unsafe { libc::close(fds[1]) };
    let mut result = 0i64;
    assert_eq!(unsafe { libc::read(fds[0], (&mut result as *mut i64).cast(), 8) }, 8);
    unsafe {
        libc::close(fds[0]);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    assert_ne!(result, -10_000, "the child could not become uid 65534");
    if result < 0 {
        Err(-result as i32)
    } else {
        Ok(result as usize)
    }
}

#[test]
fn the_socket_and_its_directory_are_root_only() {
    let l = Listening::start();
    let dir = std::fs::symlink_metadata(&l.dir).unwrap();
    assert!(dir.is_dir());
    assert_eq!((dir.uid(), dir.mode() & 0o777), (0, 0o700));
    let sock = std::fs::symlink_metadata(l.socket()).unwrap();
    assert!(sock.file_type().is_socket());
    assert_eq!((sock.uid(), sock.mode() & 0o777), (0, 0o600));
    // A non-root process cannot even reach it.
    assert_eq!(connect_as_nobody(&l.socket()), Err(libc::EACCES));
    // Root gets the hello.
    let mut c = l.connect();
    assert_eq!(c.pid, l.child.id());
    assert_eq!(c.settled_readiness().0, ReadyState::Ready);
}

#[test]
fn a_non_root_peer_that_reaches_the_socket_is_refused_by_its_credentials() {
    let l = Listening::start();
    // Open the file-system path to everyone: only SO_PEERCRED stands between uid 65534 and the agent.
    std::fs::set_permissions(&l.dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(l.socket(), std::fs::Permissions::from_mode(0o666)).unwrap();
    assert_eq!(
        connect_as_nobody(&l.socket()),
        Ok(0),
        "the agent must close a non-root connection before any byte"
    );
    // And root still is served.
    let mut c = l.connect();
    assert_eq!(c.exec(1, "printf ok"), ("ok".to_string(), 0));
}

#[test]
fn a_link_planted_where_the_socket_goes_is_removed_not_followed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let target = tmp.path().join("precious");
    std::fs::write(&target, b"keep me").unwrap();
    std::os::unix::fs::symlink(&target, dir.join("agent.sock")).unwrap();
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let l = Listening::start_in(tmp, dir);
    assert!(std::fs::symlink_metadata(l.socket()).unwrap().file_type().is_socket());
    assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
    assert!(std::fs::read_dir(&elsewhere).unwrap().next().is_none());
    l.connect();
}

fn listen_fails(dir: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sandboxd-agent"))
        .args(["listen", "--run-dir"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(!out.status.success(), "listen on {} must fail", dir.display());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_directory_that_is_a_link_or_not_root_owned_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let real = tmp.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = tmp.path().join("run");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let err = listen_fails(&link);
    assert!(err.contains("link is never followed"), "{err}");
    assert!(std::fs::read_dir(&real).unwrap().next().is_none(), "nothing was bound through the link");
    let foreign = tmp.path().join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).unwrap();
    let err = listen_fails(&foreign);
    assert!(err.contains("owned by uid 65534, not root"), "{err}");
}

#[test]
fn several_connections_are_served_at_once_and_one_ending_leaves_the_others() {
    let l = Listening::start();
    let mut a = l.connect();
    let mut b = l.connect();
    assert_eq!(a.exec(1, "echo a"), ("a\n".to_string(), 0));
    assert_eq!(b.exec(1, "echo b"), ("b\n".to_string(), 0));
    drop(a);
    assert_eq!(b.exec(2, "echo still"), ("still\n".to_string(), 0));
    let mut c = l.connect();
    assert_eq!(c.exec(1, "echo c"), ("c\n".to_string(), 0));
}

#[test]
fn a_frame_over_the_bound_ends_only_that_connection() {
    let l = Listening::start();
    let mut bad = std::os::unix::net::UnixStream::connect(l.socket()).unwrap();
    use std::io::{Read, Write};
    bad.write_all(&(200u32 << 20).to_le_bytes()).unwrap();
    bad.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut all = Vec::new();
    let _ = bad.read_to_end(&mut all);
    // Hello and readiness came first, then the agent closed it.
    assert!(!all.is_empty());
    let mut good = l.connect();
    assert_eq!(good.exec(1, "echo fine"), ("fine\n".to_string(), 0));
}

fn session_id(event: Event) -> (String, u64) {
    match event {
        Event::SessionOpened { session_id, offset, .. } => (session_id, offset),
        other => panic!("expected SessionOpened, got {other:?}"),
    }
}

#[test]
fn a_pty_is_sized_at_spawn_resized_by_ioctl_and_signals_reach_the_foreground_job() {
    let l = Listening::start();
    let mut c = l.connect();
    c.send(1, Request::SessionOpen(pty(&["sh", "-c", "stty size; exec sh -i"], 40, 132)));
    let (_id, offset) = session_id(c.next(1));
    assert_eq!(offset, 0);
    c.output_until(1, "the size at spawn", |t| t.contains("40 132"));
    c.send(1, Request::Resize(WindowSize { rows: 33, cols: 77 }));
    c.send(1, Request::Stdin(b"stty size\n".to_vec()));
    c.output_until(1, "the new size", |t| t.contains("33 77"));
    // A foreground job; SIGINT goes to it, not to the shell.
    c.send(1, Request::Stdin(b"sleep 1000\n".to_vec()));
    std::thread::sleep(Duration::from_millis(300));
    c.send(1, Request::Signal(libc::SIGINT));
    c.send(1, Request::Stdin(b"echo \"job=$?\"\n".to_vec()));
    c.output_until(1, "the job ended by SIGINT", |t| t.contains("job=130"));
    c.send(1, Request::Stdin(b"echo alive-$((1+1))\n".to_vec()));
    c.output_until(1, "the shell survived", |t| t.contains("alive-2"));
    c.send(1, Request::Stdin(b"exit 7\n".to_vec()));
    assert_eq!(until_exit(&mut c, 1), 7);
}

/// Skip output to the session's exit code.
fn until_exit(c: &mut Conn, id: u64) -> i32 {
    loop {
        match c.next(id) {
            Event::Output { .. } => {}
            Event::SessionExit { code } => return code,
            other => panic!("expected the exit, got {other:?}"),
        }
    }
}

#[test]
fn pipe_mode_keeps_stdout_and_stderr_apart_with_offsets() {
    let l = Listening::start();
    let mut c = l.connect();
    let start = SessionStart {
        argv: vec!["sh".into(), "-c".into(), "printf out; printf err >&2; read x; printf \"$x\"".into()],
        attach: true,
        ..Default::default()
    };
    c.send(1, Request::SessionOpen(start));
    session_id(c.next(1));
    c.send(1, Request::Stdin(b"in\n".to_vec()));
    c.send(1, Request::StdinEnd);
    let (mut out, mut err, mut next_offset) = (Vec::new(), Vec::new(), 0);
    loop {
        match c.next(1) {
            Event::Output { stderr, offset, data } => {
                assert_eq!(offset, next_offset, "offsets run on without gaps");
                next_offset += data.len() as u64;
                if stderr {
                    err.extend(data)
                } else {
                    out.extend(data)
                }
            }
            Event::SessionExit { code } => {
                assert_eq!(code, 0);
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((out.as_slice(), err.as_slice()), (b"outin".as_slice(), b"err".as_slice()));
}

#[test]
fn reattach_from_another_connection_with_since_and_takeover() {
    let l = Listening::start();
    let mut first = l.connect();
    let mut start =
        pty(&["sh", "-c", "echo one; read x; echo \"got $x\"; read y; echo \"then $y\"; sleep 1000"], 24, 80);
    start.detach_timeout_ms = Some(60_000);
    first.send(1, Request::SessionOpen(start));
    let (id, _) = session_id(first.next(1));
    first.output_until(1, "one", |t| t.contains("one"));

    let mut second = l.connect();
    // Held, and no takeover: refused naming why.
    second.send(1, Request::SessionAttach { session_id: id.clone(), since: Some(0), takeover: false });
    match second.next(1) {
        Event::Failed { kind: FailureKind::Held, message } => {
            assert!(message.contains("takeover"), "{message}")
        }
        other => panic!("expected Held, got {other:?}"),
    }
    // Takeover: the first holder's stream ends with the reason; the second replays from 0.
    second.send(2, Request::SessionAttach { session_id: id.clone(), since: Some(0), takeover: true });
    assert_eq!(session_id(second.next(2)), (id.clone(), 0));
    second.output_until(2, "the replay", |t| t.contains("one"));
    loop {
        match first.next(1) {
            Event::Output { .. } => {}
            Event::Detached { reason, message } => {
                assert_eq!(reason, DetachReason::TakenOver);
                assert!(message.contains("taken over"), "{message}");
                break;
            }
            other => panic!("expected Detached, got {other:?}"),
        }
    }
    second.send(2, Request::Stdin(b"two\n".to_vec()));
    let (text, _) = second.output_until(2, "got two", |t| t.contains("got two"));
    assert!(!text.is_empty());

    // Detach cleanly; the session runs on and lists as unattached.
    second.send(2, Request::Detach);
    loop {
        match second.next(2) {
            Event::Output { .. } => {}
            Event::Detached { reason: DetachReason::Requested, .. } => break,
            other => panic!("expected Detached, got {other:?}"),
        }
    }
    second.send(3, Request::ListSessions);
    let Event::Sessions(list) = second.next(3) else { panic!("expected Sessions") };
    let row = list.iter().find(|s| s.session_id == id).expect("the session is listed");
    assert!(!row.attached && row.exit_code.is_none());
    assert_eq!(row.pty, Some(WindowSize { rows: 24, cols: 80 }));
    assert_eq!(row.argv[0], "sh");
    assert!(row.retained_bytes() > 0);

    // A third connection attaches from the end minus a few bytes: only those replay.
    let mut third = l.connect();
    let since = row.end_offset - 4;
    third.send(1, Request::SessionAttach { session_id: id.clone(), since: Some(since), takeover: false });
    assert_eq!(session_id(third.next(1)), (id.clone(), since));
    match third.next(1) {
        Event::Output { offset, data, .. } => assert_eq!((offset, data.len()), (since, 4)),
        other => panic!("expected the replayed bytes, got {other:?}"),
    }
    // A `since` past the end is out of range, naming the end.
    third.send(
        2,
        Request::SessionAttach { session_id: id.clone(), since: Some(row.end_offset + 1000), takeover: true },
    );
    match third.next(2) {
        Event::Failed { kind: FailureKind::OutOfRange, message } => {
            assert!(message.contains("past the end"), "{message}")
        }
        other => panic!("expected OutOfRange, got {other:?}"),
    }
    // Close by id ends it.
    third.send(3, Request::CloseSession { session_id: id.clone() });
    assert_eq!(third.next(3), Event::Done);
    assert_eq!(until_exit(&mut third, 1), 128 + libc::SIGHUP);
}

#[test]
fn since_older_than_the_ring_names_the_oldest_offset() {
    let l = Listening::start();
    let mut c = l.connect();
    let start = SessionStart {
        argv: vec![
            "sh".into(),
            "-c".into(),
            "i=0; while [ $i -lt 200 ]; do echo 0123456789; i=$((i+1)); done; sleep 1000".into(),
        ],
        retain_bytes: 100,
        detach_timeout_ms: Some(DETACH_NEVER),
        attach: false,
        ..Default::default()
    };
    c.send(1, Request::SessionOpen(start));
    let (id, _) = session_id(c.next(1));
    let deadline = Instant::now() + Duration::from_secs(10);
    let row = loop {
        c.send(2, Request::ListSessions);
        let Event::Sessions(list) = c.next(2) else { panic!() };
        let row = list.into_iter().find(|s| s.session_id == id).unwrap();
        if row.end_offset >= 2200 {
            break row;
        }
        assert!(Instant::now() < deadline, "the output never arrived: {row:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!((row.oldest_offset, row.retained_bytes()), (2100, 100));
    c.send(3, Request::SessionAttach { session_id: id.clone(), since: Some(5), takeover: false });
    match c.next(3) {
        Event::Failed { kind: FailureKind::OutOfRange, message } => {
            assert!(message.contains("oldest offset 2100"), "{message}")
        }
        other => panic!("expected OutOfRange, got {other:?}"),
    }
    // An unheld process is signalled by id; its exit code says by what.
    c.send(4, Request::SignalSession { session_id: id.clone(), signal: libc::SIGTERM });
    assert_eq!(c.next(4), Event::Done);
    wait_for_exit(&mut c, &id, 128 + libc::SIGTERM);
}

fn wait_for_exit(c: &mut Conn, id: &str, code: i32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        c.send(50, Request::ListSessions);
        let Event::Sessions(list) = c.next(50) else { panic!() };
        let row = list.into_iter().find(|s| s.session_id == id).expect("listed");
        if let Some(got) = row.exit_code {
            assert_eq!(got, code);
            return;
        }
        assert!(Instant::now() < deadline, "session {id} never ended");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_dropped_holder_ends_the_session_at_once_or_after_its_detach_timeout() {
    let l = Listening::start();
    let mut watcher = l.connect();
    // No detach timeout: the connection's end ends the session.
    let mut c = l.connect();
    c.send(1, Request::SessionOpen(pty(&["sleep", "1000"], 24, 80)));
    let (at_once, _) = session_id(c.next(1));
    // A detach timeout of 1.5 s: still running after 0.5 s, ended after it.
    let mut start = pty(&["sleep", "1000"], 24, 80);
    start.detach_timeout_ms = Some(1500);
    c.send(2, Request::SessionOpen(start));
    let (later, _) = session_id(c.next(2));
    drop(c);
    let dropped = Instant::now();
    wait_for_exit(&mut watcher, &at_once, 128 + libc::SIGHUP);
    std::thread::sleep(Duration::from_millis(500).saturating_sub(dropped.elapsed()));
    watcher.send(7, Request::ListSessions);
    let Event::Sessions(list) = watcher.next(7) else { panic!() };
    let row = list.iter().find(|s| s.session_id == later).unwrap();
    assert!(row.exit_code.is_none() && !row.attached, "within its timeout it runs on unheld: {row:?}");
    wait_for_exit(&mut watcher, &later, 128 + libc::SIGHUP);
    assert!(dropped.elapsed() >= Duration::from_millis(1500));
    // An explicit abandon on a live connection applies the same rule.
    let mut start = pty(&["sleep", "1000"], 24, 80);
    start.detach_timeout_ms = None;
    watcher.send(8, Request::SessionOpen(start));
    let (abandoned, _) = session_id(watcher.next(8));
    watcher.send(8, Request::Abandon);
    wait_for_exit(&mut watcher, &abandoned, 128 + libc::SIGHUP);
}

#[test]
fn a_stalled_holder_stalls_only_itself() {
    let l = Listening::start();
    let mut c = l.connect();
    // 16 MiB of output with 4 MiB of credit never renewed: the program still finishes.
    let mut start = pty(&["sh", "-c", "head -c 16777216 /dev/zero | tr '\\0' x; echo; echo done"], 24, 80);
    start.pty = None;
    start.detach_timeout_ms = Some(DETACH_NEVER);
    c.send(1, Request::SessionOpen(start));
    let (id, _) = session_id(c.next(1));
    let mut other = l.connect();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        other.send(1, Request::ListSessions);
        let Event::Sessions(list) = other.next(1) else { panic!() };
        let row = list.into_iter().find(|s| s.session_id == id).unwrap();
        if row.exit_code.is_some() {
            assert_eq!(row.exit_code, Some(0));
            assert!(row.end_offset > 16 << 20 && row.retained_bytes() <= 1 << 20, "{row:?}");
            break;
        }
        assert!(Instant::now() < deadline, "the program was stalled by its holder: {row:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(other.exec(2, "echo free"), ("free\n".to_string(), 0));
}

#[test]
fn bad_session_requests_name_the_field() {
    let l = Listening::start();
    let mut c = l.connect();
    let fail = |c: &mut Conn, id: u64| match c.next(id) {
        Event::Failed { kind, message } => (kind, message),
        other => panic!("expected Failed, got {other:?}"),
    };
    c.send(1, Request::SessionOpen(SessionStart { argv: vec![], ..Default::default() }));
    assert!(fail(&mut c, 1).1.contains("argv"));
    c.send(2, Request::SessionOpen(pty(&["sh"], 0, 80)));
    assert!(fail(&mut c, 2).1.contains("rows and cols"));
    c.send(
        3,
        Request::SessionOpen(SessionStart { argv: vec!["no-such-program".into()], ..Default::default() }),
    );
    assert_eq!(fail(&mut c, 3).0, FailureKind::NotFound);
    c.send(4, Request::SessionAttach { session_id: "nope".into(), since: None, takeover: true });
    assert_eq!(fail(&mut c, 4).0, FailureKind::NoSession);
    c.send(
        5,
        Request::SessionOpen(SessionStart {
            argv: vec!["sleep".into(), "5".into()],
            attach: true,
            ..Default::default()
        }),
    );
    session_id(c.next(5));
    c.send(5, Request::Resize(WindowSize { rows: 3, cols: 3 }));
    assert!(fail(&mut c, 5).1.contains("pipe mode"));
    c.send(5, Request::Signal(0));
    assert!(fail(&mut c, 5).1.contains("signal 0"));
    c.send(5, Request::Kill);
    assert_eq!(until_exit(&mut c, 5), 128 + libc::SIGHUP);
}
