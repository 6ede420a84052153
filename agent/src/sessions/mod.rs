//! The agent's table of sessions: terminals and background processes are one thing here (a
//! program, its output retained in a ring with byte offsets, at most one holder), so a terminal
//! and a process are attached, listed, signalled and closed alike, from any connection.
//!
//! A holder is one request on one connection. Its output is sent by a thread of its own that
//! reads the ring from the holder's cursor and spends that request's credit: a holder that stops
//! reading stalls only itself, never the program (the ring drops the oldest bytes instead).
//! Starting a session (its program, pumps and exit watcher) is `open.rs`. Sessions are kept in
//! the agent's one process table (`processes`), by id and by the stream that holds each; the
//! stream requests (`Stdin`, `Kill`, `Signal`, …) reach a session through that table and act
//! only if their stream still holds it.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::channel::{Channel, Credit};
use crate::processes::{self, Program};
use crate::protocol::{self, DetachReason, Event, FailureKind, SessionInfo, WindowSize, DETACH_NEVER};
use crate::spawn::SpawnError;
use crate::terminal;
use crate::tree;

mod open;

pub use open::open;

/// How long a closed session's group has after SIGHUP before SIGKILL.
const HANGUP_GRACE: Duration = Duration::from_secs(2);
/// How long output may keep arriving after the program exits (a background child holding the
/// terminal or pipes open must not hold the exit back).
const OUTPUT_GRACE: Duration = Duration::from_millis(200);
/// How long output waits for a holder that does not read before the ring drops unread bytes.
const HOLDER_STALL: Duration = Duration::from_secs(5);

/// Who holds a session: one request on one connection.
struct Holder {
    conn: u64,
    request: u64,
    channel: Channel,
    credit: Arc<Credit>,
}

struct State {
    ring: crate::ring::Ring,
    exit: Option<i32>,
    holder: Option<Holder>,
    /// Bumped whenever the holder changes; a sender thread of an older generation stops.
    generation: u64,
    size: Option<WindowSize>,
    /// Where the current holder's stream has read to: while a holder reads, output waits for
    /// it rather than push unread bytes out of the ring (a held terminal loses nothing).
    held_cursor: Option<u64>,
    /// The holder read nothing for `HOLDER_STALL` while output waited: output no longer waits
    /// for it until it reads again.
    holder_stalled: bool,
    /// The ring's size.
    retain: u64,
}

pub struct Session {
    id: String,
    argv: Vec<String>,
    pid: libc::pid_t,
    started_ms: u64,
    detach_timeout_ms: Option<u64>,
    /// The pty master (PTY mode).
    master: Option<File>,
    /// Input for the program (the master's or the stdin pipe's writer thread).
    input: Mutex<Option<mpsc::Sender<Vec<u8>>>>,
    /// Input bytes queued for the writer and not yet written (at most `MAX_QUEUED_INPUT`).
    queued: Arc<AtomicU64>,
    state: Mutex<State>,
    changed: Condvar,
}

fn new_id() -> String {
    let mut bytes = [0u8; 8];
    // SAFETY: getrandom fills our buffer.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n != bytes.len() as isize {
        let t = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos() as u64;
        bytes = (t ^ ((std::process::id() as u64) << 32)).to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64
}

impl Session {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `request` on `conn` holds the session.
    pub fn held_by(&self, conn: u64, request: u64) -> bool {
        self.lock().holder.as_ref().is_some_and(|h| h.conn == conn && h.request == request)
    }

    fn info(&self) -> SessionInfo {
        let st = self.lock();
        SessionInfo {
            session_id: self.id.clone(),
            argv: self.argv.clone(),
            pty: st.size,
            pid: self.pid as u32,
            exit_code: st.exit,
            attached: st.holder.is_some(),
            oldest_offset: st.ring.oldest(),
            end_offset: st.ring.end(),
            started_ms: self.started_ms,
        }
    }

