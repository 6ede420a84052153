//! Health that follows the Docker daemon: a probe pings the backend every interval and turns
//! `grpc.health.v1` NOT_SERVING while the daemon cannot be reached, SERVING again when it
//! answers, so a load balancer or mesh takes the instance out and puts it back.

use std::sync::Arc;
use std::time::Duration;

use sandboxd_proto::v1::sandbox_service_server::SandboxServiceServer;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::core::backend::SandboxBackend;
use crate::service::SandboxApi;

/// Ping every `interval` until shutdown; report only changes (and log them once).
pub async fn probe_forever(
    backend: Arc<dyn SandboxBackend>,
    reporter: HealthReporter,
    interval: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut serving = true;
    loop {
        let answer = backend.ping().await;
        // Shutdown owns health from its signal on: never turn it back to SERVING.
        if *shutdown.borrow() {
            return;
        }
        match (&answer, serving) {
            (Err(e), true) => {
                tracing::warn!(error = %e, "the Docker daemon is unreachable: health NOT_SERVING");
                set(&reporter, ServingStatus::NotServing).await;
                serving = false;
            }
            (Ok(()), false) => {
                tracing::info!("the Docker daemon answers again: health SERVING");
                set(&reporter, ServingStatus::Serving).await;
                serving = true;
            }
            _ => {}
        }
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            _ = shutdown.wait_for(|stopping| *stopping) => return,
        }
    }
}

/// The service's own status and the server's (`""`) move together.
async fn set(reporter: &HealthReporter, status: ServingStatus) {
    reporter.set_service_status("", status).await;
    match status {
        ServingStatus::Serving => reporter.set_serving::<SandboxServiceServer<SandboxApi>>().await,
        _ => reporter.set_not_serving::<SandboxServiceServer<SandboxApi>>().await,
    }
}
