//! An `EgressPlan` as an nftables ruleset for `nft -f -`, run in the sandbox's network
//! namespace. The file replaces the service's one table atomically (nft applies a file as one
//! transaction: the old table is never half-replaced) and touches nothing else, so Docker's own
//! rules in the namespace (the embedded DNS's NAT) stay. Every variable part is a typed value
//! (`IpNet`, `IpAddr`, `u16`) formatted here, so nothing a caller sent reaches nft as text.

use std::fmt::Write;
use std::net::IpAddr;

use super::{CheckedRule, EgressAction, EgressPlan};

/// The service's table in the sandbox's namespace.
pub const TABLE: &str = "sandboxd_egress";

/// Docker's embedded DNS on user-defined networks: on loopback, but a resolver all the same, so
/// it is judged like any other destination.
const DOCKER_DNS: &str = "127.0.0.11";

/// The ruleset: answers to connections made to the sandbox and loopback pass; then the allowed
/// domains' addresses; then the rules in order; then the default. Packets of connections the
/// sandbox opened are judged one by one (no "established" shortcut), so a live change also
/// cuts connections opened before it.
pub fn ruleset(plan: &EgressPlan) -> String {
    let (v4, v6): (Vec<IpAddr>, Vec<IpAddr>) = plan.addresses().into_iter().partition(IpAddr::is_ipv4);
    let mut out = String::new();
    // Declaring the table first makes the delete succeed when it does not exist yet.
    let _ = writeln!(out, "table inet {TABLE} {{}}\ndelete table inet {TABLE}\ntable inet {TABLE} {{");
    let _ = writeln!(out, "  set allow4 {{ type ipv4_addr;{} }}", elements(&v4));
    let _ = writeln!(out, "  set allow6 {{ type ipv6_addr;{} }}", elements(&v6));
    let _ = writeln!(out, "  chain output {{");
    let _ = writeln!(out, "    type filter hook output priority 0; policy accept;");
    let _ = writeln!(out, "    ct direction reply accept");
    let _ = writeln!(out, "    oif \"lo\" ip daddr != {DOCKER_DNS} accept");
    let _ = writeln!(out, "    oif \"lo\" meta nfproto ipv6 accept");
    let _ = writeln!(out, "    ip daddr @allow4 accept");
    let _ = writeln!(out, "    ip6 daddr @allow6 accept");
    for rule in &plan.policy.rules {
        let _ = writeln!(out, "    {}", rule_line(rule));
    }
    if plan.policy.default_action == EgressAction::Deny {
        let _ = writeln!(out, "    {}", verdict(EgressAction::Deny));
    }
    let _ = writeln!(out, "  }}\n}}");
    out
}

fn elements(addresses: &[IpAddr]) -> String {
    if addresses.is_empty() {
        return String::new();
    }
    let list: Vec<String> = addresses.iter().map(IpAddr::to_string).collect();
    format!(" elements = {{ {} }};", list.join(", "))
}

fn rule_line(rule: &CheckedRule) -> String {
    let family = if rule.net.addr().is_ipv4() { "ip" } else { "ip6" };
    let mut line = format!("{family} daddr {}", rule.net);
    if !rule.ports.is_empty() {
        let ports: Vec<String> = rule.ports.iter().map(u16::to_string).collect();
        let _ = write!(line, " meta l4proto {{ tcp, udp }} th dport {{ {} }}", ports.join(", "));
    }
    format!("{line} {}", verdict(rule.action))
}

/// A refusal the sender sees at once (an ICMP "administratively prohibited" for any protocol),
/// rather than a drop it would wait out.
fn verdict(action: EgressAction) -> &'static str {
    match action {
        EgressAction::Allow => "accept",
        EgressAction::Deny => "reject with icmpx admin-prohibited",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::{EgressRule, NetworkPolicy};

    #[test]
    fn rules_in_order_then_the_default() {
        let policy = NetworkPolicy {
            default_action: EgressAction::Deny,
            rules: vec![
                EgressRule { action: EgressAction::Allow, cidr: "10.0.0.0/8".into(), ports: vec![443, 80] },
                EgressRule { action: EgressAction::Deny, cidr: "2001:db8::/32".into(), ports: vec![] },
            ],
            allow_domains: vec!["a.example".into()],
        };
        let plan = EgressPlan {
            policy: policy.check("p").unwrap(),
            resolved: [(
                "a.example".to_string(),
                vec!["192.0.2.7".parse().unwrap(), "2001:db8::7".parse().unwrap()],
            )]
            .into(),
        };
        let text = ruleset(&plan);
        let allow =
            text.find("ip daddr 10.0.0.0/8 meta l4proto { tcp, udp } th dport { 80, 443 } accept").unwrap();
        let deny = text.find("ip6 daddr 2001:db8::/32 reject").unwrap();
        let default = text.rfind("    reject with icmpx admin-prohibited").unwrap();
        assert!(allow < deny && deny < default, "{text}");
        assert!(text.contains("set allow4 { type ipv4_addr; elements = { 192.0.2.7 }; }"), "{text}");
        assert!(text.contains("elements = { 2001:db8::7 }"), "{text}");
        let open = EgressPlan {
            policy: NetworkPolicy::allow_all().check("p").unwrap(),
            resolved: Default::default(),
        };
        assert!(!ruleset(&open).contains("reject"), "an allow-all policy refuses nothing");
    }
}
