//! The backend's capability table in front of the handlers: an RPC whose capability
//! (`service/rpc_table.rs`, `needs`) the backend does not declare
//! (`SandboxBackend::capabilities`) is refused here with UNIMPLEMENTED naming the capability
//! and the backend, before a handler or the backend sees it. It sits inside the audit layer
//! (a refusal of a mutating call is audited) and behind the relay (a relayed call is judged by
//! the node that answers it), so every front-end gets the same answer.

use std::convert::Infallible;
use std::task::{Context, Poll};

use futures_util::future::{Either, Ready};

use crate::core::capabilities::Capabilities;

/// The service `S`, answering only the RPCs `capabilities` allows.
#[derive(Clone)]
pub struct Capable<S> {
    inner: S,
    capabilities: Capabilities,
}

impl<S> Capable<S> {
    pub fn new(inner: S, capabilities: Capabilities) -> Self {
        Self { inner, capabilities }
    }
}

impl<S: tonic::server::NamedService> tonic::server::NamedService for Capable<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B, RB> tower_service::Service<http::Request<B>> for Capable<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<RB>, Error = Infallible>,
    RB: Default,
{
    type Response = http::Response<RB>;
    type Error = Infallible;
    type Future = Either<Ready<Result<http::Response<RB>, Infallible>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let method = request.uri().path().rsplit('/').next().unwrap_or_default();
        let needs = crate::service::rpc_table::get(method).and_then(|rpc| rpc.needs);
        match needs.map(|capability| self.capabilities.require(capability)) {
            Some(Err(refusal)) => {
                let status = tonic::Status::from(refusal);
                Either::Left(futures_util::future::ready(Ok(status.into_http())))
            }
            _ => Either::Right(self.inner.call(request)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::Ready as StdReady;

    use super::*;
    use crate::core::capabilities::Capability;

    /// Answers every call with 200 and counts them.
    #[derive(Clone, Default)]
    struct Handlers(std::sync::Arc<std::sync::atomic::AtomicUsize>);

    impl tower_service::Service<http::Request<()>> for Handlers {
        type Response = http::Response<String>;
        type Error = Infallible;
        type Future = StdReady<Result<http::Response<String>, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: http::Request<()>) -> Self::Future {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            std::future::ready(Ok(http::Response::new("handled".into())))
        }
    }

    async fn call(service: &mut Capable<Handlers>, method: &str) -> http::Response<String> {
        let request =
            http::Request::builder().uri(format!("/sandbox.v1.SandboxService/{method}")).body(()).unwrap();
        tower_service::Service::call(service, request).await.unwrap()
    }

    #[tokio::test]
    async fn an_rpc_of_a_capability_the_backend_lacks_never_reaches_a_handler() {
        let handlers = Handlers::default();
        let caps = Capabilities::none("fake").with(Capability::Reset);
        let mut service = Capable::new(handlers.clone(), caps);

        let refused = call(&mut service, "Snapshot").await;
        assert_eq!(refused.headers()["grpc-status"], (tonic::Code::Unimplemented as i32).to_string());
        let message = refused.headers()["grpc-message"].to_str().unwrap().to_string();
        assert!(message.contains("snapshots") && message.contains("fake"), "{message}");
        assert_eq!(handlers.0.load(std::sync::atomic::Ordering::SeqCst), 0);

        for answered in ["Reset", "Exec", "Create", "NoSuchMethod"] {
            assert_eq!(call(&mut service, answered).await.body(), "handled", "{answered}");
        }
        assert_eq!(handlers.0.load(std::sync::atomic::Ordering::SeqCst), 4);
    }
}
