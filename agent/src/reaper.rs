//! The one reaper of the agent process: every child (commands' shims, sessions, the wrapped
//! keep-alive, and orphans re-parented to the agent as a subreaper) is waited for here, and its
//! status goes to whoever registered the pid.

use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;

/// A wait status and the resources the child used.
pub type Status = (libc::c_int, libc::rusage);

#[derive(Default)]
pub struct Reaper {
    pub waiting: Mutex<HashMap<libc::pid_t, mpsc::Sender<Status>>>,
    pub spawned: Condvar,
}

/// The process's reaper, started on first use.
pub fn reaper() -> &'static Reaper {
    static REAPER: OnceLock<&'static Reaper> = OnceLock::new();
    REAPER.get_or_init(|| {
        let reaper: &'static Reaper = Box::leak(Box::default());
        std::thread::spawn(move || reaper.run());
        reaper
    })
}

impl Reaper {
    /// Fork through `spawn` with the table locked until the child's pid is registered (`spawn`
    /// calls `register` right after its fork), so its status cannot be reaped unclaimed; the
    /// lock is let go there, so spawns on other threads need not wait for this one's `execve`.
    /// The receiver gets the child's status.
    pub fn spawn_registered<T, E>(
        &self,
        spawn: impl FnOnce(&mut dyn FnMut(libc::pid_t)) -> Result<T, E>,
    ) -> Result<(T, mpsc::Receiver<Status>), E> {
        let (tx, rx) = mpsc::channel();
        let mut waiting = Some(self.waiting.lock().unwrap_or_else(|e| e.into_inner()));
        let mut tx = Some(tx);
        let result = spawn(&mut |pid| {
            if let (Some(mut table), Some(tx)) = (waiting.take(), tx.take()) {
                table.insert(pid, tx);
            }
        });
        drop(waiting);
        self.spawned.notify_all();
        result.map(|t| (t, rx))
    }

    /// Reap every child forever; orphans are reaped and forgotten.
    fn run(&self) {
        loop {
            let mut status = 0;
            // SAFETY: rusage is plain old data.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: valid pointers to locals.
            let pid = unsafe { libc::wait4(-1, &mut status, 0, &mut usage) };
            if pid > 0 {
                if let Some(tx) = self.waiting.lock().ok().and_then(|mut w| w.remove(&pid)) {
                    let _ = tx.send((status, usage));
                }
                continue;
            }
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD) {
                if let Ok(w) = self.waiting.lock() {
                    let _ = self.spawned.wait_timeout(w, Duration::from_secs(1));
                }
            }
        }
    }
}
