//! `Create` in cluster mode: `docker service create` (Swarm places it), wait until its task
//! runs, then the owning node adopts the task's container: `Connect` (the container answers a
//! command; its shell is found) and `spec.files` uploaded, on this node's own docker backend
//! when the task landed here, else through the owning node's sandboxd with the cluster token,
//! which also keeps them as the sandbox's `Reset` baseline (`SandboxPeer.KeepBaseline`). A task
//! Swarm finds no node for is CAPACITY at once. Any failure after the service exists removes it.

use crate::service::rpc_table::name as rpc;
use std::time::{Duration, Instant};

use sandboxd_proto::v1 as pb;
use sandboxd_proto::v1::sandbox_service_client::SandboxServiceClient;

use super::argv;
use super::backend::SwarmBackend;
use super::placement::Placement;
use crate::core::backend::{CreatePlan, SandboxBackend};
use crate::core::inventory::SandboxSummary;
use crate::core::lease;
use crate::core::spec::{SandboxDescriptor, SandboxHandle, SandboxId, SandboxSpec, SandboxStatus};
use crate::core::watch::{EventKind, SandboxEvent};
use crate::error::{ProviderError, Result};

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
        crate::backends::docker::argv::check_docker_env(&spec.env, true)
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
        // Only nodes whose tasks run on the spec's runtime (none: refused at once, naming it)
        // and that have the image (none: refused at once, naming it); from a snapshot, the node
        // that holds it (and runs the runtime the snapshot's sandbox ran on).
        let mut cluster = self.cluster.clone();
        let from_snapshot;
        let spec = match &spec.snapshot_id {
            Some(snapshot_id) => {
                let (image_spec, holder) = self.spec_from_snapshot(spec, snapshot_id).await?;
                if image_spec.runtime.is_some() {
                    cluster.constraints.extend(self.runtime_constraints(&image_spec).await?);
                }
                cluster.constraints.push(holder);
                from_snapshot = image_spec;
                &from_snapshot
            }
            None => {
                cluster.constraints.extend(self.runtime_constraints(spec).await?);
                cluster.constraints.extend(self.image_constraints(&spec.image).await?);
                spec
            }
        };
        let args = argv::service_create_args(&self.docker_config.create, &cluster, spec, id, &labels);
        let (env, env_file) = crate::backends::docker::argv::run_env(&spec.env);
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
            Err(_) => Err(ProviderError::CreateTimeout(format!(
                "create of {id} did not finish within {:?} (the call's deadline or server.create_timeout_s)",
                plan.timeout
            ))),
        };
        if result.is_err() {
            self.remove_service(id).await;
        }
        let handle = result?;
        tracing::info!(sandbox_id = %id, shell = %handle.shell, "sandbox created in the swarm");
        self.tell_ready(spec, &handle, &labels);
        Ok(handle)
    }

    /// READY for watchers, from the node whose create completed (the owning node's daemon
    /// told CREATED; files are written only now).
    fn tell_ready(&self, spec: &SandboxSpec, handle: &SandboxHandle, lease: &[(&str, String)]) {
        let Some(hub) = SandboxBackend::event_hub(&*self.local) else { return };
        let label =
            |key: &str| lease.iter().find(|(k, _)| *k == key).and_then(|(_, v)| v.parse::<i64>().ok());
        let sandbox = SandboxSummary {
            sandbox_id: handle.sandbox_id.clone(),
            image: crate::core::spec::normalize_image(&spec.image).to_string(),
            status: SandboxStatus::Running,
            created_ns: label(lease::CREATED_LABEL).map_or(0, |ms| i128::from(ms) * 1_000_000),
            ports: handle.ports.clone(),
            workdir: handle.workdir.clone(),
            metadata: handle.metadata.clone(),
            expires_at_unix_ms: label(lease::EXPIRES_LABEL),
            reserved_millicpus: 0,
            reserved_memory_mib: 0,
            pool: spec.pool_member.as_ref().map(|m| m.pool.clone()),
            tenant: handle.tenant.clone(),
            runtime: spec.runtime.clone(),
        };
        hub.publish(SandboxEvent {
            kind: EventKind::Ready,
            sandbox,
            tenant: handle.tenant.clone(),
            time_unix_ms: lease::now_ms(),
            exit_code: None,
            oom_killed: false,
            reason: String::new(),
            failure_kind: None,
        });
    }

    /// A warm pool's member (`spec.pool_member` set: its pool and the pool's key), with no lease
    /// until it is claimed, then marked ready to be claimed. Removed when any step fails.
    pub(super) async fn create_member(&self, spec: &SandboxSpec, timeout: Duration) -> Result<SandboxHandle> {
        let plan = CreatePlan { id: SandboxId::generate(), ttl: None, timeout };
        let handle = self.create_in_swarm(spec, &plan).await?;
        let ready = argv::mark_ready_args(&handle.sandbox_id, &handle.shell);
        if let Err(e) = self.swarm.docker(ready).await {
            self.remove_service(&handle.sandbox_id).await;
            return Err(e.into());
        }
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
                if let Some(why) = no_room(task) {
                    return Err(ProviderError::ResourceExhausted(format!(
                        "no node of the cluster can take sandbox {id} now (Swarm: {why}); retry later, or ask for fewer resources"
                    )));
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
                return Err(ProviderError::CreateTimeout(format!(
                    "the task of {id} did not run within {limit:?}"
                )));
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
                self.upload_on(placement, id, path, content).await?;
            }
            self.local.keep_baseline(id, spec);
            return Ok(handle);
        }
        let mut client = self.peer_client(placement)?;
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
            .map_err(|s| peer_failure(&placement.node.hostname, rpc::CONNECT, s))?
            .into_inner();
        for (path, content) in &spec.files {
            self.upload_on(placement, id, path, content).await?;
        }
        // What a `Reset` there writes back: the owning node never saw this spec. A node that
        // cannot keep it (an older sandboxd) still serves the sandbox; only its `Reset` is refused.
        if let Err(e) = self.keep_baseline_on(placement, id, spec).await {
            tracing::warn!(sandbox_id = %id, node = %placement.node.hostname, error = %e, "the owning node did not keep the sandbox's reset baseline; Reset will be refused there");
        }
        Ok(SandboxHandle {
            sandbox_id: id.to_string(),
            image: answer.image,
            shell: answer.shell,
            ports: spec.ports.clone(),
            workdir: spec.workdir.clone(),
            metadata: spec.metadata.clone(),
            tenant: spec.tenant.clone(),
            runtime: spec.runtime.clone(),
        })
    }

    /// Writes one file into sandbox `id`, on this node's docker backend or through the owning
    /// node's sandboxd.
    pub(super) async fn upload_on(
        &self,
        placement: &Placement,
        id: &str,
        path: &str,
        content: &[u8],
    ) -> Result<()> {
        if placement.local {
            self.alias(id).await?;
            let handle = SandboxBackend::lookup(&*self.local, &SandboxId::parse("sandbox_id", id)?).await?;
            let size = content.len() as u64;
            SandboxBackend::upload(&*self.local, &handle, Box::new(content), size, path, None, &[]).await?;
            return Ok(());
        }
        let mut messages = vec![pb::UploadRequest {
            request: Some(pb::upload_request::Request::Header(pb::UploadHeader {
                sandbox_id: id.to_string(),
                path: path.to_string(),
                mode: None,
                size: Some(content.len() as u64),
                xattrs: Default::default(),
            })),
        }];
        messages.extend(
            content
                .chunks(CHUNK)
                .map(|c| pb::UploadRequest { request: Some(pb::upload_request::Request::Chunk(c.to_vec())) }),
        );
        self.peer_client(placement)?
            .upload(self.peer_request(futures_util::stream::iter(messages))?)
            .await
            .map_err(|s| peer_failure(&placement.node.hostname, rpc::UPLOAD, s))?;
        Ok(())
    }

    /// Hands the spec's files to the owning node `placement` as the sandbox's reset baseline
    /// (`SandboxPeer.KeepBaseline`).
    async fn keep_baseline_on(&self, placement: &Placement, id: &str, spec: &SandboxSpec) -> Result<()> {
        let channel = self.swarm.channel(&placement.node.addr)?;
        let mut peer = sandboxd_proto::v1::sandbox_peer_client::SandboxPeerClient::new(channel)
            .max_encoding_message_size(usize::MAX);
        let request = pb::KeepBaselineRequest {
            sandbox_id: id.to_string(),
            files: spec.files.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        };
        peer.keep_baseline(self.peer_request(request)?)
            .await
            .map_err(|s| peer_failure(&placement.node.hostname, "KeepBaseline", s))?;
        Ok(())
    }

    fn peer_client(&self, placement: &Placement) -> Result<SandboxServiceClient<tonic::transport::Channel>> {
        let channel = self.swarm.channel(&placement.node.addr)?;
        Ok(SandboxServiceClient::new(channel)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20))
    }

    /// A request to another node: the cluster token as bearer and as the relayed-call mark.
    fn peer_request<T>(&self, message: T) -> Result<tonic::Request<T>> {
        super::peer_calls::peer_request(self.swarm.token(), message, Some(Duration::from_secs(120)))
    }
}

/// Swarm's reason when it found no node for a pending task (reservations past every node's
/// free resources, every node paused or drained, constraints no node meets): the cluster is out
/// of room now, said at once (CAPACITY) rather than waited on until the create's deadline.
fn no_room(task: &super::placement::TaskLine) -> Option<&str> {
    (task.current == "pending" && task.error.contains("no suitable node")).then_some(task.error.as_str())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::swarm::placement::parse_tasks;

    #[test]
    fn a_task_no_node_can_take_is_out_of_room() {
        let text = "sbx-a.1\t\tRunning\tPending 2 seconds ago\t\"no suitable node (insufficient resources on 3 nodes)\"\n\
                    sbx-b.1\t\tRunning\tPending 1 second ago\t\n\
                    sbx-c.1\tn1\tRunning\tRunning 1 second ago\t\n";
        let tasks = parse_tasks(text);
        assert!(no_room(&tasks[0]).is_some_and(|why| why.contains("insufficient resources")));
        assert_eq!(no_room(&tasks[1]), None, "not scheduled yet");
        assert_eq!(no_room(&tasks[2]), None);
    }
}
