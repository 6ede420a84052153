//! Wiring: the services (auth, health, reflection) built once, served on a listener until a
//! future resolves, with a shutdown that drains; `serve` adds the binary's flags and signals.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sandboxd_proto::v1::sandbox_service_server::SandboxServiceServer;
use tokio::io::AsyncWriteExt;
use tonic::service::interceptor::InterceptedService;
use tonic::service::Routes;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};
use tonic_health::server::HealthReporter;

use super::{Access, SandboxApi};
use crate::config::{FileConfig, ServerSection};
use crate::core::backend::SandboxBackend;
use crate::core::lease::{LeasePolicy, LeaseStore};
use crate::core::lifecycle::{LeaseOptions, Lifecycle};

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
    /// Where Prometheus metrics are served (`GET /metrics`); `None`: nowhere.
    pub metrics_listen: Option<SocketAddr>,
    /// Serve TLS with these PEM files.
    pub tls: Option<TlsFiles>,
}

/// PEM files of the server's TLS identity and, for mutual TLS, the CA client certificates
/// must chain to.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

impl TlsFiles {
    /// Reads the PEM files into tonic's server TLS configuration.
    pub fn server_config(&self) -> Result<ServerTlsConfig, ServeError> {
        let read = |flag: &'static str, path: &PathBuf| {
            std::fs::read(path)
                .map_err(|source| ServeError::Tls(format!("{flag} {}: {source}", path.display())))
        };
        let identity = Identity::from_pem(read("--tls-cert", &self.cert)?, read("--tls-key", &self.key)?);
        let mut config = ServerTlsConfig::new().identity(identity);
        if let Some(ca) = &self.client_ca {
            config = config.client_ca_root(Certificate::from_pem(read("--tls-client-ca", ca)?));
        }
        Ok(config)
    }
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
    #[error("{0}")]
    MetricsListen(String),
    #[error("reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("tls: {0}")]
    Tls(String),
    #[error("state directory {dir}: {source}")]
    StateDir { dir: PathBuf, source: std::io::Error },
    #[error("server.auth.signing_key_file: {0}")]
    SigningKeys(#[from] crate::auth::keys::KeyError),
    #[error("server.auth.tenants_file: {0}")]
    Tenants(String),
    /// A host program the configured walls run is missing (`backends/docker/host/host_tools.rs`).
    #[error("{0}")]
    HostTools(String),
    #[error("{0}")]
    Audit(String),
    #[error("{0}")]
    Pools(crate::error::ProviderError),
}

/// The signing keys (the configured file, or one made in the state directory), the
/// revocation set in the state directory, and the tenants.
fn load_access(config: &FileConfig, state_dir: &std::path::Path) -> Result<Arc<Access>, ServeError> {
    let auth = &config.server.auth;
    let state = |source| ServeError::StateDir { dir: state_dir.to_path_buf(), source };
    std::fs::create_dir_all(state_dir).map_err(state)?;
    let keys = match &auth.signing_key_file {
        Some(path) => crate::auth::keys::load(path)?,
        None => crate::auth::keys::load_or_generate(&state_dir.join("signing-keys"))?,
    };
    let revocations = crate::auth::revocations::Revocations::open(state_dir).map_err(state)?;
    let tenants = match &auth.tenants_file {
        Some(path) => Some(Arc::new(crate::auth::Tenants::load(path).map_err(ServeError::Tenants)?)),
        None => None,
    };
    // A tenant bound to a runtime the server does not offer could never create: said at start.
    for tenant in tenants.iter().flat_map(|t| t.all()) {
        if let Some(runtime) = tenant.runtime.as_deref().filter(|r| config.docker.runtimes.get(r).is_none()) {
            return Err(ServeError::Tenants(format!(
                "tenant {:?} is bound to runtime {runtime:?}, which docker.runtimes does not offer (offered: {})",
                tenant.name,
                config.docker.runtimes.names()
            )));
        }
    }
    Ok(Arc::new(Access {
        tokens: Arc::new(crate::auth::Tokens::new(keys, Arc::new(revocations))),
        tenants,
        owner_token_ttl: auth.owner_token_ttl,
        grant_ttl: auth.grant_ttl,
    }))
}

