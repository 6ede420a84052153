//! E2B's per-sandbox firewall (`network` of a create, `PUT /sandboxes/{id}/network`) as
//! sandboxd's egress policy (`NetworkPolicy`, `SetNetworkPolicy`): `denyOut` and `allowOut`
//! of addresses, CIDRs and (allow only) host names; an allow wins over a deny, as E2B's does;
//! a deny of everything (`0.0.0.0/0`, the SDK's `all_traffic`) is the DENY default.
//! What sandboxd's policy has no counterpart for is refused by name, never dropped: header
//! transforms (`rules`), `maskRequestHost`, an `egressProxy`, `dnsServers`, `httpsPorts`, and
//! `allowPublicTraffic: false` (E2B's public host names, which sandboxd does not serve).

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use sandboxd_proto::v1 as pb;
use serde::Deserialize;
use serde_json::Value;
use tonic::Status;

use super::inproc::request;
use super::{errors, E2bFront};

/// E2B's network options (create and update take the same fields).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Network {
    allow_out: Option<Vec<String>>,
    deny_out: Option<Vec<String>>,
    allow_public_traffic: Option<bool>,
    dns_servers: Option<Value>,
    egress_proxy: Option<Value>,
    mask_request_host: Option<Value>,
    https_ports: Option<Value>,
    rules: Option<BTreeMap<String, Value>>,
}

/// Every address: what the SDK's `all_traffic` selector sends.
fn is_everything(cidr: &str) -> bool {
    matches!(cidr.trim(), "0.0.0.0/0" | "::/0")
}

/// `entry` as a CIDR sandboxd takes (one address becomes a /32 or /128), or `None` for a host name.
fn as_cidr(entry: &str) -> Option<String> {
    let entry = entry.trim();
    if entry.parse::<ipnet::IpNet>().is_ok() {
        return Some(entry.to_string());
    }
    entry.parse::<std::net::IpAddr>().ok().map(|ip| match ip {
        std::net::IpAddr::V4(_) => format!("{ip}/32"),
        std::net::IpAddr::V6(_) => format!("{ip}/128"),
    })
}

/// The egress policy of `network`, or `None` when it restricts nothing.
pub fn policy(network: &Network) -> Result<Option<pb::NetworkPolicy>, Status> {
    let unsupported = [
        ("rules", network.rules.as_ref().is_some_and(|r| !r.is_empty())),
        ("maskRequestHost", network.mask_request_host.as_ref().is_some_and(|v| !v.is_null())),
        ("egressProxy", network.egress_proxy.as_ref().is_some_and(|v| !v.is_null())),
        ("dnsServers", network.dns_servers.as_ref().is_some_and(|v| !v.is_null())),
        ("httpsPorts", network.https_ports.as_ref().is_some_and(|v| !v.is_null())),
        ("allowPublicTraffic", network.allow_public_traffic == Some(false)),
    ];
    if let Some((field, _)) = unsupported.iter().find(|(_, set)| *set) {
        return Err(Status::invalid_argument(format!(
            "network.{field}: not served by sandboxd (its egress policy takes allowOut and denyOut: \
             addresses, CIDRs, and host names to allow)"
        )));
    }
    let allow = network.allow_out.clone().unwrap_or_default();
    let deny = network.deny_out.clone().unwrap_or_default();
    if allow.is_empty() && deny.is_empty() {
        return Ok(None);
    }
    let deny_all = deny.iter().any(|d| is_everything(d));
    let mut rules = Vec::new();
    let mut allow_domains = Vec::new();
    for entry in &allow {
        match as_cidr(entry) {
            Some(cidr) => {
                rules.push(pb::EgressRule { action: pb::EgressAction::Allow as i32, cidr, ports: vec![] })
            }
            None if deny_all => allow_domains.push(entry.trim().to_string()),
            // Under an ALLOW default a host name allows nothing more.
            None => {}
        }
    }
    if !deny_all {
        for entry in &deny {
            let cidr = as_cidr(entry).ok_or_else(|| {
                Status::invalid_argument(format!(
                    "network.denyOut: {entry:?} is not an address or CIDR (host names can only be allowed)"
                ))
            })?;
            rules.push(pb::EgressRule { action: pb::EgressAction::Deny as i32, cidr, ports: vec![] });
        }
    }
    let default_action = if deny_all { pb::EgressAction::Deny } else { pb::EgressAction::Allow };
    Ok(Some(pb::NetworkPolicy { default_action: default_action as i32, rules, allow_domains }))
}

