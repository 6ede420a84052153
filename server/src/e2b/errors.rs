//! Refusals as E2B's SDK reads them: the control plane and `/files` answer
//! `{"code": <http status>, "message": "..."}` with the status the SDK maps to its exceptions
//! (400 InvalidArgument, 401 Authentication, 404 NotFound, 409 conflict, 429 RateLimit, 502
//! sandbox unavailable, 507 NotEnoughSpace); Connect calls answer Connect errors (connect.rs).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tonic::{Code, Status};

/// The HTTP status E2B uses for what a gRPC code says.
pub fn http_status(code: Code) -> StatusCode {
    match code {
        Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted | Code::FailedPrecondition => StatusCode::CONFLICT,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// E2B's error body for `status` at `http`.
pub fn body(http: StatusCode, message: &str) -> Response {
    (http, axum::Json(serde_json::json!({ "code": http.as_u16(), "message": message }))).into_response()
}

/// A refused REST or `/files` call. A refusal with a retry delay (CAPACITY, QUOTA: the
/// status's `google.rpc.RetryInfo`) is a 429 with `Retry-After` in whole seconds, rounded up,
/// and the delay in milliseconds in the body (`retryAfterMs`).
pub fn rest(status: Status) -> Response {
    let http = http_status(status.code());
    let Some(delay) = crate::core::failure::retry_after_of(&status) else {
        return body(http, status.message());
    };
    let json = serde_json::json!({
        "code": http.as_u16(),
        "message": status.message(),
        "retryAfterMs": delay.as_millis() as u64,
    });
    let seconds = delay.as_secs() + u64::from(delay.subsec_nanos() > 0);
    (http, [(axum::http::header::RETRY_AFTER, seconds.max(1).to_string())], axum::Json(json)).into_response()
}

/// Anything else on the listener.
pub async fn no_route(uri: axum::http::Uri) -> Response {
    body(StatusCode::NOT_FOUND, &format!("no such E2B route: {}", uri.path()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_the_statuses_the_sdk_raises_from() {
        assert_eq!(http_status(Code::NotFound), StatusCode::NOT_FOUND);
        assert_eq!(http_status(Code::Unauthenticated), StatusCode::UNAUTHORIZED);
        assert_eq!(http_status(Code::InvalidArgument), StatusCode::BAD_REQUEST);
        assert_eq!(http_status(Code::ResourceExhausted), StatusCode::TOO_MANY_REQUESTS);
    }

    #[test]
    fn a_refusal_with_a_retry_delay_is_a_429_saying_when_to_come_back() {
        let busy = crate::error::ProviderError::Busy {
            message: "no start slot".into(),
            retry_after: std::time::Duration::from_millis(1500),
        };
        let response = rest(Status::from(busy));
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers().get("retry-after").unwrap(), "2");
        let plain = rest(Status::not_found("x"));
        assert!(plain.headers().get("retry-after").is_none());
    }
}