/// HTTP/2 pings every `server.limits.keepalive_interval_s` (30 s), answered within
/// `keepalive_timeout_s` (20 s), and TCP keepalive after 30 s idle (then 3 probes 10 s apart): a
/// client whose host vanished without a FIN is dropped within about a minute, and what its
/// calls held is released.
const TCP_KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
const TCP_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const TCP_KEEPALIVE_RETRIES: u32 = 3;

/// Time the shutdown removal always gets after the drain, even when the drain used it all.
const SHUTDOWN_REMOVAL_FLOOR: Duration = Duration::from_secs(2);

/// The services one sandboxd answers, built and not yet serving: `SandboxService` behind the
/// bearer-token gate, health, reflection (v1 and v1alpha), over this process's `Lifecycle`.
/// [`Services::serve_until`] serves them on a listener until a future resolves; [`serve`] is
/// that for the binary (flags, signals, the listening line). Tests build them in-process.
pub struct Services {
    pub(crate) lifecycle: Arc<Lifecycle>,
    pub(crate) pools: Arc<crate::core::pools::Pools>,
    policy: ServerSection,
    routes: Routes,
    health: HealthReporter,
    shutdown_tx: tokio::sync::watch::Sender<bool>,
    /// Egress policies: their domains are resolved again while serving.
    egress: Arc<crate::egress::Egress>,
    /// The gate every call passes (the console also asks it who a credential is).
    gate: crate::auth::AccessGate,
    /// `server.e2b`, for the E2B front-end built by [`Services::e2b`].
    e2b: crate::config::E2bSection,
    /// The runtimes that checkpoint: the E2B front-end's `pause` hibernates their sandboxes.
    checkpointing: std::collections::BTreeSet<String>,
    /// The per-connection call limit, one count for the listener and the front-ends.
    stream_limit: super::stream_limit::StreamLimitLayer,
    /// Relays calls about sandboxes on other nodes (cluster mode; set by `crate::wiring`);
    /// passes everything through on a single host.
    pub(crate) forward: super::forward::ForwardLayer,
    /// The tenants in force (`server.auth.tenants_file`), reloaded on SIGHUP by [`serve`].
    tenants: Option<Arc<crate::auth::Tenants>>,
}

/// How [`Services::serve_until`] serves its listener and what its shutdown does.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    /// Serve TLS with this identity (and client CA).
    pub tls: Option<ServerTlsConfig>,
    /// Remove the sandboxes this process created when the shutdown future resolves.
    pub remove_on_shutdown: bool,
    /// How long in-flight calls may take to finish once the shutdown future resolved.
    pub drain_timeout: Duration,
}

