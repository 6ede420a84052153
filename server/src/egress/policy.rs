//! A policy as written (`NetworkPolicy`, from the wire or the config file) and its one check,
//! into `CheckedPolicy`; and the `docker run` flags a policy cannot coexist with. Nothing here
//! depends on the rest of the crate, so the config file can use it.

use std::collections::BTreeSet;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// A part of a policy that is wrong: the field (`spec.network_policy.rules[0].cidr`) and what
/// is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field}: {message}")]
pub struct PolicyError {
    pub field: String,
    pub message: String,
}

impl PolicyError {
    fn new(field: impl std::fmt::Display, message: impl Into<String>) -> Self {
        Self { field: field.to_string(), message: message.into() }
    }
}

/// At most this many rules, domains and ports per rule: a policy is a short list, and a longer
/// one is a mistake (the ruleset is rebuilt whole on every change).
pub const MAX_RULES: usize = 256;
pub const MAX_DOMAINS: usize = 64;
pub const MAX_PORTS: usize = 64;

/// What a rule (or the default) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EgressAction {
    Allow,
    Deny,
}

/// One rule as a caller (or the config file) wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressRule {
    pub action: EgressAction,
    pub cidr: String,
    #[serde(default)]
    pub ports: Vec<u32>,
}

/// A policy as a caller (or `network.default_policy`) wrote it; `check` makes it usable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkPolicy {
    pub default_action: EgressAction,
    #[serde(default)]
    pub rules: Vec<EgressRule>,
    #[serde(default)]
    pub allow_domains: Vec<String>,
}

/// A rule with its network parsed and its ports checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedRule {
    pub action: EgressAction,
    pub net: IpNet,
    /// Sorted, without duplicates; empty: every port and protocol.
    pub ports: Vec<u16>,
}

/// A policy every part of which was checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedPolicy {
    pub default_action: EgressAction,
    pub rules: Vec<CheckedRule>,
    /// Lower-case, without duplicates, in the caller's order.
    pub domains: Vec<String>,
}

impl NetworkPolicy {
    /// Everything allowed: what a sandbox without a policy gets.
    pub fn allow_all() -> Self {
        Self { default_action: EgressAction::Allow, rules: Vec::new(), allow_domains: Vec::new() }
    }

