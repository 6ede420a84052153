//! The agent's loop on one channel: frames in, one thread per running command's stream. Over
//! stdio (`serve`) the channel is private to the server (it holds the other end of this
//! `docker exec -i`) and at its end the agent stops every command still running and exits; on
//! the socket (`socket`) each accepted connection runs this loop and only its own commands stop
//! when it ends.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::channel::{Channel, Credit};
use crate::files::{self, Upload, UploadWriter};
use crate::forward;
use crate::fs;
use crate::protocol::{self, Event, ExecExit, ExecStart, FailureKind, Request, SessionStart, Usage};
use crate::reaper::reaper;
use crate::sessions;
use crate::spawn::{self, Prepared};
use crate::tree;
use crate::users;

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

/// A command the agent is running for the server (from the moment its `Exec` is read: its
/// stdin and a `Kill` may come before it has started).
struct Running {
    /// The shim's pid once started (0 before).
    shim: AtomicI32,
    stdin: Mutex<Option<mpsc::Sender<Vec<u8>>>>,
    killed: AtomicBool,
}

impl Running {
    fn kill(&self) {
        self.killed.store(true, Ordering::SeqCst);
        if let Ok(mut s) = self.stdin.lock() {
            s.take();
        }
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

/// One connection's state: the commands, downloads and uploads it started. Sessions live in
/// `sessions` (they outlive connections).
pub struct Agent {
    /// Unique per connection in this process (sessions name their holder by it).
    conn: u64,
    channel: Channel,
    running: Mutex<HashMap<u64, Arc<Running>>>,
    credits: Mutex<HashMap<u64, Arc<Credit>>>,
    uploads: Mutex<HashMap<u64, UploadWriter>>,
    /// The environment the agent was started with: the sandbox's, the base of every command's.
    base_env: Arc<Vec<(String, String)>>,
}

/// The agent's own environment, as `(key, value)` pairs.
pub fn own_environment() -> Arc<Vec<(String, String)>> {
    Arc::new(
        std::env::vars_os()
            .map(|(k, v)| (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned()))
            .collect(),
    )
}

static STDIO_AGENT: Mutex<Option<Arc<Agent>>> = Mutex::new(None);

/// The stdio channel ended or broke: stop every running command and exit.
fn shutdown_now() {
    if let Some(agent) = STDIO_AGENT.lock().ok().and_then(|a| a.clone()) {
        agent.end();
    }
    std::process::exit(0)
}

fn next_connection() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Serve the channel on stdin/stdout until it ends.
pub fn serve() -> ! {
    // Move the channel off 0 and 1 (close-on-exec) and put /dev/null there, so nothing the
    // agent starts can ever hold an end of it.
    // SAFETY: plain fd syscalls on the process's own descriptors.
    let (input, output) = unsafe {
        let input = libc::fcntl(0, libc::F_DUPFD_CLOEXEC, 10);
        let output = libc::fcntl(1, libc::F_DUPFD_CLOEXEC, 10);
        if input < 0 || output < 0 {
            eprintln!("sandboxd-agent: cannot move the channel: {}", std::io::Error::last_os_error());
            std::process::exit(2);
        }
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            libc::dup2(null, 0);
            libc::dup2(null, 1);
            if null > 2 {
                libc::close(null);
            }
        }
        (File::from_raw_fd(input), File::from_raw_fd(output))
    };
    let agent = Agent::new(Channel::new(output, shutdown_now), own_environment());
    if let Ok(mut a) = STDIO_AGENT.lock() {
        *a = Some(agent.clone());
    }
    agent.channel.send(0, &Event::Hello { version: protocol::PROTOCOL_VERSION, pid: std::process::id() });
    agent.run(input);
    shutdown_now();
    unreachable!("shutdown_now exits")
}

impl Agent {
    /// A connection's state around the write end of its channel.
    pub fn new(channel: Channel, base_env: Arc<Vec<(String, String)>>) -> Arc<Self> {
        Arc::new(Self {
            conn: next_connection(),
            channel,
            running: Mutex::default(),
            credits: Mutex::default(),
            uploads: Mutex::default(),
            base_env,
        })
    }

    pub fn channel(&self) -> &Channel {
        &self.channel
    }

