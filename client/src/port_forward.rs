//! `PortForward`: one TCP connection made from inside the sandbox, as a [`Forward`] to drive by
//! hand or to [`Forward::splice`] with a local socket (what `sandboxctl port-forward` does per
//! accepted connection).

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::client::Client;
use crate::error::{ClientError, Result};
use crate::proto;

type Out = proto::port_forward_response::Message;

/// What the sandbox side sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForwardChunk {
    Data(Vec<u8>),
    /// It closed its half: no more data.
    Eof,
}

/// One forwarded connection.
pub struct Forward {
    /// Where the sandbox connected (`ip:port`).
    pub address: String,
    tx: Option<mpsc::Sender<proto::PortForwardRequest>>,
    rx: tonic::Streaming<proto::PortForwardResponse>,
}

impl Client {
    /// Connect to `host:port` as the sandbox sees it (`host` empty: 127.0.0.1). A connect
    /// failure is UNAVAILABLE naming the address.
    pub async fn port_forward(
        &self,
        sandbox_id: impl Into<String>,
        host: impl Into<String>,
        port: u16,
    ) -> Result<Forward> {
        let (tx, rx) = mpsc::channel(8);
        let open = proto::PortForwardOpen {
            sandbox_id: sandbox_id.into(),
            host: host.into(),
            port: u32::from(port),
        };
        tx.send(proto::PortForwardRequest {
            message: Some(proto::port_forward_request::Message::Open(open)),
        })
        .await
        .map_err(|_| ClientError::Protocol("the request stream closed".into()))?;
        let mut stream = self.raw().port_forward(ReceiverStream::new(rx)).await?.into_inner();
        let address = match stream.message().await?.and_then(|m| m.message) {
            Some(Out::Opened(o)) => o.address,
            other => {
                return Err(ClientError::Protocol(format!("PortForward answered {other:?} before opened")))
            }
        };
        Ok(Forward { address, tx: Some(tx), rx: stream })
    }
}

impl Forward {
    /// Bytes for the sandbox side.
    pub async fn send(&mut self, data: Vec<u8>) -> Result<()> {
        let tx =
            self.tx.as_ref().ok_or_else(|| ClientError::InvalidArgument("this side was closed".into()))?;
        tx.send(proto::PortForwardRequest { message: Some(proto::port_forward_request::Message::Data(data)) })
            .await
            .map_err(|_| ClientError::Protocol("the call ended".into()))
    }

    /// Close this half (the sandbox side reads EOF).
    pub fn close_write(&mut self) {
        self.tx = None;
    }

    /// What the sandbox side sent next; `None` once the call ended (both halves closed).
    pub async fn recv(&mut self) -> Result<Option<ForwardChunk>> {
        match self.rx.message().await? {
            None => Ok(None),
            Some(m) => match m.message {
                Some(Out::Data(d)) => Ok(Some(ForwardChunk::Data(d))),
                Some(Out::Eof(_)) => Ok(Some(ForwardChunk::Eof)),
                other => Err(ClientError::Protocol(format!("unexpected PortForwardResponse {other:?}"))),
            },
        }
    }

    /// Move bytes between `socket` and the sandbox side until both halves closed, passing each
    /// half-close on.
    pub async fn splice(mut self, socket: tokio::net::TcpStream) -> Result<()> {
        let (mut local_in, mut local_out) = socket.into_split();
        let tx = self.tx.take();
        let up = tokio::spawn(async move {
            let Some(tx) = tx else { return };
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match local_in.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let m = proto::PortForwardRequest {
                            message: Some(proto::port_forward_request::Message::Data(buf[..n].to_vec())),
                        };
                        if tx.send(m).await.is_err() {
                            break;
                        }
                    }
                }
            }
            // Dropping `tx` ends the request stream: the half-close.
        });
        let result = async {
            let mut writable = true;
            while let Some(chunk) = self.recv().await? {
                match chunk {
                    ForwardChunk::Data(d) if writable => {
                        if local_out.write_all(&d).await.is_err() {
                            writable = false;
                        }
                    }
                    ForwardChunk::Data(_) => {}
                    ForwardChunk::Eof => {
                        let _ = local_out.shutdown().await;
                        writable = false;
                    }
                }
            }
            Ok(())
        }
        .await;
        up.abort();
        result
    }
}
