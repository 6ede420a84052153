//! `docker diff`: the paths added, changed and deleted in a sandbox against its image (the
//! image it was created from, or the snapshot it started from), without the service's own
//! bookkeeping files.

use std::collections::BTreeSet;

use super::argv;
use super::failure::DockerFailureKind;
use super::provider::DockerProvider;
use crate::core::branching::{DiffEntry, DiffKind};
use crate::core::spec::{validate_abs_path, SandboxId};
use crate::error::{ProviderError, Result};

/// Paths the service itself writes into a sandbox: PTY pid records (under `/tmp`, else
/// `/dev/shm`), the agent's mount point, and the `--init` binary docker mounts.
const BOOKKEEPING_PREFIXES: [&str; 2] = ["/tmp/.sandboxd-", "/dev/shm/.sandboxd-"];
const BOOKKEEPING_TREES: [&str; 2] = ["/.sandboxd", "/sbin/docker-init"];

/// Whether `path` is one of the service's own files.
pub fn is_bookkeeping(path: &str) -> bool {
    BOOKKEEPING_PREFIXES.iter().any(|p| path.starts_with(p))
        || BOOKKEEPING_TREES.iter().any(|t| under(path, t))
}

/// `path` is `root` or below it (`/` holds everything).
pub fn under(path: &str, root: &str) -> bool {
    let root = root.trim_end_matches('/');
    root.is_empty() || path == root || path.strip_prefix(root).is_some_and(|rest| rest.starts_with('/'))
}

/// `docker diff` output (`A /path`, `C /path`, `D /path`, one per line).
pub fn parse_diff(text: &str) -> Vec<DiffEntry> {
    text.lines()
        .filter_map(|line| {
            let (kind, path) = line.split_once(' ')?;
            let kind = match kind {
                "A" => DiffKind::Added,
                "C" => DiffKind::Changed,
                "D" => DiffKind::Deleted,
                _ => return None,
            };
            Some(DiffEntry { path: path.to_string(), kind })
        })
        .collect()
}

/// Drop the bookkeeping entries, and the `C` of a directory whose only changes were those
/// entries (writing `/tmp/.sandboxd-pty-…` marks `/tmp` changed).
pub fn without_bookkeeping(entries: Vec<DiffEntry>) -> Vec<DiffEntry> {
    let mut artefact_parents = BTreeSet::new();
    for entry in entries.iter().filter(|e| is_bookkeeping(&e.path)) {
        let mut path = entry.path.as_str();
        while let Some((parent, _)) = path.rsplit_once('/') {
            let parent = if parent.is_empty() { "/" } else { parent };
            artefact_parents.insert(parent.to_string());
            if parent == "/" {
                break;
            }
            path = parent;
        }
    }
    let kept: Vec<&DiffEntry> = entries.iter().filter(|e| !is_bookkeeping(&e.path)).collect();
    // Deepest first: a directory stays when anything still kept lies below it.
    let mut parents: Vec<&str> = artefact_parents.iter().map(String::as_str).collect();
    parents.sort_by_key(|dir| std::cmp::Reverse(dir.matches('/').count() + usize::from(*dir != "/")));
    let mut drop: BTreeSet<&str> = BTreeSet::new();
    for dir in parents {
        let kept_below = kept.iter().any(|e| {
            e.path != dir
                && under(&e.path, dir)
                && !(e.kind == DiffKind::Changed && drop.contains(e.path.as_str()))
        });
        if !kept_below {
            drop.insert(dir);
        }
    }
    entries
        .into_iter()
        .filter(|e| !is_bookkeeping(&e.path))
        .filter(|e| !(e.kind == DiffKind::Changed && drop.contains(e.path.as_str())))
        .collect()
}

impl DockerProvider {
    /// The sandbox's changes against its image, only paths at or below `path_prefix` (absolute)
    /// when given, bookkeeping files left out, in docker's order.
    pub async fn diff(&self, id: &SandboxId, path_prefix: Option<&str>) -> Result<Vec<DiffEntry>> {
        let sandbox_id = id.as_str();
        if let Some(prefix) = path_prefix {
            validate_abs_path("path_prefix", prefix)?;
        }
        self.handle(sandbox_id).await?;
        let out = match self.control(argv::diff_args(sandbox_id)).await {
            Err(e) if e.kind() == Some(DockerFailureKind::MissingContainer) => {
                return Err(ProviderError::SandboxNotFound(sandbox_id.into()))
            }
            result => result?,
        };
        let entries = without_bookkeeping(parse_diff(&out.stdout_text()));
        Ok(match path_prefix {
            Some(prefix) => entries.into_iter().filter(|e| under(&e.path, prefix)).collect(),
            None => entries,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(kind: DiffKind, path: &str) -> DiffEntry {
        DiffEntry { path: path.into(), kind }
    }

    #[test]
    fn parses_docker_diff_lines() {
        let text = "C /tmp\nA /tmp/a b\nD /bin/ls\nX /weird\n\n";
        assert_eq!(
            parse_diff(text),
            vec![
                e(DiffKind::Changed, "/tmp"),
                e(DiffKind::Added, "/tmp/a b"),
                e(DiffKind::Deleted, "/bin/ls")
            ]
        );
    }

    #[test]
    fn bookkeeping_and_its_parent_marks_are_dropped() {
        let entries = vec![
            e(DiffKind::Changed, "/tmp"),
            e(DiffKind::Added, "/tmp/.sandboxd-pty-1"),
            e(DiffKind::Changed, "/sbin"),
            e(DiffKind::Added, "/sbin/docker-init"),
            e(DiffKind::Added, "/.sandboxd"),
            e(DiffKind::Added, "/.sandboxd/agent"),
            e(DiffKind::Changed, "/dev"),
            e(DiffKind::Changed, "/dev/shm"),
            e(DiffKind::Added, "/dev/shm/.sandboxd-pty-2"),
            e(DiffKind::Changed, "/work"),
            e(DiffKind::Added, "/work/a"),
        ];
        assert_eq!(
            without_bookkeeping(entries),
            vec![e(DiffKind::Changed, "/work"), e(DiffKind::Added, "/work/a")]
        );
        // A real change beside a record keeps its directory.
        let entries = vec![
            e(DiffKind::Changed, "/tmp"),
            e(DiffKind::Added, "/tmp/.sandboxd-pty-1"),
            e(DiffKind::Added, "/tmp/out.txt"),
        ];
        assert_eq!(
            without_bookkeeping(entries),
            vec![e(DiffKind::Changed, "/tmp"), e(DiffKind::Added, "/tmp/out.txt")]
        );
        assert!(!is_bookkeeping("/tmp/sandboxd-user-file"));
        assert!(!is_bookkeeping("/.sandboxdx"));
    }

    #[test]
    fn prefixes_match_whole_components() {
        assert!(under("/work/a", "/work"));
        assert!(under("/work", "/work/"));
        assert!(!under("/workbench", "/work"));
        assert!(under("/anything", "/"));
    }
}
