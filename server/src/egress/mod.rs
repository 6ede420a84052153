//! Egress policy: what a sandbox may reach on the network. The neutral types and their one
//! check (`NetworkPolicy::check`), the plan a backend enforces (`EgressPlan`: the checked policy
//! with its domains resolved), and `Egress`, which keeps each sandbox's policy in the state
//! directory and re-resolves its domains on an interval. How a plan becomes packet filtering is
//! `nft.rs` (the ruleset) and `hosts.rs` (the names written into the sandbox); the Docker
//! backend enters the sandbox's network namespace with them (`backends/docker/host/egress.rs`).

pub mod hosts;
pub mod nft;
pub mod policy;
mod refresh;
mod store;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Duration;

use crate::error::ProviderError;

pub use policy::{
    net_admin_flag, unenforceable_network, CheckedPolicy, CheckedRule, EgressAction, EgressRule,
    NetworkPolicy, PolicyError, MAX_DOMAINS, MAX_PORTS, MAX_RULES,
};
pub use refresh::Egress;

impl From<PolicyError> for ProviderError {
    fn from(e: PolicyError) -> Self {
        ProviderError::InvalidArgument { field: e.field, message: e.message }
    }
}

/// What a backend enforces: the checked policy and the addresses its domains resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressPlan {
    pub policy: CheckedPolicy,
    /// Each allowed domain and its addresses (empty when it did not resolve this time).
    pub resolved: BTreeMap<String, Vec<IpAddr>>,
}

impl EgressPlan {
    /// Every address an allowed domain resolved to, without duplicates.
    pub fn addresses(&self) -> BTreeSet<IpAddr> {
        self.resolved.values().flatten().copied().collect()
    }
}

/// Resolve each name with the host's resolver (what the server's own lookups use), each within
/// `timeout`; a name that does not resolve gets no addresses (logged) and is tried again at the
/// next refresh.
pub async fn resolve(domains: &[String], timeout: Duration) -> BTreeMap<String, Vec<IpAddr>> {
    let lookups = domains.iter().map(|name| async move {
        let found = tokio::time::timeout(timeout, tokio::net::lookup_host((name.as_str(), 0))).await;
        let addresses: Vec<IpAddr> = match found {
            Ok(Ok(addrs)) => {
                let set: BTreeSet<IpAddr> = addrs.map(|a| a.ip()).collect();
                set.into_iter().collect()
            }
            Ok(Err(e)) => {
                tracing::warn!(domain = %name, error = %e, "an allowed domain does not resolve");
                Vec::new()
            }
            Err(_) => {
                tracing::warn!(domain = %name, ?timeout, "an allowed domain did not resolve in time");
                Vec::new()
            }
        };
        (name.clone(), addresses)
    });
    futures_util::future::join_all(lookups).await.into_iter().collect()
}
