//! The pumps that move a session client's output and stderr into the read queues, and the
//! head of its stderr kept to classify a startup failure. Knows nothing of the session itself.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::sync::{mpsc, watch};

use crate::backends::docker::pty::spawner::{self, read_chunk};
use crate::backends::docker::pty::PtyError;

/// How much of the client's own stderr is kept to classify a startup failure.
pub const CLIENT_STDERR_KEEP: usize = 16 * 1024;
/// The head of the client's own stderr, and whether it is complete enough to classify.
pub(super) struct Kept {
    pub(super) bytes: std::sync::Mutex<Vec<u8>>,
    pub(super) settled: watch::Sender<bool>,
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

    pub(super) fn text(&self) -> String {
        let bytes = self.bytes.lock().unwrap_or_else(|p| p.into_inner());
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

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
