//! The Connect protocol (connectrpc.com/docs/protocol), as much of it as envd's clients use:
//! unary calls (`application/json` or `application/proto` bodies) and server-streaming calls
//! (`application/connect+json` / `application/connect+proto`: 5-byte envelopes, flags then a
//! big-endian length, the last one flagged 0x02 carrying the end-of-stream JSON). Over HTTP/1.1
//! and HTTP/2 alike (axum serves both). JSON is proto3's JSON mapping, done by `prost-reflect`
//! from the vendored envd descriptors so that field names, enums, bytes and oneofs follow the
//! spec rather than a hand-written serializer.

use std::sync::OnceLock;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::{BufMut, Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage};
use tonic::{Code, Status};

/// How a call's messages are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    Json,
    Proto,
}

/// A call as the client framed it.
#[derive(Debug, Clone, Copy)]
pub struct CallKind {
    pub codec: Codec,
    pub streaming: bool,
}

impl CallKind {
    /// From the request's content type; `None` for anything Connect does not define.
    pub fn from_headers(headers: &HeaderMap) -> Option<CallKind> {
        let ct = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
        let ct = ct.split(';').next()?.trim().to_ascii_lowercase();
        Some(match ct.as_str() {
            "application/json" => CallKind { codec: Codec::Json, streaming: false },
            "application/proto" => CallKind { codec: Codec::Proto, streaming: false },
            "application/connect+json" => CallKind { codec: Codec::Json, streaming: true },
            "application/connect+proto" => CallKind { codec: Codec::Proto, streaming: true },
            _ => return None,
        })
    }

    fn content_type(&self) -> &'static str {
        match (self.streaming, self.codec) {
            (false, Codec::Json) => "application/json",
            (false, Codec::Proto) => "application/proto",
            (true, Codec::Json) => "application/connect+json",
            (true, Codec::Proto) => "application/connect+proto",
        }
    }
}

fn pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        DescriptorPool::decode(sandboxd_proto::envd::FILE_DESCRIPTOR_SET)
            .expect("the envd descriptors are valid")
    })
}

/// Decodes one message of type `name` (e.g. `process.StartRequest`).
pub fn decode<T: Message + Default>(codec: Codec, name: &str, bytes: &[u8]) -> Result<T, Status> {
    match codec {
        Codec::Proto => T::decode(bytes).map_err(|e| Status::invalid_argument(format!("{name}: {e}"))),
        Codec::Json => {
            let desc = pool().get_message_by_name(name).expect("a known envd message");
            let bytes = if bytes.is_empty() { b"{}".as_slice() } else { bytes };
            let mut de = serde_json::Deserializer::from_slice(bytes);
            let dynamic = DynamicMessage::deserialize(desc, &mut de)
                .map_err(|e| Status::invalid_argument(format!("{name}: {e}")))?;
            T::decode(dynamic.encode_to_vec().as_slice())
                .map_err(|e| Status::invalid_argument(format!("{name}: {e}")))
        }
    }
}

/// Encodes one message of type `name`.
pub fn encode<T: Message>(codec: Codec, name: &str, message: &T) -> Bytes {
    match codec {
        Codec::Proto => Bytes::from(message.encode_to_vec()),
        Codec::Json => {
            let desc = pool().get_message_by_name(name).expect("a known envd message");
            let dynamic = DynamicMessage::decode(desc, message.encode_to_vec().as_slice())
                .expect("a message re-decodes under its own descriptor");
            Bytes::from(serde_json::to_vec(&dynamic).expect("proto JSON serializes"))
        }
    }
}

/// The Connect name of a gRPC code.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "ok",
        Code::Cancelled => "canceled",
        Code::Unknown => "unknown",
        Code::InvalidArgument => "invalid_argument",
        Code::DeadlineExceeded => "deadline_exceeded",
        Code::NotFound => "not_found",
        Code::AlreadyExists => "already_exists",
        Code::PermissionDenied => "permission_denied",
        Code::ResourceExhausted => "resource_exhausted",
        Code::FailedPrecondition => "failed_precondition",
        Code::Aborted => "aborted",
        Code::OutOfRange => "out_of_range",
        Code::Unimplemented => "unimplemented",
        Code::Internal => "internal",
        Code::Unavailable => "unavailable",
        Code::DataLoss => "data_loss",
        Code::Unauthenticated => "unauthenticated",
    }
}