    /// Serve requests read from `input` until it ends or carries a bad frame.
    pub fn run(self: &Arc<Self>, input: impl Read) {
        let mut input = BufReader::with_capacity(256 * 1024, input);
        loop {
            let body = match protocol::read_body(&mut input, protocol::MAX_REQUEST_FRAME) {
                Ok(Some(body)) => body,
                Ok(None) => return,
                Err(e) => {
                    eprintln!("sandboxd-agent: bad frame on the channel: {e}");
                    return;
                }
            };
            match protocol::decode_request(&body) {
                Ok(frame) => self.handle(frame.id, frame.message),
                // A newer server's request: say so and go on (the channel stays usable).
                Err(e) if protocol::unknown_request_id(&body, &e).is_some() => {
                    let id = protocol::unknown_request_id(&body, &e).unwrap_or_default();
                    self.fail(
                        id,
                        (FailureKind::Invalid, format!("this agent does not know the request ({e})")),
                    );
                }
                Err(e) => {
                    eprintln!("sandboxd-agent: bad frame on the channel: {e}");
                    return;
                }
            }
        }
    }

    /// The connection ended: stop what it started, release the sessions it held.
    pub fn end(&self) {
        self.channel.close();
        let running: Vec<Arc<Running>> =
            self.running.lock().map(|r| r.values().cloned().collect()).unwrap_or_default();
        for r in running {
            r.kill();
        }
        if let Ok(credits) = self.credits.lock() {
            for c in credits.values() {
                c.close();
            }
        }
        if let Ok(mut uploads) = self.uploads.lock() {
            for (_, u) in uploads.drain() {
                u.abort();
            }
        }
        sessions::connection_ended(self.conn);
        forward::connection_ended(self.conn);
        fs::connection_ended(self.conn);
    }
}

impl Agent {
    fn fail(&self, id: u64, (kind, message): (FailureKind, String)) {
        self.channel.send(id, &Event::Failed { kind, message });
    }

    fn handle(self: &Arc<Self>, id: u64, request: Request) {
        match request {
            request @ (Request::ListDir { .. }
            | Request::Stat { .. }
            | Request::MakeDir { .. }
            | Request::Remove { .. }
            | Request::Rename { .. }
            | Request::WatchDir { .. }) => fs::handle(self.conn, self.channel.clone(), id, request),
            Request::Exec(start) => {
                if let Err(e) = self.exec(id, start) {
                    self.fail(id, e);
                }
            }
            Request::Stdin(data) => {
                let sender = self.running.lock().ok().and_then(|r| r.get(&id).cloned());
                if let Some(r) = sender {
                    if let Some(tx) = r.stdin.lock().ok().and_then(|s| s.clone()) {
                        let _ = tx.send(data);
                    }
                } else {
                    sessions::input(self.conn, id, data);
                }
            }
            Request::StdinEnd => {
                if let Some(r) = self.running.lock().ok().and_then(|r| r.get(&id).cloned()) {
                    if let Ok(mut s) = r.stdin.lock() {
                        s.take();
                    }
                } else {
                    sessions::end_input(self.conn, id);
                }
            }
            Request::Kill => {
                fs::stop(self.conn, id);
                sessions::close_held(self.conn, id);
                if let Some(r) = self.running.lock().ok().and_then(|r| r.get(&id).cloned()) {
                    std::thread::spawn(move || r.kill());
                }
                if let Some(c) = self.credits.lock().ok().and_then(|c| c.get(&id).cloned()) {
                    c.close();
                }
                if let Some(upload) = self.uploads.lock().ok().and_then(|mut u| u.remove(&id)) {
                    upload.abort();
                }
                forward::kill(self.conn, id);
            }
            Request::Credit(n) => {
                if let Some(c) = self.credits.lock().ok().and_then(|c| c.get(&id).cloned()) {
                    c.grant(n);
                } else if let Some(c) = sessions::credit_of(self.conn, id) {
                    c.grant(n);
                } else if let Some(c) = forward::credit_of(self.conn, id) {
                    c.grant(n);
                } else if let Some(c) = fs::credit_of(self.conn, id) {
                    c.grant(n);
                }
            }
            Request::SessionOpen(start) => {
                if let Err(e) = self.open_session(id, start) {
                    self.fail(id, e);
                }
            }
            Request::SessionAttach { session_id, since, takeover } => {
                if let Err(e) = sessions::attach(self.conn, &self.channel, id, &session_id, since, takeover) {
                    self.fail(id, e);
                }
            }
            Request::Resize(size) => {
                if let Err(e) = sessions::resize(self.conn, id, size) {
                    self.fail(id, e);
                }
            }
            Request::Signal(sig) => {
                if let Err(e) = sessions::signal(self.conn, id, sig) {
                    self.fail(id, e);
                }
            }
            Request::Detach => {
                if let Err(e) = sessions::detach(self.conn, id) {
                    self.fail(id, e);
                }
            }
            Request::Abandon => sessions::abandon(self.conn, id),
            Request::SignalSession { session_id, signal } => {
                match sessions::signal_by_id(&session_id, signal) {
                    Ok(()) => self.channel.send(id, &Event::Done),
                    Err(e) => self.fail(id, e),
                }
            }
            Request::CloseSession { session_id } => match sessions::close_by_id(&session_id) {
                Ok(()) => self.channel.send(id, &Event::Done),
                Err(e) => self.fail(id, e),
            },
            Request::ListSessions => self.channel.send(id, &Event::Sessions(sessions::list())),
            Request::PutStart { path, mode } => match Upload::start(id, &path, mode) {
                Ok(upload) => {
                    let writer = UploadWriter::spawn(upload, self.channel.clone(), id);
                    if let Ok(mut u) = self.uploads.lock() {
                        u.insert(id, writer);
                    }
                }
                Err(e) => self.fail(id, e),
            },
            Request::PutData(data) => {
                let chunks = self.uploads.lock().ok().and_then(|u| u.get(&id).map(UploadWriter::chunks));
                if let Some(chunks) = chunks {
                    chunks.write(data);
                }
            }
            Request::PutEnd { size } => {
                if let Some(upload) = self.uploads.lock().ok().and_then(|mut u| u.remove(&id)) {
                    upload.end(size);
                }
            }
            Request::PutAbort => {
                if let Some(upload) = self.uploads.lock().ok().and_then(|mut u| u.remove(&id)) {
                    upload.abort();
                }
            }
            Request::ForwardOpen { host, port } => forward::open(self.conn, &self.channel, id, host, port),
            Request::ForwardData(data) => {
                forward::data(self.conn, id, data);
            }
            Request::ForwardEnd => {
                forward::end(self.conn, id);
            }
            Request::Get { path } => {
                let credit = Credit::new();
                if let Ok(mut c) = self.credits.lock() {
                    c.insert(id, credit.clone());
                }
                let agent = self.clone();
                std::thread::spawn(move || {
                    agent.download(id, &path, &credit);
                    if let Ok(mut c) = agent.credits.lock() {
                        c.remove(&id);
                    }
                });
            }
        }
    }

