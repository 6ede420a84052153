//! A session's I/O: reads and writes without blocking the runtime, and the host side of a
//! resize (the pumps that fill the read queues are in `pump.rs`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use nix::sys::signal::Signal;

use super::pump::with_timeout;
use super::{check_size, closed_error, TerminalProcess};
use crate::backends::docker::pty::spawner::{self, write_all};
use crate::core::terminal::{PtyError, TerminalMode};

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
