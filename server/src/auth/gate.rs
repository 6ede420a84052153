//! The interceptor in front of every RPC but health: reads `authorization: Bearer <…>` and
//! puts the [`Principal`] it names in the request's extensions. A JWT-shaped value is verified
//! as a capability token; any other value is compared with the operator key and the tenants'
//! keys. A server with neither admits every call as the operator, as before tenants existed.

use std::sync::Arc;

use subtle::ConstantTimeEq;
use tonic::{Request, Status};

use super::principal::Principal;
use super::tenants::Tenants;
use super::token::{looks_like_token, Tokens};

#[derive(Clone)]
pub struct AccessGate {
    operator_key: Option<Arc<str>>,
    tenants: Option<Arc<Tenants>>,
    tokens: Arc<Tokens>,
}

impl AccessGate {
    pub fn new(operator_key: Option<String>, tenants: Option<Arc<Tenants>>, tokens: Arc<Tokens>) -> Self {
        Self { operator_key: operator_key.map(|t| Arc::from(t.trim())), tenants, tokens }
    }

    fn open(&self) -> bool {
        self.operator_key.is_none() && self.tenants.is_none()
    }

    pub fn check<T>(&self, mut request: Request<T>) -> Result<Request<T>, Status> {
        let principal = self.principal(&request)?;
        if let Some(tenant) = principal.tenant() {
            crate::otel::attribute("tenant", tenant.to_string());
        }
        request.extensions_mut().insert(principal);
        Ok(request)
    }

    /// The caller named by a credential that arrived outside gRPC metadata (the E2B and
    /// console front-ends' headers and messages), checked exactly as `authorization: Bearer`.
    pub fn principal_of_credential(&self, credential: Option<&str>) -> Result<Principal, Status> {
        let mut request = Request::new(());
        if let Some(value) = credential {
            let bearer = format!("Bearer {}", value.trim())
                .parse()
                .map_err(|_| Status::unauthenticated("the credential is not a valid header value"))?;
            request.metadata_mut().insert("authorization", bearer);
        }
        let checked = self.check(request)?;
        Ok(Principal::of(&checked))
    }

    fn principal<T>(&self, request: &Request<T>) -> Result<Principal, Status> {
        let bearer = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        let Some(bearer) = bearer else {
            if self.open() {
                return Ok(Principal::Operator);
            }
            return Err(Status::unauthenticated("missing `authorization: Bearer <token>`"));
        };
        if looks_like_token(bearer) {
            return match self.tokens.verify(bearer) {
                Ok(claims) => Ok(Principal::Token(Arc::new(claims))),
                Err(e) => Err(Status::unauthenticated(e.to_string())),
            };
        }
        if let Some(key) = &self.operator_key {
            if bool::from(bearer.as_bytes().ct_eq(key.as_bytes())) {
                return Ok(Principal::Operator);
            }
        }
        if let Some(tenant) = self.tenants.as_ref().and_then(|t| t.by_key(bearer)) {
            return Ok(Principal::Tenant(tenant));
        }
        if self.open() {
            return Ok(Principal::Operator);
        }
        Err(Status::unauthenticated("wrong bearer token"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::keys::SigningKey;
    use crate::auth::revocations::Revocations;
    use crate::auth::scope::Scope;
    use crate::auth::tenants::key_sha256;

    fn with_bearer(value: &str) -> Request<()> {
        let mut r = Request::new(());
        r.metadata_mut().insert("authorization", format!("Bearer {value}").parse().unwrap());
        r
    }

    #[test]
    fn bearer_names_operator_tenant_or_token() {
        let dir = tempfile::tempdir().unwrap();
        let tokens = Arc::new(Tokens::new(
            vec![SigningKey { kid: "k".into(), secret: vec![7; 32] }],
            Arc::new(Revocations::open(dir.path()).unwrap()),
        ));
        let tenants =
            Tenants::parse(&format!("tenants: [{{name: red, key_sha256: {}}}]", key_sha256("red"))).unwrap();
        let gate = AccessGate::new(Some("op\n".into()), Some(Arc::new(tenants)), tokens.clone());
        let code = |r: Result<Request<()>, Status>| r.map(|_| ()).unwrap_err().code();
        assert_eq!(code(gate.check(Request::new(()))), tonic::Code::Unauthenticated);
        assert_eq!(code(gate.check(with_bearer("nope"))), tonic::Code::Unauthenticated);
        let op = gate.check(with_bearer("op")).unwrap();
        assert!(matches!(Principal::of(&op), Principal::Operator));
        let red = gate.check(with_bearer("red")).unwrap();
        assert_eq!(Principal::of(&red).tenant(), Some("red"));
        let token = tokens.mint(&Tokens::claims("s", Scope::Read, Some("red".into()), 60, vec![]));
        let held = gate.check(with_bearer(&token)).unwrap();
        assert!(matches!(Principal::of(&held), Principal::Token(_)));

        // No keys at all: everything is the operator, a token still narrows.
        let open = AccessGate::new(None, None, tokens.clone());
        assert!(matches!(Principal::of(&open.check(Request::new(())).unwrap()), Principal::Operator));
        assert!(matches!(Principal::of(&open.check(with_bearer("x")).unwrap()), Principal::Operator));
        assert!(matches!(Principal::of(&open.check(with_bearer(&token)).unwrap()), Principal::Token(_)));
    }
}
