//! The agent's one process table (E2B envd's model: one map of the processes it runs, whatever
//! their kind). Every program the agent runs for the server is here: an exec command (for the
//! request that started it, until it ends) and a session, a terminal or a pipe program (by its
//! id, for as long as it is kept, since a session outlives the connection that opened it). The
//! table also records which request stream drives which program, by (connection, request id),
//! so a stream's `Stdin`, `StdinEnd`, `Kill`, `Credit`, `Signal`, `Resize`, `Detach` and
//! `Abandon` have one destination, whichever kind the program is: each kind implements
//! [`Program`] (`exec::Command`, `sessions::Session`), and this module names neither.
//!
//! A command's stream entry lives as long as the command. A session's entry is its holder's:
//! made before the holder is set and removed after it is cleared (`sessions` does both), and a
//! session still checks that the stream holds it before acting (a takeover may be under way).
//! Locks: the table's lock may be held while a program's own state is locked, never the reverse.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use crate::channel::Credit;
use crate::protocol::{FailureKind, WindowSize};
use crate::spawn::SpawnError;

/// Ended named programs (sessions) kept for listing (their exit code); older ones are
/// forgotten.
pub const ENDED_KEPT: usize = 64;

/// What a request stream does to the program it drives (`request` on `conn` is the stream). A
/// kind without a request's meaning refuses it as a stream that holds no session would.
pub trait Program: Any + Send + Sync {
    /// `Stdin`.
    fn input(self: Arc<Self>, conn: u64, request: u64, data: Vec<u8>);
    /// `StdinEnd`.
    fn end_input(self: Arc<Self>, conn: u64, request: u64);
    /// `Kill`; the reader must not wait for it.
    fn kill(self: Arc<Self>, conn: u64, request: u64);
    /// The stream's output credit, for `Credit` frames.
    fn credit(&self, conn: u64, request: u64) -> Option<Arc<Credit>>;
    /// The stream's connection ended.
    fn connection_ended(self: Arc<Self>, conn: u64, request: u64);
    /// `Signal`.
    fn signal(&self, _conn: u64, _request: u64, _signal: i32) -> Result<(), SpawnError> {
        Err(no_session())
    }
    /// `Resize`.
    fn resize(&self, _conn: u64, _request: u64, _size: WindowSize) -> Result<(), SpawnError> {
        Err(no_session())
    }
    /// `Detach`.
    fn detach(self: Arc<Self>, _conn: u64, _request: u64) -> Result<(), SpawnError> {
        Err(no_session())
    }
    /// `Abandon`.
    fn abandon(self: Arc<Self>, _conn: u64, _request: u64) {}
    /// A named program that ended: when it started (the oldest ended ones are forgotten).
    fn ended_started_ms(&self) -> Option<u64> {
        None
    }
}

/// The answer to a session request on a stream that holds none.
pub fn no_session() -> SpawnError {
    (FailureKind::NoSession, "this request holds no session".into())
}

#[derive(Default)]
struct Table {
    /// What each stream drives, by (connection, request id).
    streams: HashMap<(u64, u64), Arc<dyn Program>>,
    /// Programs kept by name beyond their streams (sessions, by id); ended ones are kept (at
    /// most `ENDED_KEPT`) for listing.
    named: HashMap<String, Arc<dyn Program>>,
}

static TABLE: LazyLock<Mutex<Table>> = LazyLock::new(Mutex::default);

fn table() -> MutexGuard<'static, Table> {
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

fn same<P: Program>(entry: &Arc<dyn Program>, program: &Arc<P>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(entry), Arc::as_ptr(program))
}

/// Stream `request` on `conn` drives `program` from now on.
pub fn insert(conn: u64, request: u64, program: Arc<dyn Program>) {
    table().streams.insert((conn, request), program);
}