impl Services {
    /// The lease store, the lifecycle over `backend` and the gRPC services over them; health
    /// reports SERVING. Nothing runs until `serve_until`.
    pub async fn build(
        backend: Arc<dyn SandboxBackend>,
        config: &FileConfig,
        auth_token: Option<String>,
    ) -> Result<Self, ServeError> {
        let capabilities = backend.capabilities();
        let state_dir = config.server.state_dir();
        let leases =
            LeaseStore::open(&state_dir).map_err(|source| ServeError::StateDir { dir: state_dir, source })?;
        let lease_options = LeaseOptions {
            policy: LeasePolicy::from_config(&config.server),
            store: leases,
            create_timeout: config.server.create_timeout,
        };
        let state_dir = config.server.state_dir();
        let state = |source| ServeError::StateDir { dir: state_dir.clone(), source };
        let claims = crate::core::claims::ClaimStore::open(&state_dir).map_err(state)?;
        let lifecycle = Arc::new(
            Lifecycle::new(backend, lease_options)
                .with_claims(claims)
                .with_admission(admission_limits(&config.server.admission)),
        );
        let pool_specs =
            crate::core::pools::PoolSpec::all_from_config(&config.pools).map_err(ServeError::Pools)?;
        let owner = crate::core::pools::Pools::owner_of_state_dir(&state_dir).map_err(state)?;
        let pools = crate::core::pools::Pools::new(lifecycle.clone(), owner);
        pools.add_from_config(&pool_specs);
        let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
        let access = load_access(config, &config.server.state_dir())?;
        let tenants = access.tenants.clone();
        let reloadable = tenants.clone();
        let tokens = access.tokens.clone();
        let egress = Arc::new(crate::egress::Egress::new(&config.network, &config.server.state_dir()));
        let api = SandboxApi::new(lifecycle.clone(), config.server.clone(), shutdown_rx)
            .with_access(access)
            .with_egress(egress.clone())
            .with_pools(pools.clone());

        // Per-tenant usage in the metrics; it ends with the service's shutdown signal (or when
        // these services are dropped unserved).
        tokio::spawn(super::quota::publish_usage_forever(api.clone(), config.server.sweep_interval));
        let auth = crate::auth::AccessGate::new(auth_token, tenants, tokens);
        let audit = match &config.server.audit {
            Some(target) => Some(Arc::new(
                crate::audit::AuditLog::open(target)
                    .map_err(|e| ServeError::Audit(format!("server.audit {target}: {e}")))?,
            )),
            None => None,
        };
        let gate = auth.clone();
        let intercept = move |req| auth.check(req);
        let sandbox = SandboxServiceServer::new(api)
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
        let routes = Routes::new(health)
            .add_service(InterceptedService::new(
                crate::audit::Audited::new(super::capable::Capable::new(sandbox, capabilities), audit),
                intercept.clone(),
            ))
            .add_service(InterceptedService::new(reflection_v1, intercept.clone()))
            .add_service(InterceptedService::new(reflection_v1alpha, intercept));
        Ok(Self {
            lifecycle,
            pools,
            policy: config.server.clone(),
            routes,
            health: health_reporter,
            shutdown_tx,
            egress,
            gate,
            e2b: config.server.e2b.clone(),
            checkpointing: config.docker.runtimes.checkpointing(),
            stream_limit: super::stream_limit::StreamLimitLayer::new(
                config.server.limits.max_streams_per_connection,
            ),
            forward: super::forward::ForwardLayer::default(),
            tenants: reloadable,
        })
    }

    /// Read the tenants file again (`server.auth.tenants_file`): new keys, tenants and limits
    /// for every call from now on; a file with an error changes nothing (the error names the
    /// field). `Ok(None)` when the server has no tenants file.
    pub fn reload_tenants(&self) -> Result<Option<usize>, String> {
        let (Some(tenants), Some(path)) = (&self.tenants, &self.policy.auth.tenants_file) else {
            return Ok(None);
        };
        tenants.reload(path).map(Some)
    }

    /// Serve `peer` (the calls the nodes of a cluster make to each other) beside the API: it
    /// checks the cluster token itself, so it goes around the gate.
    pub fn add_peer_routes<S>(&mut self, peer: S)
    where
        S: tower_service::Service<
                http::Request<tonic::body::Body>,
                Response = http::Response<tonic::body::Body>,
                Error = std::convert::Infallible,
            > + tonic::server::NamedService
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
    {
        let routes = std::mem::take(&mut self.routes);
        self.routes = routes.add_service(peer);
    }

    /// A gRPC client of these services in-process: every call passes the layers the listener
    /// serves (`service/calls.rs`), entered at `entry` (the span's address; `None`: in-process).
    pub fn calls(&self, entry: Option<std::net::SocketAddr>) -> super::calls::Calls {
        let layers = super::calls::layers(entry, &self.stream_limit, &self.forward);
        super::calls::client(&layers, self.routes.clone(), MAX_MESSAGE)
    }

