//! A tenant bound to a runtime (`tenants: [{..., runtime: runsc}]`): every sandbox and pool it
//! makes runs on that runtime. A create that names none gets it; one that names another is
//! PERMISSION_DENIED naming `spec.runtime` and the runtime allowed (the caller is not allowed
//! that runtime: the request itself is well formed). A capability token's holder is bound by
//! its creator tenant's binding. Whether the runtime is offered and registered is the
//! backend's check (`docker/oci_runtime.rs`).

use crate::service::rpc_table::name as rpc;
use tonic::Status;

use super::SandboxApi;
use crate::auth::Principal;

impl SandboxApi {
    /// The runtime `principal` is bound to, if any.
    pub(super) fn bound_runtime(&self, principal: &Principal) -> Option<String> {
        match principal {
            Principal::Operator => None,
            Principal::Tenant(t) => t.runtime.clone(),
            Principal::Token(c) => {
                let tenants = self.access.tenants.as_ref()?;
                tenants.by_name(c.ten.as_deref()?)?.runtime.clone()
            }
        }
    }

    /// `runtime` (the field `field` of the request) under `principal`'s binding: set to the
    /// bound runtime when empty, refused when it names another.
    pub(super) fn bind_runtime(
        &self,
        principal: &Principal,
        field: &str,
        runtime: &mut Option<String>,
    ) -> Result<(), Status> {
        let Some(bound) = self.bound_runtime(principal) else { return Ok(()) };
        match runtime.as_deref() {
            None => {
                *runtime = Some(bound);
                Ok(())
            }
            Some(asked) if asked == bound => Ok(()),
            Some(asked) => Err(refused(principal, field, asked, &bound)),
        }
    }

    /// `Fork`'s check: its scope, and a fork's children run on their source's runtime, refused
    /// for a caller bound to another (the source's handle is the check's own lookup).
    pub(super) async fn authorize_fork(&self, principal: &Principal, sandbox_id: &str) -> Result<(), Status> {
        let needed = const { super::rpc_table::scope(rpc::FORK) };
        let Some(bound) = self.bound_runtime(principal) else {
            return self.authorize(principal, sandbox_id, needed).await;
        };
        let source = self.authorize_handle(principal, sandbox_id, needed).await?.runtime.unwrap_or_default();
        if source == bound {
            return Ok(());
        }
        Err(refused(principal, "sandbox_id", &source, &bound))
    }
}

fn refused(principal: &Principal, field: &str, asked: &str, bound: &str) -> Status {
    let who = match principal.tenant() {
        Some(tenant) => format!("tenant {tenant:?}"),
        None => "this caller".to_string(),
    };
    Status::permission_denied(format!(
        "{field}: runtime {asked:?} is not allowed: {who} is bound to runtime {bound:?} \
         (tenants[].runtime); leave the runtime empty or set it to {bound:?}"
    ))
}
