//! The agent's one process table in process (its own test binary: the agent's reaper waits
//! for every child of the process): a stream's requests reach the program it drives, exec
//! command or session, and its entry follows the program's life and its holder.

use std::any::Any;
use std::fs::File;
use std::os::fd::FromRawFd;
use std::sync::mpsc;
use std::time::Duration;

use sandboxd_agent::channel::Channel;
use sandboxd_agent::exec::{self, Command};
use sandboxd_agent::launch::Launch;
use sandboxd_agent::processes::{self, Program};
use sandboxd_agent::protocol::{
    self, DetachReason, Event, ExecStart, FailureKind, SessionStart, DETACH_NEVER,
};
use sandboxd_agent::sessions::{self, Session};
use sandboxd_agent::users::ExecUser;

/// Whether `request` on `conn` drives a `P`.
fn drives<P: Program>(conn: u64, request: u64) -> bool {
    processes::stream(conn, request).is_some_and(|p| (&*p as &dyn Any).is::<P>())
}

/// A channel whose frames the test reads back, in order.
fn channel() -> (Channel, mpsc::Receiver<(u64, Event)>) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills both descriptors, each then owned by one File.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    let (mut read, write) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        while let Ok(Some(body)) = protocol::read_body(&mut read, protocol::MAX_FRAME) {
            let frame = protocol::decode_event(&body).expect("a well-formed event");
            if tx.send((frame.id, frame.message)).is_err() {
                return;
            }
        }
    });
    (Channel::new(write, || {}), rx)
}

fn next(rx: &mpsc::Receiver<(u64, Event)>) -> (u64, Event) {
    rx.recv_timeout(Duration::from_secs(20)).expect("an event within 20 s")
}

fn as_this_user() -> Launch {
    // SAFETY: plain getters.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    Launch {
        user: ExecUser { uid, gid, groups: Vec::new(), home: "/".into() },
        env: vec![("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into())],
    }
}

#[test]
fn a_commands_stream_takes_its_stdin_and_leaves_the_table_when_it_exits() {
    let (conn, id) = (u64::MAX - 1, 7);
    let (ch, rx) = channel();
    let start = ExecStart {
        shell: "sh".into(),
        command: b"cat".to_vec(),
        env: Vec::new(),
        cwd: None,
        user: None,
        stdin: true,
        output_limit: 1 << 20,
    };
    exec::start(conn, &ch, id, start, as_this_user()).unwrap();
    assert!(drives::<Command>(conn, id), "in the table from its request on");
    processes::input(conn, id, b"through the table".to_vec());
    processes::end_input(conn, id);
    let mut out = Vec::new();
    let code = loop {
        match next(&rx) {
            (i, Event::Stdout(data)) if i == id => out.extend(data),
            (i, Event::Exit(exit)) if i == id => break exit.code,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!((code, out.as_slice()), (0, &b"through the table"[..]));
    assert!(
        processes::stream(conn, id).is_none(),
        "an ended command leaves the table before its exit is told"
    );
    let (kind, _) = processes::signal(conn, id, libc::SIGTERM).unwrap_err();
    assert_eq!(kind, FailureKind::NoSession);
}

#[test]
fn a_sessions_stream_entry_follows_its_holder() {
    let (a, b) = (u64::MAX - 2, u64::MAX - 3);
    let (ch_a, rx_a) = channel();
    let (ch_b, rx_b) = channel();
    let start = SessionStart {
        argv: vec!["cat".into()],
        env: Vec::new(),
        cwd: None,
        user: None,
        pty: None,
        retain_bytes: 0,
        detach_timeout_ms: Some(DETACH_NEVER),
        attach: true,
    };
    sessions::open(a, &ch_a, 1, start, as_this_user()).unwrap();
    let session_id = match next(&rx_a) {
        (1, Event::SessionOpened { session_id, .. }) => session_id,
        other => panic!("expected SessionOpened, got {other:?}"),
    };
    assert!(drives::<Session>(a, 1));
    // `Stdin` on the holder's stream reaches the session's program (`cat` echoes it).
    processes::input(a, 1, b"ping\n".to_vec());
    match next(&rx_a) {
        (1, Event::Output { stderr: false, data, .. }) => assert_eq!(data, b"ping\n"),
        other => panic!("expected the echo, got {other:?}"),
    }
    // A takeover from another connection moves the entry.
    sessions::attach(b, &ch_b, 2, &session_id, Some(0), true).unwrap();
    assert!(matches!(next(&rx_a), (1, Event::Detached { reason: DetachReason::TakenOver, .. })));
    assert!(processes::stream(a, 1).is_none(), "the old holder's stream no longer drives the session");
    assert!(drives::<Session>(b, 2));
    assert_eq!(processes::signal(a, 1, libc::SIGCONT).unwrap_err().0, FailureKind::NoSession);
    assert!(matches!(next(&rx_b), (2, Event::SessionOpened { .. })));
    // `Detach` ends the stream and its entry; the session runs on.
    processes::detach(b, 2).unwrap();
    assert!(processes::stream(b, 2).is_none());
    loop {
        match next(&rx_b) {
            (2, Event::Output { .. }) => continue, // the replay of `ping`
            (2, Event::Detached { reason: DetachReason::Requested, .. }) => break,
            other => panic!("expected Detached, got {other:?}"),
        }
    }
    assert!(sessions::list().iter().any(|s| s.session_id == session_id && s.exit_code.is_none()));
    sessions::close_by_id(&session_id).unwrap();
}
