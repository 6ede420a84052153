//! The allowed domains' addresses in the sandbox's `/etc/hosts`, so its programs resolve them
//! without DNS (which a DENY default blocks like any other traffic). The service's lines end in
//! a marker and are replaced whole; the rest of the file (Docker's own lines, the caller's) is
//! kept. Writing the file is only convenience: what may be reached is decided by the ruleset,
//! so a process that edits it gains nothing.

use super::EgressPlan;

/// Ends every line the service writes.
pub const MARKER: &str = "# sandboxd-egress";

/// A `sh` script (busybox, dash and bash alike) that puts `plan`'s lines into `/etc/hosts` in
/// place (the file is Docker's bind mount: it is rewritten, never renamed over). Names and
/// addresses were checked (host-name characters, parsed addresses), so they are quoted safely.
pub fn update_script(plan: &EgressPlan) -> String {
    let mut lines = Vec::new();
    for (name, addresses) in &plan.resolved {
        for address in addresses {
            lines.push(format!("{address} {name} {MARKER}"));
        }
    }
    let add: String = lines.iter().map(|l| format!(" '{l}'")).collect();
    let print = if lines.is_empty() { String::from(":") } else { format!("printf '%s\\n'{add}") };
    format!(
        "f=/etc/hosts; kept=$(grep -v ' {MARKER}$' \"$f\" 2>/dev/null); \
         {{ [ -n \"$kept\" ] && printf '%s\\n' \"$kept\"; {print}; }} > \"$f\""
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::{EgressAction, NetworkPolicy};

    #[test]
    fn lines_carry_the_marker() {
        let policy = NetworkPolicy {
            default_action: EgressAction::Deny,
            rules: vec![],
            allow_domains: vec!["a.test".into()],
        };
        let plan = EgressPlan {
            policy: policy.check("p").unwrap(),
            resolved: [("a.test".to_string(), vec!["192.0.2.1".parse().unwrap()])].into(),
        };
        let script = update_script(&plan);
        assert!(script.contains("'192.0.2.1 a.test # sandboxd-egress'"), "{script}");
    }
}
