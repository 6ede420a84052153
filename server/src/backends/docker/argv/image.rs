//! Snapshot images: ids, `docker commit`, `docker image` listing and inspect, `docker rmi`.

use super::*;

/// Repository of every snapshot image; a snapshot id is `sandboxd-snapshot:<32 hex>`.
pub const SNAPSHOT_REPOSITORY: &str = "sandboxd-snapshot";

/// A fresh snapshot id: the repository plus 128 random bits as the tag.
pub fn new_snapshot_id() -> String {
    format!("{SNAPSHOT_REPOSITORY}:{}", uuid::Uuid::new_v4().simple())
}

/// A snapshot id this service could have made; anything else is refused before docker sees it.
pub fn is_valid_snapshot_id(id: &str) -> bool {
    id.strip_prefix(SNAPSHOT_REPOSITORY).and_then(|rest| rest.strip_prefix(':')).is_some_and(|hex| {
        hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    })
}

/// What `docker commit` records about a snapshot besides the filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotMarks<'a> {
    pub source: &'a str,
    /// `SNAPSHOT_LABELS_LABEL`'s value (already encoded).
    pub labels: &'a str,
    pub created_ms: i64,
    /// The user the image keeps (`--change USER`): the image's own user of a sandbox whose agent
    /// runs as root (`-u 0`).
    pub user: Option<&'a str>,
    /// A live snapshot (`SNAPSHOT_LIVE_LABEL`): its checkpoint is kept beside it.
    pub live: bool,
}

/// `docker commit --pause=true …`: the container is frozen for the commit (docker resumes it
/// after, and leaves an already paused one paused). The image inherits the container's labels:
/// the sandbox ownership, port and lease labels are blanked so a snapshot never passes for a
/// sandbox (a container run from it elsewhere is not ours) and a child never inherits its
/// source's lease, and the snapshot's own labels are set.
pub fn commit_args(name: &str, snapshot_id: &str, marks: &SnapshotMarks<'_>) -> Vec<String> {
    let mut a = vec![s("commit")];
    if let Some(user) = marks.user {
        a.extend([s("--change"), format!("USER {user}")]);
    }
    a.push(s("--pause=true"));
    use crate::core::lease::{CREATED_LABEL, CREATE_DEADLINE_LABEL, EXPIRES_LABEL};
    for label in [
        format!("{SANDBOX_LABEL}="),
        format!("{PORTS_LABEL}="),
        format!("{CREATED_LABEL}="),
        format!("{EXPIRES_LABEL}="),
        format!("{CREATE_DEADLINE_LABEL}="),
        format!("{SNAPSHOT_LABEL}=1"),
        format!("{SNAPSHOT_SOURCE_LABEL}={}", marks.source),
        format!("{SNAPSHOT_LABELS_LABEL}={}", marks.labels),
        format!("{SNAPSHOT_CREATED_LABEL}={}", marks.created_ms),
    ] {
        a.extend([s("--change"), format!("LABEL {label}")]);
    }
    if marks.live {
        a.extend([s("--change"), format!("LABEL {SNAPSHOT_LIVE_LABEL}=1")]);
    }
    a.extend([s(name), s(snapshot_id)]);
    a
}

/// The snapshot images on the daemon: `repo:tag` per line, only those with the ownership label.
pub fn snapshot_list_args() -> Vec<String> {
    vec![
        s("images"),
        s("--filter"),
        format!("label={SNAPSHOT_LABEL}=1"),
        s("--format"),
        s("{{.Repository}}:{{.Tag}}"),
        s(SNAPSHOT_REPOSITORY),
    ]
}

/// `docker image inspect` of images by reference (a JSON array).
pub fn image_inspect_args(refs: &[String]) -> Vec<String> {
    let mut a = vec![s("image"), s("inspect")];
    a.extend(refs.iter().cloned());
    a
}

/// `docker rmi REF` without `--force`: docker itself refuses an image a container still uses.
pub fn rmi_args(image: &str) -> Vec<String> {
    vec![s("rmi"), s(image)]
}

/// The containers (any state) whose image is `image` or built on it.
pub fn image_users_args(image: &str) -> Vec<String> {
    vec![s("ps"), s("-a"), s("--filter"), format!("ancestor={image}"), s("--format"), s("{{.Names}}")]
}

/// The size in bytes of image `image` (one line); fails when the daemon lacks it.
pub fn image_size_args(image: &str) -> Vec<String> {
    vec![s("image"), s("inspect"), s("--format"), s("{{.Size}}"), s("--"), s(image)]
}

/// `docker pull -q IMAGE` (the image already checked: no leading `-`).
pub fn pull_args(image: &str) -> Vec<String> {
    vec![s("pull"), s("-q"), s("--"), s(image)]
}

/// `docker save IMAGE`: the image's tar on stdout.
pub fn save_args(image: &str) -> Vec<String> {
    vec![s("save"), s("--"), s(image)]
}

/// `docker load -q`: an image tar from stdin.
pub fn load_args() -> Vec<String> {
    vec![s("load"), s("-q")]
}
