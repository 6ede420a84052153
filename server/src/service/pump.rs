//! "Pump a server stream until the caller leaves or the server shuts down": the race every
//! long-lived server stream runs. [`leaving`] is the race itself (Watch and Pty put it beside
//! branches of their own); [`pump`] is the whole forwarding loop of a stream whose source is one
//! queue of items (Logs, AttachProcess, PortForward).

use tokio::sync::{mpsc, watch};
use tonic::Status;

/// Why a stream stops before its source ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leave {
    /// The caller went away (its end of the stream was dropped).
    Caller,
    /// The server began shutting down.
    Shutdown,
}

/// Resolves when the caller left (`tx`'s receiver was dropped) or the server began shutting down.
pub(crate) async fn leaving<M>(tx: &mpsc::Sender<M>, shutdown: &mut watch::Receiver<bool>) -> Leave {
    tokio::select! {
        _ = tx.closed() => Leave::Caller,
        _ = shutdown.wait_for(|down| *down) => Leave::Shutdown,
    }
}

/// Where a pumped stream's items come from; `None`: the source ended.
pub(crate) trait Source: Send {
    type Item: Send;
    fn next(&mut self) -> impl std::future::Future<Output = Option<Self::Item>> + Send;
}

impl<T: Send> Source for mpsc::Receiver<T> {
    type Item = T;
    async fn next(&mut self) -> Option<T> {
        self.recv().await
    }
}

impl Source for crate::core::logs::LogStream {
    type Item = crate::error::Result<crate::core::logs::LogChunk>;
    async fn next(&mut self) -> Option<Self::Item> {
        crate::core::logs::LogStream::next(self).await
    }
}

/// Forward `source` to the caller through `tx`, each item as `forward` makes it (the message,
/// and whether it is the last), until the source ends, the last message went, the caller
/// leaves, or the server shuts down. At a shutdown the caller gets `at_shutdown` (made by
/// `forward`) as its last message, or nothing: the stream just ends.
pub(crate) async fn pump<S: Source, M>(
    tx: &mpsc::Sender<Result<M, Status>>,
    mut shutdown: watch::Receiver<bool>,
    mut source: S,
    at_shutdown: Option<S::Item>,
    mut forward: impl FnMut(S::Item) -> (Result<M, Status>, bool),
) {
    loop {
        let item = tokio::select! {
            item = source.next() => item,
            leave = leaving(tx, &mut shutdown) => match (leave, at_shutdown) {
                (Leave::Shutdown, Some(item)) => {
                    let _ = tx.send(forward(item).0).await;
                    return;
                }
                _ => return,
            },
        };
        let Some(item) = item else { return };
        let (message, last) = forward(item);
        if tx.send(message).await.is_err() || last {
            return;
        }
    }
}