/// The HTTP status of a unary error (the Connect protocol's table).
pub fn http_status(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::Cancelled => StatusCode::from_u16(499).expect("valid"),
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

fn error_json(status: &Status) -> serde_json::Value {
    serde_json::json!({ "code": code_name(status.code()), "message": status.message() })
}

/// A unary call's error response.
pub fn unary_error(status: &Status) -> Response {
    let mut response = (http_status(status.code()), axum::Json(error_json(status))).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A unary call's success response.
pub fn unary_ok<T: Message>(kind: CallKind, name: &str, message: &T) -> Response {
    let body = encode(kind.codec, name, message);
    ([(header::CONTENT_TYPE, kind.content_type())], body).into_response()
}

/// One envelope: flags, big-endian length, payload.
pub fn envelope(flags: u8, payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + payload.len());
    out.put_u8(flags);
    out.put_u32(payload.len() as u32);
    out.put_slice(payload);
    out.freeze()
}

/// The single message of a server-streaming request body (one envelope, uncompressed).
pub fn request_message(kind: CallKind, body: &[u8]) -> Result<&[u8], Status> {
    if !kind.streaming {
        return Ok(body);
    }
    if body.len() < 5 {
        return Err(Status::invalid_argument("a streaming request needs one 5-byte-framed message"));
    }
    if body[0] & 0x01 != 0 {
        return Err(Status::unimplemented("compressed messages are not accepted"));
    }
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    body.get(5..5 + len)
        .ok_or_else(|| Status::invalid_argument("the request envelope is shorter than its length"))
}

/// The metadata key `cut_off` marks a stream's error with.
const CUT_OFF: &str = "x-sandboxd-cut-off";

/// `status`, marked so that `streaming_response` cuts the response off instead of ending it with
/// an error message: for a stream whose sandbox went away under it, as a proxy's stream is cut
/// off when the sandbox behind it dies (HTTP/1.1: the body ends without its last chunk; HTTP/2:
/// the stream is reset). Every E2B SDK reads that as a transport failure and asks `/health`
/// whether the sandbox is gone; SDKs before 2.46 map an UNAVAILABLE end message by its code alone.
pub fn cut_off(mut status: Status) -> Status {
    status.metadata_mut().insert(CUT_OFF, tonic::metadata::MetadataValue::from_static("1"));
    status
}

/// Whether `status` was marked by `cut_off`.
pub fn is_cut_off(status: &Status) -> bool {
    status.metadata().contains_key(CUT_OFF)
}

/// A server-streaming response: each item an envelope, then the end-of-stream envelope (with
/// the error, if the stream ended with one; cut off instead for a `cut_off` error). Bounded by
/// the call's `Connect-Timeout-Ms`.
pub fn streaming_response<T, S>(
    kind: CallKind,
    name: &'static str,
    timeout: Option<Duration>,
    messages: S,
) -> Response
where
    T: Message + 'static,
    S: Stream<Item = Result<T, Status>> + Send + 'static,
{
    let codec = kind.codec;
    let frames = async_stream(messages, timeout).map(move |item| match item {
        Item::Message(m) => Ok(envelope(0, &encode(codec, name, &m))),
        Item::End(None) => Ok(envelope(0x02, b"{}")),
        Item::End(Some(status)) if is_cut_off(&status) => {
            Err(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, status.message().to_owned()))
        }
        Item::End(Some(status)) => {
            let end = serde_json::json!({ "error": error_json(&status) });
            Ok(envelope(0x02, end.to_string().as_bytes()))
        }
    });
    ([(header::CONTENT_TYPE, kind.content_type())], Body::from_stream(frames)).into_response()
}

/// A streaming call's error before its first message: a 200 with only the end-of-stream.
pub fn streaming_error(kind: CallKind, status: &Status) -> Response {
    let end = serde_json::json!({ "error": error_json(status) });
    ([(header::CONTENT_TYPE, kind.content_type())], envelope(0x02, end.to_string().as_bytes()))
        .into_response()
}

enum Item<T> {
    Message(T),
    End(Option<Status>),
}

