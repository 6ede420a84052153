//! The provider's Upload and Download: the arguments checked once, then the transfer handed to
//! the exec engine (`docker cp` or the sandbox's agent, chosen per call by the engine).

use tokio::io::AsyncBufRead;

use super::provider::DockerProvider;
use crate::core::backend::FileDownload;
use crate::core::fs::Xattr;
use crate::core::spec::validate_abs_path;
use crate::core::spec::SandboxHandle;
use crate::error::{ProviderError, Result};

impl DockerProvider {
    /// Stream exactly `size` bytes from `reader` into `target` (mode default 0644), without
    /// holding the file in memory.
    pub async fn upload_reader<R: AsyncBufRead + Send + Unpin>(
        &self,
        handle: &SandboxHandle,
        reader: R,
        size: u64,
        target: &str,
        mode: Option<u32>,
        xattrs: &[Xattr],
    ) -> Result<u64> {
        validate_abs_path("path", target)?;
        if target.ends_with('/') {
            return Err(ProviderError::invalid(
                "path",
                format!("must name a file, not a directory (got {target:?})"),
            ));
        }
        let mode = mode.unwrap_or(0o644);
        if mode > 0o7777 {
            return Err(ProviderError::invalid(
                "mode",
                format!("must be permission bits <= 0o7777 (got {mode:o})"),
            ));
        }
        self.refuse_closing(&handle.sandbox_id)?;
        self.engine.upload(&handle.sandbox_id, Box::new(reader), size, target, mode, xattrs).await
    }

    /// Open a streaming download: errors about the path (missing, a directory) come here, before
    /// the first byte, so a caller can still answer with a clean status.
    pub async fn download_stream(
        &self,
        handle: &SandboxHandle,
        source: &str,
    ) -> Result<Box<dyn FileDownload>> {
        validate_abs_path("path", source)?;
        self.refuse_closing(&handle.sandbox_id)?;
        self.engine.download(&handle.sandbox_id, source).await
    }
}
