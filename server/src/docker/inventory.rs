//! `List`: the sandboxes this service owns, in two docker calls whatever their number: one
//! `docker ps -a` filtered by the ownership label and the asked-for metadata labels, then one
//! `docker inspect` of every candidate for creation time, image, state, workdir and labels.
//! Pages are cut by a key (creation time, id), so removing sandboxes between two pages never
//! skips or repeats one.

use std::collections::BTreeMap;
use std::time::UNIX_EPOCH;

use super::argv;
use super::classify;
use super::labels;
use super::provider::DockerProvider;
use crate::error::{ProviderError, Result};
use crate::spec::SandboxStatus;

/// What to list.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    /// Every one of these metadata entries must match.
    pub labels: BTreeMap<String, String>,
    /// Only these states; empty means any.
    pub statuses: Vec<SandboxStatus>,
    /// At most this many sandboxes (>= 1).
    pub page_size: usize,
    /// Only sandboxes after this key (the previous page's last).
    pub after: Option<PageKey>,
}

/// Where a page ends: the order of `List` is (creation time, id).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PageKey {
    pub created_ns: i128,
    pub sandbox_id: String,
}

impl PageKey {
    /// The opaque token a client passes back (hex, so nobody is tempted to build one).
    pub fn to_token(&self) -> String {
        format!("v1:{}:{}", self.created_ns, self.sandbox_id).bytes().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses a token made by [`PageKey::to_token`].
    pub fn from_token(token: &str) -> Result<Self> {
        let bad = || {
            ProviderError::invalid(
                "page_token",
                "is not a token returned by List (pass next_page_token as is)",
            )
        };
        if token.len() % 2 != 0 || token.len() > 256 {
            return Err(bad());
        }
        let bytes = (0..token.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&token[i..i + 2], 16))
            .collect::<std::result::Result<Vec<u8>, _>>()
            .map_err(|_| bad())?;
        let text = String::from_utf8(bytes).map_err(|_| bad())?;
        let mut parts = text.splitn(3, ':');
        let (Some("v1"), Some(ns), Some(id)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad());
        };
        let created_ns = ns.parse().map_err(|_| bad())?;
        if !argv::is_valid_sandbox_id(id) {
            return Err(bad());
        }
        Ok(Self { created_ns, sandbox_id: id.to_string() })
    }
}

/// One sandbox as `List` sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSummary {
    pub sandbox_id: String,
    pub image: String,
    pub status: SandboxStatus,
    pub created_ns: i128,
    pub ports: Vec<u16>,
    pub workdir: Option<String>,
    pub metadata: BTreeMap<String, String>,
}

impl SandboxSummary {
    pub fn created_at_unix_ms(&self) -> i64 {
        i64::try_from(self.created_ns / 1_000_000).unwrap_or(i64::MAX)
    }

    fn key(&self) -> PageKey {
        PageKey { created_ns: self.created_ns, sandbox_id: self.sandbox_id.clone() }
    }
}

/// One page, oldest first; `next` is set when more follow.
#[derive(Debug, Clone, Default)]
pub struct ListPage {
    pub sandboxes: Vec<SandboxSummary>,
    pub next: Option<PageKey>,
}

impl DockerProvider {
    /// The owned sandboxes matching `query`, one page.
    pub async fn list(&self, query: &ListQuery) -> Result<ListPage> {
        labels::validate_metadata("labels", &query.labels)?;
        let out = self.control(argv::ps_owned_args(&labels::filter_args(&query.labels))).await?;
        if !out.success() {
            return Err(docker_failure("docker ps", &out.stderr_text()));
        }
        let names: Vec<String> = out
            .stdout_text()
            .lines()
            .map(str::trim)
            .filter(|n| argv::is_valid_sandbox_id(n))
            .map(String::from)
            .collect();
        let mut found = Vec::new();
        if !names.is_empty() {
            let out = self.control(argv::inspect_many_args(&names)).await?;
            // A sandbox removed between the two calls makes inspect fail for that name only.
            let err = out.stderr_text();
            if !out.success()
                && !err.lines().all(|l| l.trim().is_empty() || classify::is_missing_container(l))
            {
                return Err(docker_failure("docker inspect", &err));
            }
            for line in out.stdout_text().lines().filter(|l| !l.trim().is_empty()) {
                found.push(parse_summary(line)?);
            }
        }
        Ok(page(found, query))
    }
}

/// Filters by status and key, sorts oldest first, and cuts one page.
fn page(mut found: Vec<SandboxSummary>, query: &ListQuery) -> ListPage {
    found.retain(|s| query.statuses.is_empty() || query.statuses.contains(&s.status));
    if let Some(after) = &query.after {
        found.retain(|s| &s.key() > after);
    }
    found.sort_by_key(SandboxSummary::key);
    let more = found.len() > query.page_size;
    found.truncate(query.page_size);
    let next = if more { found.last().map(SandboxSummary::key) } else { None };
    ListPage { sandboxes: found, next }
}

