//! The caller's gRPC deadline (`grpc-timeout` header), so an exec never outlives its call.

use std::time::Duration;

use tonic::metadata::MetadataMap;

/// The deadline the caller set, if any.
pub fn grpc_timeout(metadata: &MetadataMap) -> Option<Duration> {
    parse(metadata.get("grpc-timeout")?.to_str().ok()?)
}

/// `grpc-timeout` values (`crate::grpc_timeout`, shared with the cluster relay).
pub use crate::grpc_timeout::parse;

/// The exec timeout: the one asked for, capped by the call's deadline less a margin for the
/// answer to travel back. Returns the timeout and whether the deadline set it.
pub fn cap(requested: Option<Duration>, deadline: Option<Duration>) -> (Option<Duration>, bool) {
    let Some(deadline) = deadline else { return (requested, false) };
    let budget = deadline.saturating_sub(margin(deadline)).max(Duration::from_millis(1));
    match requested {
        Some(r) if r <= budget => (Some(r), false),
        _ => (Some(budget), true),
    }
}

/// When the answer to a call with this deadline must leave: after the command's capped
/// timeout (the deadline less the margin), before the caller's own timer fires.
pub fn answer_by(deadline: Duration) -> Duration {
    deadline.saturating_sub(margin(deadline) / 2).max(Duration::from_millis(1))
}

fn margin(deadline: Duration) -> Duration {
    (deadline / 20).min(Duration::from_millis(250))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps() {
        let s = Duration::from_secs;
        assert_eq!(cap(Some(s(1)), None), (Some(s(1)), false));
        assert_eq!(cap(Some(s(1)), Some(s(10))), (Some(s(1)), false));
        let (t, capped) = cap(Some(s(100)), Some(s(10)));
        assert!(capped && t.unwrap() < s(10) && t.unwrap() > s(9));
        let by = answer_by(s(2));
        assert!(by > cap(None, Some(s(2))).0.unwrap() && by < s(2), "{by:?}");
        assert!(cap(None, Some(s(10))).1);
    }
}
