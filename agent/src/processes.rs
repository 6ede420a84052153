//! The agent's one process table (E2B envd's model: one map of the processes it runs, whatever
//! their kind). Every program the agent runs for the server is here: an exec command (for the
//! request that started it, until it ends) and a session, a terminal or a pipe program (by its
//! id, for as long as it is kept, since a session outlives the connection that opened it). The
//! table also records which request stream drives which program, by (connection, request id),
//! so a stream's `Stdin`, `StdinEnd`, `Kill`, `Credit`, `Signal`, `Resize`, `Detach` and
//! `Abandon` have one destination, whichever kind the program is.
//!
//! A command's stream entry lives as long as the command. A session's entry is its holder's:
//! made before the holder is set and removed after it is cleared (`sessions` does both), and a
//! session still checks that the stream holds it before acting (a takeover may be under way).
//! Locks: the table's lock may be held while a session's state is locked, never the reverse.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use crate::channel::Credit;
use crate::exec::Command;
use crate::protocol::{FailureKind, WindowSize};
use crate::sessions::{Session, ENDED_KEPT};
use crate::spawn::SpawnError;

/// What a request stream drives.
#[derive(Clone)]
pub enum Process {
    /// An exec command (`Exec`).
    Command(Arc<Command>),
    /// The session the stream holds (`SessionOpen` with `attach`, `SessionAttach`).
    Session(Arc<Session>),
}