fn docker_failure(what: &str, stderr: &str) -> ProviderError {
    if classify::is_daemon_unreachable(stderr) {
        ProviderError::Unavailable(stderr.trim().into())
    } else {
        ProviderError::Docker(format!("{what}: {}", stderr.trim()))
    }
}

/// One line of [`argv::inspect_many_args`]: `/name \t created \t labels-json \t image \t state \t workdir`.
fn parse_summary(line: &str) -> Result<SandboxSummary> {
    let unexpected =
        |what: &str| ProviderError::Docker(format!("unexpected docker inspect output ({what}): {line:?}"));
    let mut parts = line.splitn(6, '\t');
    let name = parts.next().unwrap_or_default().trim_start_matches('/').to_string();
    let created = parts.next().ok_or_else(|| unexpected("no creation time"))?;
    let labels_json = parts.next().ok_or_else(|| unexpected("no labels"))?;
    let image = parts.next().unwrap_or_default().to_string();
    let state = parts.next().unwrap_or_default().to_string();
    let workdir = parts.next().map(str::trim).filter(|w| !w.is_empty()).map(String::from);
    let labels: BTreeMap<String, String> =
        serde_json::from_str::<Option<BTreeMap<String, String>>>(labels_json)
            .map_err(|_| unexpected("labels"))?
            .unwrap_or_default();
    let created = humantime::parse_rfc3339(created.trim()).map_err(|_| unexpected("creation time"))?;
    let created_ns = match created.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i128,
        Err(e) => -(e.duration().as_nanos() as i128),
    };
    let ports = labels
        .get(argv::PORTS_LABEL)
        .map(|p| p.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_default();
    Ok(SandboxSummary {
        sandbox_id: name,
        image,
        status: SandboxStatus::from_docker_state(&state),
        created_ns,
        ports,
        workdir,
        metadata: labels::metadata_from_labels(&labels),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(id_digit: char, created_ns: i128, status: SandboxStatus) -> SandboxSummary {
        SandboxSummary {
            sandbox_id: format!("sandboxd-{}", id_digit.to_string().repeat(32)),
            image: "img".into(),
            status,
            created_ns,
            ports: vec![],
            workdir: None,
            metadata: BTreeMap::new(),
        }
    }

    #[test]
    fn inspect_line_parses() {
        let line = "/sandboxd-0123456789abcdef0123456789abcdef\t2026-11-30T06:13:49.123456789Z\t\
                    {\"sandboxd.sandbox\":\"1\",\"sandboxd.ports\":\"80\",\"sandboxd.meta.run\":\"r1\"}\t\
                    sandboxd-test/busybox:1\trunning\t/work";
        let s = parse_summary(line).unwrap();
        assert_eq!(s.sandbox_id, "sandboxd-0123456789abcdef0123456789abcdef");
        assert_eq!(s.created_at_unix_ms(), 1_796_019_229_123);
        assert_eq!(s.ports, vec![80]);
        assert_eq!(s.metadata.get("run").map(String::as_str), Some("r1"));
        assert_eq!(s.status, SandboxStatus::Running);
        assert_eq!(s.workdir.as_deref(), Some("/work"));
    }

    #[test]
    fn pages_are_oldest_first_and_keyed() {
        let all = vec![
            summary('c', 30, SandboxStatus::Running),
            summary('a', 10, SandboxStatus::Running),
            summary('b', 20, SandboxStatus::Stopped),
            summary('d', 30, SandboxStatus::Running),
        ];
        let q = ListQuery { page_size: 2, ..Default::default() };
        let first = page(all.clone(), &q);
        assert_eq!(first.sandboxes.iter().map(|s| s.created_ns).collect::<Vec<_>>(), vec![10, 20]);
        let key = first.next.clone().expect("more");
        let token = key.to_token();
        assert_eq!(PageKey::from_token(&token).unwrap(), key);
        let second = page(all.clone(), &ListQuery { after: Some(key), ..q.clone() });
        assert_eq!(second.sandboxes.len(), 2);
        assert!(second.next.is_none());
        assert!(second.sandboxes[0].sandbox_id < second.sandboxes[1].sandbox_id);
        let running = page(all, &ListQuery { statuses: vec![SandboxStatus::Stopped], ..q });
        assert_eq!(running.sandboxes.len(), 1);
    }

    #[test]
    fn forged_tokens_are_refused() {
        for bad in ["", "zz", "00", &"v1:1:x".bytes().map(|b| format!("{b:02x}")).collect::<String>()] {
            if bad.is_empty() {
                continue;
            }
            assert!(PageKey::from_token(bad).unwrap_err().to_string().contains("page_token"), "{bad}");
        }
    }
}
