//! Limits on what clients can hold open: terminal sessions per server and per sandbox. A slot
//! is held for the life of a session and given back when it ends; past a limit the call is
//! RESOURCE_EXHAUSTED, naming the limit.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tonic::Status;

use crate::config::Limits;

/// Open terminal sessions, counted per server and per sandbox.
pub struct PtySlots {
    max_total: u32,
    max_per_sandbox: u32,
    open: Mutex<OpenSessions>,
}

#[derive(Default)]
struct OpenSessions {
    total: u32,
    /// Only sandboxes with a session open: an entry goes when its last session ends.
    per_sandbox: HashMap<String, u32>,
}

impl PtySlots {
    pub fn new(limits: &Limits) -> Arc<Self> {
        Arc::new(Self {
            max_total: limits.max_pty_sessions,
            max_per_sandbox: limits.max_pty_sessions_per_sandbox,
            open: Mutex::default(),
        })
    }

    /// A slot for one more session on `sandbox_id`, or RESOURCE_EXHAUSTED.
    pub fn acquire(self: &Arc<Self>, sandbox_id: &str) -> Result<PtySlot, Status> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if open.total >= self.max_total {
            return Err(Status::resource_exhausted(format!(
                "this server has {} PTY sessions open, its limit (server.limits.max_pty_sessions)",
                open.total
            )));
        }
        let on_sandbox = open.per_sandbox.get(sandbox_id).copied().unwrap_or(0);
        if on_sandbox >= self.max_per_sandbox {
            return Err(Status::resource_exhausted(format!(
                "sandbox {sandbox_id} has {on_sandbox} PTY sessions open, the limit per sandbox \
                 (server.limits.max_pty_sessions_per_sandbox)"
            )));
        }
        open.total += 1;
        *open.per_sandbox.entry(sandbox_id.to_string()).or_default() += 1;
        Ok(PtySlot { slots: self.clone(), sandbox_id: sandbox_id.to_string() })
    }

    /// Sessions open now.
    #[cfg(test)]
    fn open(&self) -> u32 {
        self.open.lock().map(|o| o.total).unwrap_or(0)
    }
}

/// One session's slot; given back on drop.
pub struct PtySlot {
    slots: Arc<PtySlots>,
    sandbox_id: String,
}

impl Drop for PtySlot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock().unwrap_or_else(|p| p.into_inner());
        open.total = open.total.saturating_sub(1);
        if let Some(n) = open.per_sandbox.get_mut(&self.sandbox_id) {
            *n -= 1;
            if *n == 0 {
                open.per_sandbox.remove(&self.sandbox_id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_bounded_per_server_and_per_sandbox_and_given_back() {
        let limits = Limits { max_pty_sessions: 3, max_pty_sessions_per_sandbox: 2, ..Limits::default() };
        let slots = PtySlots::new(&limits);
        let a1 = slots.acquire("a").unwrap();
        let _a2 = slots.acquire("a").unwrap();
        let err = slots.acquire("a").err().unwrap();
        assert_eq!(err.code(), tonic::Code::ResourceExhausted);
        assert!(err.message().contains("max_pty_sessions_per_sandbox"), "{}", err.message());
        let _b1 = slots.acquire("b").unwrap();
        let err = slots.acquire("c").err().unwrap();
        assert!(err.message().contains("server.limits.max_pty_sessions"), "{}", err.message());
        drop(a1);
        assert_eq!(slots.open(), 2);
        let _c1 = slots.acquire("c").unwrap();
        assert!(!slots.open.lock().unwrap().per_sandbox.contains_key("z"));
    }

    #[test]
    fn an_entry_goes_with_its_last_session() {
        let slots = PtySlots::new(&Limits::default());
        drop(slots.acquire("a").unwrap());
        assert!(slots.open.lock().unwrap().per_sandbox.is_empty(), "the per-sandbox map stays bounded");
    }
}
