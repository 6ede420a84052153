//! The fault phase of the soak driver: once a second, a fault (a client SIGKILLed or SIGSTOPped
//! and thawed, the server restarted) while the traffic keeps flowing; and thawing every frozen
//! client before a hold.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::{checks, Driver, Footprint, SETTLE};

impl Driver {
    /// The fault phase: traffic keeps flowing while faults are injected once a second. A
    /// server restarted during it is a new process: its own baseline (RSS, fds) is taken at a
    /// hold one warm-up after its last restart, and returned.
    pub(super) fn faults(&mut self) -> Option<Footprint> {
        let mut base = None;
        let mut rebaseline_at = None;
        let start = Instant::now();
        let total = Duration::from_secs_f64(self.seconds);
        // Server restarts only in the first two thirds: the last process must live long
        // enough under faults for its footprint to mean something.
        let restart_every = Duration::from_secs_f64((self.seconds / 4.0).clamp(20.0, 300.0));
        let mut next_restart = start + restart_every.min(Duration::from_secs(15));
        while start.elapsed() < total {
            self.sleep(Duration::from_secs(1));
            let now = Instant::now();
            if now >= next_restart && now - start < total * 2 / 3 {
                next_restart = now + restart_every;
                self.server.kill();
                self.totals.fault("server_sigkill");
                if let Err(e) = self.server.start() {
                    self.totals.violations.push(format!("server did not restart: {e}"));
                    return base;
                }
                self.totals.fault("server_restart");
                if next_restart - start >= total * 2 / 3 {
                    rebaseline_at = Some(now + Duration::from_secs_f64(self.cli.warmup_s));
                }
            }
            if rebaseline_at.is_some_and(|t| Instant::now() >= t) {
                rebaseline_at = None;
                self.thaw_all();
                if self.hold().is_ok() {
                    std::thread::sleep(SETTLE);
                    let after_restart = self.server.footprint();
                    eprintln!(
                        "soak: baseline after the last restart: rss {} KiB, {} fds ({} for docker children); {}",
                        after_restart.rss_kib,
                        after_restart.fds,
                        after_restart.child_fds,
                        self.server.footprint_detail()
                    );
                    base = Some(after_restart);
                }
                let _ = std::fs::remove_file(self.hold_file());
            }
            let ids: Vec<u64> = self.clients.keys().copied().collect();
            // Thaw or kill frozen clients.
            for id in &ids {
                let frozen = self.clients[id].frozen_at;
                if frozen.is_some_and(|t| t.elapsed() > Duration::from_secs(self.rng.u64(1..7))) {
                    if self.rng.u32(0..10) < 7 {
                        self.signal(*id, Signal::SIGCONT);
                        self.clients.get_mut(id).unwrap().frozen_at = None;
                        self.totals.fault("client_sigcont");
                    } else {
                        self.kill_client(*id);
                        self.totals.fault("client_sigkill_frozen");
                        self.respawn();
                    }
                }
            }
            let ids: Vec<u64> = self.clients.keys().copied().collect();
            if !ids.is_empty() && self.rng.u32(0..10) == 0 {
                let id = ids[self.rng.usize(0..ids.len())];
                self.kill_client(id);
                self.totals.fault("client_sigkill");
                self.respawn();
            }
            let ids: Vec<u64> = self.clients.keys().copied().collect();
            if !ids.is_empty() && self.rng.u32(0..10) == 0 {
                let id = ids[self.rng.usize(0..ids.len())];
                if self.clients[&id].frozen_at.is_none() {
                    self.signal(id, Signal::SIGSTOP);
                    self.clients.get_mut(&id).unwrap().frozen_at = Some(Instant::now());
                    self.totals.fault("client_sigstop");
                }
            }
            if self.rng.u32(0..8) == 0 {
                let running: Vec<_> =
                    checks::containers(&self.run_label).into_iter().filter(|c| c.running).collect();
                if !running.is_empty() && checks::kill(&running[self.rng.usize(0..running.len())].name) {
                    self.totals.fault("docker_kill");
                }
            }
            // Replace clients that died on their own (they should not).
            for id in self.clients.keys().copied().collect::<Vec<_>>() {
                if let Ok(Some(status)) = self.clients.get_mut(&id).unwrap().child.try_wait() {
                    self.clients.remove(&id);
                    self.totals.violations.push(format!("client {id} exited by itself: {status}"));
                    self.respawn();
                }
            }
        }
        base
    }

    /// SIGCONT every frozen client (a frozen client cannot reach a hold).
    pub(super) fn thaw_all(&mut self) {
        for id in self.clients.keys().copied().collect::<Vec<_>>() {
            if self.clients.get_mut(&id).and_then(|c| c.frozen_at.take()).is_some() {
                self.signal(id, Signal::SIGCONT);
            }
        }
    }
}