    /// The E2B-compatible front-end over these services (serve it with `E2bFront::serve`);
    /// build it once per listener (it holds the sessions its `process.Start` calls opened).
    pub fn e2b(&self) -> crate::e2b::E2bFront {
        crate::e2b::E2bFront::new(
            self.calls(None),
            self.e2b.clone(),
            self.gate.clone(),
            super::template_build::TemplateEngine::new(self.lifecycle.backend().clone()),
            self.checkpointing.clone(),
        )
    }

    /// The web console over these services, naming nodes through the cluster when there is one
    /// (serve it with `ConsoleFront::serve`).
    pub fn console(&self) -> crate::console::ConsoleFront {
        crate::console::ConsoleFront::new(self.calls(None), self.gate.clone())
            .with_cluster(self.forward.cluster().cloned())
    }

    /// What this process owns (the sandboxes it created) above the backend.
    pub fn lifecycle(&self) -> &Arc<Lifecycle> {
        &self.lifecycle
    }

    /// Resolves once a shutdown began (the future given to `serve_until` resolved).
    fn stopping(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut stop = self.shutdown_tx.subscribe();
        async move {
            let _ = stop.wait_for(|s| *s).await;
        }
    }

    /// Serves `listener` (with the sweep, and the snapshot expiry when configured, beside it)
    /// until `shutdown` resolves, then shuts down within `settings.drain_timeout`:
    /// 1. health turns NOT_SERVING, no new connections are accepted, PTY sessions are closed,
    ///    and (with `remove_on_shutdown`) this process's sandboxes are removed in parallel, while
    /// 2. in-flight calls drain, until the drain timeout;
    /// 3. then every call still running is dropped and the function returns once the removal
    ///    finished (or had what was left of the drain timeout, at least 2 s).
    pub async fn serve_until(
        self,
        listener: tokio::net::TcpListener,
        settings: ServeSettings,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) -> Result<(), ServeError> {
        let Services {
            lifecycle,
            pools,
            policy,
            routes,
            health: health_reporter,
            shutdown_tx,
            egress,
            forward,
            gate: _,
            e2b: _,
            checkpointing: _,
            tenants: _,
            stream_limit,
        } = self;
        let refresher =
            tokio::spawn(egress.refresh_forever(lifecycle.backend().clone(), shutdown_tx.subscribe()));
        let sweeper =
            tokio::spawn(sweep_forever(lifecycle.clone(), policy.sweep_interval, shutdown_tx.subscribe()));
        let refiller = tokio::spawn(pools.run(shutdown_tx.subscribe()));
        if let Some(ttl) = policy.snapshot_ttl {
            let every = (ttl / 4).clamp(Duration::from_secs(1), Duration::from_secs(300));
            let backend = lifecycle.backend().clone();
            tokio::spawn(crate::core::snapshot_expiry::expire_periodically(
                backend,
                ttl,
                every,
                shutdown_tx.subscribe(),
            ));
        }
        if policy.metrics.per_sandbox {
            tokio::spawn(crate::core::usage_metrics::refresh_periodically(
                lifecycle.backend().clone(),
                policy.metrics.per_sandbox_interval,
                shutdown_tx.subscribe(),
            ));
        }
        let prober = tokio::spawn(crate::health::probe_forever(
            lifecycle.backend().clone(),
            health_reporter.clone(),
            policy.health_probe_interval,
            shutdown_tx.subscribe(),
        ));
        let layers = super::calls::layers(listener.local_addr().ok(), &stream_limit, &forward);
        let incoming = tonic::transport::server::TcpIncoming::from(listener)
            .with_nodelay(Some(true))
            .with_keepalive(Some(TCP_KEEPALIVE_IDLE))
            .with_keepalive_interval(Some(TCP_KEEPALIVE_INTERVAL))
            .with_keepalive_retries(Some(TCP_KEEPALIVE_RETRIES));

        let cleanup_lifecycle = lifecycle.clone();
        let remove_on_shutdown = settings.remove_on_shutdown;
        let cleanup = std::sync::Mutex::new(None::<tokio::task::JoinHandle<()>>);
        let cleanup = &cleanup;
        // When the signal came, kept here rather than learnt by the drain timer: a server with
        // no call in flight ends in the same poll as the signal, before the timer ever runs,
        // and the removal's budget must still count from the signal.
        let signalled_at = std::sync::OnceLock::<tokio::time::Instant>::new();
        let signalled_at = &signalled_at;
        let mut stopping = shutdown_tx.subscribe();
        let shutdown_signal = async move {
            shutdown.await;
            tracing::info!("shutting down: NOT_SERVING, no new calls, closing terminal sessions");
            health_reporter.set_not_serving::<SandboxServiceServer<SandboxApi>>().await;
            health_reporter.set_service_status("", tonic_health::ServingStatus::NotServing).await;
            let _ = signalled_at.set(tokio::time::Instant::now());
            let _ = shutdown_tx.send(true);
            let task = tokio::spawn(async move { cleanup_lifecycle.shutdown(remove_on_shutdown).await });
            if let Ok(mut slot) = cleanup.lock() {
                *slot = Some(task);
            }
        };
        let mut builder = Server::builder();
        if let Some(tls) = settings.tls {
            builder = builder.tls_config(tls)?;
        }
        let server = builder
            // HTTP/2's default 64 KiB windows stall file streams on every round trip.
            .initial_stream_window_size(Some(8 << 20))
            .initial_connection_window_size(Some(16 << 20))
            // 16 KiB frames cost a frame header and a wakeup per 16 KiB of file content.
            .max_frame_size(Some(1 << 20))
            .http2_keepalive_interval(Some(policy.limits.keepalive_interval))
            .http2_keepalive_timeout(Some(policy.limits.keepalive_timeout))
            .max_concurrent_streams(Some(super::stream_limit::StreamLimitLayer::http2_cap(
                policy.limits.max_streams_per_connection,
            )))
            // The same layers the front-ends' in-process calls pass (`Services::calls`).
            .layer(layers)
            .add_routes(routes)
            .serve_with_incoming_shutdown(incoming, shutdown_signal);
        let drain_timer = async {
            // A sender dropped without a signal (the server failed first) never ends the drain.
            let signalled = stopping.wait_for(|stopped| *stopped).await.is_ok();
            match signalled_at.get() {
                Some(at) if signalled => tokio::time::sleep_until(*at + settings.drain_timeout).await,
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            result = server => result?,
            () = drain_timer => tracing::warn!("drain timeout passed; cancelling the calls still running"),
        }
        sweeper.abort();
        prober.abort();
        refresher.abort();
        refiller.abort();
        let task = cleanup.lock().ok().and_then(|mut slot| slot.take());
        if let Some(task) = task {
            // Removal started with the signal, beside the drain; it gets what is left of the
            // drain timeout, and at least SHUTDOWN_REMOVAL_FLOOR.
            let end =
                signalled_at.get().map_or_else(tokio::time::Instant::now, |at| *at + settings.drain_timeout);
            let budget =
                end.saturating_duration_since(tokio::time::Instant::now()).max(SHUTDOWN_REMOVAL_FLOOR);
            if tokio::time::timeout(budget, task).await.is_err() {
                tracing::warn!("shutdown removal did not finish in time; the sweep collects what is left");
            }
        }
        Ok(())
    }
}

/// The binary: serve `options.listen` until SIGTERM or SIGINT, then shut down as
/// [`Services::serve_until`] does within the drain timeout; a second signal exits at once.
/// Once the drain ended, docker clients still running are killed and the function returns
/// (the caller exits, which ends the connection tasks).
pub async fn serve(options: ServeOptions) -> Result<(), ServeError> {
    let loopback = options.listen.ip().is_loopback();
    let keyed = options.auth_token.is_some() || options.config.server.auth.tenants_file.is_some();
    if !loopback && !keyed && !options.insecure {
        return Err(ServeError::InsecureListen(options.listen));
    }
    if let Some(addr) = options.metrics_listen {
        crate::metrics::check_listen(addr, options.insecure).map_err(ServeError::MetricsListen)?;
    }
    if !loopback && options.auth_token.is_some() && options.tls.is_none() {
        tracing::warn!(
            listen = %options.listen,
            "the bearer token travels in clear text on a non-loopback listener: pass --tls-cert and --tls-key"
        );
    }
    let tls = options.tls.as_ref().map(TlsFiles::server_config).transpose()?;
    raise_fd_limit();
    let services = Services::build_docker(&options.config, options.auth_token.clone()).await?;
    let backend = services.lifecycle().backend().clone();

    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|source| ServeError::Bind { addr: options.listen, source })?;
    let local = listener.local_addr().map_err(|source| ServeError::Bind { addr: options.listen, source })?;
    let metrics_listener = match options.metrics_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr).await.map_err(|source| ServeError::Bind { addr, source })?,
        ),
        None => None,
    };

    let e2b_listener = match options.config.server.e2b.listen {
        Some(addr) => {
            if !addr.ip().is_loopback() && !keyed && !options.insecure {
                return Err(ServeError::InsecureListen(addr));
            }
            Some(
                tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|source| ServeError::Bind { addr, source })?,
            )
        }
        None => None,
    };

    let console_listener = match options.config.server.console.listen {
        Some(addr) => {
            if !addr.ip().is_loopback() && !keyed && !options.insecure {
                return Err(ServeError::InsecureListen(addr));
            }
            Some(
                tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|source| ServeError::Bind { addr, source })?,
            )
        }
        None => None,
    };

    // Handlers go in before the listening line: a SIGTERM right after it must drain, not kill.
    let mut signals = Signals::install();
    reload_tenants_on_hangup(&services);
    let mut stdout = tokio::io::stdout();
    if let Some(listener) = metrics_listener {
        let metrics_addr =
            listener.local_addr().map_err(|source| ServeError::Bind { addr: local, source })?;
        let stopped = services.stopping();
        // Sandboxes by state: one listing every few seconds, only when someone can scrape it.
        tokio::spawn(crate::state_metrics::refresh_periodically(
            services.lifecycle.clone(),
            crate::state_metrics::REFRESH_EVERY,
            services.shutdown_tx.subscribe(),
        ));
        tokio::spawn(async move {
            if let Err(e) = crate::metrics::serve(listener, stopped).await {
                tracing::error!(error = %e, "the metrics endpoint failed");
            }
        });
        let _ =
            stdout.write_all(format!("sandboxd metrics on http://{metrics_addr}/metrics\n").as_bytes()).await;
        tracing::info!(%metrics_addr, "serving Prometheus metrics at /metrics");
    }
    if let Some(listener) = e2b_listener {
        let e2b_addr = listener.local_addr().map_err(|source| ServeError::Bind { addr: local, source })?;
        let stopped = services.stopping();
        let front = services.e2b();
        tokio::spawn(async move {
            if let Err(e) = front.serve(listener, stopped).await {
                tracing::error!(error = %e, "the E2B endpoint failed");
            }
        });
        let _ = stdout.write_all(format!("sandboxd e2b on http://{e2b_addr}\n").as_bytes()).await;
        tracing::info!(%e2b_addr, "serving the E2B API (server.e2b)");
    }
    if let Some(listener) = console_listener {
        let console_addr =
            listener.local_addr().map_err(|source| ServeError::Bind { addr: local, source })?;
        let stopped = services.stopping();
        let front = services.console();
        tokio::spawn(async move {
            if let Err(e) = front.serve(listener, stopped).await {
                tracing::error!(error = %e, "the console failed");
            }
        });
        let _ = stdout.write_all(format!("sandboxd console on http://{console_addr}/\n").as_bytes()).await;
        tracing::info!(%console_addr, "serving the web console (server.console)");
    }
    let _ = stdout.write_all(format!("sandboxd listening on {local}\n").as_bytes()).await;
    let _ = stdout.flush().await;
    tracing::info!(%local, auth = options.auth_token.is_some(), tls = tls.is_some(), "sandboxd listening");

    let on_signal = backend.clone();
    let signalled = async move {
        signals.wait().await;
        tokio::spawn(async move {
            signals.wait().await;
            tracing::warn!("second signal: exiting at once");
            on_signal.shutdown();
            std::process::exit(130);
        });
    };
    let settings = ServeSettings {
        tls,
        remove_on_shutdown: options.remove_on_shutdown,
        drain_timeout: options.drain_timeout,
    };
    services.serve_until(listener, settings, signalled).await?;
    backend.shutdown();
    tracing::info!("sandboxd stopped");
    Ok(())
}