    fn append(&self, stderr: bool, data: &[u8]) {
        let mut st = self.lock();
        // A holder that reads slower than the program writes slows the program (as a terminal
        // does); one that stopped reading for long lets the ring drop its oldest bytes.
        let deadline = Instant::now() + HOLDER_STALL;
        while let Some(cursor) = st.held_cursor.filter(|_| !st.holder_stalled) {
            let unread = (st.ring.end() + data.len() as u64).saturating_sub(cursor);
            if unread <= st.retain {
                break;
            }
            if Instant::now() >= deadline {
                st.holder_stalled = true;
                break;
            }
            st = match self.changed.wait_timeout(st, Duration::from_millis(50)) {
                Ok((st, _)) => st,
                Err(e) => e.into_inner().0,
            };
        }
        st.ring.push(stderr, data);
        drop(st);
        self.changed.notify_all();
    }

    /// Make `holder` the holder (ending the previous one's stream) and stream from `cursor`.
    fn hold(self: &Arc<Self>, holder: Holder, cursor: u64) {
        let (channel, conn, request, credit) =
            (holder.channel.clone(), holder.conn, holder.request, holder.credit.clone());
        // The stream's entry comes before the holder, and goes after it (never a holder
        // without its entry).
        processes::insert(conn, request, self.clone());
        let (generation, old) = {
            let mut st = self.lock();
            let old = st.holder.take();
            st.holder = Some(holder);
            st.generation += 1;
            st.held_cursor = Some(cursor);
            st.holder_stalled = false;
            (st.generation, old)
        };
        self.changed.notify_all();
        // Outside the lock: a write to a stalled connection must not hold up the session.
        if let Some(old) = old {
            processes::remove(old.conn, old.request, self);
            old.credit.close();
            old.channel.send(
                old.request,
                &Event::Detached {
                    reason: DetachReason::TakenOver,
                    message: format!("session {} taken over by another attach", self.id),
                },
            );
        }
        channel.send(
            request,
            &Event::SessionOpened { session_id: self.id.clone(), pid: self.pid as u32, offset: cursor },
        );
        let session = self.clone();
        std::thread::spawn(move || session.send_output(generation, cursor, &channel, conn, request, &credit));
    }

    /// The holder's stream: retained output from `cursor`, then live output, then the exit.
    fn send_output(
        self: &Arc<Self>,
        generation: u64,
        mut cursor: u64,
        channel: &Channel,
        conn: u64,
        request: u64,
        credit: &Credit,
    ) {
        loop {
            let (offset, stderr, data) = {
                let mut st = self.lock();
                loop {
                    if st.generation != generation || channel.is_broken() {
                        return;
                    }
                    if let Some(chunk) = st.ring.read(cursor, protocol::MAX_CHUNK) {
                        break chunk;
                    }
                    if let Some(code) = st.exit {
                        st.holder = None;
                        st.held_cursor = None;
                        st.generation += 1;
                        drop(st);
                        processes::remove(conn, request, self);
                        channel.send(request, &Event::SessionExit { code });
                        return;
                    }
                    st = match self.changed.wait_timeout(st, Duration::from_secs(1)) {
                        Ok((st, _)) => st,
                        Err(e) => e.into_inner().0,
                    };
                }
            };
            if !credit.spend(data.len()) || self.lock().generation != generation {
                return;
            }
            cursor = offset + data.len() as u64;
            channel.send(request, &Event::Output { stderr, offset, data });
            {
                let mut st = self.lock();
                if st.generation == generation {
                    st.held_cursor = Some(cursor);
                    st.holder_stalled = false;
                }
            }
            self.changed.notify_all();
        }
    }

    /// End the holder's stream without ending the session.
    fn release(self: &Arc<Self>, conn: u64, request: u64) -> Option<Holder> {
        let mut st = self.lock();
        if !st.holder.as_ref().is_some_and(|h| h.conn == conn && h.request == request) {
            return None;
        }
        st.generation += 1;
        st.held_cursor = None;
        let holder = st.holder.take();
        if let Some(h) = &holder {
            h.credit.close();
        }
        drop(st);
        self.changed.notify_all();
        if holder.is_some() {
            processes::remove(conn, request, self);
        }
        holder
    }

