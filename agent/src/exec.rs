//! The exec runner: one command (`<shell> -c <command>`) for one `Exec` request, its output
//! forwarded as `Stdout`/`Stderr` frames within the request's credit and its exit reported
//! with the usage it took. The command is in the process table (`processes`) from the moment
//! its request is read, so its `Stdin` and a `Kill` may come before it has started.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::channel::{Channel, Credit};
use crate::launch::Launch;
use crate::processes::{self, Program};
use crate::protocol::{Event, ExecExit, ExecStart, Usage};
use crate::reaper::reaper;
use crate::spawn::{self, Prepared, SpawnError};
use crate::tree;

/// How long output may keep arriving after the command exits (a background child holding the
/// pipes open must not hold the result back; `docker exec` does not wait for it either).
const OUTPUT_GRACE: Duration = Duration::from_millis(200);
/// After the grace, how long a pump may take to forward what its pipe already held. Output
/// written before the exit is never dropped for a late thread: on a loaded machine a pump may
/// not have run at all within the grace (the soak saw `echo` answer 0 with no output).
const DRAIN_WAIT: Duration = Duration::from_secs(2);
/// At most this much is forwarded from a pipe once the grace ended (a background child may
/// still be writing).
const DRAIN_MAX: u64 = 1 << 20;

/// A command the agent runs for one request.
pub struct Command {
    /// The shim's pid once started (0 before).
    shim: AtomicI32,
    stdin: Mutex<Option<mpsc::Sender<Vec<u8>>>>,
    killed: AtomicBool,
    /// The request's output credit.
    credit: Arc<Credit>,
}

/// What the command's own request stream does to it (`Signal`, `Resize` and `Detach` are
/// refused: a command holds no session).
impl Program for Command {
    /// Bytes for the command's stdin (dropped when it was started without one or closed it).
    fn input(self: Arc<Self>, _conn: u64, _request: u64, data: Vec<u8>) {
        if let Some(tx) = self.stdin.lock().ok().and_then(|s| s.clone()) {
            let _ = tx.send(data);
        }
    }

    /// Close the command's stdin.
    fn end_input(self: Arc<Self>, _conn: u64, _request: u64) {
        self.close_stdin();
    }

    /// Its output stops at once (a pump waiting for credit gives up); the tree is killed on a
    /// thread of its own.
    fn kill(self: Arc<Self>, _conn: u64, _request: u64) {
        self.credit.close();
        std::thread::spawn(move || self.stop());
    }

    fn credit(&self, _conn: u64, _request: u64) -> Option<Arc<Credit>> {
        Some(self.credit.clone())
    }

    fn connection_ended(self: Arc<Self>, _conn: u64, _request: u64) {
        self.stop();
        self.credit.close();
    }
}

impl Command {
    fn close_stdin(&self) {
        if let Ok(mut s) = self.stdin.lock() {
            s.take();
        }
    }

    /// Stop the command and everything it started.
    fn stop(&self) {
        self.killed.store(true, Ordering::SeqCst);
        self.close_stdin();
        // Not started yet: its starter sees `killed` once it has the pid.
        let shim = self.shim.load(Ordering::SeqCst);
        if shim > 0 {
            tree::kill_descendants(shim);
        }
    }

    /// The command started as `shim`; a kill that came first takes effect now.
    fn started(&self, shim: libc::pid_t) {
        self.shim.store(shim, Ordering::SeqCst);
        if self.killed.load(Ordering::SeqCst) {
            tree::kill_descendants(shim);
        }
    }
}

/// Accept `start` for request `id` on `conn`: prepare it as `launch` says, enter it in the
/// process table, and start it on a thread of its own (the fork and the wait for its `execve`
/// happen off the connection's reader, which goes on to the next request: execs in flight
/// start side by side). A command that cannot even be prepared is refused here.
pub fn start(
    conn: u64,
    channel: &Channel,
    id: u64,
    start: ExecStart,
    launch: Launch,
) -> Result<(), SpawnError> {
    let prepared = Prepared::new(
        &start.shell,
        &start.command,
        &launch.env,
        start.cwd.as_deref(),
        launch.user,
        start.stdin,
    )?;
    let (stdin_tx, stdin_rx) = mpsc::channel::<Vec<u8>>();
    let command = Arc::new(Command {
        shim: AtomicI32::new(0),
        stdin: Mutex::new(start.stdin.then_some(stdin_tx)),
        killed: AtomicBool::new(false),
        credit: Credit::new(),
    });
    processes::insert(conn, id, command.clone());
    let run = Run { conn, id, channel: channel.clone(), command };
    let limit = start.output_limit;
    std::thread::spawn(move || run.run(prepared, limit, stdin_rx));
    Ok(())
}

