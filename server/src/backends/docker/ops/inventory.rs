//! `List` on Docker: the sandboxes this service owns, in two docker calls whatever their
//! number: one `docker ps -a` filtered by the ownership label and the asked-for metadata labels,
//! then one `docker inspect` of every candidate for creation time, image, state, workdir and
//! labels. Ordering and paging are [`crate::core::inventory::page`]'s.

use std::collections::BTreeMap;
use std::time::UNIX_EPOCH;

use super::argv;
use super::failure::CliError;
use super::failure::DockerFailureKind;
use super::labels;
use super::provider::DockerProvider;
use super::state::ContainerState;
use crate::core::inventory::{page, ListPage, ListQuery, SandboxSummary};
use crate::core::spec::SandboxId;
use crate::error::{ProviderError, Result};

impl DockerProvider {
    /// The owned sandboxes matching `query`, one page.
    pub async fn list(&self, query: &ListQuery) -> Result<ListPage> {
        crate::core::metadata::validate_metadata("labels", &query.labels)?;
        let mut filters = argv::metadata_filter_args(&query.labels);
        if let Some(tenant) = &query.tenant {
            filters.extend(argv::tenant_filter_args(tenant));
        }
        if let Some(owner) = &query.pool_owner {
            // The pools' start-up cleanup: this server's members of this deployment only.
            filters = argv::pool_owner_filter_args(owner, &self.config.create.extra_run_args);
        }
        // Closed here before the listing began: gone for every caller even when its removal
        // finishes between Docker's answer and the look at what is in flight.
        let closing_before = self.closing_ids();
        let mut names = self.owned_names(&filters).await?;
        // A claimed pool member's labels and tenant are its claim's, which docker's filters
        // cannot see: find the members apart and let `page` filter them by their claims.
        let narrowed = !query.labels.is_empty() || query.tenant.is_some();
        if query.pool_owner.is_none() && narrowed && !query.claims.is_empty() {
            for name in self.owned_names(&argv::pool_member_filter_args()).await? {
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
        let mut found = Vec::new();
        if !names.is_empty() {
            // A sandbox removed between the two calls makes inspect fail for that name only.
            let stdout = match self.control(argv::inspect_many_args(&names)).await {
                Ok(out) => out.stdout,
                Err(CliError::Failed(f)) if f.only(DockerFailureKind::MissingContainer) => f.stdout,
                Err(e) => return Err(e.into()),
            };
            for line in String::from_utf8_lossy(&stdout).lines().filter(|l| !l.trim().is_empty()) {
                let mut summary = parse_summary(line)?;
                // Closed here and being removed in the background: gone for every caller (not
                // listed, its quota place free) whatever the daemon has heard yet.
                if closing_before.contains(&summary.sandbox_id) || self.closing_now(&summary.sandbox_id) {
                    continue;
                }
                // A stopped container asleep in its checkpoint is hibernated, as `Status` says.
                if summary.status == crate::core::spec::SandboxStatus::Stopped {
                    if let Ok(id) = SandboxId::parse("sandbox_id", &summary.sandbox_id) {
                        summary.status = self.hibernated_or(&id, summary.status).await;
                    }
                }
                found.push(summary);
            }
        }
        Ok(page(found, query))
    }

    /// The names of the owned containers matching `filters` that have the shape of an id.
    async fn owned_names(&self, filters: &[String]) -> Result<Vec<String>> {
        let out = self.control(argv::ps_owned_args(filters)).await?;
        Ok(out
            .stdout_text()
            .lines()
            .map(str::trim)
            .filter(|n| SandboxId::parse("sandbox_id", n).is_ok())
            .map(String::from)
            .collect())
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
        status: ContainerState::parse(&state).sandbox_status(),
        created_ns,
        ports,
        workdir,
        expires_at_unix_ms: labels.get(crate::core::lease::EXPIRES_LABEL).and_then(|v| v.parse().ok()),
        metadata: labels::metadata_from_labels(&labels),
        reserved_millicpus: labels
            .get(crate::auth::CPUS_LABEL)
            .and_then(|v| v.parse::<f64>().ok())
            .map_or(0, |c| (c * 1000.0).round() as u64),
        reserved_memory_mib: labels.get(crate::auth::MEMORY_LABEL).and_then(|v| v.parse().ok()).unwrap_or(0),
        pool: labels.get(labels::POOL_LABEL).cloned(),
        tenant: labels.get(crate::auth::TENANT_LABEL).cloned(),
        runtime: labels.get(labels::OCI_RUNTIME_LABEL).cloned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(s.status, crate::core::spec::SandboxStatus::Running);
        assert_eq!(s.workdir.as_deref(), Some("/work"));
    }
}