    /// The one check of a policy; `field` is where it came from (`spec.network_policy`,
    /// `policy`, `network.default_policy`) and every error names the part that is wrong.
    pub fn check(&self, field: &str) -> Result<CheckedPolicy, PolicyError> {
        if self.rules.len() > MAX_RULES {
            return Err(PolicyError::new(
                format!("{field}.rules"),
                format!("at most {MAX_RULES} rules (got {})", self.rules.len()),
            ));
        }
        let rules = self
            .rules
            .iter()
            .enumerate()
            .map(|(i, rule)| rule.check(&format!("{field}.rules[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        if self.allow_domains.len() > MAX_DOMAINS {
            return Err(PolicyError::new(
                format!("{field}.allow_domains"),
                format!("at most {MAX_DOMAINS} names (got {})", self.allow_domains.len()),
            ));
        }
        let mut seen = BTreeSet::new();
        let mut domains = Vec::new();
        for (i, name) in self.allow_domains.iter().enumerate() {
            let name = check_domain(&format!("{field}.allow_domains[{i}]"), name)?;
            if seen.insert(name.clone()) {
                domains.push(name);
            }
        }
        Ok(CheckedPolicy { default_action: self.default_action, rules, domains })
    }
}

impl EgressRule {
    fn check(&self, field: &str) -> Result<CheckedRule, PolicyError> {
        let cidr = self.cidr.trim();
        let net = parse_cidr(cidr).ok_or_else(|| {
            PolicyError::new(
                format!("{field}.cidr"),
                format!(
                    "must be an IPv4 or IPv6 network like 10.0.0.0/8 or one address (got {:?})",
                    self.cidr
                ),
            )
        })?;
        if net.trunc() != net {
            return Err(PolicyError::new(
                format!("{field}.cidr"),
                format!("{cidr} has bits set past its prefix; did you mean {}?", net.trunc()),
            ));
        }
        if self.ports.len() > MAX_PORTS {
            return Err(PolicyError::new(
                format!("{field}.ports"),
                format!("at most {MAX_PORTS} ports (got {})", self.ports.len()),
            ));
        }
        let mut ports = BTreeSet::new();
        for &p in &self.ports {
            match u16::try_from(p) {
                Ok(port) if port > 0 => {
                    ports.insert(port);
                }
                _ => {
                    return Err(PolicyError::new(
                        format!("{field}.ports"),
                        format!("ports must be in 1..=65535 (got {p})"),
                    ))
                }
            }
        }
        Ok(CheckedRule { action: self.action, net, ports: ports.into_iter().collect() })
    }
}

/// `10.0.0.0/8`, `2001:db8::/32`, or one address (a /32 or /128).
fn parse_cidr(text: &str) -> Option<IpNet> {
    text.parse::<IpNet>().ok().or_else(|| text.parse::<IpAddr>().ok().map(IpNet::from))
}

/// A host name: letters, digits and `-` in dot-separated labels of 1..=63, at most 253 in all,
/// no label starting or ending with `-`; no wildcards (names are resolved, not matched).
fn check_domain(field: &str, name: &str) -> Result<String, PolicyError> {
    let name = name.trim().trim_end_matches('.').to_ascii_lowercase();
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) || name.parse::<IpAddr>().is_ok()
    {
        return Err(PolicyError::new(
            field,
            format!(
                "must be a host name like pypi.org (letters, digits, '-' and '.'; no wildcards; \
                 addresses go in rules) (got {name:?})"
            ),
        ));
    }
    Ok(name)
}

/// A `docker run` flag among `args` that would give a sandbox `CAP_NET_ADMIN` (so root in it
/// could rewrite its own rules) or put it in a network namespace it shares (the host's, or
/// another container's), where per-sandbox rules cannot hold: `--privileged`, `--cap-add`
/// NET_ADMIN / ALL, `--network`/`--net` host or `container:…`. The first one found.
pub fn net_admin_flag(args: &[String]) -> Option<String> {
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f, Some(v)),
            None => (arg, None),
        };
        let value = || inline.map(String::from).or_else(|| args.get(i + 1).cloned()).unwrap_or_default();
        match flag {
            "--privileged" if inline.is_none_or(|v| v != "false") => return Some(arg.to_string()),
            "--cap-add" => {
                let cap = value().to_ascii_uppercase();
                let cap = cap.trim_start_matches("CAP_");
                if cap == "NET_ADMIN" || cap == "ALL" {
                    return Some(format!("--cap-add {}", value()));
                }
            }
            "--network" | "--net" if unenforceable_network(Some(&value())).is_some() => {
                return Some(format!("{flag} {}", value()));
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Why a policy cannot be enforced on `docker.create.network` (`None`: it can): the host's
/// network or another container's is shared, and rules in it would not be the sandbox's own.
pub fn unenforceable_network(network: Option<&str>) -> Option<String> {
    match network {
        Some("host") => {
            Some("cannot be enforced with the host's network (docker.create.network: host)".into())
        }
        Some(n) if n.starts_with("container:") => {
            Some(format!("cannot be enforced in another container's network namespace ({n})"))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(cidr: &str, ports: &[u32]) -> EgressRule {
        EgressRule { action: EgressAction::Allow, cidr: cidr.into(), ports: ports.to_vec() }
    }

    fn policy(rules: Vec<EgressRule>, domains: &[&str]) -> NetworkPolicy {
        NetworkPolicy {
            default_action: EgressAction::Deny,
            rules,
            allow_domains: domains.iter().map(|d| d.to_string()).collect(),
        }
    }

    #[test]
    fn bad_parts_are_named() {
        let cases = [
            (policy(vec![rule("10.0.0.0/33", &[])], &[]), "spec.network_policy.rules[0].cidr"),
            (policy(vec![rule("nonsense", &[])], &[]), "spec.network_policy.rules[0].cidr"),
            (policy(vec![rule("10.0.0.1/8", &[])], &[]), "did you mean 10.0.0.0/8"),
            (
                policy(vec![rule("10.0.0.0/8", &[]), rule("::/0", &[0])], &[]),
                "spec.network_policy.rules[1].ports",
            ),
            (policy(vec![rule("10.0.0.0/8", &[70000])], &[]), "1..=65535"),
            (policy(vec![], &["*.example.com"]), "spec.network_policy.allow_domains[0]"),
            (policy(vec![], &["ok.example", "-bad.example"]), "spec.network_policy.allow_domains[1]"),
            (policy(vec![], &["10.0.0.1"]), "addresses go in rules"),
        ];
        for (p, want) in cases {
            let err = p.check("spec.network_policy").unwrap_err().to_string();
            assert!(err.contains(want), "{err} should name {want}");
        }
    }

    #[test]
    fn flags_that_give_net_admin_are_found() {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        for bad in [
            v(&["--privileged"]),
            v(&["--cap-add", "NET_ADMIN"]),
            v(&["--cap-add=cap_net_admin"]),
            v(&["--cap-add", "all"]),
            v(&["--network", "host"]),
            v(&["--net=container:abc"]),
        ] {
            assert!(net_admin_flag(&bad).is_some(), "{bad:?}");
        }
        for ok in [v(&["--cap-add", "SYS_PTRACE"]), v(&["--label", "NET_ADMIN"]), v(&["--network", "bridge"])]
        {
            assert_eq!(net_admin_flag(&ok), None, "{ok:?}");
        }
    }

    #[test]
    fn good_policies_are_normalised() {
        let p = policy(
            vec![rule("10.1.2.3", &[443, 80, 80]), rule("2001:db8::/32", &[])],
            &["PyPI.org.", "pypi.org"],
        );
        let c = p.check("policy").unwrap();
        assert_eq!(c.rules[0].net.to_string(), "10.1.2.3/32");
        assert_eq!(c.rules[0].ports, vec![80, 443]);
        assert_eq!(c.domains, vec!["pypi.org".to_string()]);
    }
}
