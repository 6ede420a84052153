//! Capability tokens: JWTs (HS256, `jsonwebtoken`; no hand-written crypto) naming one sandbox,
//! a scope, the tenant, an expiry, and the ids of the tokens it was granted from. Verified
//! with the signing keys alone plus the revocation set, so any replica holding the keys and
//! the set can verify.

use std::sync::Arc;

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use super::keys::SigningKey;
use super::revocations::{now_s, Revocations};
use super::scope::Scope;

/// What a token says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The sandbox id.
    pub sub: String,
    pub scope: Scope,
    /// The tenant the sandbox belongs to (none: the operator's sandbox).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ten: Option<String>,
    /// Unix seconds.
    pub exp: u64,
    pub iat: u64,
    /// The token id (`Revoke`).
    pub jti: String,
    /// Ids of the tokens this one was granted from, oldest first: revoking any ends this one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chain: Vec<String>,
}

impl Claims {
    /// Every id whose revocation ends this token.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.chain.iter().map(String::as_str).chain(std::iter::once(self.jti.as_str()))
    }
}

/// Why a token is refused (all UNAUTHENTICATED on the wire).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    #[error("the token has expired")]
    Expired,
    #[error("the token was revoked")]
    Revoked,
    #[error("the token is signed with an unknown key id")]
    UnknownKey,
    #[error("the token is not valid: {0}")]
    Invalid(String),
}

/// Mints and verifies tokens.
pub struct Tokens {
    keys: Vec<SigningKey>,
    revocations: Arc<Revocations>,
}

impl Tokens {
    pub fn new(keys: Vec<SigningKey>, revocations: Arc<Revocations>) -> Self {
        assert!(!keys.is_empty(), "Tokens needs at least one signing key");
        Self { keys, revocations }
    }

    pub fn revocations(&self) -> &Arc<Revocations> {
        &self.revocations
    }

    /// A new token for `claims` with the signing key (the first).
    pub fn mint(&self, claims: &Claims) -> String {
        let key = &self.keys[0];
        let header = Header { kid: Some(key.kid.clone()), ..Header::new(Algorithm::HS256) };
        jsonwebtoken::encode(&header, claims, &EncodingKey::from_secret(&key.secret))
            .expect("HS256 encoding of plain claims cannot fail")
    }

    /// Claims for a new token (fresh id, issued now, `ttl_s` from now).
    pub fn claims(
        sandbox: &str,
        scope: Scope,
        tenant: Option<String>,
        ttl_s: u64,
        chain: Vec<String>,
    ) -> Claims {
        let now = now_s();
        Claims {
            sub: sandbox.into(),
            scope,
            ten: tenant,
            exp: now.saturating_add(ttl_s),
            iat: now,
            jti: uuid::Uuid::new_v4().simple().to_string(),
            chain,
        }
    }

    /// The claims of a valid, unexpired, unrevoked token signed by one of the keys.
    pub fn verify(&self, token: &str) -> Result<Claims, TokenError> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| TokenError::Invalid(e.to_string()))?;
        let kid = header.kid.ok_or(TokenError::UnknownKey)?;
        let key = self.keys.iter().find(|k| k.kid == kid).ok_or(TokenError::UnknownKey)?;
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 0;
        validation.set_required_spec_claims(&["exp", "sub"]);
        let data = jsonwebtoken::decode::<Claims>(token, &DecodingKey::from_secret(&key.secret), &validation)
            .map_err(|e| match e.kind() {
                jsonwebtoken::errors::ErrorKind::ExpiredSignature => TokenError::Expired,
                _ => TokenError::Invalid(e.to_string()),
            })?;
        let claims = data.claims;
        // `jsonwebtoken` accepts `exp == now`; a token is valid strictly before its expiry.
        if claims.exp <= now_s() {
            return Err(TokenError::Expired);
        }
        if claims.ids().any(|id| self.revocations.is_revoked(id)) {
            return Err(TokenError::Revoked);
        }
        Ok(claims)
    }
}

/// Whether a bearer value has a JWT's shape (three base64url parts), so it is verified as a
/// token rather than compared with the keys.
pub fn looks_like_token(bearer: &str) -> bool {
    bearer.starts_with("eyJ") && bearer.split('.').count() == 3
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(kid: &str, fill: u8) -> SigningKey {
        SigningKey { kid: kid.into(), secret: vec![fill; 32] }
    }

    fn tokens(keys: Vec<SigningKey>, dir: &std::path::Path) -> Tokens {
        Tokens::new(keys, Arc::new(Revocations::open(dir).unwrap()))
    }

    #[test]
    fn round_trip_rotation_expiry_revocation_and_tampering() {
        let dir = tempfile::tempdir().unwrap();
        let old = tokens(vec![key("old", 1)], dir.path());
        let claims = Tokens::claims("sbx-1", Scope::Operate, Some("red".into()), 60, vec!["parent".into()]);
        let by_old = old.mint(&claims);
        assert!(looks_like_token(&by_old));
        assert_eq!(old.verify(&by_old).unwrap(), claims);

        // Rotation: the new key signs, the old one still verifies; a server without it refuses.
        let rotated = tokens(vec![key("new", 2), key("old", 1)], dir.path());
        assert_eq!(rotated.verify(&by_old).unwrap(), claims);
        let by_new = rotated.mint(&claims);
        assert_eq!(old.verify(&by_new), Err(TokenError::UnknownKey));
        // Same kid, another secret: the signature fails.
        let forged = tokens(vec![key("old", 9)], dir.path()).mint(&claims);
        assert!(matches!(old.verify(&forged), Err(TokenError::Invalid(_))));

        let mut expired = claims.clone();
        expired.exp = now_s().saturating_sub(1);
        assert_eq!(old.verify(&old.mint(&expired)), Err(TokenError::Expired));

        // Revoking a parent ends the child.
        old.revocations().revoke("parent", now_s() + 60).unwrap();
        assert_eq!(old.verify(&by_old), Err(TokenError::Revoked));
        assert!(matches!(old.verify("eyJ.not.atoken"), Err(TokenError::Invalid(_))));
    }
}
