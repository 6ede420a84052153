//! The rules `spec.metadata` (and a `List` label filter) must follow, for every backend: they
//! are Docker's label rules, the strictest store a backend has, so metadata that passes here can
//! be stored as labels anywhere.

use std::collections::BTreeMap;

use crate::error::ProviderError;

/// At most this many metadata entries per sandbox.
pub const MAX_ENTRIES: usize = 64;
/// Longest key, in bytes (before the prefix).
pub const MAX_KEY_BYTES: usize = 128;
/// Longest value, in bytes.
pub const MAX_VALUE_BYTES: usize = 1024;
/// Keys and values of one sandbox together, in bytes.
pub const MAX_TOTAL_BYTES: usize = 16 * 1024;

/// Docker's label-key rules: lower-case letters, digits, `.` and `-`; starts and ends with a
/// letter or digit; no `..` or `--`.
pub fn validate_key(field: &str, key: &str) -> Result<(), ProviderError> {
    let allowed = "keys are 1 to 128 lower-case letters, digits, '.' and '-', starting and ending \
                   with a letter or digit, without '..' or '--' (Docker's label rules)";
    let edge_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let ok = !key.is_empty()
        && key.len() <= MAX_KEY_BYTES
        && key.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-')
        && edge_ok(key.chars().next())
        && edge_ok(key.chars().last())
        && !key.contains("..")
        && !key.contains("--");
    if ok {
        Ok(())
    } else {
        Err(ProviderError::invalid(field, format!("invalid key {key:?}: {allowed}")))
    }
}

/// Values are free text up to 1024 bytes without control characters (they end up in logs and
/// in `docker` command lines).
pub fn validate_value(field: &str, key: &str, value: &str) -> Result<(), ProviderError> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(ProviderError::invalid(
            field,
            format!("value of {key:?} is {} bytes; at most {MAX_VALUE_BYTES}", value.len()),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(ProviderError::invalid(
            field,
            format!("value of {key:?} must not contain control characters"),
        ));
    }
    Ok(())
}

/// Every entry valid, at most [`MAX_ENTRIES`], at most [`MAX_TOTAL_BYTES`] in all.
pub fn validate_metadata(field: &str, metadata: &BTreeMap<String, String>) -> Result<(), ProviderError> {
    if metadata.len() > MAX_ENTRIES {
        return Err(ProviderError::invalid(
            field,
            format!("{} entries; at most {MAX_ENTRIES}", metadata.len()),
        ));
    }
    let mut total = 0;
    for (k, v) in metadata {
        validate_key(field, k)?;
        validate_value(field, k, v)?;
        total += k.len() + v.len();
    }
    if total > MAX_TOTAL_BYTES {
        return Err(ProviderError::invalid(
            field,
            format!("keys and values take {total} bytes; at most {MAX_TOTAL_BYTES}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn keys_follow_docker_rules() {
        for good in ["run", "run-id", "team.alpha", "a", "x9", "0abc"] {
            assert!(validate_key("spec.metadata", good).is_ok(), "{good}");
        }
        for bad in ["", "Run", "run_id", "-run", "run.", "a..b", "a--b", "a b", "a=b", &"k".repeat(129)] {
            let err = validate_key("spec.metadata", bad).unwrap_err().to_string();
            assert!(err.contains("spec.metadata"), "{err}");
        }
    }

    #[test]
    fn bounds_and_values() {
        assert!(validate_metadata("spec.metadata", &map(&[("run", "r-1 with spaces, commas=ok")])).is_ok());
        let long = "v".repeat(MAX_VALUE_BYTES + 1);
        assert!(validate_metadata("spec.metadata", &map(&[("run", &long)])).is_err());
        assert!(validate_metadata("spec.metadata", &map(&[("run", "a\nb")])).is_err());
        let many: BTreeMap<String, String> =
            (0..=MAX_ENTRIES).map(|i| (format!("k{i}"), String::new())).collect();
        assert!(validate_metadata("spec.metadata", &many).unwrap_err().to_string().contains("at most 64"));
        let big: BTreeMap<String, String> = (0..20).map(|i| (format!("k{i}"), "v".repeat(1000))).collect();
        assert!(validate_metadata("spec.metadata", &big).unwrap_err().to_string().contains("bytes"));
    }
}
