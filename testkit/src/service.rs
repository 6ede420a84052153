//! The service in-process: the same `Services` the binary serves (auth, health, reflection,
//! metrics layer, limits), on `127.0.0.1:0`, until the fixture is dropped. Most end-to-end tests
//! use this; only CLI, signal and listener tests start the binary ([`crate::server`]).
//!
//! The service runs on a runtime and thread of its own, as a server process would: a test on a
//! current-thread runtime (or no runtime, as the sandboxctl suites) that blocks its thread never
//! stalls the server, and dropping the fixture shuts the service down the way SIGTERM does
//! (NOT_SERVING, terminal sessions closed, a short drain), then ends its runtime, which kills
//! the docker clients it still had.

use std::net::SocketAddr;
use std::time::Duration;

use sandboxd::config::FileConfig;
use sandboxd::core::backend::SandboxBackend;
use sandboxd::service::{ServeSettings, Services};
use sandboxd_client::Client;

use crate::raw::{raw_client, RawClient};
use crate::TestLabel;

/// How long calls still running get when the fixture is dropped.
const DRAIN: Duration = Duration::from_secs(2);

/// How long the service's runtime waits for its blocking work after the drain.
const RUNTIME_END: Duration = Duration::from_secs(2);

/// A `sandboxd` service serving on a loopback port in this process, shut down on drop.
pub struct TestService {
    /// `http://127.0.0.1:PORT`, what a client connects to.
    pub url: String,
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TestService {
    /// The test config (containers labelled with `label`, a 60 s exec default, the engine and
    /// transport under test) and, with `token`, bearer auth.
    pub fn start(label: &TestLabel, token: Option<&str>) -> TestService {
        Self::start_with(label, token, |_| {})
    }

    /// As `start`, with `edit` applied to the config first.
    pub fn start_with(
        label: &TestLabel,
        token: Option<&str>,
        edit: impl FnOnce(&mut FileConfig),
    ) -> TestService {
        let mut config = FileConfig::default();
        config.docker.create.extra_run_args = label.run_args();
        config.docker.exec.default_timeout = Some(Duration::from_secs(60));
        config.docker.exec.engine = crate::engine();
        config.docker.exec.transport = crate::transport();
        config.docker.create.runtime = crate::runtime_name().into();
        if crate::on_runsc() {
            config.docker.runtimes.0.push(sandboxd::config::RuntimeOffer::new("runsc"));
        }
        edit(&mut config);
        Self::start_config(config, token)
    }

    /// The config [`crate::server::Launch`] would give the binary ([`crate::config::test_config`]
    /// with `config` merged in), as JSON: for tests that only talk gRPC (no signal, restart,
    /// flag, log or environment of a process).
    pub fn start_json(label: &TestLabel, config: serde_json::Value) -> TestService {
        let body = crate::config::test_config(label, config);
        let config = FileConfig::from_json_value(&body).expect("the test's config");
        Self::start_config(config, None)
    }

    /// Serves exactly `config` (whose `extra_run_args` should carry the test's label).
    pub fn start_config(config: FileConfig, token: Option<&str>) -> TestService {
        crate::require_docker();
        Self::serve(config, token, None)
    }

    /// The same services over `backend` (e.g. [`crate::fake::FakeBackend`]): no Docker daemon
    /// is needed. `config.server.state_dir` should be a directory of the test's own.
    pub fn start_backend(
        backend: std::sync::Arc<dyn SandboxBackend>,
        config: FileConfig,
        token: Option<&str>,
    ) -> TestService {
        Self::serve(config, token, Some(backend))
    }

    fn serve(
        config: FileConfig,
        token: Option<&str>,
        backend: Option<std::sync::Arc<dyn SandboxBackend>>,
    ) -> TestService {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        listener.set_nonblocking(true).expect("nonblocking listener");
        let addr = listener.local_addr().expect("local addr");
        let token = token.map(str::to_string);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let thread = std::thread::Builder::new()
            .name(format!("sandboxd-test-service-{}", addr.port()))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name("sandboxd-test-service")
                    .enable_all()
                    .build()
                    .expect("the service's runtime");
                runtime.block_on(async move {
                    let built = match backend {
                        Some(backend) => Services::build(backend, &config, token).await,
                        None => Services::build_docker(&config, token).await,
                    };
                    let services = match built {
                        Ok(services) => services,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e.to_string()));
                            return;
                        }
                    };
                    let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
                    let _ = ready_tx.send(Ok(()));
                    let settings =
                        ServeSettings { tls: None, remove_on_shutdown: false, drain_timeout: DRAIN };
                    let stopped = async move {
                        let _ = stop_rx.await;
                    };
                    if let Err(e) = services.serve_until(listener, settings, stopped).await {
                        eprintln!("the in-process sandboxd failed: {e}");
                    }
                });
                // As the binary exits once `serve` returned: work still running (a blocking
                // task, a docker client) is ended, never awaited, so a drop cannot hang.
                runtime.shutdown_timeout(RUNTIME_END);
            })
            .expect("spawn the service's thread");
        match ready_rx.recv_timeout(Duration::from_secs(30)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("the in-process sandboxd did not start: {e}"),
            Err(_) => panic!("the in-process sandboxd did not start within 30 s"),
        }
        TestService { url: format!("http://{addr}"), addr, stop: Some(stop_tx), thread: Some(thread) }
    }

    /// `127.0.0.1:PORT`, as `sandboxctl --addr` takes it.
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    pub async fn client(&self) -> Client {
        Client::connect(self.url.clone()).await.expect("connect")
    }

    /// The generated stub on this service.
    pub async fn raw(&self) -> RawClient {
        raw_client(&self.url).await
    }
}

impl Drop for TestService {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
