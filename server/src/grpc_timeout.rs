//! The `grpc-timeout` header's value as a duration: one parser for the service's deadlines
//! (`service/deadline.rs`) and the cluster relay (`service/forward.rs`).

use std::time::Duration;

/// `<digits><unit>` (units H, M, S, m, u, n); anything else is `None`.
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
        // (The cluster relay's own cases.)
        assert_eq!(parse("1500m"), Some(Duration::from_millis(1500)));
        assert_eq!(parse("2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse("x"), None);
        assert_eq!(parse(""), None);
    }
}
