//! `PrefetchImages` and `SetPoolTargets`: images onto nodes before the tasks that need them,
//! and the warm pools a task schedule keeps (`crate::core::images`; the backend does the work).

use crate::service::rpc_table::name as rpc;
use std::collections::HashSet;

use futures_util::StreamExt;
use sandboxd_proto::v1 as pb;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use super::status::invalid;
use super::{convert, BoxStream, SandboxApi};
use crate::auth::Principal;
use crate::core::images::{self, ImageProgress, ImageState};

/// Nodes and pool targets one call may name.
const MAX_ENTRIES: usize = 64;

fn state_to_wire(state: ImageState) -> pb::ImagePrefetchState {
    match state {
        ImageState::Present => pb::ImagePrefetchState::Present,
        ImageState::Pulling => pb::ImagePrefetchState::Pulling,
        ImageState::Copying => pb::ImagePrefetchState::Copying,
        ImageState::Ready => pb::ImagePrefetchState::Ready,
        ImageState::Failed => pb::ImagePrefetchState::Failed,
    }
}

/// One step on the wire.
pub fn progress_to_wire(p: ImageProgress) -> pb::PrefetchImagesResponse {
    pb::PrefetchImagesResponse {
        image: p.image,
        node: p.node,
        state: state_to_wire(p.state) as i32,
        bytes_done: p.bytes_done,
        bytes_total: p.bytes_total,
        source: p.source,
        error: p.error,
        failure_kind: crate::core::failure::FailureKind::to_wire(p.failure_kind),
    }
}

/// A step from the wire (another node's), as the backend passes it on.
pub fn progress_from_wire(p: pb::PrefetchImagesResponse) -> ImageProgress {
    let state = match pb::ImagePrefetchState::try_from(p.state).unwrap_or_default() {
        pb::ImagePrefetchState::Present => ImageState::Present,
        pb::ImagePrefetchState::Pulling => ImageState::Pulling,
        pb::ImagePrefetchState::Copying => ImageState::Copying,
        pb::ImagePrefetchState::Ready => ImageState::Ready,
        pb::ImagePrefetchState::Failed | pb::ImagePrefetchState::Unspecified => ImageState::Failed,
    };
    let failure_kind = crate::core::failure::FailureKind::from_wire(p.failure_kind);
    ImageProgress {
        image: p.image,
        node: p.node,
        state,
        bytes_done: p.bytes_done,
        bytes_total: p.bytes_total,
        source: p.source,
        error: p.error,
        failure_kind,
    }
}

/// `nodes`: at most [`MAX_ENTRIES`], non-empty, none twice.
fn check_nodes(nodes: &[String]) -> Result<(), Status> {
    if nodes.len() > MAX_ENTRIES {
        return Err(invalid("nodes", format!("at most {MAX_ENTRIES} nodes (got {})", nodes.len())));
    }
    let mut seen = HashSet::new();
    for (i, node) in nodes.iter().enumerate() {
        if node.is_empty()
            || node.len() > 255
            || node.starts_with('-')
            || node.chars().any(char::is_whitespace)
        {
            return Err(invalid(&format!("nodes[{i}]"), format!("{node:?} is not a node name")));
        }
        if !seen.insert(node) {
            return Err(invalid(&format!("nodes[{i}]"), format!("{node:?} is named twice")));
        }
    }
    Ok(())
}

pub(super) async fn prefetch_images(
    api: &SandboxApi,
    request: Request<pb::PrefetchImagesRequest>,
) -> Result<Response<BoxStream<pb::PrefetchImagesResponse>>, Status> {
    let principal = Principal::of(&request);
    SandboxApi::require_key(&principal, rpc::PREFETCH_IMAGES)?;
    let request = request.into_inner();
    let images = images::check_images(&request.images)?;
    check_nodes(&request.nodes)?;
    let backend = api.lifecycle.backend().clone();
    let (tx, rx) = tokio::sync::mpsc::channel::<ImageProgress>(64);
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<Result<(), Status>>();
    let nodes = request.nodes;
    let span = tracing::info_span!("rpc", rpc = rpc::PREFETCH_IMAGES, images = images.len());
    tokio::spawn(
        async move {
            let result = backend.prefetch_images(&images, &nodes, tx).await;
            match &result {
                Ok(()) => tracing::info!("images prefetched"),
                Err(e) => tracing::warn!(error = %e, "prefetch failed"),
            }
            let _ = done_tx.send(result.map_err(Status::from));
        }
        .instrument(span),
    );
    // The steps, then the backend's own error (if any) as the stream's end.
    let steps = ReceiverStream::new(rx).map(|p| Ok(progress_to_wire(p)));
    let end = futures_util::stream::once(async move {
        match done_rx.await {
            Ok(Err(status)) => Some(Err(status)),
            _ => None,
        }
    })
    .filter_map(std::future::ready);
    Ok(Response::new(Box::pin(steps.chain(end))))
}

