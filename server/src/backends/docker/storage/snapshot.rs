//! Snapshots: a sandbox's filesystem committed to an image this service owns
//! (`sandboxd-snapshot:<32 hex>`, label `sandboxd.snapshot=1`). Listing, deleting and the
//! expiry of unreferenced snapshots. Images without the label are never touched.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::Deserialize;

use super::argv::{self, SnapshotMarks};
use super::failure::CliError;
use super::failure::DockerFailureKind;
use super::provider::DockerProvider;
use crate::core::branching::SnapshotInfo;
use crate::core::spec::SandboxId;
use crate::error::{ProviderError, Result};

/// The parts of `docker image inspect` a snapshot needs.
#[derive(Debug, Deserialize)]
struct ImageJson {
    #[serde(rename = "RepoTags", default)]
    repo_tags: Option<Vec<String>>,
    #[serde(rename = "Size", default)]
    size: u64,
    #[serde(rename = "Config", default)]
    config: Option<ImageConfig>,
}

#[derive(Debug, Deserialize)]
struct ImageConfig {
    #[serde(rename = "Labels", default)]
    labels: Option<BTreeMap<String, String>>,
}

/// A commit's place under the bound, given back when the commit ends (or is cancelled).
pub(in crate::backends::docker) struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Labels as one `LABEL` value: base64url of their JSON (docker never parses or expands it).
pub fn encode_labels(labels: &BTreeMap<String, String>) -> String {
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(labels).unwrap_or_else(|_| b"{}".to_vec()))
}