impl Process {
    fn is(&self, other: &Process) -> bool {
        match (self, other) {
            (Process::Command(a), Process::Command(b)) => Arc::ptr_eq(a, b),
            (Process::Session(a), Process::Session(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

#[derive(Default)]
struct Table {
    /// What each stream drives, by (connection, request id).
    streams: HashMap<(u64, u64), Process>,
    /// Every session by id; ended ones are kept (at most `ENDED_KEPT`) for listing.
    sessions: HashMap<String, Arc<Session>>,
}

static TABLE: LazyLock<Mutex<Table>> = LazyLock::new(Mutex::default);

fn table() -> MutexGuard<'static, Table> {
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Stream `request` on `conn` drives `process` from now on.
pub fn insert(conn: u64, request: u64, process: Process) {
    table().streams.insert((conn, request), process);
}

/// The stream no longer drives `process` (an entry for something else is left alone).
fn remove(conn: u64, request: u64, process: &Process) {
    let mut t = table();
    if t.streams.get(&(conn, request)).is_some_and(|p| p.is(process)) {
        t.streams.remove(&(conn, request));
    }
}

/// The command of `request` ended or could not start.
pub fn remove_command(conn: u64, request: u64, command: &Arc<Command>) {
    remove(conn, request, &Process::Command(command.clone()));
}

/// `request` on `conn` no longer holds `session`.
pub fn release_stream(conn: u64, request: u64, session: &Arc<Session>) {
    remove(conn, request, &Process::Session(session.clone()));
}

/// What `request` on `conn` drives.
pub fn stream(conn: u64, request: u64) -> Option<Process> {
    table().streams.get(&(conn, request)).cloned()
}

/// A new session; the oldest ended ones are forgotten past `ENDED_KEPT`.
pub fn add_session(session: Arc<Session>) {
    let mut t = table();
    let mut ended: Vec<(u64, String)> = t.sessions.values().filter_map(|s| s.ended_at_start()).collect();
    if ended.len() >= ENDED_KEPT {
        ended.sort();
        for (_, id) in &ended[..ended.len() + 1 - ENDED_KEPT] {
            t.sessions.remove(id);
        }
    }
    t.sessions.insert(session.id().to_string(), session);
}

/// The session `session_id`.
pub fn session(session_id: &str) -> Result<Arc<Session>, SpawnError> {
    table()
        .sessions
        .get(session_id)
        .cloned()
        .ok_or_else(|| (FailureKind::NoSession, format!("no session {session_id:?} in this sandbox")))
}

/// Forget the session `session_id`.
pub fn remove_session(session_id: &str) {
    table().sessions.remove(session_id);
}

/// Every session, in no order.
pub fn sessions() -> Vec<Arc<Session>> {
    table().sessions.values().cloned().collect()
}

fn no_session() -> SpawnError {
    (FailureKind::NoSession, "this request holds no session".into())
}

/// `Stdin`: a command's stdin, or input for the held session.
pub fn input(conn: u64, request: u64, data: Vec<u8>) {
    match stream(conn, request) {
        Some(Process::Command(c)) => c.input(data),
        Some(Process::Session(s)) => s.input(conn, request, data),
        None => {}
    }
}

/// `StdinEnd`: close a command's stdin, or end the held session's input.
pub fn end_input(conn: u64, request: u64) {
    match stream(conn, request) {
        Some(Process::Command(c)) => c.end_input(),
        Some(Process::Session(s)) => s.end_input(conn, request),
        None => {}
    }
}

/// `Kill`: stop a command and everything it started (on a thread of its own: the reader goes
/// on) and its output, or close the held session (its exit ends the stream).
pub fn kill(conn: u64, request: u64) {
    match stream(conn, request) {
        Some(Process::Command(c)) => {
            // Its output stops at once (a pump waiting for credit gives up).
            c.credit().close();
            std::thread::spawn(move || c.kill());
        }
        Some(Process::Session(s)) => s.close_held(conn, request),
        None => {}
    }
}

/// The output credit of the stream, for `Credit` frames.
pub fn credit_of(conn: u64, request: u64) -> Option<Arc<Credit>> {
    match stream(conn, request)? {
        Process::Command(c) => Some(c.credit().clone()),
        Process::Session(s) => s.holder_credit(conn, request),
    }
}

/// `Signal`: the held session's foreground job (a terminal) or group (pipes).
pub fn signal(conn: u64, request: u64, signal: i32) -> Result<(), SpawnError> {
    match stream(conn, request) {
        Some(Process::Session(s)) if s.held_by(conn, request) => s.signal(signal),
        _ => Err(no_session()),
    }
}

/// `Resize`: the held session's terminal.
pub fn resize(conn: u64, request: u64, size: WindowSize) -> Result<(), SpawnError> {
    match stream(conn, request) {
        Some(Process::Session(s)) if s.held_by(conn, request) => s.resize(size),
        _ => Err(no_session()),
    }
}

/// `Detach`: the stream ends cleanly (`Detached`), the session runs on.
pub fn detach(conn: u64, request: u64) -> Result<(), SpawnError> {
    match stream(conn, request) {
        Some(Process::Session(s)) if s.held_by(conn, request) => {
            s.detach(conn, request);
            Ok(())
        }
        _ => Err(no_session()),
    }
}

/// `Abandon`: the holder went away; the session's detach timeout applies.
pub fn abandon(conn: u64, request: u64) {
    if let Some(Process::Session(s)) = stream(conn, request) {
        s.abandon(conn, request);
    }
}

/// A connection ended: its commands stop, the sessions it held are abandoned.
pub fn connection_ended(conn: u64) {
    let streams: Vec<(u64, Process)> = table()
        .streams
        .iter()
        .filter(|((c, _), _)| *c == conn)
        .map(|((_, request), p)| (*request, p.clone()))
        .collect();
    for (request, process) in streams {
        match process {
            Process::Command(c) => {
                c.kill();
                c.credit().close();
            }
            Process::Session(s) => s.abandon(conn, request),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::os::fd::FromRawFd;
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;
    use crate::channel::Channel;
    use crate::launch::Launch;
    use crate::protocol::{self, DetachReason, Event, ExecStart, SessionStart, DETACH_NEVER};
    use crate::users::ExecUser;
    use crate::{exec, sessions};

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
        assert!(matches!(stream(conn, id), Some(Process::Command(_))), "in the table from its request on");
        input(conn, id, b"through the table".to_vec());
        end_input(conn, id);
        let mut out = Vec::new();
        let code = loop {
            match next(&rx) {
                (i, Event::Stdout(data)) if i == id => out.extend(data),
                (i, Event::Exit(exit)) if i == id => break exit.code,
                other => panic!("unexpected {other:?}"),
            }
        };
        assert_eq!((code, out.as_slice()), (0, &b"through the table"[..]));
        assert!(stream(conn, id).is_none(), "an ended command leaves the table before its exit is told");
        let (kind, _) = signal(conn, id, libc::SIGTERM).unwrap_err();
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
        assert!(matches!(stream(a, 1), Some(Process::Session(_))));
        // `Stdin` on the holder's stream reaches the session's program (`cat` echoes it).
        input(a, 1, b"ping\n".to_vec());
        match next(&rx_a) {
            (1, Event::Output { stderr: false, data, .. }) => assert_eq!(data, b"ping\n"),
            other => panic!("expected the echo, got {other:?}"),
        }
        // A takeover from another connection moves the entry.
        sessions::attach(b, &ch_b, 2, &session_id, Some(0), true).unwrap();
        assert!(matches!(next(&rx_a), (1, Event::Detached { reason: DetachReason::TakenOver, .. })));
        assert!(stream(a, 1).is_none(), "the old holder's stream no longer drives the session");
        assert!(matches!(stream(b, 2), Some(Process::Session(_))));
        assert_eq!(signal(a, 1, libc::SIGCONT).unwrap_err().0, FailureKind::NoSession);
        assert!(matches!(next(&rx_b), (2, Event::SessionOpened { .. })));
        // `Detach` ends the stream and its entry; the session runs on.
        detach(b, 2).unwrap();
        assert!(stream(b, 2).is_none());
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
}
