//! One live terminal: a client process (the provider's `docker exec -i [-t] …`, or any local
//! program) under a host pty or on pipes, with its output queued for readers, its input written
//! without blocking the runtime, and signals and cleanup reaching the process in the container
//! through the provider (`RunInContainer`).
//!
//! One file per job: this one starts a session and classifies how its client exited; `io` moves
//! its bytes (pumps, reads, writes, the host side of a resize); `control` reaches its processes
//! (signals, the in-container resize, close).

mod control;
mod io;
mod pump;

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::{mpsc, watch, Mutex, OnceCell};

pub use self::pump::CLIENT_STDERR_KEEP;
use self::pump::{pump, with_timeout, Kept};
use super::spawner::{self, spawn_process, ChildProc};
use super::{PtyError, RunInContainer, TerminalMode};

/// Output chunks queued per stream before reading from the descriptor pauses (at most
/// `QUEUE_CHUNKS` x 64 KiB buffered).
pub const QUEUE_CHUNKS: usize = 16;
/// How long, once the client exited, its stderr and output may take to drain before the exit is
/// classified.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a read at EOF waits for the exit to tell a startup failure from a plain EOF.
const EOF_OUTCOME_TIMEOUT: Duration = Duration::from_secs(2);

/// How to start a session.
#[derive(Clone)]
pub struct SpawnOptions {
    /// Program and arguments: the provider passes `docker exec -i [-t] … NAME <launcher argv>`;
    /// tests pass local programs.
    pub argv: Vec<String>,
    /// Added to the program's environment (env values stay off its argv).
    pub env: Vec<(String, String)>,
    pub use_pty: bool,
    pub rows: u16,
    pub cols: u16,
    /// Empty: a fresh uuid.
    pub session_id: String,
    /// The session's container. `None` for local programs: `send_signal` and `close` then act on
    /// the local process group only.
    pub container: Option<Arc<dyn RunInContainer>>,
    /// The session's user: the pid record is read as this user (`None`: the exec's default user).
    pub user: Option<String>,
    pub pid_file: Option<String>,
    /// Where the launcher records the pid when `pid_file` refuses it (`None`: `pid_file` only).
    pub fallback_pid_file: Option<String>,
    /// Tells from the client's own stderr that it exited without starting the program (the
    /// daemon refused the exec).
    pub runtime_failure: Option<fn(&str) -> bool>,
}

impl Default for SpawnOptions {
    fn default() -> Self {
        Self {
            argv: Vec::new(),
            env: Vec::new(),
            use_pty: true,
            rows: 24,
            cols: 80,
            session_id: String::new(),
            container: None,
            user: None,
            pid_file: None,
            fallback_pid_file: None,
            runtime_failure: None,
        }
    }
}

impl std::fmt::Debug for SpawnOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpawnOptions")
            .field("argv_len", &self.argv.len())
            .field("use_pty", &self.use_pty)
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .field("session_id", &self.session_id)
            .field("container", &self.container.is_some())
            .field("user", &self.user)
            .field("pid_file", &self.pid_file)
            .field("fallback_pid_file", &self.fallback_pid_file)
            .finish()
    }
}

type Outcome = Option<Result<i32, PtyError>>;

/// One live terminal. Shared through `Arc`: one task may read while another writes and resizes.
pub struct TerminalProcess {
    id: String,
    mode: TerminalMode,
    child: Arc<ChildProc>,
    /// PTY mode: the master, for resizes and the terminal's foreground group. Taken on release.
    master: std::sync::Mutex<Option<Arc<AsyncFd<OwnedFd>>>>,
    /// Where writes go (the master, or the client's stdin); the lock serialises writes. Taken on
    /// release, after every waiting write left.
    input: Mutex<Option<Arc<AsyncFd<OwnedFd>>>>,
    /// True once the session released its descriptors (close, abandon, drop).
    released: watch::Sender<bool>,
    stdout: Mutex<mpsc::Receiver<Vec<u8>>>,
    stderr: Mutex<mpsc::Receiver<Vec<u8>>>,
    output_seen: Arc<AtomicBool>,
    classifies: bool,
    outcome: watch::Receiver<Outcome>,
    closed: AtomicBool,
    close_result: OnceCell<Result<(), PtyError>>,
    container: Option<Arc<dyn RunInContainer>>,
    user: Option<String>,
    pid_files: Vec<String>,
    /// Only a successful read is kept: a read that failed (a timeout under load) is retried.
    recorded_pid: OnceCell<Result<u32, String>>,
}

