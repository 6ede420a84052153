//! `ExecStream`: an exec whose output is sent as it is produced.

use sandboxd_proto::v1 as pb;
use tonic::{Request, Response, Status};

use super::{BoxStream, SandboxApi};

pub(super) async fn exec_stream(
    _api: &SandboxApi,
    _request: Request<pb::ExecRequest>,
) -> Result<Response<BoxStream<pb::ExecStreamResponse>>, Status> {
    Err(Status::unimplemented("ExecStream is not implemented yet"))
}
