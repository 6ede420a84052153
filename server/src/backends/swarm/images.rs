//! Images in cluster mode. `PrefetchImages`: the node called asks every node which of the
//! images it has (`SandboxPeer.LocalImages`), then has each node that lacks one get it: copied
//! from a node that has it (the lacking node's sandboxd reads the holder's `SaveImage`, a
//! `docker save` there, into `docker load` here: node to node, never through the caller), or
//! pulled when no node has it. A `Create` of an image that only some nodes have is placed on
//! those; one no node has (and this node cannot pull) is refused at once.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use sandboxd_proto::v1 as pb;
use sandboxd_proto::v1::sandbox_peer_server::{SandboxPeer, SandboxPeerServer};
use subtle::ConstantTimeEq;
use tokio_util::io::ReaderStream;
use tonic::{Request, Response, Status};

use super::backend::SwarmBackend;
use super::peer_calls::{peer_client, peer_request, ASK_TIMEOUT, CHUNK};
use super::placement::{NodeInfo, CLUSTER_TOKEN_HEADER};
use crate::backends::docker::DockerProvider;
use crate::core::failure::FailureKind;
use crate::core::images::{ImageProgress, ImageSink, ImageState};
use crate::error::{ProviderError, Result};

type BoxStream<T> = Pin<Box<dyn Stream<Item = std::result::Result<T, Status>> + Send + 'static>>;

/// The peer service every node serves to the others (cluster token only).
pub struct PeerImages {
    local: Arc<DockerProvider>,
    token: String,
}

impl PeerImages {
    pub fn server(local: Arc<DockerProvider>, token: String) -> SandboxPeerServer<PeerImages> {
        // A `KeepBaseline` carries a spec's files: as large as a `Create` may be (64 MiB).
        SandboxPeerServer::new(PeerImages { local, token }).max_decoding_message_size(64 << 20)
    }

    fn check<T>(&self, request: &Request<T>) -> std::result::Result<(), Status> {
        let given = request.metadata().get(CLUSTER_TOKEN_HEADER).map(|t| t.as_bytes()).unwrap_or_default();
        if bool::from(given.ct_eq(self.token.as_bytes())) && !self.token.is_empty() {
            Ok(())
        } else {
            Err(Status::unauthenticated("SandboxPeer answers the nodes of this cluster only"))
        }
    }
}

fn one_image(image: &str) -> std::result::Result<String, Status> {
    let images = crate::core::images::check_images(&[image.to_string()])?;
    Ok(images.into_iter().next().unwrap_or_default())
}

#[tonic::async_trait]
impl SandboxPeer for PeerImages {
    async fn local_images(
        &self,
        request: Request<pb::LocalImagesRequest>,
    ) -> std::result::Result<Response<pb::LocalImagesResponse>, Status> {
        self.check(&request)?;
        let images = crate::core::images::check_images(&request.into_inner().images)?;
        let found = self.local.local_images(&images).await?;
        Ok(Response::new(pb::LocalImagesResponse {
            node: String::new(),
            images: found
                .into_iter()
                .map(|(image, size)| pb::LocalImage {
                    image,
                    present: size.is_some(),
                    size: size.unwrap_or(0),
                })
                .collect(),
        }))
    }

    type SaveImageStream = BoxStream<pb::ImageChunk>;

    async fn save_image(
        &self,
        request: Request<pb::SaveImageRequest>,
    ) -> std::result::Result<Response<Self::SaveImageStream>, Status> {
        self.check(&request)?;
        let image = one_image(&request.into_inner().image)?;
        let mut child = self.local.save_image(&image).await?;
        let stdout = child.child.stdout.take().ok_or_else(|| Status::internal("docker save: no stdout"))?;
        let chunks = ReaderStream::with_capacity(stdout, CHUNK).map(|r| {
            r.map(|data| pb::ImageChunk { data: data.to_vec() }).map_err(|e| Status::internal(e.to_string()))
        });
        // After the last byte: docker's own verdict (a missing image is its error).
        let end = futures_util::stream::once(async move {
            match child.finish().await {
                Ok(()) => None,
                Err(e) => Some(Err(Status::from(ProviderError::from(e)))),
            }
        })
        .filter_map(std::future::ready);
        Ok(Response::new(Box::pin(chunks.chain(end))))
    }

    async fn keep_baseline(
        &self,
        request: Request<pb::KeepBaselineRequest>,
    ) -> std::result::Result<Response<pb::KeepBaselineResponse>, Status> {
        self.check(&request)?;
        let keep = request.into_inner();
        let id = crate::core::spec::SandboxId::parse("sandbox_id", &keep.sandbox_id)?;
        let spec =
            crate::core::spec::SandboxSpec { files: keep.files.into_iter().collect(), ..Default::default() };
        self.local.keep_baseline(id.as_str(), &spec);
        Ok(Response::new(pb::KeepBaselineResponse {}))
    }