/// Start `opts.argv` as a session: under a fresh host pty sized `rows` x `cols` (raw mode, the
/// program session leader on it) in PTY mode, on pipes otherwise.
pub async fn spawn(opts: SpawnOptions) -> Result<Arc<TerminalProcess>, PtyError> {
    if opts.use_pty {
        check_size(opts.rows, opts.cols)?;
    }
    let spawned = spawn_process(&opts.argv, &opts.env, opts.use_pty, opts.rows, opts.cols)?;
    let mode = if opts.use_pty { TerminalMode::Pty } else { TerminalMode::Pipe };
    let child = Arc::new(spawned.child);
    let (released, _) = watch::channel(false);
    let output_seen = Arc::new(AtomicBool::new(false));
    let (stdout_done_tx, stdout_done_rx) = watch::channel(false);
    let (settled_tx, settled_rx) = watch::channel(false);
    let kept = Arc::new(Kept { bytes: std::sync::Mutex::new(Vec::new()), settled: settled_tx });
    let (out_tx, out_rx) = mpsc::channel(QUEUE_CHUNKS);
    let (err_tx, err_rx) = mpsc::channel(QUEUE_CHUNKS);

    let (master, input, output) = match spawned.master {
        Some(fd) => {
            let fd = Arc::new(spawner::async_fd(fd, Interest::READABLE | Interest::WRITABLE)?);
            (Some(fd.clone()), Some(fd.clone()), fd)
        }
        None => {
            let stdin = match spawned.stdin {
                Some(fd) => Some(Arc::new(spawner::async_fd(fd, Interest::WRITABLE)?)),
                None => None,
            };
            let stdout =
                spawned.stdout.ok_or_else(|| PtyError::Spawn("the client has no stdout pipe".into()))?;
            (None, stdin, Arc::new(spawner::async_fd(stdout, Interest::READABLE)?))
        }
    };
    let stderr = Arc::new(spawner::async_fd(spawned.stderr, Interest::READABLE)?);

    tokio::spawn(pump(
        output,
        Some(out_tx),
        None,
        Some((output_seen.clone(), stdout_done_tx)),
        released.subscribe(),
    ));
    // PTY mode: the client's stderr is its own (the program's goes to the terminal): kept for
    // classification, never shown. Pipe mode: the program's stderr too.
    let err_queue = if opts.use_pty {
        drop(err_tx);
        None
    } else {
        Some(err_tx)
    };
    tokio::spawn(pump(stderr, err_queue, Some(kept.clone()), None, released.subscribe()));

    let (outcome_tx, outcome_rx) = watch::channel(None);
    {
        let child = child.clone();
        let output_seen = output_seen.clone();
        let runtime_failure = opts.runtime_failure;
        let container = opts.container.clone();
        tokio::spawn(async move {
            let code = child.wait().await;
            let mut settled_rx = settled_rx;
            let mut stdout_done_rx = stdout_done_rx;
            let _ = tokio::time::timeout(SETTLE_TIMEOUT, async {
                let _ = settled_rx.wait_for(|s| *s).await;
                let _ = stdout_done_rx.wait_for(|s| *s).await;
            })
            .await;
            let outcome = match runtime_failure {
                Some(is_failure) if code != 0 && !output_seen.load(Ordering::SeqCst) => {
                    let text = kept.text();
                    if is_failure(&text) {
                        Err(PtyError::Failed(text.trim().to_string()))
                    } else {
                        Ok(code)
                    }
                }
                _ => Ok(code),
            };
            // A client cut off because its container went away (removed, stopped) exits like a
            // killed program: only the container's state tells the two apart.
            let outcome = match (outcome, &container) {
                (Ok(code), Some(container)) if code != 0 && !container.running().await => {
                    Err(PtyError::Failed(format!(
                        "the sandbox's container is no longer running (client exit {code})"
                    )))
                }
                (outcome, _) => outcome,
            };
            outcome_tx.send_replace(Some(outcome));
        });
    }

    let id =
        if opts.session_id.is_empty() { uuid::Uuid::new_v4().simple().to_string() } else { opts.session_id };
    let mut pid_files = Vec::new();
    if let Some(f) = opts.pid_file {
        pid_files.push(f);
    }
    if let Some(g) = opts.fallback_pid_file {
        if !pid_files.contains(&g) {
            pid_files.push(g);
        }
    }
    Ok(Arc::new(TerminalProcess {
        id,
        mode,
        child,
        master: std::sync::Mutex::new(master),
        input: Mutex::new(input),
        released,
        stdout: Mutex::new(out_rx),
        stderr: Mutex::new(err_rx),
        output_seen,
        classifies: opts.runtime_failure.is_some(),
        outcome: outcome_rx,
        closed: AtomicBool::new(false),
        close_result: OnceCell::new(),
        container: opts.container,
        user: opts.user,
        pid_files,
        recorded_pid: OnceCell::new(),
    }))
}

