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

/// A refused REST or `/files` call.
pub fn rest(status: Status) -> Response {
    body(http_status(status.code()), status.message())
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
}
