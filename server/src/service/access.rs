//! Authorization in the service: what the gate found ([`Principal`]) checked against the
//! sandbox a handler names, `Grant` and `Revoke`, and the owner token `Create` returns.
//! Each handler makes one call, `api.authorize(&principal, sandbox_id, const { scope("X") })`,
//! or `api.authorize_handle(…)` when it uses the sandbox's handle (the check's lookup is the
//! handler's: no handler looks the handle up again): the scope each RPC needs is a row of
//! `service/rpc_table.rs` (read, operate, owner; `Key` for the calls a tenant key or the
//! operator makes: Create, List, snapshots, volumes, pools, Watch).

use std::sync::Arc;
use std::time::Duration;

use sandboxd_proto::v1 as pb;
use tonic::{Request, Response, Status};

use super::status::invalid;
use super::SandboxApi;
use crate::auth::{Principal, Scope, Tenants, Tokens};
use crate::core::spec::SandboxId;

/// What the service needs to authorize calls and mint tokens.
pub struct Access {
    pub tokens: Arc<Tokens>,
    pub tenants: Option<Arc<Tenants>>,
    /// Lifetime of the owner token `Create` returns.
    pub owner_token_ttl: Duration,
    /// Lifetime of a grant that names none.
    pub grant_ttl: Duration,
}

impl Access {
    /// Tokens signed with a key made for this process only (in-process tests, tools): they do
    /// not survive it.
    pub fn ephemeral() -> Arc<Access> {
        let mut secret = vec![0u8; 32];
        getrandom::getrandom(&mut secret).expect("the OS random source");
        let dir = std::env::temp_dir().join(format!("sandboxd-ephemeral-{}", uuid::Uuid::new_v4().simple()));
        let _ = std::fs::create_dir_all(&dir);
        let revocations = crate::auth::revocations::Revocations::open(&dir).expect("a temp directory");
        let _ = std::fs::remove_dir_all(&dir);
        Arc::new(Access {
            tokens: Arc::new(Tokens::new(
                vec![crate::auth::keys::SigningKey { kid: "ephemeral".into(), secret }],
                Arc::new(revocations),
            )),
            tenants: None,
            owner_token_ttl: crate::config::DEFAULT_OWNER_TOKEN_TTL,
            grant_ttl: crate::config::DEFAULT_GRANT_TTL,
        })
    }
}

impl SandboxApi {
    /// The call on `sandbox_id` needs `needed`: a token for this sandbox with that scope, a
    /// tenant that owns it (anyone else's is NOT_FOUND), or the operator.
    pub(super) async fn authorize(
        &self,
        principal: &Principal,
        sandbox_id: &str,
        needed: Scope,
    ) -> Result<(), Status> {
        crate::audit::note_sandbox(sandbox_id);
        principal.require(sandbox_id, needed)?;
        if let Principal::Tenant(_) = principal {
            let handle = self.handle(sandbox_id).await?;
            principal.check_owner(sandbox_id, handle.tenant.as_deref())?;
        }
        Ok(())
    }

    /// [`Self::authorize`], returning the sandbox's handle (its pool claim applied) that the
    /// check looks up: one lookup per call, whoever calls. Handlers that use the sandbox take
    /// it from here; `authorize` stays for those that need only the check.
    pub(super) async fn authorize_handle(
        &self,
        principal: &Principal,
        sandbox_id: &str,
        needed: Scope,
    ) -> Result<crate::core::spec::SandboxHandle, Status> {
        crate::audit::note_sandbox(sandbox_id);
        principal.require(sandbox_id, needed)?;
        let handle = self.handle(sandbox_id).await?;
        if let Principal::Tenant(_) = principal {
            principal.check_owner(sandbox_id, handle.tenant.as_deref())?;
        }
        Ok(handle)
    }

    /// Calls that are not about one sandbox (Create, List, snapshots) need a tenant key or the
    /// operator: a capability token reaches its own sandbox only.
    pub(super) fn require_key(principal: &Principal, rpc: &str) -> Result<(), Status> {
        match principal {
            Principal::Token(_) => Err(Status::permission_denied(format!(
                "{rpc} needs a tenant key; a capability token reaches only its own sandbox"
            ))),
            _ => Ok(()),
        }
    }

