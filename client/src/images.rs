//! Images and the pools a task schedule keeps: `PrefetchImages` (images onto nodes ahead of
//! the tasks) and `SetPoolTargets` (one pool per image, its target from the schedule).

use crate::client::Client;
use crate::error::Result;
use crate::proto;

pub use proto::ImagePrefetchState;

/// One step of one image on one node, as `PrefetchImages` streams it.
pub type PrefetchStep = proto::PrefetchImagesResponse;

/// The steps of one `PrefetchImages` call.
pub struct PrefetchStream {
    inner: tonic::Streaming<proto::PrefetchImagesResponse>,
}

impl PrefetchStream {
    /// The next step; `None` once every image reached its end on every node.
    pub async fn next(&mut self) -> Result<Option<PrefetchStep>> {
        Ok(self.inner.message().await?)
    }

    /// Every step to the end; the final step of each (image, node), in the order they ended.
    pub async fn finish(mut self) -> Result<Vec<PrefetchStep>> {
        let mut done = Vec::new();
        while let Some(step) = self.next().await? {
            if is_final(&step) {
                done.push(step);
            }
        }
        Ok(done)
    }
}

/// Whether `step` ends its image on its node (present, ready or failed).
pub fn is_final(step: &PrefetchStep) -> bool {
    matches!(
        step.state(),
        ImagePrefetchState::Present | ImagePrefetchState::Ready | ImagePrefetchState::Failed
    )
}

/// One image's pool as a schedule wants it (`SetPoolTargets`): `count` ready sandboxes of
/// `image`, in the pool named after the image unless `pool` is set.
pub fn pool_target(image: impl Into<String>, count: u32) -> proto::PoolTarget {
    proto::PoolTarget { image: image.into(), count, ..Default::default() }
}

impl Client {
    /// Make `images` present on `nodes` (empty: every node) before the tasks that need them:
    /// pulled, or in a cluster without a registry copied from a node that has them.
    pub async fn prefetch_images<I, N>(&self, images: I, nodes: N) -> Result<PrefetchStream>
    where
        I: IntoIterator,
        I::Item: Into<String>,
        N: IntoIterator,
        N::Item: Into<String>,
    {
        let request = proto::PrefetchImagesRequest {
            images: images.into_iter().map(Into::into).collect(),
            nodes: nodes.into_iter().map(Into::into).collect(),
        };
        let inner = self.raw().prefetch_images(request).await?.into_inner();
        Ok(PrefetchStream { inner })
    }

    /// Set the pools a task schedule needs in one call (`SetPoolTargets`): per entry, the
    /// pool made or its target set, and its ready members per node.
    pub async fn set_pool_targets(
        &self,
        targets: impl IntoIterator<Item = proto::PoolTarget>,
    ) -> Result<Vec<proto::PoolTargetResult>> {
        let request = proto::SetPoolTargetsRequest { targets: targets.into_iter().collect() };
        Ok(self.raw().set_pool_targets(request).await?.into_inner().pools)
    }
}