/// Sweep at start, then every `interval` or sooner when a known lease ends, a moved lease
/// included (a lease moved to end after the next sweep changes nothing); stops at shutdown.
async fn sweep_forever(
    lifecycle: Arc<Lifecycle>,
    interval: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    // When a lease ending at `at_ms` (ms since the epoch) is due to be swept.
    let due = |at_ms: i64| {
        let ahead = at_ms.saturating_sub(crate::core::lease::now_ms()).max(0) as u64;
        tokio::time::Instant::now() + Duration::from_millis(ahead + 50)
    };
    loop {
        let mut wake_at = tokio::time::Instant::now() + interval;
        match lifecycle.sweep().await {
            Ok(report) => {
                if let Some(at) = report.next_expiry_ms {
                    wake_at = wake_at.min(due(at));
                }
            }
            Err(e) => tracing::warn!(error = %e, "sweep failed; retrying at the next interval"),
        }
        // What the calls since the last sweep freed goes back to the kernel (see `memory`).
        crate::memory::trim_if_due();
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(wake_at) => break,
                at = lifecycle.lease_moved() => {
                    if at != i64::MAX {
                        wake_at = wake_at.min(due(at));
                    }
                }
                _ = shutdown.wait_for(|stopping| *stopping) => return,
            }
        }
    }
}

