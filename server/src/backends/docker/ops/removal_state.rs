//! What a close's background removals share with the provider (`closing.rs`): the ids being
//! removed, and whether removals run (tests hold or abandon them).

use std::collections::HashSet;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

/// What background removals do; tests hold or abandon them to see a close before Docker's part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum RemovalMode {
    /// Remove at once.
    Run = 0,
    /// Wait until the mode changes.
    Hold = 1,
    /// Do nothing and let the record go, as a server killed at that point would.
    Abandon = 2,
}

/// The state background removals share with the provider.
#[derive(Debug, Default)]
pub struct Closings {
    /// Sandboxes closed whose removal is under way here: their id answers NOT_FOUND.
    pub in_flight: Mutex<HashSet<String>>,
    pub mode: AtomicU8,
}

impl Closings {
    pub fn mode(&self) -> RemovalMode {
        match self.mode.load(Ordering::SeqCst) {
            1 => RemovalMode::Hold,
            2 => RemovalMode::Abandon,
            _ => RemovalMode::Run,
        }
    }

    pub fn done(&self, sandbox_id: &str) {
        if let Ok(mut set) = self.in_flight.lock() {
            set.remove(sandbox_id);
        }
    }
}
