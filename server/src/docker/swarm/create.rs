//! `Create` in cluster mode: `docker service create` (Swarm places it), wait until its task
//! runs, then the owning node adopts the task's container: `Connect` (the container answers a
//! command; its shell is found) and `spec.files` uploaded, on this node's own docker backend
//! when the task landed here, else through the owning node's sandboxd with the cluster token.
//! Any failure after the service exists removes it.

use std::time::{Duration, Instant};

use sandboxd_proto::v1 as pb;
use sandboxd_proto::v1::sandbox_service_client::SandboxServiceClient;

use super::argv;
use super::backend::SwarmBackend;
use super::placement::{Placement, CLUSTER_TOKEN_HEADER};
use crate::backend::{CreatePlan, SandboxBackend};
use crate::error::{ProviderError, Result};
use crate::lease;
use crate::spec::{SandboxDescriptor, SandboxHandle, SandboxSpec};

/// Task states after which it never runs (`restart-condition none`).
const FINAL_STATES: [&str; 6] = ["failed", "rejected", "complete", "shutdown", "orphaned", "remove"];

/// Bytes per upload chunk sent to another node.
const CHUNK: usize = 1 << 20;

impl SwarmBackend {
    pub(super) async fn create_in_swarm(
        &self,
        spec: &SandboxSpec,
        plan: &CreatePlan,
    ) -> Result<SandboxHandle> {
        spec.validate()?;
        argv::check_spec(spec)?;
        crate::docker::argv::check_docker_env(&spec.env, true)
            .map_err(|m| ProviderError::invalid("spec.env", m))?;
        let id = plan.id.as_str();
        let now = lease::now_ms();
        let mut labels = vec![
            (lease::CREATED_LABEL, now.to_string()),
            (lease::CREATE_DEADLINE_LABEL, lease::after_ms(now, plan.timeout).to_string()),
        ];
        if let Some(ttl) = plan.ttl {
            labels.push((lease::EXPIRES_LABEL, lease::after_ms(now, ttl).to_string()));
        }
        let args = argv::service_create_args(&self.docker_config.create, &self.cluster, spec, id, &labels);
        let (env, env_file) = crate::docker::argv::run_env(&spec.env);
        self.cli.with_env(env).run(&args, Some(plan.timeout), env_file.as_deref()).await.map_err(|e| {
            let e = ProviderError::from(e);
            match e {
                ProviderError::Docker(m) => ProviderError::Create(format!("docker service create {id}: {m}")),
                other => other,
            }
        })?;
        let work = async {
            let placement = self.wait_running(id, plan.timeout).await?;
            self.adopt(id, spec, &placement).await
        };
        let result = match tokio::time::timeout(plan.timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(ProviderError::Timeout(format!(
                "create of {id} did not finish within {:?} (the call's deadline or server.create_timeout_s)",
                plan.timeout
            ))),
        };
        if result.is_err() {
            self.remove_service(id).await;
        }
        let handle = result?;
        tracing::info!(sandbox_id = %id, shell = %handle.shell, "sandbox created in the swarm");
        Ok(handle)
    }

    /// Polls the service's task until it runs (then its node), or fails naming Swarm's reason.
    async fn wait_running(&self, id: &str, limit: Duration) -> Result<Placement> {
        let start = Instant::now();
        let mut delay = Duration::from_millis(50);
        loop {
            let tasks = self.swarm.tasks(&[id.to_string()]).await?;
            if let Some(task) = tasks.iter().find(|t| t.service == id) {
                if task.current == "running" && !task.node.is_empty() {
                    return self.swarm.placed(id, &task.node).await;
                }
                if FINAL_STATES.contains(&task.current.as_str()) {
                    return Err(ProviderError::Create(format!(
                        "Swarm could not run {id}: task {} ({})",
                        task.current,
                        if task.error.is_empty() { "no error given" } else { task.error.as_str() }
                    )));
                }
            }
            if start.elapsed() > limit {
                return Err(ProviderError::Timeout(format!("the task of {id} did not run within {limit:?}")));
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(250));
        }
    }

    /// The owning node takes the running container on as its sandbox.
    async fn adopt(&self, id: &str, spec: &SandboxSpec, placement: &Placement) -> Result<SandboxHandle> {
        let descriptor =
            SandboxDescriptor { sandbox_id: id.to_string(), ports: None, workdir: spec.workdir.clone() };
        if placement.local {
            self.alias(id).await?;
            let handle = SandboxBackend::connect(&*self.local, &descriptor).await?;
            for (path, content) in &spec.files {
                SandboxBackend::upload(
                    &*self.local,
                    &handle,
                    Box::new(content.as_slice()),
                    content.len() as u64,
                    path,
                    None,
                )
                .await?;
            }
            return Ok(handle);
        }
        let channel = self.swarm.channel(&placement.node.addr)?;
        let mut client = SandboxServiceClient::new(channel)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20);
        let node = &placement.node.hostname;
        let connect = pb::ConnectRequest {
            sandbox: Some(pb::SandboxRef {
                sandbox_id: id.to_string(),
                workdir: spec.workdir.clone(),
                ..Default::default()
            }),
        };
        let answer = client
            .connect(self.peer_request(connect)?)
            .await
            .map_err(|s| peer_failure(node, "Connect", s))?
            .into_inner();
        for (path, content) in &spec.files {
            let mut messages = vec![pb::UploadRequest {
                request: Some(pb::upload_request::Request::Header(pb::UploadHeader {
                    sandbox_id: id.to_string(),
                    path: path.clone(),
                    mode: None,
                    size: Some(content.len() as u64),
                })),
            }];
            messages.extend(content.chunks(CHUNK).map(|c| pb::UploadRequest {
                request: Some(pb::upload_request::Request::Chunk(c.to_vec())),
            }));
            client
                .upload(self.peer_request(futures_util::stream::iter(messages))?)
                .await
                .map_err(|s| peer_failure(node, "Upload", s))?;
        }
        Ok(SandboxHandle {
            sandbox_id: id.to_string(),
            image: answer.image,
            shell: answer.shell,
            ports: spec.ports.clone(),
            workdir: spec.workdir.clone(),
            metadata: spec.metadata.clone(),
            tenant: spec.tenant.clone(),
        })
    }

    /// A request to another node: the cluster token as bearer and as the relayed-call mark.
    fn peer_request<T>(&self, message: T) -> Result<tonic::Request<T>> {
        let mut request = tonic::Request::new(message);
        let token = self.swarm.token();
        let bad = |_| ProviderError::Unavailable("the cluster token is not a valid header value".into());
        request.metadata_mut().insert("authorization", format!("Bearer {token}").parse().map_err(bad)?);
        request.metadata_mut().insert(CLUSTER_TOKEN_HEADER, token.parse().map_err(bad)?);
        request.set_timeout(Duration::from_secs(120));
        Ok(request)
    }
}

/// A failed call to the owning node, as the error it stands for.
fn peer_failure(node: &str, rpc: &str, status: tonic::Status) -> ProviderError {
    let message = format!("{rpc} on node {node}: {}", status.message());
    match status.code() {
        tonic::Code::InvalidArgument => ProviderError::invalid("spec", message),
        tonic::Code::NotFound => ProviderError::FileNotFound(message),
        tonic::Code::Unavailable | tonic::Code::Unknown => ProviderError::Unavailable(message),
        tonic::Code::DeadlineExceeded => ProviderError::Timeout(message),
        _ => ProviderError::CreateVerification(message),
    }
}
