//! The static agent binary, embedded at build time (see `server/build.rs`) and written once to
//! a content-addressed host path that every sandbox bind-mounts read-only.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The agent, as built from `agent/` for this server.
pub const AGENT_BINARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/sandboxd-agent"));

/// Where the agent sits in every sandbox.
pub const AGENT_PATH_IN_SANDBOX: &str = "/.sandboxd/agent";

/// Write the agent to `dir/agent-<sha256 prefix>` (0755, owned by this process's user) unless
/// an identical file is already there; the path to bind-mount.
pub fn install(dir: &Path) -> std::io::Result<PathBuf> {
    let digest = Sha256::digest(AGENT_BINARY);
    let hex: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
    let path = dir.join(format!("agent-{hex}"));
    std::fs::create_dir_all(dir)?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let dir_meta = std::fs::metadata(dir)?;
    if dir_meta.uid() != me || dir_meta.mode() & 0o022 != 0 {
        return Err(std::io::Error::other(format!(
            "{} must be owned by uid {me} and writable by nobody else (it holds the binary every \
             sandbox runs as root)",
            dir.display()
        )));
    }
    if let Ok(existing) = std::fs::read(&path) {
        let meta = std::fs::metadata(&path)?;
        if existing == AGENT_BINARY && meta.uid() == me && meta.mode() & 0o7777 == 0o755 {
            return Ok(path);
        }
    }
    let mut temp = tempfile::NamedTempFile::new_in(dir)?;
    temp.write_all(AGENT_BINARY)?;
    temp.as_file().sync_all()?;
    temp.as_file().set_permissions(std::fs::Permissions::from_mode(0o755))?;
    temp.persist(&path).map_err(|e| e.error)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_agent_is_a_static_elf() {
        assert_eq!(&AGENT_BINARY[..4], b"\x7fELF");
        // A static executable has no program interpreter (PT_INTERP), so it needs no loader
        // or libc in the image.
        let needle = b"/lib64/ld-linux";
        assert!(!AGENT_BINARY.windows(needle.len()).any(|w| w == needle), "the agent must be static");
    }

    #[test]
    fn install_is_content_addressed_and_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let first = install(dir.path()).unwrap();
        let second = install(dir.path()).unwrap();
        assert_eq!(first, second);
        assert_eq!(std::fs::read(&first).unwrap(), AGENT_BINARY);
        assert_eq!(std::fs::metadata(&first).unwrap().mode() & 0o7777, 0o755);
        std::fs::write(&first, b"tampered").unwrap();
        assert_eq!(
            std::fs::read(install(dir.path()).unwrap()).unwrap(),
            AGENT_BINARY,
            "a changed file is replaced"
        );
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(install(dir.path()).is_err(), "a world-writable directory is refused");
    }
}
