//! Listing sandboxes, backend-neutral: what a `List` asks for, how pages are keyed and cut.
//! Pages are cut by a key (creation time, id), so removing sandboxes between two pages never
//! skips or repeats one. Backends find the candidates; [`page`] orders, filters and cuts them.

use std::collections::BTreeMap;

use crate::core::spec::{SandboxId, SandboxStatus};
use crate::error::{ProviderError, Result};

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
    /// Only this tenant's sandboxes (`None`: every sandbox, the operator's view).
    pub tenant: Option<String>,
    /// Claimed warm-pool members by id (`crate::core::claims`): their metadata, tenant and claim
    /// time replace the container's. A listed pool member without a claim is left out.
    pub claims: std::sync::Arc<BTreeMap<String, crate::core::claims::Claim>>,
    /// Only the pool members this pool owner started (`crate::core::pools`), claimed or not, as
    /// labelled (no claim applied): the pools' start-up cleanup. Backends also narrow such a
    /// listing to the operator's own labels.
    pub pool_owner: Option<String>,
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
        if !token.len().is_multiple_of(2) || token.len() > 256 {
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
        SandboxId::parse("page_token", id).map_err(|_| bad())?;
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
    /// The lease set at create (ms since the epoch), if any; a moved lease overrides it.
    pub expires_at_unix_ms: Option<i64>,
    /// Thousandths of a CPU and MiB of memory reserved at create (`resources`; 0: none), for
    /// tenant quotas.
    pub reserved_millicpus: u64,
    pub reserved_memory_mib: u64,
    /// The warm pool it was started for (`sandboxd.pool`), if any.
    pub pool: Option<String>,
    /// The tenant it belongs to (`sandboxd.tenant`); `None`: the operator's.
    pub tenant: Option<String>,
    /// The OCI runtime it runs on (`runc`, `runsc`, …); `None`: not recorded (made before
    /// runtimes were, or a backend that does not say).
    pub runtime: Option<String>,
}

impl SandboxSummary {
    pub fn created_at_unix_ms(&self) -> i64 {
        i64::try_from(self.created_ns / 1_000_000).unwrap_or(i64::MAX)
    }

    pub fn key(&self) -> PageKey {
        PageKey { created_ns: self.created_ns, sandbox_id: self.sandbox_id.clone() }
    }
}

/// One page, oldest first; `next` is set when more follow.
#[derive(Debug, Clone, Default)]
pub struct ListPage {
    pub sandboxes: Vec<SandboxSummary>,
    pub next: Option<PageKey>,
}

/// Applies claims (unclaimed pool members go), filters by status and key, sorts oldest first,
/// and cuts one page. Backends may hand in pool members beyond what the labels and tenant
/// select (found apart from those filters, their labels being the template's): they are
/// filtered here by what their claims say.
pub fn page(mut found: Vec<SandboxSummary>, query: &ListQuery) -> ListPage {
    if query.pool_owner.is_some() {
        found.retain(|s| s.pool.is_some());
    } else {
        found.retain_mut(|s| {
            if s.pool.is_none() {
                return true;
            }
            let Some(claim) = query.claims.get(&s.sandbox_id) else { return false };
            s.metadata = claim.metadata.clone();
            s.tenant = claim.tenant.clone();
            s.created_ns = i128::from(claim.claimed_ms) * 1_000_000;
            true
        });
        // The backend filtered the others by labels and tenant already.
        found.retain(|s| {
            s.pool.is_none()
                || (query.labels.iter().all(|(k, v)| s.metadata.get(k) == Some(v))
                    && (query.tenant.is_none() || query.tenant == s.tenant))
        });
    }
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
            expires_at_unix_ms: None,
            reserved_millicpus: 0,
            reserved_memory_mib: 0,
            pool: None,
            tenant: None,
            runtime: None,
        }
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
    fn unclaimed_pool_members_are_hidden_and_claims_apply() {
        let mut member = summary('a', 10, SandboxStatus::Running);
        member.pool = Some("p".into());
        let mut unclaimed = summary('b', 20, SandboxStatus::Running);
        unclaimed.pool = Some("p".into());
        let plain = summary('c', 30, SandboxStatus::Running);
        let claim = crate::core::claims::Claim {
            pool: "p".into(),
            tenant: Some("t".into()),
            metadata: [("run".to_string(), "r1".to_string())].into(),
            claimed_ms: 40,
            ..Default::default()
        };
        let claims = std::sync::Arc::new([(member.sandbox_id.clone(), claim)].into());
        let all = vec![member.clone(), unclaimed.clone(), plain.clone()];
        let q = ListQuery { page_size: 10, claims, ..Default::default() };
        let listed = page(all.clone(), &q);
        let ids: Vec<_> = listed.sandboxes.iter().map(|s| s.sandbox_id.clone()).collect();
        assert_eq!(ids, vec![plain.sandbox_id.clone(), member.sandbox_id.clone()], "claim time orders it");
        assert_eq!(listed.sandboxes[1].metadata.get("run").map(String::as_str), Some("r1"));
        // The backend filtered the others by labels and tenant; pool members are filtered here
        // by their claims.
        let members = vec![member.clone(), unclaimed.clone()];
        let by_label = ListQuery { labels: [("run".to_string(), "r1".to_string())].into(), ..q.clone() };
        assert_eq!(page(members.clone(), &by_label).sandboxes.len(), 1);
        let other_label = ListQuery { labels: [("run".to_string(), "r2".to_string())].into(), ..q.clone() };
        assert!(page(members.clone(), &other_label).sandboxes.is_empty());
        let by_tenant = ListQuery { tenant: Some("t".into()), ..q.clone() };
        assert_eq!(page(members.clone(), &by_tenant).sandboxes[0].sandbox_id, member.sandbox_id);
        let other_tenant = ListQuery { tenant: Some("u".into()), ..q.clone() };
        assert!(page(members, &other_tenant).sandboxes.is_empty());
        let owner = ListQuery { pool_owner: Some("o".into()), ..q };
        assert_eq!(page(all, &owner).sandboxes.len(), 2, "start-up cleanup sees every member");
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