fn check_size(rows: u16, cols: u16) -> Result<(), PtyError> {
    if rows == 0 || cols == 0 {
        return Err(PtyError::Invalid {
            field: "size".into(),
            message: format!("rows and cols must be positive (got {rows}x{cols})"),
        });
    }
    Ok(())
}

fn closed_error() -> PtyError {
    PtyError::Failed("the session is closed".into())
}

impl TerminalProcess {
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn mode(&self) -> TerminalMode {
        self.mode
    }

    /// The local client's pid.
    pub fn client_pid(&self) -> i32 {
        self.child.pid()
    }

    /// What a read at EOF returns: EOF, unless the client never started the program.
    async fn eof(&self) -> Result<Vec<u8>, PtyError> {
        if !self.classifies || self.output_seen.load(Ordering::SeqCst) {
            return Ok(Vec::new());
        }
        match tokio::time::timeout(EOF_OUTCOME_TIMEOUT, self.outcome()).await {
            Ok(Err(e)) => Err(e),
            _ => Ok(Vec::new()),
        }
    }

    async fn outcome(&self) -> Result<i32, PtyError> {
        let mut rx = self.outcome.clone();
        let outcome = match rx.wait_for(|o| o.is_some()).await {
            Ok(o) => o.clone(),
            Err(_) => None,
        };
        outcome.unwrap_or_else(|| Err(PtyError::Failed("the session's exit was lost".into())))
    }

    /// The exit code (128 + n for signal n); `Err(Failed)` when the client exited without
    /// starting the program.
    pub async fn wait_exit(&self, timeout: Option<Duration>) -> Result<i32, PtyError> {
        with_timeout(timeout, self.outcome()).await
    }

    /// The client's exit code once it exited.
    pub fn returncode(&self) -> Option<i32> {
        self.child.code()
    }

    /// True once the session can no longer run commands: closed, or its process exited.
    pub fn closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst) || self.returncode().is_some()
    }
}

impl Drop for TerminalProcess {
    fn drop(&mut self) {
        // A session dropped without close: stop the local client and the pumps. The process in
        // the container is left to the container's removal.
        self.released.send_replace(true);
        let _ = self.child.signal(Signal::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_is_send_sync() {
        fn check<T: Send + Sync>() {}
        check::<TerminalProcess>();
        check::<SpawnOptions>();
    }
}
