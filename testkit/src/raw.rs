//! The generated stub, for calls the Rust handle API never makes (empty ids, absurd durations,
//! streams left silent), and the few requests every suite that uses it repeats.

use sandboxd_client::proto;
use sandboxd_client::proto::sandbox_service_client::SandboxServiceClient;

use crate::images::BUSYBOX;

/// The stub on a plain channel (no bearer token).
pub type RawClient = SandboxServiceClient<tonic::transport::Channel>;

/// A stub connected to `url` (`http://127.0.0.1:PORT`).
pub async fn raw_client(url: &str) -> RawClient {
    let channel = tonic::transport::Endpoint::from_shared(url.to_string())
        .expect("a server url")
        .connect()
        .await
        .expect("connect");
    SandboxServiceClient::new(channel)
}

/// A spec of the busybox test image, nothing else set.
pub fn busybox() -> proto::SandboxSpec {
    proto::SandboxSpec { image: BUSYBOX.into(), ..Default::default() }
}

/// Create a sandbox from `spec` and return its id.
pub async fn create_id(raw: &mut RawClient, spec: proto::SandboxSpec) -> String {
    raw.create(proto::CreateRequest { spec: Some(spec) })
        .await
        .expect("create")
        .into_inner()
        .sandbox
        .unwrap()
        .sandbox_id
}

/// `command` through unary `Exec` in sandbox `id`, defaults otherwise; the call must succeed
/// (the command's own exit is in the response).
pub async fn exec(raw: &mut RawClient, id: &str, command: &str) -> proto::ExecResponse {
    raw.exec(proto::ExecRequest { sandbox_id: id.into(), command: command.into(), ..Default::default() })
        .await
        .expect("exec")
        .into_inner()
}

/// The header of an upload of `size` bytes (`None`: sizeless, spooled) to `path`.
pub fn upload_header(sandbox_id: &str, path: &str, size: Option<u64>) -> proto::UploadRequest {
    proto::UploadRequest {
        request: Some(proto::upload_request::Request::Header(proto::UploadHeader {
            sandbox_id: sandbox_id.into(),
            path: path.into(),
            mode: None,
            size,
            xattrs: Default::default(),
        })),
    }
}

/// An upload's data message.
pub fn chunk(bytes: Vec<u8>) -> proto::UploadRequest {
    proto::UploadRequest { request: Some(proto::upload_request::Request::Chunk(bytes)) }
}

/// A `Pty` stream opened with `open`: the sender of its later requests and the stream, its
/// first answer (`Opened`) already read.
pub async fn open_pty(
    raw: &mut RawClient,
    open: proto::PtyOpen,
) -> (tokio::sync::mpsc::Sender<proto::PtyRequest>, tonic::Streaming<proto::PtyResponse>) {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tx.send(proto::PtyRequest { request: Some(proto::pty_request::Request::Open(open)) })
        .await
        .expect("queue the open");
    let mut stream =
        raw.pty(tokio_stream::wrappers::ReceiverStream::new(rx)).await.expect("Pty").into_inner();
    let first = stream.message().await.expect("the Pty stream's first answer").expect("an answer");
    assert!(matches!(first.response, Some(proto::pty_response::Response::Opened(_))), "{first:?}");
    (tx, stream)
}
