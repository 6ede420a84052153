//! One live terminal: a client process (the provider's `docker exec -i [-t] …`, or any local
//! program) under a host pty or on pipes, with its output queued for readers, its input written
//! without blocking the runtime, and signals and cleanup reaching the process in the container
//! through the provider (`RunInContainer`).

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use nix::sys::signal::{killpg, Signal};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::{mpsc, watch, Mutex, OnceCell};

use super::container::{
    check_recorded_pid, cleanup_command, pid_read_command, signal_command, CONTROL_TIMEOUT, PID_READ_TIMEOUT,
    ROOT_USER,
};
use super::spawner::{self, read_chunk, spawn_process, write_all, ChildProc};
use super::{PtyError, RunInContainer, TerminalMode};

/// How much of the client's own stderr is kept to classify a startup failure.
pub const CLIENT_STDERR_KEEP: usize = 16 * 1024;
/// Output chunks queued per stream before reading from the descriptor pauses (at most
/// `QUEUE_CHUNKS` x 64 KiB buffered).
pub const QUEUE_CHUNKS: usize = 16;
/// How long, once the client exited, its stderr and output may take to drain before the exit is
/// classified.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a read at EOF waits for the exit to tell a startup failure from a plain EOF.
const EOF_OUTCOME_TIMEOUT: Duration = Duration::from_secs(2);
/// Grace a local program gets between `SIGHUP` and `SIGKILL` on close.
const HUP_GRACE: Duration = Duration::from_secs(1);

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

/// The head of the client's own stderr, and whether it is complete enough to classify.
struct Kept {
    bytes: std::sync::Mutex<Vec<u8>>,
    settled: watch::Sender<bool>,
}

impl Kept {
    fn keep(&self, chunk: &[u8]) {
        let mut bytes = self.bytes.lock().unwrap_or_else(|p| p.into_inner());
        let room = CLIENT_STDERR_KEEP.saturating_sub(bytes.len());
        bytes.extend_from_slice(&chunk[..room.min(chunk.len())]);
        if bytes.len() >= CLIENT_STDERR_KEEP {
            self.settled.send_replace(true);
        }
    }

    fn text(&self) -> String {
        let bytes = self.bytes.lock().unwrap_or_else(|p| p.into_inner());
        String::from_utf8_lossy(&bytes).into_owned()
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

/// How many times `close` reads the pid record before leaving the session's processes to the
/// container's removal (a read right after open can fail under load).
const PID_READ_ATTEMPTS_AT_CLOSE: u32 = 3;

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

/// Feed `fd` into `queue` (when there is one) until EOF or release; reading pauses while the
/// queue is full. `kept` retains the head of what passes (the client's stderr) and is marked
/// settled at the end; `seen` is raised at the first byte or at the end.
async fn pump(
    fd: Arc<AsyncFd<OwnedFd>>,
    mut queue: Option<mpsc::Sender<Vec<u8>>>,
    kept: Option<Arc<Kept>>,
    seen: Option<(Arc<AtomicBool>, watch::Sender<bool>)>,
    mut released: watch::Receiver<bool>,
) {
    let mut scratch = vec![0u8; spawner::READ_CHUNK];
    loop {
        if *released.borrow() {
            break;
        }
        let chunk = tokio::select! {
            biased;
            _ = released.wait_for(|r| *r) => break,
            chunk = read_chunk(&fd, &mut scratch) => chunk,
        };
        let chunk = match chunk {
            Ok(c) if c.is_empty() => break,
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "pty session read failed");
                break;
            }
        };
        if let Some(kept) = &kept {
            kept.keep(&chunk);
        }
        if let Some((flag, done)) = &seen {
            flag.store(true, Ordering::SeqCst);
            done.send_replace(true);
        }
        if let Some(tx) = &queue {
            let sent = tokio::select! {
                biased;
                _ = released.wait_for(|r| *r) => break,
                sent = tx.send(chunk) => sent,
            };
            if sent.is_err() {
                // Nobody reads any more: keep draining so the client never blocks on us.
                queue = None;
            }
        }
    }
    drop(fd);
    if let Some(kept) = kept {
        kept.settled.send_replace(true);
    }
    if let Some((_, done)) = seen {
        done.send_replace(true);
    }
}

