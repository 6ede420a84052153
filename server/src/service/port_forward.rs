//! `PortForward`: one TCP connection from inside the sandbox per call, spliced with the call's
//! two streams. Needs `operate` on the sandbox. The client's end of its request stream is the
//! half-close of its side; the call ends OK once both sides closed.

use crate::service::rpc_table::name as rpc;
use futures_util::StreamExt;
use sandboxd_proto::v1 as pb;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

use super::status::invalid;
use super::{span, BoxStream, SandboxApi};
use crate::auth::Principal;
use crate::core::processes::{ForwardInput, ForwardOutput, ForwardTarget};

type Msg = pb::port_forward_request::Message;
type Out = pb::port_forward_response::Message;

pub(super) async fn port_forward(
    api: &SandboxApi,
    request: Request<Streaming<pb::PortForwardRequest>>,
) -> Result<Response<BoxStream<pb::PortForwardResponse>>, Status> {
    let principal = Principal::of(&request);
    let mut stream = request.into_inner();
    let timeout = api.first_message_timeout();
    let first = tokio::time::timeout(timeout, stream.message()).await.map_err(|_| {
        Status::deadline_exceeded(format!(
            "no PortForwardOpen within {timeout:?} (server.limits.first_message_timeout_s)"
        ))
    })??;
    let open = match first.and_then(|m| m.message) {
        Some(Msg::Open(open)) => open,
        _ => return Err(invalid("open", "the first PortForwardRequest must carry a PortForwardOpen")),
    };
    let span = span(rpc::PORT_FORWARD, &open.sandbox_id);
    let connection = async {
        let target = ForwardTarget::parse(&open.host, open.port)?;
        let handle = api
            .authorize_handle(
                &principal,
                &open.sandbox_id,
                const { super::rpc_table::scope(rpc::PORT_FORWARD) },
            )
            .await?;
        Ok::<_, Status>(api.backend().port_forward(&handle, &target).await?)
    }
    .instrument(span.clone())
    .await?;
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let _ = tx
        .send(Ok(pb::PortForwardResponse {
            message: Some(Out::Opened(pb::PortForwardOpened { address: connection.address.clone() })),
        }))
        .await;
    let input = connection.input;
    let output = connection.output;
    let shutdown = api.shutdown.clone();
    // The caller's bytes into the sandbox; its end of stream is the half-close.
    let reader = tokio::spawn(async move {
        loop {
            match stream.next().await {
                Some(Ok(pb::PortForwardRequest { message: Some(Msg::Data(data)) })) => {
                    if input.send(ForwardInput::Data(data)).await.is_err() {
                        return;
                    }
                }
                Some(Ok(_)) => {
                    // A second `open` (or an empty message) is a client bug: drop the connection.
                    return;
                }
                None => {
                    let _ = input.send(ForwardInput::End).await;
                    // Keep `input` open until the connection ends, so the end is not taken for
                    // a dropped caller.
                    input.closed().await;
                    return;
                }
                Some(Err(_)) => return,
            }
        }
    });
    tokio::spawn(
        async move {
            let at_shutdown =
                Err(crate::error::ProviderError::Unavailable("the server is shutting down".into()));
            super::pump::pump(&tx, shutdown, output, Some(at_shutdown), |item| {
                let message = match item {
                    Ok(ForwardOutput::Data(data)) => Ok(Out::Data(data)),
                    Ok(ForwardOutput::Eof) => Ok(Out::Eof(pb::PortForwardEof {})),
                    Err(e) => Err(Status::from(e)),
                };
                let failed = message.is_err();
                (message.map(|m| pb::PortForwardResponse { message: Some(m) }), failed)
            })
            .await;
            reader.abort();
        }
        .instrument(span),
    );
    Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
}
