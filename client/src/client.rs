//! The connection to a sandboxd server.

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::error::{ClientError, Result};
use crate::proto::sandbox_service_client::SandboxServiceClient;

/// Largest response message the client accepts (exec output comes back in one message).
const MAX_DECODING_MESSAGE_BYTES: usize = 1 << 30;
/// HTTP/2 flow-control windows for file streams (the 64 KiB default stalls every round trip).
const STREAM_WINDOW: u32 = 8 << 20;
const CONNECTION_WINDOW: u32 = 16 << 20;

/// Adds `authorization: Bearer <token>` to every call when a token is set.
#[derive(Clone, Debug, Default)]
pub struct BearerAuth {
    header: Option<MetadataValue<Ascii>>,
}

impl BearerAuth {
    /// An interceptor sending `token` (none: a no-op).
    pub fn new(token: Option<&str>) -> Result<Self> {
        let header = match token {
            None => None,
            Some(token) => Some(format!("Bearer {token}").parse::<MetadataValue<Ascii>>().map_err(|_| {
                ClientError::InvalidArgument(
                    "the bearer token must be printable ASCII without control characters".to_string(),
                )
            })?),
        };
        Ok(Self { header })
    }
}

impl tonic::service::Interceptor for BearerAuth {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> std::result::Result<tonic::Request<()>, tonic::Status> {
        if let Some(header) = &self.header {
            request.metadata_mut().insert("authorization", header.clone());
        }
        #[cfg(feature = "otel")]
        inject_context(request.metadata_mut());
        Ok(request)
    }
}

/// With feature `otel`: the current OpenTelemetry context (`opentelemetry::Context::current()`,
/// e.g. attached with `FutureExt::with_context`, or a `tracing` span's `.context()` from
/// `tracing-opentelemetry`) as `traceparent`/`tracestate`, through the global propagator the
/// application set (`opentelemetry::global::set_text_map_propagator`), so the server's spans
/// continue the caller's trace.
#[cfg(feature = "otel")]
fn inject_context(metadata: &mut tonic::metadata::MetadataMap) {
    struct Metadata<'a>(&'a mut tonic::metadata::MetadataMap);
    impl opentelemetry::propagation::Injector for Metadata<'_> {
        fn set(&mut self, key: &str, value: String) {
            if let (Ok(key), Ok(value)) = (
                tonic::metadata::MetadataKey::from_bytes(key.as_bytes()),
                value.parse::<MetadataValue<Ascii>>(),
            ) {
                self.0.insert(key, value);
            }
        }
    }
    let cx = opentelemetry::Context::current();
    opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&cx, &mut Metadata(metadata)));
}

/// The generated stub as this crate uses it (bearer metadata on every call).
pub type RawClient = SandboxServiceClient<InterceptedService<Channel, BearerAuth>>;

/// A connection to a sandboxd server. Cheap to clone; clones share the HTTP/2 connection.
#[derive(Clone, Debug)]
pub struct Client {
    rpc: RawClient,
    /// The connection, for a client presenting another token ([`Client::with_token`]).
    channel: Channel,
}

impl Client {
    /// Connects to `url` (for example `http://127.0.0.1:50051`, or `127.0.0.1:50051`, which
    /// means plaintext `http://`).
    pub async fn connect(url: impl Into<String>) -> Result<Client> {
        Self::connect_inner(url.into(), None).await
    }

    /// Connects to `url` and sends `authorization: Bearer <token>` with every call.
    pub async fn connect_with_token(url: impl Into<String>, token: impl Into<String>) -> Result<Client> {
        Self::connect_inner(url.into(), Some(token.into())).await
    }

    async fn connect_inner(url: String, token: Option<String>) -> Result<Client> {
        let auth = BearerAuth::new(token.as_deref())?;
        let url = if url.contains("://") { url } else { format!("http://{url}") };
        // HTTP/2's default 64 KiB windows stall file streams on every round trip; larger windows
        // let a download run at the speed of the docker copy behind it.
        let channel = tonic::transport::Endpoint::from_shared(url)?
            .initial_stream_window_size(Some(STREAM_WINDOW))
            .initial_connection_window_size(Some(CONNECTION_WINDOW))
            .max_frame_size(Some(1 << 20))
            .connect()
            .await?;
        Ok(Self::from_parts(channel, auth))
    }

    /// Wraps an existing channel (for custom TLS, timeouts or a lazy connection).
    pub fn from_channel(channel: Channel, token: Option<&str>) -> Result<Client> {
        Ok(Self::from_parts(channel, BearerAuth::new(token)?))
    }

    fn from_parts(channel: Channel, auth: BearerAuth) -> Client {
        let rpc = SandboxServiceClient::with_interceptor(channel.clone(), auth)
            .max_decoding_message_size(MAX_DECODING_MESSAGE_BYTES);
        Client { rpc, channel }
    }

    /// This client's connection with other bearer metadata.
    pub(crate) fn with_auth(&self, auth: BearerAuth) -> Client {
        Self::from_parts(self.channel.clone(), auth)
    }

    /// A clone of the generated stub, for calls this crate does not wrap.
    pub fn raw(&self) -> RawClient {
        self.rpc.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::service::Interceptor;

    #[test]
    fn bearer_header_is_added() {
        let mut auth = BearerAuth::new(Some("s3cret")).expect("token");
        let req = auth.call(tonic::Request::new(())).expect("intercept");
        assert_eq!(req.metadata().get("authorization").and_then(|v| v.to_str().ok()), Some("Bearer s3cret"));
        let mut none = BearerAuth::new(None).expect("no token");
        let req = none.call(tonic::Request::new(())).expect("intercept");
        assert!(req.metadata().get("authorization").is_none());
    }

    #[tokio::test]
    async fn transport_error_shows_its_cause_and_host_port_is_accepted() {
        // Port 1 on loopback: nothing listens there, so the cause is a refused connection.
        let err = Client::connect("127.0.0.1:1").await.expect_err("nothing listens on port 1");
        let text = err.to_string();
        assert!(text.to_lowercase().contains("refused"), "{text}");
        let err = Client::connect("http://[::1").await.expect_err("bad url");
        assert!(err.to_string().len() > "transport error: ".len() + 3, "{err}");
    }

    #[test]
    fn bad_token_is_invalid_argument() {
        assert!(matches!(BearerAuth::new(Some("a\nb")), Err(ClientError::InvalidArgument(_))));
    }
}
