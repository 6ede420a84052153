//! Who a call is: the operator (no tenants, or the server's own `--auth-token-file` key), a
//! tenant (by its key), or the holder of a capability token for one sandbox. The gate puts it
//! in the request's extensions; each handler asks it once for what it needs.

use std::sync::Arc;

use tonic::Status;

use super::scope::Scope;
use super::tenants::Tenant;
use super::token::Claims;

#[derive(Debug, Clone)]
pub enum Principal {
    /// Everything, as a server without tenants has always allowed.
    Operator,
    /// Its own sandboxes and snapshots, all scopes.
    Tenant(Arc<Tenant>),
    /// One sandbox, up to the token's scope.
    Token(Arc<Claims>),
}

impl Principal {
    /// The principal the gate found (a request that never passed a gate, as in-process tests
    /// make, is the operator: exactly a server without auth).
    pub fn of<T>(request: &tonic::Request<T>) -> Principal {
        request.extensions().get::<Principal>().cloned().unwrap_or(Principal::Operator)
    }

    /// The tenant whose sandboxes this caller reaches (`None`: the operator's, i.e. all).
    pub fn tenant(&self) -> Option<&str> {
        match self {
            Principal::Operator => None,
            Principal::Tenant(t) => Some(&t.name),
            Principal::Token(c) => c.ten.as_deref(),
        }
    }

    /// The token id, for the audit log.
    pub fn token_id(&self) -> Option<&str> {
        match self {
            Principal::Token(c) => Some(&c.jti),
            _ => None,
        }
    }

    /// A call on a sandbox that needs `needed`, checked without a lookup: a token must be for
    /// this sandbox with a wide enough scope (PERMISSION_DENIED otherwise, whether or not the
    /// sandbox exists, so nothing leaks). A tenant's ownership needs the sandbox's tenant:
    /// see [`Principal::check_owner`].
    pub fn require(&self, sandbox_id: &str, needed: Scope) -> Result<(), Status> {
        match self {
            Principal::Operator | Principal::Tenant(_) => Ok(()),
            Principal::Token(c) if c.sub != sandbox_id => Err(Status::permission_denied(format!(
                "this token is for sandbox {:?} only; it cannot reach sandbox_id {sandbox_id:?}",
                c.sub
            ))),
            Principal::Token(c) if !c.scope.allows(needed) => Err(Status::permission_denied(format!(
                "this call needs scope {needed}; the token has scope {}",
                c.scope
            ))),
            Principal::Token(_) => Ok(()),
        }
    }

    /// A tenant reaches only sandboxes labelled with its name: any other is NOT_FOUND, as an
    /// unknown id is, so one tenant never learns that another's sandbox exists.
    pub fn check_owner(&self, sandbox_id: &str, sandbox_tenant: Option<&str>) -> Result<(), Status> {
        match self {
            Principal::Tenant(t) if sandbox_tenant != Some(t.name.as_str()) => {
                Err(Status::not_found(format!("no sandbox {sandbox_id:?}")))
            }
            _ => Ok(()),
        }
    }

    /// Whether a sandbox (or snapshot) of `tenant` is this caller's to see in a listing.
    pub fn sees(&self, tenant: Option<&str>) -> bool {
        match self {
            Principal::Operator => true,
            Principal::Tenant(t) => tenant == Some(t.name.as_str()),
            Principal::Token(_) => false,
        }
    }

    /// The widest scope this caller has on `sandbox_id` (a grant is at most this), and the
    /// latest expiry a grant may have (Unix seconds).
    pub fn grantable(&self, sandbox_id: &str) -> Result<(Scope, Option<u64>), Status> {
        match self {
            Principal::Token(c) => {
                self.require(sandbox_id, Scope::Read)?;
                Ok((c.scope, Some(c.exp)))
            }
            _ => Ok((Scope::Owner, None)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::token::Tokens;

    #[test]
    fn a_token_reaches_its_sandbox_up_to_its_scope() {
        let p = Principal::Token(Arc::new(Tokens::claims("a", Scope::Operate, None, 60, vec![])));
        assert!(p.require("a", Scope::Operate).is_ok());
        assert_eq!(p.require("a", Scope::Owner).unwrap_err().code(), tonic::Code::PermissionDenied);
        assert_eq!(p.require("b", Scope::Read).unwrap_err().code(), tonic::Code::PermissionDenied);
        assert!(!p.sees(None));
        assert!(Principal::Operator.sees(Some("red")));
    }
}