/// Sessions, pipes and docker clients each cost descriptors: take all the hard limit allows.
fn raise_fd_limit() {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max {
            let from = limit.rlim_cur;
            limit.rlim_cur = limit.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                tracing::debug!(from, to = limit.rlim_max, "raised RLIMIT_NOFILE");
            }
        }
    }
}

/// SIGTERM and SIGINT, installed up front.
/// Every SIGHUP reads the tenants file again (a server without one ignores the signal).
fn reload_tenants_on_hangup(services: &Services) {
    let (Some(tenants), Some(path)) = (services.tenants.clone(), services.policy.auth.tenants_file.clone())
    else {
        return;
    };
    let Ok(mut hangups) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else {
        tracing::warn!("cannot install the SIGHUP handler: tenants are read at start only");
        return;
    };
    let mut stopping = services.shutdown_tx.subscribe();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = hangups.recv() => {}
                _ = stopping.wait_for(|s| *s) => return,
            }
            match tenants.reload(&path) {
                Ok(count) => {
                    tracing::info!(tenants = count, file = %path.display(), "SIGHUP: tenants reloaded")
                }
                Err(e) => {
                    tracing::error!(error = %e, "SIGHUP: tenants file refused; the tenants in force are unchanged")
                }
            }
        }
    });
}

struct Signals {
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn install() -> Self {
        use tokio::signal::unix::{signal, SignalKind};
        Self { term: signal(SignalKind::terminate()).ok(), int: signal(SignalKind::interrupt()).ok() }
    }

    async fn wait(&mut self) {
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

/// `server.admission` as the admission queue's limits (the machine's size where unset).
fn admission_limits(section: &crate::config::AdmissionSection) -> crate::core::admission::AdmissionLimits {
    crate::core::admission::AdmissionLimits {
        max_starting: section
            .max_starting
            .map_or_else(crate::core::admission::default_max_starting, |n| n as usize),
        max_waiting: section.max_waiting as usize,
        max_wait: section.max_wait,
        first_start_estimate: section.first_start_estimate,
    }
}
