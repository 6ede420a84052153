//! `Logs`: the sandbox's main-process output, streamed. The backend's stream is dropped (and
//! its reader stopped) when the caller cancels, or when the server shuts down.

use crate::service::rpc_table::name as rpc;
use sandboxd_proto::v1 as pb;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use super::{span, BoxStream, SandboxApi};
use crate::auth::Principal;
use crate::core::logs::{LogChunk, LogOptions};
use crate::core::spec::SandboxId;

pub(super) async fn logs(
    api: &SandboxApi,
    request: Request<pb::LogsRequest>,
) -> Result<Response<BoxStream<pb::LogsResponse>>, Status> {
    let principal = Principal::of(&request);
    let req = request.into_inner();
    let span = span(rpc::LOGS, &req.sandbox_id);
    let stream = async {
        let id = SandboxId::parse("sandbox_id", &req.sandbox_id)?;
        api.authorize(&principal, id.as_str(), const { super::rpc_table::scope(rpc::LOGS) }).await?;
        let options = LogOptions { follow: req.follow, tail_lines: req.tail_lines };
        Ok::<_, Status>(api.backend().logs(&id, options).await?)
    }
    .instrument(span.clone())
    .await?;
    let shutdown = api.shutdown.clone();
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    tokio::spawn(
        async move {
            super::pump::pump(&tx, shutdown, stream, None, |chunk| {
                let item = chunk.map_err(Status::from).map(|chunk| pb::LogsResponse {
                    output: Some(match chunk {
                        LogChunk::Stdout(data) => pb::logs_response::Output::Stdout(data),
                        LogChunk::Stderr(data) => pb::logs_response::Output::Stderr(data),
                    }),
                });
                (item, false)
            })
            .await
        }
        .instrument(span),
    );
    Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
}
