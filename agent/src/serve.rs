//! The dispatcher: the agent's loop on one channel, reading requests and routing each to the
//! part that serves it (commands to the exec runner `exec`, sessions to `sessions`, a stream's
//! `Stdin`, `Kill`, `Signal`, `Resize` … to the one process table `processes`, files to
//! `files` and `fs`, connections to `forward`). A command's or session's user and environment
//! are resolved here, once per request (`launch`). Over stdio (`serve`) the channel is private
//! to the server (it holds the other end of this `docker exec -i`) and at its end the agent
//! stops every command still running and exits; on the socket (`socket`) each accepted
//! connection runs this loop and only its own commands stop when it ends.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read};
use std::os::fd::FromRawFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use crate::channel::{Channel, Credit};
use crate::exec;
use crate::files::{self, Upload, UploadWriter};
use crate::forward;
use crate::fs;
use crate::launch::Launch;
use crate::processes;
use crate::protocol::{self, Event, FailureKind, Request};
use crate::sessions;

/// One connection's state: the downloads and uploads it started. Its commands and the sessions
/// it holds are in the process table (`processes`), under this connection's number.
pub struct Agent {
    /// Unique per connection in this process (the process table keys its streams by it).
    conn: u64,
    channel: Channel,
    /// Downloads in flight: their credit.
    downloads: Mutex<HashMap<u64, Arc<Credit>>>,
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
            downloads: Mutex::default(),
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

    /// The connection ended: stop what it started, abandon the sessions it held.
    pub fn end(&self) {
        self.channel.close();
        processes::connection_ended(self.conn);
        if let Ok(downloads) = self.downloads.lock() {
            for c in downloads.values() {
                c.close();
            }
        }
        if let Ok(mut uploads) = self.uploads.lock() {
            for (_, u) in uploads.drain() {
                u.abort();
            }
        }
        forward::connection_ended(self.conn);
        fs::connection_ended(self.conn);
    }
}

impl Agent {
    fn fail(&self, id: u64, (kind, message): (FailureKind, String)) {
        self.channel.send(id, &Event::Failed { kind, message });
    }

    /// Route one request.
    fn handle(self: &Arc<Self>, id: u64, request: Request) {
        let conn = self.conn;
        match request {
            request @ (Request::ListDir { .. }
            | Request::Stat { .. }
            | Request::MakeDir { .. }
            | Request::Remove { .. }
            | Request::Rename { .. }
            | Request::WatchDir { .. }) => fs::handle(conn, self.channel.clone(), id, request),
            Request::Exec(start) => {
                let started = Launch::resolve(&self.base_env, start.user.as_deref(), &start.env)
                    .and_then(|launch| exec::start(conn, &self.channel, id, start, launch));
                if let Err(e) = started {
                    self.fail(id, e);
                }
            }
            Request::SessionOpen(start) => {
                let opened = Launch::resolve(&self.base_env, start.user.as_deref(), &start.env)
                    .and_then(|launch| sessions::open(conn, &self.channel, id, start, launch));
                if let Err(e) = opened {
                    self.fail(id, e);
                }
            }
            // A stream's requests: one destination, the program the stream drives.
            Request::Stdin(data) => processes::input(conn, id, data),
            Request::StdinEnd => processes::end_input(conn, id),
            Request::Resize(size) => {
                if let Err(e) = processes::resize(conn, id, size) {
                    self.fail(id, e);
                }
            }
            Request::Signal(sig) => {
                if let Err(e) = processes::signal(conn, id, sig) {
                    self.fail(id, e);
                }
            }
            Request::Detach => {
                if let Err(e) = processes::detach(conn, id) {
                    self.fail(id, e);
                }
            }
            Request::Abandon => processes::abandon(conn, id),
            // `Kill` and `Credit` apply to any stream: a program's, a file transfer's, a file
            // call's or a forwarded connection's.
            Request::Kill => {
                fs::stop(conn, id);
                processes::kill(conn, id);
                if let Some(c) = self.downloads.lock().ok().and_then(|c| c.get(&id).cloned()) {
                    c.close();
                }
                if let Some(upload) = self.uploads.lock().ok().and_then(|mut u| u.remove(&id)) {
                    upload.abort();
                }
                forward::kill(conn, id);
            }
            Request::Credit(n) => {
                let credit = processes::credit_of(conn, id)
                    .or_else(|| self.downloads.lock().ok().and_then(|c| c.get(&id).cloned()))
                    .or_else(|| forward::credit_of(conn, id))
                    .or_else(|| fs::credit_of(conn, id));
                if let Some(c) = credit {
                    c.grant(n);
                }
            }
            Request::SessionAttach { session_id, since, takeover } => {
                if let Err(e) = sessions::attach(conn, &self.channel, id, &session_id, since, takeover) {
                    self.fail(id, e);
                }
            }
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
            Request::PutStart { path, mode, xattrs } => match Upload::start(id, &path, mode, &xattrs) {
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
            Request::ForwardOpen { host, port } => forward::open(conn, &self.channel, id, host, port),
            Request::ForwardData(data) => {
                forward::data(conn, id, data);
            }
            Request::ForwardEnd => {
                forward::end(conn, id);
            }
            Request::Get { path } => {
                let credit = Credit::new();
                if let Ok(mut c) = self.downloads.lock() {
                    c.insert(id, credit.clone());
                }
                let agent = self.clone();
                std::thread::spawn(move || {
                    files::download(&agent.channel, id, &path, &credit);
                    if let Ok(mut c) = agent.downloads.lock() {
                        c.remove(&id);
                    }
                });
            }
        }
    }
}