pub(super) async fn set_pool_targets(
    api: &SandboxApi,
    request: Request<pb::SetPoolTargetsRequest>,
) -> Result<Response<pb::SetPoolTargetsResponse>, Status> {
    let principal = Principal::of(&request);
    SandboxApi::require_key(&principal, rpc::SET_POOL_TARGETS)?;
    let targets = request.into_inner().targets;
    async move {
        if targets.is_empty() || targets.len() > MAX_ENTRIES {
            return Err(invalid(
                "targets",
                format!("must hold 1 to {MAX_ENTRIES} entries (got {})", targets.len()),
            ));
        }
        // Every entry checked before any pool changes.
        let (mut specs, mut names, mut seen_images) = (Vec::new(), HashSet::new(), HashSet::new());
        for (i, target) in targets.into_iter().enumerate() {
            let at = format!("targets[{i}]");
            crate::core::spec::validate_image(&target.image).map_err(|_| {
                invalid(&format!("{at}.image"), format!("{:?} is not an image reference", target.image))
            })?;
            let image = crate::core::spec::normalize_image(&target.image).to_string();
            let name =
                if target.pool.is_empty() { images::pool_name_for(&image) } else { target.pool.clone() };
            crate::core::pools::rules::check_name(&format!("{at}.pool"), &name)
                .map_err(|(f, m)| invalid(&f, m))?;
            let most = crate::core::pools::rules::MAX_POOL_SIZE;
            if target.count > most {
                return Err(invalid(
                    &format!("{at}.count"),
                    format!("must be in 0..={most} (got {})", target.count),
                ));
            }
            if !names.insert(name.clone()) {
                return Err(invalid(&format!("{at}.pool"), format!("pool {name:?} is named twice")));
            }
            if target.pool.is_empty() && !seen_images.insert(image.clone()) {
                return Err(invalid(&format!("{at}.image"), format!("{image:?} is named twice")));
            }
            if let Some(template) = &target.template {
                api.check_policy(template)?;
            }
            let wire = pb::PoolSpec {
                name,
                image,
                template: target.template,
                target: target.count,
                max: target.count.max(1),
                recycle: false,
            };
            let mut spec = convert::pool_spec_from_proto(wire).map_err(|s| {
                Status::new(s.code(), s.message().replacen("pool.template", &format!("{at}.template"), 1))
            })?;
            api.bind_runtime(&principal, &format!("{at}.template.runtime"), &mut spec.template.runtime)?;
            spec.validate(&at)?;
            specs.push(spec);
        }
        let tenant = principal.tenant().map(String::from);
        let mut pools = Vec::with_capacity(specs.len());
        for spec in specs {
            let image = spec.template.image.clone();
            let (status, created) = api.pools.set_target(tenant.clone(), spec).await?;
            tracing::info!(pool = %status.spec.name, target = status.spec.target, created, "pool target set");
            pools.push(pb::PoolTargetResult {
                pool: status.spec.name.clone(),
                image,
                target: status.spec.target,
                max: status.spec.max,
                created,
                nodes: status
                    .shares
                    .iter()
                    .map(|(node, ready)| pb::PoolNodeShare { node: node.clone(), ready: *ready })
                    .collect(),
            });
        }
        Ok(Response::new(pb::SetPoolTargetsResponse { pools }))
    }
    .instrument(tracing::info_span!("rpc", rpc = rpc::SET_POOL_TARGETS))
    .await
}