    async fn local_snapshots(
        &self,
        request: Request<pb::LocalSnapshotsRequest>,
    ) -> std::result::Result<Response<pb::LocalSnapshotsResponse>, Status> {
        self.check(&request)?;
        let ask = request.into_inner();
        let snapshots = super::snapshots::local_snapshots(&self.local, ask.labels, ask.snapshot_id).await?;
        Ok(Response::new(pb::LocalSnapshotsResponse {
            snapshots: snapshots.into_iter().map(Into::into).collect(),
        }))
    }

    async fn delete_local_snapshot(
        &self,
        request: Request<pb::DeleteLocalSnapshotRequest>,
    ) -> std::result::Result<Response<pb::DeleteLocalSnapshotResponse>, Status> {
        self.check(&request)?;
        let found = super::snapshots::delete_local(&self.local, &request.into_inner().snapshot_id).await?;
        Ok(Response::new(pb::DeleteLocalSnapshotResponse { found }))
    }

    type FetchImageStream = BoxStream<pb::PrefetchImagesResponse>;

    async fn fetch_image(
        &self,
        request: Request<pb::FetchImageRequest>,
    ) -> std::result::Result<Response<Self::FetchImageStream>, Status> {
        self.check(&request)?;
        let fetch = request.into_inner();
        let image = one_image(&fetch.image)?;
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let (local, token) = (self.local.clone(), self.token.clone());
        tokio::spawn(async move {
            let last = if fetch.source_addr.is_empty() {
                local.pull_steps(&image, "", &tx).await
            } else {
                let source = Source { addr: fetch.source_addr, node: fetch.source_node, size: fetch.size };
                copy_here(&local, &token, &image, "", &source, &tx).await
            };
            let _ = tx.send(last).await;
        });
        let steps = tokio_stream::wrappers::ReceiverStream::new(rx)
            .map(|p| Ok(crate::service::images::progress_to_wire(p)));
        Ok(Response::new(Box::pin(steps)))
    }
}

/// A node that has the image.
struct Source {
    addr: String,
    node: String,
    size: u64,
}

