//! Bearer-token check for every RPC but health (`authorization: Bearer <token>`).

use std::sync::Arc;

use subtle::ConstantTimeEq;
use tonic::{Request, Status};

/// An interceptor that admits a request only with the right token; `None` admits everything.
#[derive(Clone, Default)]
pub struct TokenGate {
    token: Option<Arc<str>>,
}

impl TokenGate {
    pub fn new(token: Option<String>) -> Self {
        Self { token: token.map(|t| Arc::from(t.trim())) }
    }

    pub fn check<T>(&self, request: Request<T>) -> Result<Request<T>, Status> {
        let Some(token) = &self.token else { return Ok(request) };
        let given = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| Status::unauthenticated("missing `authorization: Bearer <token>`"))?;
        if bool::from(given.as_bytes().ct_eq(token.as_bytes())) {
            Ok(request)
        } else {
            Err(Status::unauthenticated("wrong bearer token"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_rules() {
        let auth = TokenGate::new(Some("s3cret\n".into()));
        assert_eq!(auth.check(Request::new(())).unwrap_err().code(), tonic::Code::Unauthenticated);
        let mut ok = Request::new(());
        ok.metadata_mut().insert("authorization", "Bearer s3cret".parse().unwrap());
        assert!(auth.check(ok).is_ok());
        let mut wrong = Request::new(());
        wrong.metadata_mut().insert("authorization", "Bearer nope".parse().unwrap());
        assert_eq!(auth.check(wrong).unwrap_err().code(), tonic::Code::Unauthenticated);
        assert!(TokenGate::new(None).check(Request::new(())).is_ok());
    }
}