/// The messages, then one `End` (the first error ends the stream; so does the deadline).
fn async_stream<T, S>(messages: S, timeout: Option<Duration>) -> impl Stream<Item = Item<T>> + Send
where
    T: Send + 'static,
    S: Stream<Item = Result<T, Status>> + Send + 'static,
{
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    futures_util::stream::unfold((Box::pin(messages), false), move |(mut messages, done)| async move {
        if done {
            return None;
        }
        let next = match deadline {
            Some(at) => match tokio::time::timeout_at(at, messages.next()).await {
                Ok(next) => next,
                Err(_) => Some(Err(Status::deadline_exceeded("the call's Connect-Timeout-Ms elapsed"))),
            },
            None => messages.next().await,
        };
        match next {
            Some(Ok(m)) => Some((Item::Message(m), (messages, false))),
            Some(Err(status)) => Some((Item::End(Some(status)), (messages, true))),
            None => Some((Item::End(None), (messages, true))),
        }
    })
}

/// The call's `Connect-Timeout-Ms`, if any.
pub fn timeout(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get("connect-timeout-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandboxd_proto::envd::process as pp;

    #[test]
    fn json_follows_the_proto3_mapping_both_ways() {
        let req: pp::StartRequest = decode(
            Codec::Json,
            "process.StartRequest",
            br#"{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"],"envs":{"A":"1"}},"stdin":false}"#,
        )
        .unwrap();
        let process = req.process.unwrap();
        assert_eq!(process.cmd, "/bin/bash");
        assert_eq!(process.args, ["-l", "-c", "echo hi"]);
        assert_eq!(process.envs["A"], "1");
        assert_eq!(req.stdin, Some(false));

        let event = pp::StartResponse {
            event: Some(pp::ProcessEvent {
                event: Some(pp::process_event::Event::Data(pp::process_event::DataEvent {
                    output: Some(pp::process_event::data_event::Output::Stdout(b"hi\n".to_vec())),
                })),
            }),
        };
        let json: serde_json::Value =
            serde_json::from_slice(&encode(Codec::Json, "process.StartResponse", &event)).unwrap();
        assert_eq!(json, serde_json::json!({"event": {"data": {"stdout": "aGkK"}}}));
    }

    #[test]
    fn bad_json_is_invalid_argument_naming_the_message() {
        let err =
            decode::<pp::StartRequest>(Codec::Json, "process.StartRequest", b"{\"process\": 3}").unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert!(err.message().contains("process.StartRequest"), "{}", err.message());
    }

    #[test]
    fn envelopes_frame_and_unframe() {
        let kind = CallKind { codec: Codec::Proto, streaming: true };
        let framed = envelope(0, b"abc");
        assert_eq!(&framed[..5], &[0, 0, 0, 0, 3]);
        assert_eq!(request_message(kind, &framed).unwrap(), b"abc");
        assert_eq!(request_message(kind, &framed[..6]).unwrap_err().code(), Code::InvalidArgument);
        assert_eq!(request_message(kind, &envelope(1, b"x")).unwrap_err().code(), Code::Unimplemented);
    }

    /// A stream's error ends it with the end-of-stream message, unless the error is `cut_off`:
    /// then the body fails (the connection is cut), and no end message is sent.
    #[tokio::test]
    async fn a_cut_off_error_fails_the_body_instead_of_ending_it() {
        let kind = CallKind { codec: Codec::Json, streaming: true };
        let event = || pp::ProcessEvent { event: None };
        let ended = streaming_response(
            kind,
            "process.ProcessEvent",
            None,
            futures_util::stream::iter([Ok(event()), Err(Status::unavailable("gone"))]),
        );
        let body = axum::body::to_bytes(ended.into_body(), usize::MAX).await.expect("a whole body");
        let end = envelope(0x02, br#"{"error":{"code":"unavailable","message":"gone"}}"#);
        assert!(body.ends_with(&end), "{body:?}");

        let cut = streaming_response(
            kind,
            "process.ProcessEvent",
            None,
            futures_util::stream::iter([Ok(event()), Err(cut_off(Status::unavailable("gone")))]),
        );
        let err = axum::body::to_bytes(cut.into_body(), usize::MAX).await.expect_err("a cut-off body");
        assert!(err.to_string().contains("gone"), "{err}");
    }
}
