//! Signing keys with key ids (`server.auth.signing_key_file`): the first key signs, every key
//! verifies, so a key is rotated by putting the new one first and dropping the old one once
//! its tokens expired.
//!
//! The file: one key a line, `<kid> <secret>`, the secret at least 32 bytes; `#` comments and
//! blank lines are skipped. Without the setting the server makes one random key in
//! `<state_dir>/signing-keys` (mode 0600) on first start and keeps it, so tokens survive a
//! restart.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The shortest secret accepted: HS256 wants at least its output size.
pub const MIN_SECRET_BYTES: usize = 32;

/// One key: its id (the token header's `kid`) and secret.
#[derive(Clone)]
pub struct SigningKey {
    pub kid: String,
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey").field("kid", &self.kid).finish_non_exhaustive()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path} line {line}: {message}")]
    Format { path: String, line: usize, message: String },
    #[error("{path}: no key (one `<kid> <secret>` a line)")]
    Empty { path: String },
    #[error("cannot draw a random signing key: {0}")]
    Random(String),
}

/// Keys in file order (the first signs).
pub fn load(path: &Path) -> Result<Vec<SigningKey>, KeyError> {
    let shown = path.display().to_string();
    let text =
        std::fs::read_to_string(path).map_err(|source| KeyError::Io { path: shown.clone(), source })?;
    parse(&shown, &text)
}

fn parse(path: &str, text: &str) -> Result<Vec<SigningKey>, KeyError> {
    let mut keys: Vec<SigningKey> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let format = |message: String| KeyError::Format { path: path.into(), line: n + 1, message };
        let (kid, secret) =
            line.split_once(char::is_whitespace).ok_or_else(|| format("expected `<kid> <secret>`".into()))?;
        let secret = secret.trim();
        let kid_ok = !kid.is_empty()
            && kid.len() <= 64
            && kid.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.');
        if !kid_ok {
            return Err(format(format!("key id {kid:?}: 1 to 64 letters, digits, '-', '_' or '.'")));
        }
        if secret.len() < MIN_SECRET_BYTES {
            return Err(format(format!(
                "the secret of {kid:?} is {} bytes; at least {MIN_SECRET_BYTES}",
                secret.len()
            )));
        }
        if keys.iter().any(|k| k.kid == kid) {
            return Err(format(format!("key id {kid:?} appears twice")));
        }
        keys.push(SigningKey { kid: kid.into(), secret: secret.as_bytes().to_vec() });
    }
    if keys.is_empty() {
        return Err(KeyError::Empty { path: path.into() });
    }
    Ok(keys)
}

/// The keys in `path`, made (one random key, mode 0600) when the file does not exist yet.
pub fn load_or_generate(path: &Path) -> Result<Vec<SigningKey>, KeyError> {
    if !path.exists() {
        let mut raw = [0u8; 32];
        getrandom::getrandom(&mut raw).map_err(|e| KeyError::Random(e.to_string()))?;
        let secret: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        let kid = format!("k{}", crate::core::lease::now_ms());
        let shown = path.display().to_string();
        let io = |source| KeyError::Io { path: shown.clone(), source };
        // Written whole under a private name, then linked into place: two servers starting on
        // one state directory never read half a file, and the first link wins.
        let tmp = path.with_extension(format!("tmp-{}", uuid::Uuid::new_v4().simple()));
        let mut file =
            std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).map_err(io)?;
        file.write_all(format!("# made by sandboxd; the first key signs\n{kid} {secret}\n").as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(io)?;
        let linked = std::fs::hard_link(&tmp, path);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(e)),
        }
    }
    load(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_keys_in_order_and_names_what_is_wrong() {
        let keys = parse(
            "f",
            "# c\nnew 0123456789abcdef0123456789abcdef\n\nold abcdefabcdefabcdefabcdefabcdefabcdef\n",
        )
        .unwrap();
        assert_eq!(keys.iter().map(|k| k.kid.as_str()).collect::<Vec<_>>(), ["new", "old"]);
        let short = parse("f", "a short").unwrap_err().to_string();
        assert!(short.contains("line 1") && short.contains("at least 32"), "{short}");
        let dup = parse("f", "a 0123456789abcdef0123456789abcdef\na 0123456789abcdef0123456789abcdef")
            .unwrap_err()
            .to_string();
        assert!(dup.contains("twice"), "{dup}");
        assert!(matches!(parse("f", "# nothing"), Err(KeyError::Empty { .. })));
    }

    #[test]
    fn a_generated_key_is_kept_and_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("signing-keys");
        let first = load_or_generate(&path).unwrap();
        let again = load_or_generate(&path).unwrap();
        assert_eq!(
            (first[0].kid.clone(), first[0].secret.clone()),
            (again[0].kid.clone(), again[0].secret.clone())
        );
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    }
}
