//! Capability tokens from the client's side: `Grant` and `Revoke`, the owner token `Create`
//! returned, and a client that presents a token instead of its own key.

use crate::client::{BearerAuth, Client};
use crate::error::{ClientError, Result};
use crate::proto;
use crate::sandbox::Sandbox;

/// What a token allows on its sandbox (the wire's `TokenScope`).
pub use sandboxd_proto::v1::TokenScope;

/// A token minted by `Grant`.
#[derive(Clone, Debug, PartialEq)]
pub struct Grant {
    /// The signed token: present it as `authorization: Bearer <token>` ([`Client::with_token`]).
    pub token: String,
    /// Its id, for [`Client::revoke`].
    pub token_id: String,
    /// When it expires, in seconds since the Unix epoch.
    pub expires_at_s: f64,
}

impl Client {
    /// A token for `sandbox_id` with `scope` (at most the caller's own), valid `ttl_s` seconds
    /// (`None`: the server's `server.auth.grant_ttl_s`).
    pub async fn grant(&self, sandbox_id: &str, scope: TokenScope, ttl_s: Option<f64>) -> Result<Grant> {
        let request = proto::GrantRequest { sandbox_id: sandbox_id.to_string(), scope: scope as i32, ttl_s };
        let r = self.raw().grant(request).await?.into_inner();
        if r.token.is_empty() {
            return Err(ClientError::Protocol("GrantResponse without a token".into()));
        }
        Ok(Grant { token: r.token, token_id: r.token_id, expires_at_s: r.expires_at_s })
    }

    /// Revoke a token by id (and every token granted from it); durable on the server.
    pub async fn revoke(&self, token_id: &str) -> Result<()> {
        self.raw().revoke(proto::RevokeRequest { token_id: token_id.to_string() }).await?;
        Ok(())
    }

    /// The same connection presenting `token` (a tenant key or a capability token) instead of
    /// this client's own: a grader handed an operate token builds its client with it.
    pub fn with_token(&self, token: &str) -> Result<Client> {
        Ok(self.with_auth(BearerAuth::new(Some(token))?))
    }
}

impl Sandbox {
    /// The owner token `Create` returned (kept by `serialize`/`connect`), if the server sent one.
    pub fn token(&self) -> Option<&str> {
        Some(self.inner.reference.token.as_str()).filter(|t| !t.is_empty())
    }

    /// A narrower token for this sandbox (see [`Client::grant`]).
    pub async fn grant(&self, scope: TokenScope, ttl_s: Option<f64>) -> Result<Grant> {
        self.client().grant(self.id(), scope, ttl_s).await
    }
}
