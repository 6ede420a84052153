//! The audit log (`server.audit`: a file path or `stderr`): one JSON line per mutating call
//! with the tenant, the token id, the sandbox, the method and the outcome (the gRPC code). Which
//! calls are mutating is `service/rpc_table.rs`'s to say.
//!
//! [`Audited`] wraps the sandbox service inside the access gate, so it sees the caller's
//! [`Principal`]; every front-end's calls pass it (`service/calls.rs`), so none is audited by
//! hand; the handler names its sandbox through [`note_sandbox`] (a task-local the
//! wrapper scopes around the call), which `authorize` and `Create` do.

use std::cell::RefCell;
use std::io::Write;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use crate::auth::Principal;

tokio::task_local! {
    static SANDBOX: RefCell<Option<String>>;
}

/// Records the sandbox the current call is about (no-op outside an audited call).
pub fn note_sandbox(sandbox_id: &str) {
    let _ = SANDBOX.try_with(|cell| *cell.borrow_mut() = Some(sandbox_id.to_string()));
}

/// Where the lines go.
pub struct AuditLog {
    sink: Mutex<Box<dyn Write + Send>>,
}

impl AuditLog {
    /// `stderr`, or a file appended to (created mode 0600).
    pub fn open(target: &str) -> std::io::Result<AuditLog> {
        let sink: Box<dyn Write + Send> = if target == "stderr" {
            Box::new(std::io::stderr())
        } else {
            use std::os::unix::fs::OpenOptionsExt;
            Box::new(std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(target)?)
        };
        Ok(AuditLog { sink: Mutex::new(sink) })
    }

    fn write(&self, principal: Option<&Principal>, sandbox_id: Option<&str>, method: &str, outcome: &str) {
        let token_sandbox = match principal {
            Some(Principal::Token(c)) => Some(c.sub.as_str()),
            _ => None,
        };
        let line = serde_json::json!({
            "ts_ms": crate::core::lease::now_ms(),
            "tenant": principal.and_then(Principal::tenant),
            "token_id": principal.and_then(Principal::token_id),
            "sandbox_id": sandbox_id.or(token_sandbox),
            "method": method,
            "outcome": outcome,
        });
        if let Ok(mut sink) = self.sink.lock() {
            let _ = writeln!(sink, "{line}");
            let _ = sink.flush();
        }
    }
}

/// The service `S`, its mutating calls logged to `log` (none: passed straight through).
#[derive(Clone)]
pub struct Audited<S> {
    inner: S,
    log: Option<Arc<AuditLog>>,
}

impl<S> Audited<S> {
    pub fn new(inner: S, log: Option<Arc<AuditLog>>) -> Self {
        Self { inner, log }
    }
}

impl<S: tonic::server::NamedService> tonic::server::NamedService for Audited<S> {
    const NAME: &'static str = S::NAME;
}

type BoxFuture<T> = Pin<Box<dyn std::future::Future<Output = T> + Send>>;

impl<S, B, RB> tower_service::Service<http::Request<B>> for Audited<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<RB>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    RB: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let method = request.uri().path().rsplit('/').next().unwrap_or_default().to_string();
        let log = match &self.log {
            Some(log) if crate::service::rpc_table::mutating(&method) => log.clone(),
            _ => return Box::pin(self.inner.call(request)),
        };
        let principal = request.extensions().get::<Principal>().cloned();
        let call = self.inner.call(request);
        Box::pin(SANDBOX.scope(RefCell::new(None), async move {
            let result = call.await;
            let sandbox = SANDBOX.with(|cell| cell.borrow().clone());
            let outcome = match &result {
                Ok(response) => response
                    .headers()
                    .get("grpc-status")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<i32>().ok())
                    .map_or("OK".to_string(), |c| format!("{:?}", tonic::Code::from(c))),
                Err(_) => "Internal".to_string(),
            };
            log.write(principal.as_ref(), sandbox.as_deref(), &method, &outcome);
            result
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::future::Ready;

    use prost::Message;

    use super::*;

    /// Answers every call OK, as the service behind the audit layer would.
    #[derive(Clone)]
    struct AnswerOk;

    impl tower_service::Service<http::Request<()>> for AnswerOk {
        type Response = http::Response<()>;
        type Error = Infallible;
        type Future = Ready<Result<http::Response<()>, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: http::Request<()>) -> Self::Future {
            std::future::ready(Ok(http::Response::builder().header("grpc-status", "0").body(()).unwrap()))
        }
    }

    /// Every method of the service, from its descriptor.
    fn methods() -> Vec<String> {
        let set = prost_types::FileDescriptorSet::decode(sandboxd_proto::FILE_DESCRIPTOR_SET).unwrap();
        let service = set.file.iter().flat_map(|f| f.service.iter()).find(|s| s.name() == "SandboxService");
        service.expect("SandboxService").method.iter().map(|m| m.name().to_string()).collect()
    }

    /// Each RPC the table calls mutating leaves exactly one line naming it; the others none.
    /// (The eight the hand-kept list missed, StartProcess to DeletePool, among them.)
    #[tokio::test]
    async fn every_mutating_rpc_leaves_one_audit_line_and_no_other_does() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = Arc::new(AuditLog::open(path.to_str().unwrap()).unwrap());
        let mut audited = Audited::new(AnswerOk, Some(log));
        let methods = methods();
        for method in &methods {
            let request = http::Request::builder()
                .uri(format!("/sandbox.v1.SandboxService/{method}"))
                .body(())
                .unwrap();
            tower_service::Service::call(&mut audited, request).await.unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let logged: Vec<String> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["method"].as_str().unwrap().to_string()
            })
            .collect();
        let want: Vec<String> =
            methods.iter().filter(|m| crate::service::rpc_table::mutating(m)).cloned().collect();
        assert_eq!(logged, want);
        for missed in [
            "StartProcess",
            "SignalProcess",
            "MakeDir",
            "Remove",
            "Rename",
            "PortForward",
            "CreatePool",
            "DeletePool",
        ] {
            assert!(logged.iter().any(|m| m == missed), "{missed} left no audit line");
        }
        assert!(!logged.iter().any(|m| m == "Status" || m == "List"));
    }
}
