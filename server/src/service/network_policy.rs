//! Egress policy on the wire: `SetNetworkPolicy`, the policy a `Create` asks for (or the
//! server's default) turned into the plan the backend enforces from the first moment, and a
//! fork's children inheriting their source's policy. The rules themselves: `crate::egress`.

use crate::service::rpc_table::name as rpc;
use sandboxd_proto::v1 as pb;
use tonic::{Request, Response, Status};

use super::status::invalid;
use super::SandboxApi;
use crate::auth::Principal;
use crate::core::spec::{SandboxHandle, SandboxId, SandboxSpec};
use crate::egress::{EgressAction, EgressPlan, EgressRule, NetworkPolicy};

/// A policy from the wire; `field` names where it came from (`spec.network_policy`, `policy`).
pub(super) fn from_proto(field: &str, policy: pb::NetworkPolicy) -> Result<NetworkPolicy, Status> {
    let action = |field: String, value: i32| match pb::EgressAction::try_from(value) {
        Ok(pb::EgressAction::Allow) => Ok(EgressAction::Allow),
        Ok(pb::EgressAction::Deny) => Ok(EgressAction::Deny),
        _ => Err(invalid(&field, format!("must be EGRESS_ACTION_ALLOW or EGRESS_ACTION_DENY (got {value})"))),
    };
    let rules = policy
        .rules
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            Ok(EgressRule {
                action: action(format!("{field}.rules[{i}].action"), r.action)?,
                cidr: r.cidr,
                ports: r.ports,
            })
        })
        .collect::<Result<Vec<_>, Status>>()?;
    Ok(NetworkPolicy {
        default_action: action(format!("{field}.default_action"), policy.default_action)?,
        rules,
        allow_domains: policy.allow_domains,
    })
}

impl SandboxApi {
    /// The policy `Create` enforces: the request's, else `network.default_policy`, checked and
    /// with its domains resolved, put into the spec for the backend. Returns the policy to record.
    pub(super) async fn plan_network(
        &self,
        requested: Option<pb::NetworkPolicy>,
        spec: &mut SandboxSpec,
    ) -> Result<Option<NetworkPolicy>, Status> {
        let requested = requested.map(|p| from_proto("spec.network_policy", p)).transpose()?;
        let Some((policy, plan)) = self.egress.plan_for(requested, "spec.network_policy").await? else {
            return Ok(None);
        };
        spec.egress = Some(plan);
        Ok(Some(policy))
    }

    /// A create enforced `policy` on `handle`'s sandbox: record it (refreshes, forks, restarts).
    pub(super) fn record_network(
        &self,
        handle: &SandboxHandle,
        policy: Option<NetworkPolicy>,
        plan: Option<&EgressPlan>,
    ) {
        if let (Some(policy), Some(plan)) = (policy, plan) {
            if let Err(e) = self.egress.remember(&handle.id(), &policy, plan) {
                tracing::warn!(sandbox_id = %handle.sandbox_id, error = %e, "the network policy is enforced but not recorded");
            }
        }
    }

    /// A fork's children get their source's policy (or the default when it has none) before the
    /// caller learns their ids; when that fails they are removed and the fork fails.
    pub(super) async fn inherit_network(
        &self,
        source: &SandboxId,
        children: &[SandboxHandle],
    ) -> Result<(), Status> {
        let ids: Vec<SandboxId> = children.iter().map(SandboxHandle::id).collect();
        let policy = self.egress.policy_of(source);
        if let Err(e) = self.egress.apply_to_new(self.backend().as_ref(), &ids, policy).await {
            for id in &ids {
                let _ = self.lifecycle().close(id).await;
                self.egress.forget(id.as_str());
            }
            return Err(e.into());
        }
        Ok(())
    }
}

pub(super) async fn set_network_policy(
    api: &SandboxApi,
    request: Request<pb::SetNetworkPolicyRequest>,
) -> Result<Response<pb::SetNetworkPolicyResponse>, Status> {
    let principal = Principal::of(&request);
    let req = request.into_inner();
    let id = SandboxId::parse("sandbox_id", &req.sandbox_id)?;
    let policy = from_proto("policy", req.policy.ok_or_else(|| invalid("policy", "is required"))?)?;
    policy.check("policy").map_err(crate::error::ProviderError::from)?;
    api.authorize(&principal, id.as_str(), const { super::rpc_table::scope(rpc::SET_NETWORK_POLICY) })
        .await?;
    api.egress.set(api.backend().as_ref(), &id, policy).await?;
    Ok(Response::new(pb::SetNetworkPolicyResponse {}))
}