    /// The holder dropped: end the session now, after its detach timeout, or never.
    fn abandoned(self: &Arc<Self>) {
        match self.detach_timeout_ms {
            None => self.close(),
            Some(DETACH_NEVER) => {}
            Some(ms) => {
                let generation = self.lock().generation;
                let session = self.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(ms));
                    let st = session.lock();
                    if st.generation == generation && st.holder.is_none() && st.exit.is_none() {
                        drop(st);
                        session.close();
                    }
                });
            }
        }
    }

    fn send_signal(&self, signal: i32) -> Result<(), SpawnError> {
        if !(1..=64).contains(&signal) {
            return Err((FailureKind::Invalid, format!("signal {signal} is not a signal number (1..=64)")));
        }
        // A terminal's signal goes to the job in its foreground (what Ctrl-C reaches); a pipe
        // session's to its own group.
        let group = match &self.master {
            // gVisor (release 2022-12-19) answers TIOCGPGRP on a master with ENOTTY: there the
            // session's newest job stands for the foreground one.
            Some(m) => terminal::foreground_group(m.as_raw_fd())
                .or_else(|| terminal::newest_job_in_session(self.pid))
                .unwrap_or(self.pid),
            None => self.pid,
        };
        // SAFETY: kill(2) on a process group of this session.
        if unsafe { libc::kill(-group, signal) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::ESRCH) {
                return Err((
                    FailureKind::from_errno(e.raw_os_error().unwrap_or(0)),
                    format!("signal {signal}: {e}"),
                ));
            }
        }
        Ok(())
    }

    fn set_size(&self, size: WindowSize) -> Result<(), SpawnError> {
        if size.rows == 0 || size.cols == 0 {
            return Err((FailureKind::Invalid, "rows and cols must be > 0".into()));
        }
        let Some(master) = &self.master else {
            return Err((FailureKind::Invalid, format!("session {} has no terminal (pipe mode)", self.id)));
        };
        terminal::set_size(master.as_raw_fd(), size)
            .map_err(|e| (FailureKind::Other, format!("resize: {e}")))?;
        self.lock().size = Some(size);
        Ok(())
    }

    /// HUP the session's processes, KILL them after a grace (in a thread of its own).
    fn close(self: &Arc<Self>) {
        if self.lock().exit.is_some() {
            return;
        }
        let session = self.clone();
        std::thread::spawn(move || {
            tree::signal_session(session.pid, libc::SIGHUP);
            let deadline = Instant::now() + HANGUP_GRACE;
            let mut st = session.lock();
            while st.exit.is_none() && Instant::now() < deadline {
                st = match session.changed.wait_timeout(st, Duration::from_millis(50)) {
                    Ok((st, _)) => st,
                    Err(e) => e.into_inner().0,
                };
            }
            drop(st);
            tree::signal_session(session.pid, libc::SIGKILL);
        });
    }
}

/// What a holder's stream does to its session (reached through the process table; each acts
/// only while `request` on `conn` still holds the session).
impl Program for Session {
    /// Input for the program. Input it does not read is queued up to `MAX_QUEUED_INPUT`; past
    /// it the holder's stream ends (`Detached { InputFull }`) and the session runs on, to be
    /// attached again.
    fn input(self: Arc<Self>, conn: u64, request: u64, data: Vec<u8>) {
        if !self.held_by(conn, request) {
            return;
        }
        let Some(tx) = self.input.lock().ok().and_then(|i| i.clone()) else { return };
        let n = data.len() as u64;
        let before = self.queued.fetch_add(n, Ordering::SeqCst);
        if before + n <= protocol::MAX_QUEUED_INPUT {
            if tx.send(data).is_err() {
                self.queued.fetch_sub(n, Ordering::SeqCst);
            }
            return;
        }
        self.queued.fetch_sub(n, Ordering::SeqCst);
        if let Some(h) = self.release(conn, request) {
            let message = format!(
                "session {} has {before} bytes of input its program has not read (at most {} are queued): \
                 this stream ends, the session runs on (attach again to go on)",
                self.id,
                protocol::MAX_QUEUED_INPUT
            );
            h.channel.send(request, &Event::Detached { reason: DetachReason::InputFull, message });
        }
    }

    /// End of input: a pipe session's stdin closes; a terminal gets its EOF character.
    fn end_input(self: Arc<Self>, conn: u64, request: u64) {
        if !self.held_by(conn, request) {
            return;
        }
        if self.master.is_some() {
            self.input(conn, request, vec![4]);
        } else if let Ok(mut i) = self.input.lock() {
            i.take();
        }
    }