/// `image` copied onto this node from `source` (its `SaveImage` into `docker load`), COPYING
/// steps on the way; the final step.
async fn copy_here(
    local: &DockerProvider,
    token: &str,
    image: &str,
    node: &str,
    source: &Source,
    sink: &ImageSink,
) -> ImageProgress {
    let step = |state| ImageProgress::new(image, node, state).from(&source.node);
    let _ = sink.send(step(ImageState::Copying).bytes(0, source.size)).await;
    let failed = |e: String| {
        ImageProgress::failed(
            image,
            node,
            format!("copy from node {}: {e}", source.node),
            FailureKind::CreateFailed,
        )
        .from(&source.node)
    };
    let saved = async {
        let mut client = peer_client(&source.addr)?;
        let request = peer_request(token, pb::SaveImageRequest { image: image.to_string() }, None)?;
        client
            .save_image(request)
            .await
            .map_err(|s| ProviderError::Unavailable(format!("{}: {}", s.code(), s.message())))
    };
    let stream = match saved.await {
        Ok(response) => response.into_inner(),
        Err(e) => return failed(e.to_string()),
    };
    let chunks = stream.map(|r| r.map(|c| Bytes::from(c.data)).map_err(|s| s.message().to_string()));
    let (progress_tx, mut progress_rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
    let relay = {
        let sink = sink.clone();
        let first = step(ImageState::Copying);
        let total = source.size;
        async move {
            while let Some(done) = progress_rx.recv().await {
                let _ = sink.send(first.clone().bytes(done, total.max(done))).await;
            }
        }
    };
    let load = local.load_image(Box::pin(chunks), move |done| {
        let _ = progress_tx.send(done);
    });
    let (loaded, ()) = tokio::join!(load, relay);
    match loaded {
        Ok(bytes) => step(ImageState::Ready).bytes(bytes, bytes),
        Err(e) => failed(e.to_string()),
    }
}

/// What one node said of the images (or that it did not answer).
struct NodeImages {
    node: NodeInfo,
    local: bool,
    /// image → size, for those it has; `Err`: it did not answer.
    has: std::result::Result<HashMap<String, u64>, String>,
}

impl SwarmBackend {
    /// The service the other nodes call this node's images through (`SandboxPeer`).
    pub fn peer_service(&self) -> SandboxPeerServer<PeerImages> {
        PeerImages::server(self.local.clone(), self.swarm.token().to_string())
    }

    /// Every node of the swarm (any state).
    pub(super) async fn all_nodes(&self) -> Result<Vec<NodeInfo>> {
        let nodes = self.engine.nodes().await.map_err(ProviderError::from)?;
        Ok(nodes.iter().map(|n| NodeInfo::from_engine(n, self.cluster.peer_port)).collect())
    }

    /// Which of `images` node `node` has (this node's daemon, or another node's sandboxd).
    async fn images_on(&self, node: &NodeInfo, images: &[String]) -> NodeImages {
        let local = node.id == self.swarm.self_id();
        let has = if local {
            self.local
                .local_images(images)
                .await
                .map(|found| {
                    found.into_iter().filter_map(|(i, s)| s.map(|s| (i, s))).collect::<HashMap<String, u64>>()
                })
                .map_err(|e| e.to_string())
        } else {
            let ask = async {
                let mut client = peer_client(&node.addr)?;
                let request = peer_request(
                    self.swarm.token(),
                    pb::LocalImagesRequest { images: images.to_vec() },
                    Some(ASK_TIMEOUT),
                )?;
                let answer = client
                    .local_images(request)
                    .await
                    .map_err(|s| ProviderError::Unavailable(s.message().to_string()))?;
                Ok::<_, ProviderError>(
                    answer
                        .into_inner()
                        .images
                        .into_iter()
                        .filter(|i| i.present)
                        .map(|i| (i.image, i.size))
                        .collect(),
                )
            };
            match tokio::time::timeout(ASK_TIMEOUT, ask).await {
                Ok(r) => r.map_err(|e| e.to_string()),
                Err(_) => Err(format!("no answer within {ASK_TIMEOUT:?}")),
            }
        };
        if let Ok(has) = &has {
            for image in images {
                self.images.put(&node.id, image, has.contains_key(image));
            }
        }
        NodeImages { node: node.clone(), local, has }
    }

    pub(super) async fn prefetch(&self, images: &[String], nodes: &[String], sink: ImageSink) -> Result<()> {
        let all = self.all_nodes().await?;
        let mut targets = Vec::new();
        for (i, wanted) in nodes.iter().enumerate() {
            match all.iter().find(|n| &n.hostname == wanted || &n.id == wanted) {
                Some(n) => targets.push(n.id.clone()),
                None => {
                    let names: Vec<&str> = all.iter().map(|n| n.hostname.as_str()).collect();
                    return Err(ProviderError::invalid(
                        format!("nodes[{i}]"),
                        format!("no node {wanted:?} in the swarm (its nodes: {})", names.join(", ")),
                    ));
                }
            }
        }
        let asked = futures_util::future::join_all(all.iter().map(|n| self.images_on(n, images))).await;
        let asked = Arc::new(asked);
        let work =
            asked.iter().enumerate().filter(|(_, n)| targets.is_empty() || targets.contains(&n.node.id)).map(
                |(index, target)| {
                    let (asked, sink) = (asked.clone(), sink.clone());
                    async move {
                        for image in images {
                            if sink.is_closed() {
                                return;
                            }
                            let step = self.prefetch_one(&asked, index, target, image, &sink).await;
                            if let ImageState::Ready = step.state {
                                self.images.put(&target.node.id, image, true);
                            }
                            let _ = sink.send(step).await;
                        }
                    }
                },
            );
        futures_util::future::join_all(work).await;
        Ok(())
    }

    /// One image on one node: present, copied from a holder, or pulled; the final step.
    async fn prefetch_one(
        &self,
        asked: &[NodeImages],
        index: usize,
        target: &NodeImages,
        image: &str,
        sink: &ImageSink,
    ) -> ImageProgress {
        let name = target.node.hostname.as_str();
        let has = match &target.has {
            Err(e) => {
                return ImageProgress::failed(
                    image,
                    name,
                    format!("node {name} ({}) did not answer: {e}", target.node.addr),
                    FailureKind::NodeLost,
                )
            }
            Ok(has) => has,
        };
        if let Some(size) = has.get(image) {
            return ImageProgress::new(image, name, ImageState::Present).bytes(*size, *size);
        }
        // A holder, spread over the holders by the target's place in the list.
        let holders: Vec<(&NodeImages, u64)> = asked
            .iter()
            .filter_map(|n| n.has.as_ref().ok().and_then(|h| h.get(image)).map(|size| (n, *size)))
            .collect();
        let source = (!holders.is_empty()).then(|| {
            let (holder, size) = holders[index % holders.len()];
            Source { addr: holder.node.addr.clone(), node: holder.node.hostname.clone(), size }
        });
        // Relayed steps are this node's to name.
        let (tx, mut rx) = tokio::sync::mpsc::channel::<ImageProgress>(16);
        let forward = async {
            let mut last = None;
            while let Some(mut step) = rx.recv().await {
                step.node = name.to_string();
                if step.state.is_final() {
                    last = Some(step);
                } else {
                    let _ = sink.send(step).await;
                }
            }
            last
        };
        let run = async move {
            let last = if target.local {
                match &source {
                    Some(source) => {
                        copy_here(&self.local, self.swarm.token(), image, name, source, &tx).await
                    }
                    None => self.local.pull_steps(image, name, &tx).await,
                }
            } else {
                self.fetch_on(target, image, source.as_ref(), &tx).await
            };
            let _ = tx.send(last).await;
        };
        let (last, ()) = tokio::join!(forward, run);
        let mut last = last.unwrap_or_else(|| {
            ImageProgress::failed(
                image,
                name,
                "the node's fetch ended without a verdict",
                FailureKind::Internal,
            )
        });
        if last.state == ImageState::Failed && holders.is_empty() {
            last.error = format!(
                "image {image:?} is on no node of the cluster and could not be pulled: {}",
                last.error
            );
        }
        last
    }

    /// `FetchImage` on another node; its steps to `tx`, its final step returned.
    async fn fetch_on(
        &self,
        target: &NodeImages,
        image: &str,
        source: Option<&Source>,
        tx: &ImageSink,
    ) -> ImageProgress {
        let name = target.node.hostname.as_str();
        let fetch = pb::FetchImageRequest {
            image: image.to_string(),
            source_addr: source.map(|s| s.addr.clone()).unwrap_or_default(),
            source_node: source.map(|s| s.node.clone()).unwrap_or_default(),
            size: source.map_or(0, |s| s.size),
        };
        let call = async {
            let mut client = peer_client(&target.node.addr)?;
            let request = peer_request(self.swarm.token(), fetch, None)?;
            client.fetch_image(request).await.map_err(|s| ProviderError::Unavailable(s.message().to_string()))
        };
        let mut steps = match call.await {
            Ok(r) => r.into_inner(),
            Err(e) => {
                return ImageProgress::failed(image, name, format!("node {name}: {e}"), FailureKind::NodeLost)
            }
        };
        let mut last = None;
        loop {
            match steps.next().await {
                Some(Ok(step)) => {
                    let step = crate::service::images::progress_from_wire(step);
                    if step.state.is_final() {
                        last = Some(step);
                    } else {
                        let _ = tx.send(step).await;
                    }
                }
                Some(Err(s)) => {
                    return ImageProgress::failed(
                        image,
                        name,
                        format!("node {name} stopped answering: {}", s.message()),
                        FailureKind::NodeLost,
                    )
                }
                None => break,
            }
        }
        last.unwrap_or_else(|| {
            ImageProgress::failed(
                image,
                name,
                format!("node {name} ended without a verdict"),
                FailureKind::NodeLost,
            )
        })
    }

    /// The constraints that keep a create of `image` on nodes that have it; FAILED_PRECONDITION
    /// at once when no node has it and this node cannot pull it.
    pub(super) async fn image_constraints(&self, image: &str) -> Result<Vec<String>> {
        let image = crate::core::spec::normalize_image(image).to_string();
        let nodes = self.all_nodes().await?;
        let mut known: Vec<(NodeInfo, bool)> = Vec::new();
        let mut unknown = Vec::new();
        for node in nodes.into_iter().filter(|n| n.availability == "active") {
            match self.images.get(&node.id, &image) {
                Some(present) => known.push((node, present)),
                None => unknown.push(node),
            }
        }
        let wanted = [image.clone()];
        let asked = futures_util::future::join_all(unknown.iter().map(|n| self.images_on(n, &wanted))).await;
        for answer in asked {
            // A node that does not answer is left to Swarm (it is down, or will say so itself).
            let present = answer.has.as_ref().map_or(true, |h| h.contains_key(&image));
            known.push((answer.node, present));
        }
        if known.iter().any(|(_, present)| *present) {
            return Ok(known.iter().filter(|(_, p)| !p).map(|(n, _)| format!("node.id!={}", n.id)).collect());
        }
        // No node has it: this node pulls it (when its policy lets it), or the create is refused.
        match self.local.pull_image(&image).await {
            Ok(()) => {
                self.images.put(self.swarm.self_id(), &image, true);
                Ok(vec![format!("node.id=={}", self.swarm.self_id())])
            }
            Err(e) => Err(ProviderError::FailedPrecondition(format!(
                "image {image:?} is on no node of the cluster: {e} (PrefetchImages copies an image from a node \
                 that has it; load or build it on one node first)"
            ))),
        }
    }
}