async fn with_timeout<T>(
    timeout: Option<Duration>,
    fut: impl std::future::Future<Output = Result<T, PtyError>>,
) -> Result<T, PtyError> {
    match timeout {
        Some(d) => tokio::time::timeout(d, fut).await.unwrap_or(Err(PtyError::Timeout(d))),
        None => fut.await,
    }
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

    /// The next output chunk (the terminal's in PTY mode, stdout in pipe mode); empty at EOF.
    /// `Err(Timeout)` when nothing came within `timeout`; `Err(Failed)` when the client exited
    /// without starting the program.
    pub async fn read(&self, timeout: Option<Duration>) -> Result<Vec<u8>, PtyError> {
        with_timeout(timeout, async {
            let chunk = self.stdout.lock().await.recv().await;
            match chunk {
                Some(c) => Ok(c),
                None => self.eof().await,
            }
        })
        .await
    }

    /// The next chunk of the program's stderr in pipe mode; in PTY mode always EOF (the program's
    /// stderr goes to the terminal).
    pub async fn read_stderr(&self, timeout: Option<Duration>) -> Result<Vec<u8>, PtyError> {
        with_timeout(timeout, async { Ok(self.stderr.lock().await.recv().await.unwrap_or_default()) }).await
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

    /// Write all of `data`, waiting for room without blocking the runtime. Fails cleanly when
    /// the session is released while the write waits.
    pub async fn write(&self, data: &[u8]) -> Result<(), PtyError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(closed_error());
        }
        let mut released = self.released.subscribe();
        let input = self.input.lock().await;
        let fd = input.as_ref().ok_or_else(closed_error)?;
        write_all(fd, data, &mut released).await
    }

    /// Resize the terminal: the host pty's size, then `SIGWINCH` to the client. Ignored in pipe
    /// mode.
    pub async fn resize(&self, rows: u16, cols: u16) -> Result<(), PtyError> {
        if self.mode == TerminalMode::Pipe {
            return Ok(());
        }
        check_size(rows, cols)?;
        let master = self.master.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let master = master.ok_or_else(closed_error)?;
        spawner::set_winsize(master.get_ref(), rows, cols)
            .map_err(|e| PtyError::Failed(format!("cannot resize the terminal: {e}")))?;
        if let Err(e) = self.child.signal(Signal::SIGWINCH) {
            tracing::debug!(error = %e, "SIGWINCH to the session client failed");
        }
        self.apply_size_in_container(rows, cols).await;
        Ok(())
    }

    /// The docker client resizes the container's terminal through the API on its own time,
    /// racing input typed right after. Setting the size on the session's terminal directly (as
    /// the session's user, on the verified pid) makes `resize` return once the size holds.
    /// Best effort: the client's own resize follows anyway.
    async fn apply_size_in_container(&self, rows: u16, cols: u16) {
        let Some(container) = &self.container else { return };
        if self.closed() {
            return;
        }
        let pid = match self.recorded_pid().await {
            Ok(pid) => pid,
            Err(e) => {
                tracing::debug!(error = %e, "no verified pid: leaving the resize to the docker client");
                return;
            }
        };
        let command = super::container::resize_command(pid, rows, cols);
        let result = container.run(command, self.user.clone(), CONTROL_TIMEOUT).await;
        if result.return_code != 0 {
            tracing::debug!(stderr = %result.stderr_str(), "in-container resize failed");
        }
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

    /// Deliver a signal by name (`SIGINT`, `INT`, ...; see `Signal`).
    pub async fn send_signal(&self, name: &str) -> Result<(), PtyError> {
        let signal = crate::spec::Signal::try_from(name)
            .map_err(|e| PtyError::Invalid { field: "signal".into(), message: e.to_string() })?;
        self.deliver(signal).await
    }

    /// Deliver `signal`: in PTY mode to the foreground process group of the session's terminal,
    /// in pipe mode to the group of the session's process. A session whose process already
    /// exited has nothing to signal.
    pub async fn deliver(&self, signal: crate::spec::Signal) -> Result<(), PtyError> {
        let sig_name = signal.as_str();
        if self.closed.load(Ordering::SeqCst) {
            return Err(closed_error());
        }
        if self.returncode().is_some() {
            return Ok(());
        }
        match &self.container {
            None => self.signal_local(signal),
            Some(container) => {
                let pid = self
                    .recorded_pid()
                    .await
                    .map_err(|e| PtyError::Failed(format!("cannot signal the session: {e}")))?;
                let res = container
                    .run(signal_command(pid, signal, self.mode), Some(ROOT_USER.into()), CONTROL_TIMEOUT)
                    .await;
                if res.error_type.is_some() || res.return_code != 0 {
                    let detail = res.stderr_str();
                    return Err(PtyError::Failed(format!(
                        "cannot deliver {sig_name}: {} (exit {})",
                        detail.trim(),
                        res.return_code
                    )));
                }
                Ok(())
            }
        }
    }

    fn signal_local(&self, signal: crate::spec::Signal) -> Result<(), PtyError> {
        let sig_name = signal.as_str();
        let sig = Signal::try_from(signal.number())
            .map_err(|e| PtyError::Failed(format!("cannot deliver {sig_name}: {e}")))?;
        let master = self.master.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(master) = master {
            // The terminal's foreground group belongs to this session's terminal, which keeps
            // its number reserved.
            if let Ok(pgrp) = nix::unistd::tcgetpgrp(master.get_ref()) {
                if pgrp.as_raw() > 0 {
                    return killpg(pgrp, sig)
                        .map_err(|e| PtyError::Failed(format!("cannot deliver {sig_name}: {e}")));
                }
            }
        }
        match self.child.signal_group(sig) {
            Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
            Err(e) => Err(PtyError::Failed(format!("cannot deliver {sig_name}: {e}"))),
        }
    }

    /// The pid the launcher recorded, read as the session's user and checked; read again until
    /// a read succeeds.
    async fn recorded_pid(&self) -> Result<u32, String> {
        // A verdict on the record (its pid, or why it is refused) is final and kept; a read that
        // did not run (timeout, daemon) is not, so a later signal or close asks again.
        self.recorded_pid
            .get_or_try_init(|| async {
                let container = self.container.as_ref().ok_or("the session has no container")?;
                let first = self.pid_files.first().ok_or("the session has no pid record")?;
                let fallback = self.pid_files.get(1).unwrap_or(first);
                let res = container
                    .run(pid_read_command(first, fallback, &self.id), self.user.clone(), PID_READ_TIMEOUT)
                    .await;
                if let Some(kind) = res.error_type {
                    return Err(format!(
                        "reading the pid record failed ({}): {}",
                        kind.as_str(),
                        res.stderr_str().trim()
                    ));
                }
                Ok(check_recorded_pid(&res.stdout_str(), self.mode, &self.id))
            })
            .await?
            .clone()
    }

    /// Idempotent: end the session's processes, stop the client, drop the pid records. In a
    /// container: `SIGHUP` to the recorded pid's group, up to a second, then `SIGKILL` to its
    /// whole session (best effort; a session that already exited only has its records removed).
    /// Local programs: the same on the local process group.
    pub async fn close(&self) -> Result<(), PtyError> {
        self.close_result.get_or_init(|| self.close_inner()).await.clone()
    }

    async fn close_inner(&self) -> Result<(), PtyError> {
        self.closed.store(true, Ordering::SeqCst);
        let running = self.returncode().is_none();
        match &self.container {
            Some(container) => {
                let mut pid = None;
                if running {
                    for attempt in 1..=PID_READ_ATTEMPTS_AT_CLOSE {
                        match self.recorded_pid().await {
                            Ok(found) => {
                                pid = Some(found);
                                break;
                            }
                            Err(e) if attempt == PID_READ_ATTEMPTS_AT_CLOSE => {
                                tracing::warn!(session = %self.id, error = %e, "session pid not trusted; left to the container's removal");
                            }
                            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                        }
                    }
                }
                if pid.is_some() || !self.pid_files.is_empty() {
                    let files: Vec<&str> = self.pid_files.iter().map(String::as_str).collect();
                    let res = container
                        .run(cleanup_command(pid, &files), Some(ROOT_USER.into()), CONTROL_TIMEOUT)
                        .await;
                    if res.error_type.is_some() || res.return_code != 0 {
                        tracing::debug!(session = %self.id, stderr = %res.stderr_str(), "session cleanup failed (best effort)");
                    }
                }
            }
            None => {
                if running {
                    let _ = self.child.signal_group(Signal::SIGHUP);
                    let _ = tokio::time::timeout(HUP_GRACE, self.outcome()).await;
                }
                let _ = self.child.signal_group(Signal::SIGKILL);
            }
        }
        self.release().await;
        Ok(())
    }

    /// Release the session when its container is going away: no in-container cleanup.
    pub async fn abandon(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let _ = self.close_result.set(Ok(()));
        self.release().await;
    }

    /// Stop the client and release the descriptors. A write waiting for room fails first and
    /// leaves before the descriptor is dropped, so nothing touches its number afterwards.
    async fn release(&self) {
        self.released.send_replace(true);
        let _ = self.child.signal(Signal::SIGKILL);
        self.input.lock().await.take();
        self.master.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    /// The output as a stream of chunks, ending at EOF (after an error, if one ends it). Reads
    /// the same queue as `read`. The stream is `Unpin` (boxed), so `next()` works on it as is.
    pub fn output_stream(
        self: &Arc<Self>,
    ) -> impl Stream<Item = Result<Vec<u8>, PtyError>> + Send + Unpin + 'static {
        Box::pin(futures_util::stream::unfold(Some(self.clone()), |state| async move {
            let session = state?;
            match session.read(None).await {
                Ok(chunk) if chunk.is_empty() => None,
                Ok(chunk) => Some((Ok(chunk), Some(session))),
                Err(e) => Some((Err(e), None)),
            }
        }))
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