    fn download(&self, id: u64, path: &str, credit: &Credit) {
        let (mut file, size) = match files::open_for_download(path) {
            Ok(f) => f,
            Err(e) => return self.fail(id, e),
        };
        self.channel.send(id, &Event::GetStart { size });
        let mut buf = vec![0u8; protocol::MAX_CHUNK];
        loop {
            match files::read_chunk(&mut file, &mut buf) {
                Ok(0) => return self.channel.send(id, &Event::GetEnd),
                Ok(n) => {
                    if !credit.spend(n) {
                        return;
                    }
                    self.channel.send(id, &Event::GetData(buf[..n].to_vec()));
                }
                Err(e) => {
                    let kind = e.raw_os_error().map(FailureKind::from_errno).unwrap_or(FailureKind::Other);
                    return self.fail(id, (kind, format!("{path}: {e}")));
                }
            }
        }
    }

    /// The command's environment: the sandbox's, `HOME` for its user, then the call's.
    fn environment(
        &self,
        extra: &[(String, String)],
        user: &users::ExecUser,
        root_home: &str,
    ) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = self.base_env.as_ref().clone();
        // `docker exec -u 0` gave the agent root's HOME unless the sandbox's env sets one; a
        // command of another user gets its own, as `docker exec -u` would.
        if let Some(home) = env.iter_mut().find(|(k, _)| k == "HOME") {
            if home.1 == root_home {
                home.1 = user.home.clone();
            }
        } else {
            env.push(("HOME".into(), user.home.clone()));
        }
        for (k, v) in extra {
            match env.iter_mut().find(|(ek, _)| ek == k) {
                Some(slot) => slot.1 = v.clone(),
                None => env.push((k.clone(), v.clone())),
            }
        }
        env
    }

