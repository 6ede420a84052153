//! A session's I/O: the pumps that move the client's output and stderr into the read queues,
//! reads and writes without blocking the runtime, and the host side of a resize.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use nix::sys::signal::Signal;
use tokio::io::unix::AsyncFd;
use tokio::sync::{mpsc, watch};

use super::{check_size, closed_error, Kept, TerminalProcess};
use crate::pty::spawner::{self, read_chunk, write_all};
use crate::pty::{PtyError, TerminalMode};

/// Feed `fd` into `queue` (when there is one) until EOF or release; reading pauses while the
/// queue is full. `kept` retains the head of what passes (the client's stderr) and is marked
/// settled at the end; `seen` is raised at the first byte or at the end.
pub(super) async fn pump(
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

pub(super) async fn with_timeout<T>(
    timeout: Option<Duration>,
    fut: impl std::future::Future<Output = Result<T, PtyError>>,
) -> Result<T, PtyError> {
    match timeout {
        Some(d) => tokio::time::timeout(d, fut).await.unwrap_or(Err(PtyError::Timeout(d))),
        None => fut.await,
    }
}

impl TerminalProcess {
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