/// The inverse of [`encode_labels`]; anything unreadable is no labels.
pub fn decode_labels(value: &str) -> BTreeMap<String, String> {
    URL_SAFE_NO_PAD
        .decode(value)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// Keys non-empty, neither keys nor values with NUL.
pub fn validate_labels(field: &str, labels: &BTreeMap<String, String>) -> Result<()> {
    for (k, v) in labels {
        if k.is_empty() || k.contains('\0') || v.contains('\0') {
            return Err(ProviderError::invalid(
                field,
                format!("label {k:?}: keys must be non-empty; no NUL in keys or values"),
            ));
        }
    }
    Ok(())
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or_default()
}

/// The snapshot in one inspected image, when it is one this service owns.
fn owned_snapshot(image: ImageJson) -> Option<SnapshotInfo> {
    let labels = image.config.and_then(|c| c.labels).unwrap_or_default();
    if labels.get(argv::SNAPSHOT_LABEL).map(String::as_str) != Some("1") {
        return None;
    }
    let snapshot_id = image.repo_tags?.into_iter().find(|t| argv::is_valid_snapshot_id(t))?;
    Some(SnapshotInfo {
        snapshot_id,
        source_sandbox_id: labels.get(argv::SNAPSHOT_SOURCE_LABEL).cloned().unwrap_or_default(),
        labels: labels.get(argv::SNAPSHOT_LABELS_LABEL).map(|v| decode_labels(v)).unwrap_or_default(),
        created_at_unix_ms: labels
            .get(argv::SNAPSHOT_CREATED_LABEL)
            .and_then(|v| v.parse().ok())
            .unwrap_or_default(),
        size_bytes: image.size,
        runtime: labels.get(crate::backends::docker::labels::OCI_RUNTIME_LABEL).cloned().unwrap_or_default(),
        live: labels.get(argv::SNAPSHOT_LIVE_LABEL).is_some_and(|v| v == "1"),
    })
}

impl DockerProvider {
    /// Commit the sandbox's filesystem to a new snapshot image. Docker pauses the container for
    /// the commit and resumes it after (an already paused one stays paused). At most
    /// `max_snapshots` snapshots exist at once (`ResourceExhausted` beyond).
    pub async fn snapshot(
        &self,
        id: &SandboxId,
        labels: &BTreeMap<String, String>,
        max_snapshots: usize,
    ) -> Result<SnapshotInfo> {
        let sandbox_id = id.as_str();
        validate_labels("labels", labels)?;
        if !SandboxId::has_valid_shape(sandbox_id) {
            return Err(ProviderError::SandboxNotFound(sandbox_id.into()));
        }
        self.owned(sandbox_id).await?;
        let (taken, making) = self.commit_owned(sandbox_id, labels, max_snapshots).await?;
        making.answered();
        Ok(taken)
    }

    /// The commit of a sandbox already known to be ours (a fork inspected it) to a new
    /// snapshot, recorded as under way once its place under the bound is reserved (a refused
    /// call leaves no record): the caller answers the record when it answers its own caller.
    pub(in crate::backends::docker) async fn commit_owned(
        &self,
        sandbox_id: &str,
        labels: &BTreeMap<String, String>,
        max_snapshots: usize,
    ) -> Result<(SnapshotInfo, super::snapshot_making::SnapshotMaking)> {
        let _place = self.reserve_snapshot_place(max_snapshots).await?;
        let snapshot_id = argv::new_snapshot_id();
        let making = self.making_snapshot(&snapshot_id);
        self.commit_as(sandbox_id, &snapshot_id, labels, false).await?;
        tracing::info!(sandbox_id, snapshot_id = %snapshot_id, "snapshot taken");
        Ok((self.snapshot_info(&snapshot_id).await?, making))
    }

    /// `docker commit` of the sandbox to the snapshot image `snapshot_id` (its place under the
    /// bound already reserved), marked live or not; a commit cut off leaves no image.
    pub(in crate::backends::docker) async fn commit_as(
        &self,
        sandbox_id: &str,
        snapshot_id: &str,
        labels: &BTreeMap<String, String>,
        live: bool,
    ) -> Result<()> {
        let encoded = encode_labels(labels);
        // A sandbox whose agent runs as root (`-u 0`) keeps its image's user in the snapshot.
        let user = self.agent_started_as(sandbox_id).await;
        let marks = SnapshotMarks {
            source: sandbox_id,
            labels: &encoded,
            created_ms: now_ms(),
            user: user.as_deref(),
            live,
        };
        let args = argv::commit_args(sandbox_id, snapshot_id, &marks);
        let timeout = self.config.create.start_timeout;
        match self.cli.run(&args, timeout, None).await {
            Ok(_) => {}
            Err(CliError::Failed(f)) if f.kind == DockerFailureKind::MissingContainer => {
                return Err(ProviderError::SandboxNotFound(sandbox_id.into()))
            }
            Err(CliError::Failed(f)) => return Err(f.into()),
            Err(e) => {
                // A commit cut off at its timeout may still have made the image.
                self.remove_snapshot_image(snapshot_id).await;
                return Err(e.into());
            }
        }
        Ok(())
    }

    /// A place under `max_snapshots` for one commit: counted under a lock with the commits
    /// still running, so concurrent snapshots of this process never pass the bound, while the
    /// commits themselves run in parallel.
    pub(in crate::backends::docker) async fn reserve_snapshot_place(
        &self,
        max_snapshots: usize,
    ) -> Result<InFlight> {
        let _counting = self.snapshot_lock.lock().await;
        let existing = self.snapshot_refs().await?.len() + self.snapshots_in_flight.load(Ordering::SeqCst);
        if existing >= max_snapshots {
            return Err(ProviderError::ResourceExhausted(format!(
                "{existing} snapshots exist and server.max_snapshots is {max_snapshots}; \
                 delete some with DeleteSnapshot"
            )));
        }
        self.snapshots_in_flight.fetch_add(1, Ordering::SeqCst);
        Ok(InFlight(self.snapshots_in_flight.clone()))
    }

    /// One snapshot this service owns; any other id or image is `SnapshotNotFound`.
    pub async fn snapshot_info(&self, snapshot_id: &str) -> Result<SnapshotInfo> {
        if !argv::is_valid_snapshot_id(snapshot_id) {
            return Err(ProviderError::SnapshotNotFound(snapshot_id.into()));
        }
        let found = self.inspect_images(&[snapshot_id.to_string()]).await?;
        let info = found
            .into_iter()
            .filter_map(owned_snapshot)
            .find(|s| s.snapshot_id == snapshot_id)
            .ok_or_else(|| ProviderError::SnapshotNotFound(snapshot_id.into()))?;
        Ok(self.counting_checkpoint(info).await)
    }

    /// The snapshots this service owns carrying every label of `filter`, oldest first.
    pub async fn list_snapshots(&self, filter: &BTreeMap<String, String>) -> Result<Vec<SnapshotInfo>> {
        let refs = self.snapshot_refs().await?;
        if refs.is_empty() {
            return Ok(Vec::new());
        }
        let owned = self
            .inspect_images(&refs)
            .await?
            .into_iter()
            .filter_map(owned_snapshot)
            .filter(|s| s.carries(filter));
        let mut found: Vec<SnapshotInfo> =
            futures_util::future::join_all(owned.map(|info| self.counting_checkpoint(info))).await;
        found.sort_by(|a, b| {
            (a.created_at_unix_ms, &a.snapshot_id).cmp(&(b.created_at_unix_ms, &b.snapshot_id))
        });
        Ok(found)
    }

    /// Remove a snapshot this service owns. A snapshot that is still the image of a sandbox is
    /// kept (`SnapshotInUse`, naming the sandboxes) until they are closed.
    pub async fn delete_snapshot(&self, snapshot_id: &str) -> Result<()> {
        self.snapshot_info(snapshot_id).await?;
        // Its only users may be sandboxes closed a moment ago, removed in the background.
        let removed = self
            .looked_at_after_removals(
                || self.control(argv::rmi_args(snapshot_id)),
                |removed| matches!(removed, Err(e) if e.kind() == Some(DockerFailureKind::ImageInUse)),
            )
            .await;
        let failure = match removed {
            Ok(_) => {
                self.drop_live_checkpoint(snapshot_id).await;
                tracing::info!(snapshot_id, "snapshot deleted");
                return Ok(());
            }
            Err(e) => e,
        };
        match failure.kind() {
            Some(DockerFailureKind::ImageInUse) => {
                let users = self.snapshot_users(snapshot_id).await.unwrap_or_default();
                Err(ProviderError::SnapshotInUse(format!(
                    "snapshot {snapshot_id:?} is the image of sandbox(es) [{}]; close them first",
                    users.join(", ")
                )))
            }
            Some(DockerFailureKind::MissingImage) => Err(ProviderError::SnapshotNotFound(snapshot_id.into())),
            _ => Err(failure.into()),
        }
    }

    /// Remove the snapshots taken more than `ttl` ago that no container uses (docker's own
    /// in-use refusal decides, so a sandbox started meanwhile keeps its snapshot). Returns the
    /// removed ids. The crash sweep and the periodic task below call this.
    pub async fn remove_expired_snapshots(&self, ttl: Duration) -> Result<Vec<String>> {
        let cutoff = now_ms() - ttl.as_millis() as i64;
        if let Ok(refs) = self.snapshot_refs().await {
            self.prune_orphan_checkpoints(&refs).await;
        }
        let mut removed = Vec::new();
        for snapshot in self.list_snapshots(&BTreeMap::new()).await? {
            if snapshot.created_at_unix_ms > cutoff {
                continue;
            }
            // Docker refuses one a container uses: it stays.
            match self.control(argv::rmi_args(&snapshot.snapshot_id)).await {
                Ok(_) => {
                    self.drop_live_checkpoint(&snapshot.snapshot_id).await;
                    tracing::info!(snapshot_id = %snapshot.snapshot_id, "expired snapshot removed");
                    removed.push(snapshot.snapshot_id);
                }
                Err(CliError::Failed(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(removed)
    }

    /// Names of the containers whose image is the snapshot (or built on it).
    pub async fn snapshot_users(&self, snapshot_id: &str) -> Result<Vec<String>> {
        let out = self.control(argv::image_users_args(snapshot_id)).await?;
        // A Swarm task's container is named `<service>.<slot>.<task>`: its service is the sandbox.
        Ok(out
            .stdout_text()
            .split_whitespace()
            .map(|name| match name.split_once('.') {
                Some((service, _)) if SandboxId::has_valid_shape(service) => service.to_string(),
                _ => name.to_string(),
            })
            .collect())
    }

    /// Best effort: remove a snapshot image this call made (a failed commit or fork).
    pub(in crate::backends::docker) async fn remove_snapshot_image(&self, snapshot_id: &str) {
        self.drop_live_checkpoint(snapshot_id).await;
        if let Err(e) = self.control(argv::rmi_args(snapshot_id)).await {
            if e.kind() == Some(DockerFailureKind::MissingImage) {
                return; // the failed commit made none
            }
            tracing::warn!(snapshot_id, error = %e, "could not remove a snapshot this call made");
        }
    }

    /// Every `sandboxd-snapshot:<hex>` image with the ownership label.
    async fn snapshot_refs(&self) -> Result<Vec<String>> {
        let out = self.control(argv::snapshot_list_args()).await?;
        Ok(out
            .stdout_text()
            .lines()
            .map(str::trim)
            .filter(|r| argv::is_valid_snapshot_id(r))
            .map(String::from)
            .collect())
    }

    /// `docker image inspect` of `refs`; images that vanished meanwhile are left out.
    async fn inspect_images(&self, refs: &[String]) -> Result<Vec<ImageJson>> {
        // With several refs, docker prints the ones it found and fails for the missing ones.
        let stdout = match self.control(argv::image_inspect_args(refs)).await {
            Ok(out) => out.stdout,
            Err(CliError::Failed(f)) if f.kind == DockerFailureKind::MissingImage => f.stdout,
            Err(e) => return Err(e.into()),
        };
        let text = String::from_utf8_lossy(&stdout);
        if text.trim().is_empty() {
            return Ok(Vec::new());
        }
        serde_json::from_str(&text)
            .map_err(|e| ProviderError::Docker(format!("unexpected docker image inspect output: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(tags: &[&str], labels: &[(&str, &str)]) -> ImageJson {
        ImageJson {
            repo_tags: Some(tags.iter().map(|t| t.to_string()).collect()),
            size: 42,
            config: Some(ImageConfig {
                labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            }),
        }
    }

    #[test]
    fn labels_round_trip_through_one_safe_value() {
        let labels: BTreeMap<String, String> =
            [("policy".to_string(), "a \"b\" $HOME\nc=d".to_string())].into();
        let encoded = encode_labels(&labels);
        assert!(encoded.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'), "{encoded}");
        assert_eq!(decode_labels(&encoded), labels);
        assert!(decode_labels("not base64 !").is_empty());
    }

    #[test]
    fn only_labelled_snapshot_tags_are_ours() {
        let id = "sandboxd-snapshot:0123456789abcdef0123456789abcdef";
        let labels = encode_labels(&[("k".to_string(), "v".to_string())].into());
        let ours = image(
            &[id],
            &[
                ("sandboxd.snapshot", "1"),
                ("sandboxd.snapshot.source", "sandboxd-x"),
                ("sandboxd.snapshot.labels", &labels),
                ("sandboxd.snapshot.created_ms", "17"),
            ],
        );
        let info = owned_snapshot(ours).expect("owned");
        assert_eq!(info.snapshot_id, id);
        assert_eq!(info.source_sandbox_id, "sandboxd-x");
        assert_eq!(info.labels.get("k").map(String::as_str), Some("v"));
        assert_eq!((info.created_at_unix_ms, info.size_bytes), (17, 42));
        assert!(owned_snapshot(image(&[id], &[("sandboxd.sandbox", "1")])).is_none(), "no label: foreign");
        assert!(owned_snapshot(image(&["busybox:latest"], &[("sandboxd.snapshot", "1")])).is_none());
    }

    #[test]
    fn label_filters_need_every_pair() {
        let labels: BTreeMap<String, String> =
            [("a".to_string(), "1".to_string()), ("b".to_string(), "2".to_string())].into();
        let info = SnapshotInfo { labels, ..Default::default() };
        assert!(info.carries(&BTreeMap::new()));
        assert!(info.carries(&[("a".to_string(), "1".to_string())].into()));
        assert!(!info.carries(&[("a".to_string(), "2".to_string())].into()));
        assert!(validate_labels("labels", &[(String::new(), "x".to_string())].into()).is_err());
    }
}
