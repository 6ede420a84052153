//! `docker version` against the daemon, for the health probe: outside every pool, so a
//! saturated exec pool never reads as a dead daemon.

use std::time::Duration;

use super::{argv, DockerProvider};
use crate::error::{ProviderError, Result};

/// A daemon that has not answered `docker version` within this long counts as unreachable.
const PING_TIMEOUT: Duration = Duration::from_secs(5);

impl DockerProvider {
    /// Ok when the daemon answers with its API version; `Unavailable` with what docker said.
    pub(in crate::backends::docker) async fn ping_daemon(&self) -> Result<()> {
        let mut child = self.cli.spawn(&argv::version_args(), false, false).await?;
        child.drain_stderr();
        match tokio::time::timeout(PING_TIMEOUT, child.finish()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(ProviderError::Unavailable(e.to_string())),
            Err(_) => {
                child.abort().await;
                Err(ProviderError::Unavailable(format!("docker version: no answer within {PING_TIMEOUT:?}")))
            }
        }
    }
}
