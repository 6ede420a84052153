//! The shape rules of a pool both the config file and `CreatePool` apply (a leaf module: the
//! config's validation uses it without reaching the rest of the server).

/// The most sandboxes one pool may hold (`max`).
pub const MAX_POOL_SIZE: u32 = 1000;

/// A refused value: the field (under the caller's prefix) and what is allowed.
pub type Refusal = (String, String);

/// A pool name: 1-63 of `[a-z0-9_.-]`, starting with a letter or digit (it is a label value
/// and a command-line word).
pub fn check_name(field: &str, name: &str) -> Result<(), Refusal> {
    let ok = (1..=63).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_.-".contains(&b))
        && name.as_bytes()[0].is_ascii_alphanumeric();
    if ok {
        Ok(())
    } else {
        Err((
            field.to_string(),
            format!(
                "must be 1-63 characters of a-z, 0-9, '_', '.', '-', starting with a letter or digit (got {name:?})"
            ),
        ))
    }
}

/// `max` in 1..=MAX_POOL_SIZE, `target` in 0..=max; fields named `<prefix>.max` / `.target`.
pub fn check_sizes(prefix: &str, target: u32, max: u32) -> Result<(), Refusal> {
    if max == 0 || max > MAX_POOL_SIZE {
        return Err((format!("{prefix}.max"), format!("must be in 1..={MAX_POOL_SIZE} (got {max})")));
    }
    if target > max {
        return Err((format!("{prefix}.target"), format!("must be in 0..=max ({max}) (got {target})")));
    }
    Ok(())
}
