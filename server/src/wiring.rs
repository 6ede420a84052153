//! The composition root: which backend a configuration asks for, built with its layers. The
//! one place above `backends/` that names a backend: `service` and `core` take a
//! `dyn SandboxBackend` and never learn which one it is. A new backend adds a `build_*` here
//! (and a `cluster.mode` or `runtime` value that selects it).

use std::sync::Arc;

use crate::backends::docker::DockerProvider;
use crate::config::FileConfig;
use crate::core::backend::SandboxBackend;
use crate::service::{ServeError, Services};

impl Services {
    /// [`Services::build`] over the Docker backend made from `config.docker`: the wiring the
    /// binary (and an in-process test or bench) uses.
    pub async fn build_docker(config: &FileConfig, auth_token: Option<String>) -> Result<Self, ServeError> {
        // A server that starts can create: the walls' host programs are there.
        crate::backends::docker::host_tools::check(
            &config.docker.create,
            config.network.default_policy.is_some(),
        )
        .map_err(ServeError::HostTools)?;
        if config.cluster.mode == crate::config::ClusterMode::Swarm {
            return Self::build_swarm(config, auth_token).await;
        }
        let provider = DockerProvider::new_in(config.docker.clone(), config.server.state_dir())?;
        provider.set_pty_retain_bytes(config.server.pty.retain_bytes);
        let backend: Arc<dyn SandboxBackend> = Arc::new(provider);
        Self::build(backend, config, auth_token).await
    }

    /// `cluster.mode: swarm`: the Swarm backend over this node's Docker backend, and the layer
    /// that relays calls to the node a sandbox runs on. The operator key is the cluster token
    /// the nodes call each other with, so it is required.
    pub async fn build_swarm(config: &FileConfig, auth_token: Option<String>) -> Result<Self, ServeError> {
        let token =
            auth_token.clone().map(|t| t.trim().to_string()).filter(|t| !t.is_empty()).ok_or_else(|| {
                ServeError::Provider(crate::error::ProviderError::invalid(
                "cluster.mode",
                "swarm needs --auth-token-file: its key is the cluster token the nodes present to each other",
            ))
            })?;
        let backend = Arc::new(
            crate::backends::swarm::SwarmBackend::new(config.docker.clone(), config.cluster.clone(), token)
                .await?,
        );
        let swarm = backend.swarm().clone();
        let peer = backend.peer_service();
        let mut services = Self::build(backend.clone(), config, auth_token).await?;
        services.add_peer_routes(peer);
        services.forward = crate::service::forward::ForwardLayer::new(Some(swarm));
        // Pools and their claims are the cluster's (kept in Swarm); the node's claim store
        // keeps the claims its calls need.
        let claims = services.lifecycle.claims().clone();
        backend.use_claims(claims.clone());
        let config_pools =
            crate::core::pools::PoolSpec::all_from_config(&config.pools).map_err(ServeError::Pools)?;
        let shared = crate::backends::swarm::ClusterPools::new(
            backend,
            config_pools,
            claims,
            config.server.create_timeout,
        );
        services.pools.share_through(shared);
        Ok(services)
    }
}
