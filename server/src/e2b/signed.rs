//! envd's signed `/files` URLs (the SDK's `download_url` / `upload_url` of a secured sandbox):
//! `?signature=v1_<base64 sha256("path:operation:user:token[:expiration]")>` with an optional
//! `signature_expiration` (Unix seconds). The key is the sandbox's envd access token, which is
//! sandboxd's own capability token (`Grant`, scope operate): the front-end keeps the tokens it
//! handed out by sandbox, a URL is accepted when its signature is one of them over its path,
//! operation, user and expiration, and the call then runs as that token's caller (so a token
//! that expired or was revoked signs nothing). The URL names no sandbox: the token does.

use std::collections::HashMap;
use std::sync::Mutex;

use base64::Engine;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tonic::Status;

/// The tokens kept per sandbox (a sandbox connected more often keeps its newest ones).
const TOKENS_PER_SANDBOX: usize = 16;

/// envd access tokens by sandbox.
#[derive(Default)]
pub struct Tokens {
    by_sandbox: Mutex<HashMap<String, Vec<String>>>,
    remembered: std::sync::atomic::AtomicU64,
}

/// Every this many tokens handed out, those that no longer authenticate (expired, or of a
/// sandbox that ended without a kill through this front-end) are let go.
const PRUNE_EVERY: u64 = 64;

impl Tokens {
    /// `token` was handed out as `sandbox_id`'s envd access token; `valid` tells whether a
    /// kept token still authenticates (for the periodic pruning).
    pub fn remember(&self, sandbox_id: &str, token: &str, valid: impl Fn(&str) -> bool) {
        let count = self.remembered.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let mut kept = self.by_sandbox.lock().expect("tokens");
        if count.is_multiple_of(PRUNE_EVERY) {
            kept.retain(|_, list| {
                list.retain(|t| valid(t));
                !list.is_empty()
            });
        }
        let list = kept.entry(sandbox_id.to_string()).or_default();
        if !list.iter().any(|t| t == token) {
            list.push(token.to_string());
        }
        if list.len() > TOKENS_PER_SANDBOX {
            list.remove(0);
        }
    }

    /// `sandbox_id` is gone: its tokens sign nothing more.
    pub fn forget(&self, sandbox_id: &str) {
        self.by_sandbox.lock().expect("tokens").remove(sandbox_id);
    }

    /// The (sandbox, token) whose signature `signature` is, over this URL's fields.
    pub fn verify(&self, url: &SignedUrl<'_>) -> Result<(String, String), Status> {
        let kept = self.by_sandbox.lock().expect("tokens");
        for (sandbox_id, tokens) in kept.iter() {
            for token in tokens {
                let expected = signature(url.path, url.operation, url.user, token, url.expiration);
                if bool::from(expected.as_bytes().ct_eq(url.signature.as_bytes())) {
                    return Ok((sandbox_id.clone(), token.clone()));
                }
            }
        }
        Err(Status::unauthenticated("the signature matches no sandbox's access token"))
    }
}

/// What a signed URL claims.
#[derive(Clone, Copy)]
pub struct SignedUrl<'a> {
    pub path: &'a str,
    /// `read` (GET) or `write` (POST).
    pub operation: &'a str,
    /// `username` as the URL carries it ("" for the sandbox's own user).
    pub user: &'a str,
    pub signature: &'a str,
    pub expiration: Option<i64>,
}

/// E2B's v1 signature (the SDK computes the same one).
pub fn signature(path: &str, operation: &str, user: &str, token: &str, expiration: Option<i64>) -> String {
    let raw = match expiration {
        Some(at) => format!("{path}:{operation}:{user}:{token}:{at}"),
        None => format!("{path}:{operation}:{user}:{token}"),
    };
    let digest = Sha256::digest(raw.as_bytes());
    format!("v1_{}", base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest))
}

/// A URL whose signature is valid but whose expiration has passed is refused with E2B's words.
pub fn check_expiration(expiration: Option<i64>, now_s: i64) -> Result<(), Status> {
    match expiration {
        Some(at) if at < now_s => Err(Status::unauthenticated("signature is already expired")),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_the_sdks() {
        // e2b.sandbox.signature.get_signature("a.txt", "read", "user", "tok", None), computed by
        // the SDK (2.63.0).
        assert_eq!(
            signature("a.txt", "read", "user", "tok", None),
            "v1_wPjHOh/p+K3FbqiyGd5vwPNc/g4IPd8sigMxb1gqu9I"
        );
    }

    #[test]
    fn a_url_names_its_sandbox_by_the_token_that_signed_it() {
        let tokens = Tokens::default();
        tokens.remember("sbx-a", "token-a", |_| true);
        tokens.remember("sbx-b", "token-b", |_| true);
        let sig = signature("/f", "read", "", "token-b", Some(99));
        let url =
            SignedUrl { path: "/f", operation: "read", user: "", signature: &sig, expiration: Some(99) };
        assert_eq!(tokens.verify(&url).unwrap(), ("sbx-b".to_string(), "token-b".to_string()));
        // Another operation, path, user or expiration is another signature.
        for url in [
            SignedUrl { operation: "write", ..url },
            SignedUrl { path: "/g", ..url },
            SignedUrl { user: "root", ..url },
            SignedUrl { expiration: Some(100), ..url },
            SignedUrl { expiration: None, ..url },
        ] {
            assert_eq!(tokens.verify(&url).unwrap_err().code(), tonic::Code::Unauthenticated);
        }
        tokens.forget("sbx-b");
        assert!(tokens.verify(&url).is_err());
        for i in 0..PRUNE_EVERY {
            tokens.remember(&format!("sbx-{i}"), "stale", |t| t != "stale");
        }
        let kept = tokens.by_sandbox.lock().unwrap();
        assert!(kept.contains_key("sbx-a"), "a valid token is kept");
        assert!(!kept.contains_key("sbx-0"), "stale tokens are let go");
        assert!(kept.len() < PRUNE_EVERY as usize);
        drop(kept);
        assert!(check_expiration(Some(99), 100).unwrap_err().message().contains("already expired"));
        assert!(check_expiration(Some(100), 100).is_ok());
        assert!(check_expiration(None, 100).is_ok());
    }
}
