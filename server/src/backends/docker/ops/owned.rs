//! What the sweep asks of Docker: the owned containers with their lease facts (one `docker ps`),
//! and the removal of one of them. Docker decides nothing here: the rule is `crate::core::expiry`'s.
//!
//! Listed are containers carrying the ownership label and a lease label and the operator's own
//! labels (the `--label` flags of `create.extra_run_args`): deployments labelled apart sweep
//! apart. A container still under its `sandboxd-creating-` name is an unfinished create.

use super::argv;
use super::provider::DockerProvider;
use crate::core::expiry::{Owned, OwnedListing, Stage};
use crate::error::Result;

impl DockerProvider {
    /// Every owned container, and the containers destroyed since the last listing (their
    /// caches go now; the caller forgets them too).
    pub async fn list_owned(&self) -> Result<OwnedListing> {
        if let Some(agent) = &self.agent {
            agent.prune_run_dirs_due().await; // run directories sandboxes left behind
        }
        self.prune_disks_due().await; // disk files of containers that are gone
        self.finish_abandoned_closes().await; // closes whose server died
        self.remove_abandoned_snapshots().await; // snapshots whose call never answered
        self.prune_networks_due().await; // networks no sandbox used for network_idle_s
        let out = self.control(argv::sweep_list_args(&self.config.create)).await?;
        let owned = parse_listing(&out.stdout_text());
        Ok(OwnedListing { owned, gone: self.take_gone_for_sweep() })
    }

    /// Remove what the sweep decided: an unfinished create's container, or a sandbox as
    /// `Close` removes it.
    pub async fn remove_owned(&self, owned: &Owned) -> Result<()> {
        match owned.stage {
            Stage::Creating => Ok(self.remove_container(&owned.name).await?),
            Stage::Made | Stage::Ended => self.remove_by_id(&owned.name).await,
        }
    }
}

/// `name \t expires_ms \t create_deadline_ms` lines ([`argv::sweep_list_args`]).
fn parse_listing(text: &str) -> Vec<Owned> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let mut parts = line.split('\t');
            let name = parts.next().unwrap_or_default().trim().to_string();
            let mut num = || parts.next().and_then(|v| v.trim().parse::<i64>().ok());
            let expires_ms = num();
            let create_deadline_ms = num();
            if name.starts_with(argv::CLOSING_NAME_PREFIX) {
                // A close whose background removal did not finish (the server stopped): an
                // unfinished operation past its deadline, removed by this sweep.
                return Owned {
                    name,
                    stage: Stage::Creating,
                    expires_ms,
                    create_deadline_ms: Some(0),
                    lease_here: true,
                };
            }
            let stage =
                if name.starts_with(argv::CREATING_NAME_PREFIX) { Stage::Creating } else { Stage::Made };
            Owned { name, stage, expires_ms, create_deadline_ms, lease_here: true }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "sandboxd-0123456789abcdef0123456789abcdef";

    fn item(name: &str, expires: Option<i64>, deadline: Option<i64>) -> Owned {
        let stage = if name.starts_with(argv::CREATING_NAME_PREFIX) { Stage::Creating } else { Stage::Made };
        Owned {
            name: name.into(),
            stage,
            expires_ms: expires,
            create_deadline_ms: deadline,
            lease_here: true,
        }
    }

    #[test]
    fn listing_parses_empty_labels_as_none() {
        let text = format!("{ID}\t\t1000\nsandboxd-creating-ab\t5\t<no value>\n");
        assert_eq!(
            parse_listing(&text),
            vec![item(ID, None, Some(1000)), item("sandboxd-creating-ab", Some(5), None)]
        );
    }
}