/// One accepted command on its thread.
struct Run {
    conn: u64,
    id: u64,
    channel: Channel,
    command: Arc<Command>,
}

impl Run {
    /// Start the command, forward its output, and report its exit (or why it did not start).
    fn run(self, prepared: Prepared, limit: u64, stdin_rx: mpsc::Receiver<Vec<u8>>) {
        let started = Instant::now();
        let (spawned, exit_rx) = match reaper().spawn_registered(|register| spawn::spawn(&prepared, register))
        {
            Ok(spawned) => spawned,
            Err((kind, message)) => {
                self.forget();
                self.channel.send(self.id, &Event::Failed { kind, message });
                return;
            }
        };
        drop(prepared);
        self.command.started(spawned.shim);
        if let Some(mut stdin) = spawned.stdin {
            std::thread::spawn(move || {
                for chunk in stdin_rx {
                    if stdin.write_all(&chunk).is_err() {
                        break; // the command closed its stdin; the rest is dropped as docker does
                    }
                }
            });
        }
        let stop = Arc::new(AtomicBool::new(false));
        let out = self.pump(spawned.stdout, true, limit, &stop);
        let err = self.pump(spawned.stderr, false, limit, &stop);
        // SAFETY: an all-zero rusage is a valid value.
        let (status, usage) = exit_rx.recv().unwrap_or((125 << 8, unsafe { std::mem::zeroed() }));
        let wall = started.elapsed();
        let deadline = Instant::now() + OUTPUT_GRACE;
        let mut dropped = [0u64; 2];
        let mut late = Vec::new();
        for (i, pump) in [out, err].into_iter().enumerate() {
            let left = deadline.saturating_duration_since(Instant::now());
            match pump.recv_timeout(left) {
                Ok(n) => dropped[i] = n,
                Err(_) => late.push((i, pump)),
            }
        }
        // Pumps still running forward what their pipe holds now, then stop.
        stop.store(true, Ordering::Relaxed);
        for (i, pump) in late {
            dropped[i] = pump.recv_timeout(DRAIN_WAIT).unwrap_or(0);
        }
        self.forget();
        let exit = ExecExit {
            code: spawn::exit_code(status),
            killed: self.command.killed.load(Ordering::SeqCst),
            dropped_stdout: dropped[0],
            dropped_stderr: dropped[1],
            usage: Usage {
                wall_us: wall.as_micros() as u64,
                user_us: micros(usage.ru_utime),
                system_us: micros(usage.ru_stime),
                peak_rss_bytes: (usage.ru_maxrss.max(0) as u64) * 1024,
            },
        };
        self.channel.send(self.id, &Event::Exit(exit));
    }

    /// The command ended or could not start: its credit closes and it leaves the table.
    fn forget(&self) {
        self.command.credit.close();
        processes::remove(self.conn, self.id, &self.command);
    }

    /// Forward one output pipe as frames until EOF or `stop`; the receiver gets the count of
    /// bytes dropped past `limit`.
    fn pump(&self, mut pipe: File, stdout: bool, limit: u64, stop: &Arc<AtomicBool>) -> mpsc::Receiver<u64> {
        let (done_tx, done_rx) = mpsc::channel();
        let (channel, id, credit, stop) =
            (self.channel.clone(), self.id, self.command.credit.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            let (mut kept, mut dropped) = (0u64, 0u64);
            let fd = pipe.as_raw_fd();
            // Once `stop` is set: what is left to forward of what the pipe already holds.
            let mut draining: Option<u64> = None;
            while draining != Some(0) {
                let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
                // SAFETY: one valid pollfd.
                let ready = unsafe { libc::poll(&mut pfd, 1, if draining.is_some() { 0 } else { 50 }) };
                if draining.is_none() && stop.load(Ordering::Relaxed) {
                    draining = Some(DRAIN_MAX);
                    continue;
                }
                if ready <= 0 {
                    if draining.is_some() {
                        break;
                    }
                    continue;
                }
                let n = match pipe.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                };
                if let Some(left) = draining.as_mut() {
                    *left = left.saturating_sub(n as u64);
                }
                let room = limit.saturating_sub(kept).min(n as u64) as usize;
                dropped += (n - room) as u64;
                if room == 0 {
                    continue;
                }
                kept += room as u64;
                if !credit.spend(room) {
                    break;
                }
                let chunk = buf[..room].to_vec();
                let event = if stdout { Event::Stdout(chunk) } else { Event::Stderr(chunk) };
                channel.send(id, &event);
            }
            let _ = done_tx.send(dropped);
        });
        done_rx
    }
}

fn micros(t: libc::timeval) -> u64 {
    (t.tv_sec.max(0) as u64) * 1_000_000 + t.tv_usec.max(0) as u64
}
