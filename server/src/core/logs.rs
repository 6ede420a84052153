//! The output of a sandbox's main process (the keep-alive, or a custom entrypoint), as the
//! `Logs` RPC streams it. Backend-neutral: the Docker backend reads it with `docker logs`; a
//! backend with an in-sandbox agent may read it from there instead.

pub use sandboxd_proto::contract::{LogChunk, LogOptions};

/// A sandbox's output arriving as it is read; `Err` once, last, when reading failed. Dropping
/// it stops the read (and whatever process the backend runs for it).
pub struct LogStream {
    chunks: tokio::sync::mpsc::Receiver<crate::error::Result<LogChunk>>,
}

impl LogStream {
    /// The chunks `chunks` delivers; the sender side owns whatever reads them, so it ends
    /// when the receiver (this stream) is dropped.
    pub fn new(chunks: tokio::sync::mpsc::Receiver<crate::error::Result<LogChunk>>) -> Self {
        Self { chunks }
    }

    /// The next chunk; `None` at the end.
    pub async fn next(&mut self) -> Option<crate::error::Result<LogChunk>> {
        self.chunks.recv().await
    }
}
