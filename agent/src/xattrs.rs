//! Extended attributes in the `user.` namespace: read with every file entry and set on an
//! upload's new file (E2B's per-file metadata is `user.e2b.*`). Other namespaces (`security.`,
//! `trusted.`, `system.`) belong to the system and are neither read nor written. Calls go through
//! libc directly: the agent depends on nothing else.

use std::ffi::CString;
use std::os::fd::AsRawFd;

use crate::protocol::{Xattr, MAX_XATTRS, MAX_XATTR_VALUE, USER_XATTR_PREFIX};

/// Most bytes of names and values one entry carries (its frame stays far below the server's
/// bound whatever a process in the sandbox set).
pub const MAX_ENTRY_XATTR_BYTES: usize = 64 * 1024;

/// The `user.` attributes of `path` (following a link: links themselves cannot carry them),
/// by name; empty where the filesystem has none or refuses to say.
pub fn read_user(path: &[u8]) -> Vec<Xattr> {
    let Ok(c) = CString::new(path) else { return Vec::new() };
    let names = match list(&c) {
        Some(names) => names,
        None => return Vec::new(),
    };
    let mut out = Vec::new();
    let mut total = 0usize;
    for name in names.split(|b| *b == 0).filter(|n| n.starts_with(USER_XATTR_PREFIX)) {
        if out.len() == MAX_XATTRS {
            break;
        }
        let Ok(cname) = CString::new(name) else { continue };
        let Some(value) = get(&c, &cname) else { continue };
        total += name.len() + value.len();
        if total > MAX_ENTRY_XATTR_BYTES {
            break;
        }
        out.push(Xattr { name: name.to_vec(), value });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The NUL-separated names `listxattr(2)` gives, read into a buffer sized by a first call.
fn list(path: &CString) -> Option<Vec<u8>> {
    for _ in 0..3 {
        // SAFETY: a NULL buffer of size 0 asks only for the size.
        let want = unsafe { libc::listxattr(path.as_ptr(), std::ptr::null_mut(), 0) };
        if want <= 0 {
            return None;
        }
        let mut buf = vec![0u8; want as usize];
        // SAFETY: `buf` holds `buf.len()` writable bytes.
        let got = unsafe { libc::listxattr(path.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if got >= 0 {
            buf.truncate(got as usize);
            return Some(buf);
        }
        // ERANGE: the list grew between the calls; ask again.
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::ERANGE) {
            return None;
        }
    }
    None
}

/// One attribute's value, `None` when it went away or is larger than [`MAX_XATTR_VALUE`].
fn get(path: &CString, name: &CString) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; MAX_XATTR_VALUE];
    // SAFETY: `buf` holds `buf.len()` writable bytes.
    let got = unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if got < 0 {
        return None;
    }
    buf.truncate(got as usize);
    Some(buf)
}

/// Set each attribute on the open `file`.
pub fn set_all(file: &std::fs::File, xattrs: &[Xattr]) -> std::io::Result<()> {
    for x in xattrs {
        let name = CString::new(x.name.clone()).map_err(std::io::Error::other)?;
        // SAFETY: the fd is open for the call; the value is `x.value.len()` readable bytes.
        let rc = unsafe {
            libc::fsetxattr(file.as_raw_fd(), name.as_ptr(), x.value.as_ptr().cast(), x.value.len(), 0)
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::check_xattrs as check;
    use std::os::unix::ffi::OsStrExt;

    fn x(name: &str, value: &str) -> Xattr {
        Xattr { name: name.into(), value: value.into() }
    }

    #[test]
    fn user_attributes_are_set_read_and_checked() {
        let dir = std::env::temp_dir().join(format!("sandboxd-agent-xattrs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        let file = std::fs::File::create(&path).unwrap();
        let want = vec![x("user.e2b.author", "mish"), x("user.e2b.purpose", "upload")];
        match set_all(&file, &want) {
            Ok(()) => assert_eq!(read_user(path.as_os_str().as_bytes()), want),
            // A temp directory on a filesystem without user xattrs (tmpfs before 6.6): nothing
            // to read back, and the error names it.
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "{e}"),
        }
        assert!(read_user(b"/no/such/path").is_empty());
        assert!(check(&want).is_ok());
        assert!(check(&[x("trusted.a", "1")]).unwrap_err().contains("user. namespace"));
        assert!(check(&[x("user.", "1")]).is_err());
        let big = Xattr { name: b"user.big".to_vec(), value: vec![0; MAX_XATTR_VALUE + 1] };
        assert!(check(&[big]).unwrap_err().contains("at most"));
        assert!(check(&vec![x("user.a", "1"); MAX_XATTRS + 1]).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
