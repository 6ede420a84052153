//! The write end of one connection to the server, and the per-request output credit that keeps
//! a slow consumer from making the agent buffer without bound.

use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::protocol::{self, Event};

/// Whole frames, one writer at a time. Once a write failed the channel is broken: later sends
/// are dropped and `on_break` ran once (the stdio agent exits there; a socket connection ends).
#[derive(Clone)]
pub struct Channel {
    out: Arc<Mutex<File>>,
    broken: Arc<AtomicBool>,
    on_break: fn(),
}

impl Channel {
    pub fn new(out: File, on_break: fn()) -> Self {
        Self { out: Arc::new(Mutex::new(out)), broken: Arc::new(AtomicBool::new(false)), on_break }
    }

    pub fn send(&self, id: u64, event: &Event) {
        if self.is_broken() {
            return;
        }
        self.write(&event.encode(id));
    }

    /// Several events of `id` in one write: under gVisor's ptrace platform every system call
    /// of the agent is a round trip through the sentry, so a burst (a watch's inotify read)
    /// goes out as one `write` instead of one per event.
    pub fn send_all(&self, id: u64, events: impl IntoIterator<Item = Event>) {
        if self.is_broken() {
            return;
        }
        let mut frames = Vec::new();
        for event in events {
            frames.extend_from_slice(&event.encode(id));
        }
        if !frames.is_empty() {
            self.write(&frames);
        }
    }

    fn write(&self, frames: &[u8]) {
        let failed = match self.out.lock() {
            Ok(mut out) => out.write_all(frames).is_err(),
            Err(_) => true,
        };
        if failed && !self.broken.swap(true, Ordering::SeqCst) {
            // The server is gone: nothing can be reported any more.
            (self.on_break)();
        }
    }

    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::SeqCst)
    }

    /// Mark the channel ended (its reader saw the end) so senders stop.
    pub fn close(&self) {
        self.broken.store(true, Ordering::SeqCst);
    }
}

/// Output bytes a request may still send before the server grants more.
pub struct Credit {
    available: Mutex<i64>,
    changed: Condvar,
    closed: AtomicBool,
}

impl Credit {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            available: Mutex::new(protocol::INITIAL_CREDIT as i64),
            changed: Condvar::new(),
            closed: AtomicBool::new(false),
        })
    }

    pub fn grant(&self, n: u64) {
        if let Ok(mut a) = self.available.lock() {
            *a = a.saturating_add(n.min(i64::MAX as u64) as i64);
        }
        self.changed.notify_all();
    }

    /// Wait for credit and spend `n`; false when the request was closed meanwhile.
    pub fn spend(&self, n: usize) -> bool {
        let Ok(mut a) = self.available.lock() else { return false };
        while *a <= 0 {
            if self.closed.load(Ordering::Relaxed) {
                return false;
            }
            a = match self.changed.wait_timeout(a, Duration::from_millis(100)) {
                Ok((a, _)) => a,
                Err(_) => return false,
            };
        }
        *a -= n as i64;
        true
    }

    pub fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        self.changed.notify_all();
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }
}
