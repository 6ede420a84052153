//! Images on this daemon for `PrefetchImages`: which are here (and their sizes), a pull when
//! `create.pull_policy` permits one, and the `docker save` / `docker load` pair a cluster copies
//! an image between nodes with.

use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use tokio::io::AsyncWriteExt;

use super::argv;
use super::cli::DockerChild;
use super::failure::CliError;
use super::provider::DockerProvider;
use crate::core::failure::FailureKind;
use crate::core::images::{ImageProgress, ImageSink, ImageState, REGISTRY};
use crate::error::{ProviderError, Result};

/// The bound on one pull (a registry can be slow; the call's deadline still applies).
const PULL_TIMEOUT: Duration = Duration::from_secs(1800);
/// A copy's progress is told at least every this many bytes.
const PROGRESS_EVERY: u64 = 8 << 20;

impl DockerProvider {
    /// The size of `image` on this daemon; `None` when the daemon does not have it.
    pub async fn image_size(&self, image: &str) -> Result<Option<u64>> {
        match self.cli.run(&argv::image_size_args(image), self.control_timeout(), None).await {
            Ok(out) => Ok(Some(out.stdout_text().trim().parse().unwrap_or(0))),
            Err(CliError::Failed(f)) if f.stderr.to_ascii_lowercase().contains("no such image") => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Each of `images` with its size on this daemon (`None`: not here).
    pub async fn local_images(&self, images: &[String]) -> Result<Vec<(String, Option<u64>)>> {
        let sizes = futures_util::future::join_all(images.iter().map(|i| self.image_size(i))).await;
        images.iter().cloned().zip(sizes).map(|(i, s)| s.map(|s| (i, s))).collect()
    }

    /// Pulls `image` when `create.pull_policy` permits (anything but `never`).
    pub async fn pull_image(&self, image: &str) -> Result<()> {
        if self.config.create.pull_policy == "never" {
            return Err(ProviderError::FailedPrecondition(format!(
                "image {image:?} is not on this node and docker.create.pull_policy is \"never\": \
                 load it there (docker load), or copy it from a node that has it (PrefetchImages in a cluster)"
            )));
        }
        match self.cli.run(&argv::pull_args(image), Some(PULL_TIMEOUT), None).await {
            Ok(_) => Ok(()),
            Err(CliError::Failed(f)) => Err(ProviderError::FailedPrecondition(format!(
                "image {image:?} is not on this node and could not be pulled: {}",
                f.error_line()
            ))),
            Err(e) => Err(e.into()),
        }
    }

    /// `docker save IMAGE` started: its stdout is the image's tar.
    pub async fn save_image(&self, image: &str) -> Result<DockerChild> {
        let mut child = self.cli.spawn(&argv::save_args(image), false, false).await?;
        child.drain_stderr();
        Ok(child)
    }

    /// `docker load` of the tar `chunks` bring; `on_progress(bytes so far)` every few MiB.
    pub async fn load_image<S, E>(&self, mut chunks: S, mut on_progress: impl FnMut(u64)) -> Result<u64>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let mut child = self.cli.spawn(&argv::load_args(), true, false).await?;
        child.drain_stderr();
        let mut stdin =
            child.child.stdin.take().ok_or_else(|| ProviderError::Docker("docker load: no stdin".into()))?;
        let (mut done, mut told) = (0u64, 0u64);
        while let Some(chunk) = chunks.next().await {
            let chunk = match chunk {
                Ok(c) => c,
                Err(e) => {
                    child.abort().await;
                    return Err(ProviderError::Unavailable(format!("the image stream broke: {e}")));
                }
            };
            if let Err(e) = stdin.write_all(&chunk).await {
                drop(stdin);
                return Err(match child.finish().await {
                    Err(failed) => failed.into(),
                    Ok(()) => ProviderError::Docker(format!("docker load stopped reading: {e}")),
                });
            }
            done += chunk.len() as u64;
            if done - told >= PROGRESS_EVERY {
                told = done;
                on_progress(done);
            }
        }
        drop(stdin);
        child.finish().await?;
        Ok(done)
    }

    /// Each of `images` present on this daemon, pulled when absent (pull policy permitting):
    /// every step to `sink` under node name `node`. Stops early when the caller went away.
    pub async fn prefetch_here(&self, images: &[String], node: &str, sink: &ImageSink) -> Result<()> {
        for (image, size) in self.local_images(images).await? {
            if sink.is_closed() {
                break;
            }
            if let Some(size) = size {
                let _ =
                    sink.send(ImageProgress::new(&image, node, ImageState::Present).bytes(size, size)).await;
                continue;
            }
            let _ = sink.send(self.pull_steps(&image, node, sink).await).await;
        }
        Ok(())
    }

    /// Tells PULLING, pulls; the final step (READY or FAILED).
    pub async fn pull_steps(&self, image: &str, node: &str, sink: &ImageSink) -> ImageProgress {
        if self.config.create.pull_policy != "never" {
            let _ = sink.send(ImageProgress::new(image, node, ImageState::Pulling).from(REGISTRY)).await;
        }
        match self.pull_image(image).await {
            Ok(()) => {
                let size = self.image_size(image).await.ok().flatten().unwrap_or(0);
                ImageProgress::new(image, node, ImageState::Ready).from(REGISTRY).bytes(size, size)
            }
            Err(e) => {
                let kind = crate::core::failure::kind_of(&e).unwrap_or(FailureKind::CreateFailed);
                ImageProgress::failed(image, node, e.to_string(), kind)
            }
        }
    }
}