/// `PUT /sandboxes/{id}/network`: the sandbox's whole policy replaced (`SetNetworkPolicy`); an
/// empty body lifts every restriction.
pub async fn update(
    State(front): State<E2bFront>,
    headers: HeaderMap,
    Path(id): Path<String>,
    bytes: axum::body::Bytes,
) -> Result<Response, Response> {
    let caller = front.api_caller(&headers).map_err(errors::rest)?;
    let network: Network = super::body::body(&bytes).map_err(errors::rest)?;
    let policy = policy(&network).map_err(errors::rest)?.unwrap_or(pb::NetworkPolicy {
        default_action: pb::EgressAction::Allow as i32,
        ..Default::default()
    });
    let set = pb::SetNetworkPolicyRequest { sandbox_id: id, policy: Some(policy) };
    front.calls().set_network_policy(request(&caller, set)).await.map_err(errors::rest)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(allow: &[&str], deny: &[&str]) -> Network {
        Network {
            allow_out: Some(allow.iter().map(|s| s.to_string()).collect()),
            deny_out: Some(deny.iter().map(|s| s.to_string()).collect()),
            ..Default::default()
        }
    }

    #[test]
    fn deny_all_with_allows_is_a_deny_default_with_allow_rules_and_domains() {
        let p = policy(&net(&["1.1.1.1", "10.0.0.0/8", "example.com"], &["0.0.0.0/0"])).unwrap().unwrap();
        assert_eq!(p.default_action, pb::EgressAction::Deny as i32);
        let cidrs: Vec<&str> = p.rules.iter().map(|r| r.cidr.as_str()).collect();
        assert_eq!(cidrs, ["1.1.1.1/32", "10.0.0.0/8"]);
        assert!(p.rules.iter().all(|r| r.action == pb::EgressAction::Allow as i32));
        assert_eq!(p.allow_domains, ["example.com"]);
    }

    #[test]
    fn an_allow_comes_before_a_deny_of_the_same_address() {
        let p = policy(&net(&["8.8.8.8"], &["8.8.8.8", "2001:db8::1"])).unwrap().unwrap();
        assert_eq!(p.default_action, pb::EgressAction::Allow as i32);
        let rules: Vec<(i32, &str)> = p.rules.iter().map(|r| (r.action, r.cidr.as_str())).collect();
        assert_eq!(
            rules,
            [
                (pb::EgressAction::Allow as i32, "8.8.8.8/32"),
                (pb::EgressAction::Deny as i32, "8.8.8.8/32"),
                (pb::EgressAction::Deny as i32, "2001:db8::1/128"),
            ]
        );
    }

    #[test]
    fn nothing_asked_is_no_policy_and_what_has_no_counterpart_is_refused_by_name() {
        assert!(policy(&Network::default()).unwrap().is_none());
        let err = policy(&net(&[], &["example.com"])).unwrap_err();
        assert!(err.message().contains("network.denyOut"), "{}", err.message());
        let transform =
            Network { rules: Some(BTreeMap::from([("h".into(), Value::Null)])), ..Default::default() };
        assert!(policy(&transform).unwrap_err().message().contains("network.rules"));
        let private = Network { allow_public_traffic: Some(false), ..Default::default() };
        assert!(policy(&private).unwrap_err().message().contains("network.allowPublicTraffic"));
        let public = Network { allow_public_traffic: Some(true), ..Default::default() };
        assert!(policy(&public).unwrap().is_none());
    }
}