    /// The chain a new token of `sandbox_id` starts with: a pool claim's id, so that handing
    /// the sandbox back to its pool (`recycle`) revokes every token of the claim.
    pub(super) fn claim_chain(&self, sandbox_id: &str) -> Vec<String> {
        self.lifecycle.claims().get(sandbox_id).map(|c| vec![c.token_id(sandbox_id)]).unwrap_or_default()
    }

    /// The owner token of a sandbox just made for `principal`.
    pub(super) fn owner_token(&self, sandbox_id: &str, tenant: Option<String>) -> String {
        let access = &self.access;
        let claims = Tokens::claims(
            sandbox_id,
            Scope::Owner,
            tenant,
            access.owner_token_ttl.as_secs().max(1),
            self.claim_chain(sandbox_id),
        );
        access.tokens.mint(&claims)
    }
}

pub(super) async fn grant(
    api: &SandboxApi,
    request: Request<pb::GrantRequest>,
) -> Result<Response<pb::GrantResponse>, Status> {
    let principal = Principal::of(&request);
    let req = request.into_inner();
    SandboxId::parse("sandbox_id", &req.sandbox_id)?;
    let scope = Scope::from_wire(req.scope).ok_or_else(|| {
        invalid("scope", "must be TOKEN_SCOPE_OWNER, TOKEN_SCOPE_OPERATE or TOKEN_SCOPE_READ")
    })?;
    let ttl = match req.ttl_s {
        Some(t) => super::convert::seconds("ttl_s", t)?,
        None => api.access.grant_ttl,
    }
    .min(api.access.owner_token_ttl.max(api.access.grant_ttl));
    // A grant needs the sandbox at the granted scope: never wider than the caller's own.
    // An operator's or a tenant's grant names the sandbox's tenant: its handle, looked up once
    // by the check; a token's names its own.
    let handle = match &principal {
        Principal::Token(_) => {
            api.authorize(&principal, &req.sandbox_id, scope).await?;
            None
        }
        Principal::Operator | Principal::Tenant(_) => {
            Some(api.authorize_handle(&principal, &req.sandbox_id, scope).await?)
        }
    };
    let (widest, until) = principal.grantable(&req.sandbox_id)?;
    if !widest.allows(scope) {
        return Err(Status::permission_denied(format!(
            "cannot grant scope {scope}: the caller has {widest}"
        )));
    }
    let tenant = match &principal {
        Principal::Operator | Principal::Tenant(_) => handle.and_then(|h| h.tenant),
        Principal::Token(c) => c.ten.clone(),
    };
    let chain = match &principal {
        Principal::Token(c) => c.ids().map(String::from).collect(),
        _ => api.claim_chain(&req.sandbox_id),
    };
    let mut claims = Tokens::claims(&req.sandbox_id, scope, tenant, ttl.as_secs().max(1), chain);
    if let Some(until) = until {
        claims.exp = claims.exp.min(until);
    }
    let token = api.access.tokens.mint(&claims);
    tracing::info!(sandbox_id = %req.sandbox_id, %scope, token_id = %claims.jti, "granted");
    Ok(Response::new(pb::GrantResponse { token, token_id: claims.jti, expires_at_s: claims.exp as f64 }))
}

pub(super) async fn revoke(
    api: &SandboxApi,
    request: Request<pb::RevokeRequest>,
) -> Result<Response<pb::RevokeResponse>, Status> {
    let principal = Principal::of(&request);
    let req = request.into_inner();
    let id = req.token_id.trim();
    if id.is_empty() || id.len() > 64 || !id.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(invalid("token_id", "a token id from Grant (1 to 64 letters and digits)"));
    }
    if let Principal::Token(c) = &principal {
        if c.scope != Scope::Owner {
            return Err(Status::permission_denied(format!(
                "Revoke needs scope owner (or a tenant key); the token has scope {}",
                c.scope
            )));
        }
    }
    // The id is kept until the longest a token can live has passed (its expiry is unknown
    // here: the server keeps no list of what it minted).
    let longest = api.access.owner_token_ttl.max(api.access.grant_ttl).as_secs();
    let until = crate::auth::revocations::now_s().saturating_add(longest);
    api.access
        .tokens
        .revocations()
        .revoke(id, until)
        .map_err(|e| Status::internal(format!("cannot record the revocation: {e}")))?;
    tracing::info!(token_id = %id, "revoked");
    Ok(Response::new(pb::RevokeResponse {}))
}
