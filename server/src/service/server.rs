//! Wiring: listener, auth, health, reflection, and a shutdown that drains.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sandboxd_proto::v1::sandbox_service_server::SandboxServiceServer;
use tokio::io::AsyncWriteExt;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Server;

use super::{BearerAuth, SandboxApi};
use crate::config::FileConfig;
use crate::docker::DockerProvider;
use crate::lifecycle::Lifecycle;

/// Largest message accepted (exec stdin and file content travel in messages).
const MAX_MESSAGE: usize = 64 << 20;

/// Everything `sandboxd` is started with.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub listen: SocketAddr,
    pub config: FileConfig,
    pub auth_token: Option<String>,
    /// Allow a non-loopback listener without a token.
    pub insecure: bool,
    /// Remove the sandboxes this process created when it shuts down.
    pub remove_on_shutdown: bool,
    /// How long in-flight calls may take to finish after SIGTERM.
    pub drain_timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("refusing to listen on {0} without --auth-token-file; pass --insecure to allow it")]
    InsecureListen(SocketAddr),
    #[error(transparent)]
    Provider(#[from] crate::error::ProviderError),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
}

/// Serve until SIGTERM or SIGINT, then drain.
pub async fn serve(options: ServeOptions) -> Result<(), ServeError> {
    if !options.listen.ip().is_loopback() && options.auth_token.is_none() && !options.insecure {
        return Err(ServeError::InsecureListen(options.listen));
    }
    let backend = Arc::new(DockerProvider::new(options.config.docker.clone())?);
    let lifecycle = Arc::new(Lifecycle::new(backend));
    let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
    let api = SandboxApi::new(lifecycle.clone(), options.config.server.clone(), shutdown_rx.clone());
    if let Some(ttl) = options.config.server.snapshot_ttl_s.map(Duration::from_secs_f64) {
        let every = (ttl / 4).clamp(Duration::from_secs(1), Duration::from_secs(300));
        let backend = lifecycle.backend().clone();
        tokio::spawn(crate::snapshot_expiry::expire_periodically(backend, ttl, every, shutdown_rx));
    }

    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|source| ServeError::Bind { addr: options.listen, source })?;
    let local = listener.local_addr().map_err(|source| ServeError::Bind { addr: options.listen, source })?;

    let auth = BearerAuth::new(options.auth_token.clone());
    let intercept = move |req| auth.check(req);
    let sandbox = SandboxServiceServer::new(api.clone())
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE);
    let (health_reporter, health) = tonic_health::server::health_reporter();
    health_reporter.set_serving::<SandboxServiceServer<SandboxApi>>().await;
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(sandboxd_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(sandboxd_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;

    // Handlers go in before the listening line: a SIGTERM right after it must drain, not kill.
    let signals = Signals::install();
    let mut stdout = tokio::io::stdout();
    let _ = stdout.write_all(format!("sandboxd listening on {local}\n").as_bytes()).await;
    let _ = stdout.flush().await;
    tracing::info!(%local, auth = options.auth_token.is_some(), "sandboxd listening");

    let (signalled_tx, signalled_rx) = tokio::sync::oneshot::channel::<()>();
    let shutdown_signal = async move {
        signals.wait().await;
        tracing::info!("shutting down: no new calls; closing terminal sessions");
        let _ = shutdown_tx.send(true);
        let _ = signalled_tx.send(());
    };
    let server = Server::builder()
        // HTTP/2's default 64 KiB windows stall file streams on every round trip.
        .initial_stream_window_size(Some(8 << 20))
        .initial_connection_window_size(Some(16 << 20))
        // 16 KiB frames cost a frame header and a wakeup per 16 KiB of file content.
        .max_frame_size(Some(1 << 20))
        .add_service(health)
        .add_service(InterceptedService::new(sandbox, intercept.clone()))
        .add_service(InterceptedService::new(reflection_v1, intercept.clone()))
        .add_service(InterceptedService::new(reflection_v1alpha, intercept))
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::TcpListenerStream::new(listener),
            shutdown_signal,
        );
    let drain = async {
        if signalled_rx.await.is_ok() {
            tokio::time::sleep(options.drain_timeout).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        result = server => result?,
        () = drain => tracing::warn!("drain timeout passed; cancelling the calls still running"),
    }
    lifecycle.shutdown(options.remove_on_shutdown).await;
    tracing::info!("sandboxd stopped");
    Ok(())
}

/// SIGTERM and SIGINT, installed up front.
struct Signals {
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn install() -> Self {
        use tokio::signal::unix::{signal, SignalKind};
        Self { term: signal(SignalKind::terminate()).ok(), int: signal(SignalKind::interrupt()).ok() }
    }

    async fn wait(mut self) {
        let (Some(term), Some(int)) = (self.term.as_mut(), self.int.as_mut()) else {
            tracing::warn!("cannot install signal handlers; stop the server with SIGKILL");
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
}
