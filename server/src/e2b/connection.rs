//! The TCP connection an E2B request came on, kept so that a stream whose sandbox died can be
//! cut off with a reset, as a proxy's connection is when the sandbox behind it dies. E2B's SDKs
//! ask the sandbox's `/health` only after such a transport failure (2.45: a reset or an HTTP/2
//! stream reset, not a connection closed early), and only then say the sandbox was killed.

use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use tokio::net::TcpListener;

/// The connection's socket, as `axum::serve` hands it to every request on it (`ConnectInfo`).
#[derive(Debug, Clone, Copy)]
pub struct Connection {
    fd: RawFd,
}

impl Connected<IncomingStream<'_, TcpListener>> for Connection {
    fn connect_info(stream: IncomingStream<'_, TcpListener>) -> Self {
        Connection { fd: stream.io().as_raw_fd() }
    }
}

impl Connection {
    /// Makes the connection's close a reset (`SO_LINGER` 0), for an HTTP/1 response about to be
    /// cut off. Sound only while a response on this connection is being written: the
    /// connection, which owns the socket, is what polls that response, so the socket is open.
    pub fn reset_when_closed(&self) {
        // SAFETY: see above; the descriptor is open for as long as this call runs.
        let fd = unsafe { BorrowedFd::borrow_raw(self.fd) };
        if let Err(error) = socket2::SockRef::from(&fd).set_linger(Some(Duration::ZERO)) {
            tracing::debug!(%error, "could not make an E2B connection's close a reset");
        }
    }
}