    /// `Kill` on the holder's stream: end the session (HUP, then KILL, on a thread of its own);
    /// its exit ends the stream.
    fn kill(self: Arc<Self>, conn: u64, request: u64) {
        if self.held_by(conn, request) {
            self.close();
        }
    }

    fn credit(&self, conn: u64, request: u64) -> Option<Arc<Credit>> {
        let st = self.lock();
        st.holder.as_ref().filter(|h| h.conn == conn && h.request == request).map(|h| h.credit.clone())
    }

    /// The holder's connection ended: as `Abandon`.
    fn connection_ended(self: Arc<Self>, conn: u64, request: u64) {
        self.abandon(conn, request);
    }

    fn signal(&self, conn: u64, request: u64, signal: i32) -> Result<(), SpawnError> {
        if !self.held_by(conn, request) {
            return Err(processes::no_session());
        }
        self.send_signal(signal)
    }

    fn resize(&self, conn: u64, request: u64, size: WindowSize) -> Result<(), SpawnError> {
        if !self.held_by(conn, request) {
            return Err(processes::no_session());
        }
        self.set_size(size)
    }

    /// `Detach`: the stream ends cleanly (`Detached`), the session runs on.
    fn detach(self: Arc<Self>, conn: u64, request: u64) -> Result<(), SpawnError> {
        if !self.held_by(conn, request) {
            return Err(processes::no_session());
        }
        if let Some(h) = self.release(conn, request) {
            h.channel.send(
                request,
                &Event::Detached { reason: DetachReason::Requested, message: "detached".into() },
            );
        }
        Ok(())
    }

    /// `Abandon`: the holder went away; the detach timeout applies.
    fn abandon(self: Arc<Self>, conn: u64, request: u64) {
        if self.release(conn, request).is_some() {
            self.abandoned();
        }
    }

    fn ended_started_ms(&self) -> Option<u64> {
        self.lock().exit.map(|_| self.started_ms)
    }
}

/// The session `session_id`.
fn find(session_id: &str) -> Result<Arc<Session>, SpawnError> {
    processes::named(session_id)
        .ok_or_else(|| (FailureKind::NoSession, format!("no session {session_id:?} in this sandbox")))
}

/// Hold `session_id` from `request` on: replay from `since`, take over a held one if asked.
pub fn attach(
    conn: u64,
    channel: &Channel,
    request: u64,
    session_id: &str,
    since: Option<u64>,
    takeover: bool,
) -> Result<(), SpawnError> {
    let session = find(session_id)?;
    let cursor = {
        let st = session.lock();
        let (oldest, end) = (st.ring.oldest(), st.ring.end());
        if st.holder.is_some() && !takeover {
            return Err((
                FailureKind::Held,
                format!(
                    "session {session_id} is held by another attach (attach with takeover to take it over)"
                ),
            ));
        }
        match since {
            // 0: everything still retained.
            Some(0) => oldest,
            Some(s) if s < oldest => {
                return Err((
                    FailureKind::OutOfRange,
                    format!("since {s} is older than the oldest retained byte of session {session_id}: oldest offset {oldest}"),
                ))
            }
            Some(s) if s > end => {
                return Err((FailureKind::OutOfRange, format!("since {s} is past the end of session {session_id}'s output ({end})")))
            }
            Some(s) => s,
            None => end,
        }
    };
    session.hold(Holder { conn, request, channel: channel.clone(), credit: Credit::new() }, cursor);
    Ok(())
}

pub fn signal_by_id(session_id: &str, sig: i32) -> Result<(), SpawnError> {
    find(session_id)?.send_signal(sig)
}

/// End a session by id and forget it.
pub fn close_by_id(session_id: &str) -> Result<(), SpawnError> {
    let session = find(session_id)?;
    session.close();
    processes::remove_named(session_id);
    Ok(())
}

/// Every session, oldest first.
pub fn list() -> Vec<SessionInfo> {
    let mut list: Vec<SessionInfo> = processes::all_named::<Session>().iter().map(|s| s.info()).collect();
    list.sort_by(|a, b| (a.started_ms, &a.session_id).cmp(&(b.started_ms, &b.session_id)));
    list
}