    fn open_session(&self, id: u64, start: SessionStart) -> Result<(), (FailureKind, String)> {
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        let group = std::fs::read_to_string("/etc/group").unwrap_or_default();
        let user =
            users::resolve(start.user.as_deref(), &passwd, &group).map_err(|e| (FailureKind::User, e))?;
        let root_home = users::resolve(None, &passwd, &group).map(|u| u.home).unwrap_or_else(|_| "/".into());
        let env = self.environment(&start.env, &user, &root_home);
        sessions::open(self.conn, &self.channel, id, start, env, user)
    }

    fn exec(self: &Arc<Self>, id: u64, start: ExecStart) -> Result<(), (FailureKind, String)> {
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        let group = std::fs::read_to_string("/etc/group").unwrap_or_default();
        let user =
            users::resolve(start.user.as_deref(), &passwd, &group).map_err(|e| (FailureKind::User, e))?;
        let root_home = users::resolve(None, &passwd, &group).map(|u| u.home).unwrap_or_else(|_| "/".into());
        let env = self.environment(&start.env, &user, &root_home);
        let prepared =
            Prepared::new(&start.shell, &start.command, &env, start.cwd.as_deref(), user, start.stdin)?;
        let credit = Credit::new();
        let (stdin_tx, stdin_rx) = mpsc::channel::<Vec<u8>>();
        let running = Arc::new(Running {
            shim: AtomicI32::new(0),
            stdin: Mutex::new(start.stdin.then_some(stdin_tx)),
            killed: AtomicBool::new(false),
        });
        if let Ok(mut r) = self.running.lock() {
            r.insert(id, running.clone());
        }
        if let Ok(mut c) = self.credits.lock() {
            c.insert(id, credit.clone());
        }
        // The fork and the wait for its `execve` happen off the connection's reader, which
        // goes on to the next request (execs in flight start side by side).
        let agent = self.clone();
        let limit = start.output_limit;
        std::thread::spawn(move || agent.run_command(id, prepared, limit, running, credit, stdin_rx));
        Ok(())
    }

    /// Start a command the reader accepted, forward its output, and report its exit (or why it
    /// did not start).
    fn run_command(
        self: Arc<Self>,
        id: u64,
        prepared: Prepared,
        limit: u64,
        running: Arc<Running>,
        credit: Arc<Credit>,
        stdin_rx: mpsc::Receiver<Vec<u8>>,
    ) {
        let started = Instant::now();
        let (spawned, exit_rx) = match reaper().spawn_registered(|register| spawn::spawn(&prepared, register))
        {
            Ok(spawned) => spawned,
            Err(e) => {
                credit.close();
                self.forget_command(id);
                self.fail(id, e);
                return;
            }
        };
        drop(prepared);
        running.started(spawned.shim);
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
        let out = self.pump(id, spawned.stdout, true, limit, &credit, &stop);
        let err = self.pump(id, spawned.stderr, false, limit, &credit, &stop);
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
        credit.close();
        self.forget_command(id);
        let exit = ExecExit {
            code: spawn::exit_code(status),
            killed: running.killed.load(Ordering::SeqCst),
            dropped_stdout: dropped[0],
            dropped_stderr: dropped[1],
            usage: Usage {
                wall_us: wall.as_micros() as u64,
                user_us: micros(usage.ru_utime),
                system_us: micros(usage.ru_stime),
                peak_rss_bytes: (usage.ru_maxrss.max(0) as u64) * 1024,
            },
        };
        self.channel.send(id, &Event::Exit(exit));
    }

    /// The command's entries, once it ended or could not start.
    fn forget_command(&self, id: u64) {
        if let Ok(mut r) = self.running.lock() {
            r.remove(&id);
        }
        if let Ok(mut c) = self.credits.lock() {
            c.remove(&id);
        }
    }

    /// Forward one output pipe as frames until EOF or `stop`; the receiver gets the count of
    /// bytes dropped past `limit`.
    fn pump(
        self: &Arc<Self>,
        id: u64,
        mut pipe: File,
        stdout: bool,
        limit: u64,
        credit: &Arc<Credit>,
        stop: &Arc<AtomicBool>,
    ) -> mpsc::Receiver<u64> {
        let (done_tx, done_rx) = mpsc::channel();
        let (agent, credit, stop) = (self.clone(), credit.clone(), stop.clone());
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
                agent.channel.send(id, &event);
            }
            let _ = done_tx.send(dropped);
        });
        done_rx
    }
}

fn micros(t: libc::timeval) -> u64 {
    (t.tv_sec.max(0) as u64) * 1_000_000 + t.tv_usec.max(0) as u64
}
