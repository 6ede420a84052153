//! `ExecStream`: an exec whose output is sent as it is produced, ending with `exit`. Dropping
//! the stream (the caller cancelled, or its deadline passed) drops the engine's stream, which
//! stops the command.

use crate::service::rpc_table::name as rpc;
use sandboxd_proto::contract::ExecEvent;
use sandboxd_proto::v1 as pb;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use super::exec::{exec_outcome, exec_request};
use super::{span, BoxStream, SandboxApi};
use crate::core::backend::StreamEvent;

pub(super) async fn exec_stream(
    api: &SandboxApi,
    request: Request<pb::ExecRequest>,
) -> Result<Response<BoxStream<pb::ExecStreamResponse>>, Status> {
    let span = span(rpc::EXEC_STREAM, &request.get_ref().sandbox_id);
    let slot = api.quotas.exec_slot(api, &crate::auth::Principal::of(&request))?;
    let mut stream = async {
        let (handle, command, params, answer_by) = exec_request(api, request).await?;
        let stream = api.backend().exec_stream(&handle, &command, &params).await?;
        Ok::<_, Status>((stream, answer_by.is_some(), handle))
    }
    .instrument(span.clone())
    .await?;
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let backend = api.backend().clone();
    tokio::spawn(
        async move {
            let _slot = slot;
            let capped = stream.1;
            loop {
                let event = tokio::select! {
                    event = stream.0.next() => event,
                    // The caller went away while the command is silent.
                    _ = tx.closed() => break,
                };
                let Some(event) = event else { break };
                let item = match event {
                    StreamEvent::Stdout(data) => Ok(ExecEvent::Stdout(data)),
                    StreamEvent::Stderr(data) => Ok(ExecEvent::Stderr(data)),
                    StreamEvent::Exit(result) => match backend.settle_exec(&stream.2, result).await {
                        Ok(result) => {
                            exec_outcome(result, capped).map(|result| ExecEvent::Exit(result.into()))
                        }
                        Err(e) => Err(Status::from(e)),
                    },
                };
                let item = item.map(pb::ExecStreamResponse::from);
                if tx.send(item).await.is_err() {
                    // The caller went away: dropping `stream` stops the command.
                    break;
                }
            }
        }
        .instrument(span),
    );
    Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
}
