//! The caller's gRPC deadline (`grpc-timeout` header), so an exec never outlives its call.

use std::time::Duration;

use tonic::metadata::MetadataMap;

/// The deadline the caller set, if any.
pub fn grpc_timeout(metadata: &MetadataMap) -> Option<Duration> {
    parse(metadata.get("grpc-timeout")?.to_str().ok()?)
}

/// `grpc-timeout` values: up to 8 digits and a unit (H, M, S, m, u, n).
pub fn parse(value: &str) -> Option<Duration> {
    if value.len() < 2 {
        return None;
    }
    let (digits, unit) = value.split_at(value.len() - 1);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The exec timeout: the one asked for, capped by the call's deadline less a margin for the
/// answer to travel back. Returns the timeout and whether the deadline set it.
pub fn cap(requested: Option<Duration>, deadline: Option<Duration>) -> (Option<Duration>, bool) {
    let Some(deadline) = deadline else { return (requested, false) };
    let margin = (deadline / 20).min(Duration::from_millis(250));
    let budget = deadline.saturating_sub(margin).max(Duration::from_millis(1));
    match requested {
        Some(r) if r <= budget => (Some(r), false),
        _ => (Some(budget), true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse("5S"), Some(Duration::from_secs(5)));
        assert_eq!(parse("100m"), Some(Duration::from_millis(100)));
        assert_eq!(parse("2M"), Some(Duration::from_secs(120)));
        assert_eq!(parse("x"), None);
        assert_eq!(parse("5Q"), None);
    }

    #[test]
    fn caps() {
        let s = Duration::from_secs;
        assert_eq!(cap(Some(s(1)), None), (Some(s(1)), false));
        assert_eq!(cap(Some(s(1)), Some(s(10))), (Some(s(1)), false));
        let (t, capped) = cap(Some(s(100)), Some(s(10)));
        assert!(capped && t.unwrap() < s(10) && t.unwrap() > s(9));
        assert!(cap(None, Some(s(10))).1);
    }
}