/// The stream no longer drives `program` (an entry for another program is left alone).
pub fn remove<P: Program>(conn: u64, request: u64, program: &Arc<P>) {
    let mut t = table();
    if t.streams.get(&(conn, request)).is_some_and(|p| same(p, program)) {
        t.streams.remove(&(conn, request));
    }
}

/// What `request` on `conn` drives.
pub fn stream(conn: u64, request: u64) -> Option<Arc<dyn Program>> {
    table().streams.get(&(conn, request)).cloned()
}

/// Keep `program` as `name`; past `ENDED_KEPT` ended named programs, the oldest are forgotten.
pub fn add_named(name: String, program: Arc<dyn Program>) {
    let mut t = table();
    let mut ended: Vec<(u64, String)> =
        t.named.iter().filter_map(|(n, p)| p.ended_started_ms().map(|ms| (ms, n.clone()))).collect();
    if ended.len() >= ENDED_KEPT {
        ended.sort();
        for (_, n) in &ended[..ended.len() + 1 - ENDED_KEPT] {
            t.named.remove(n);
        }
    }
    t.named.insert(name, program);
}

/// The program kept as `name`, if it is a `P`.
pub fn named<P: Program>(name: &str) -> Option<Arc<P>> {
    let program = table().named.get(name).cloned()?;
    (program as Arc<dyn Any + Send + Sync>).downcast().ok()
}

/// Every named program that is a `P`, in no order.
pub fn all_named<P: Program>() -> Vec<Arc<P>> {
    let programs: Vec<Arc<dyn Program>> = table().named.values().cloned().collect();
    programs.into_iter().filter_map(|p| (p as Arc<dyn Any + Send + Sync>).downcast().ok()).collect()
}

/// Forget the program kept as `name`.
pub fn remove_named(name: &str) {
    table().named.remove(name);
}

/// `Stdin`: a command's stdin, or input for the held session.
pub fn input(conn: u64, request: u64, data: Vec<u8>) {
    if let Some(p) = stream(conn, request) {
        p.input(conn, request, data);
    }
}

/// `StdinEnd`: close a command's stdin, or end the held session's input.
pub fn end_input(conn: u64, request: u64) {
    if let Some(p) = stream(conn, request) {
        p.end_input(conn, request);
    }
}

/// `Kill`: stop a command and everything it started, or close the held session.
pub fn kill(conn: u64, request: u64) {
    if let Some(p) = stream(conn, request) {
        p.kill(conn, request);
    }
}

/// The output credit of the stream, for `Credit` frames.
pub fn credit_of(conn: u64, request: u64) -> Option<Arc<Credit>> {
    stream(conn, request)?.credit(conn, request)
}

/// `Signal`: the held session's foreground job (a terminal) or group (pipes).
pub fn signal(conn: u64, request: u64, signal: i32) -> Result<(), SpawnError> {
    stream(conn, request).ok_or_else(no_session)?.signal(conn, request, signal)
}

/// `Resize`: the held session's terminal.
pub fn resize(conn: u64, request: u64, size: WindowSize) -> Result<(), SpawnError> {
    stream(conn, request).ok_or_else(no_session)?.resize(conn, request, size)
}

/// `Detach`: the stream ends cleanly (`Detached`), the session runs on.
pub fn detach(conn: u64, request: u64) -> Result<(), SpawnError> {
    stream(conn, request).ok_or_else(no_session)?.detach(conn, request)
}

/// `Abandon`: the holder went away; the session's detach timeout applies.
pub fn abandon(conn: u64, request: u64) {
    if let Some(p) = stream(conn, request) {
        p.abandon(conn, request);
    }
}

/// A connection ended: its commands stop, the sessions it held are abandoned.
pub fn connection_ended(conn: u64) {
    let streams: Vec<(u64, Arc<dyn Program>)> = table()
        .streams
        .iter()
        .filter(|((c, _), _)| *c == conn)
        .map(|((_, request), p)| (*request, p.clone()))
        .collect();
    for (request, program) in streams {
        program.connection_ended(conn, request);
    }
}
