//! Who a request's program runs as and with what environment, resolved once per request (by
//! the dispatcher, before the program is started) from the image's own `/etc/passwd` and
//! `/etc/group`: an exec command and a session are launched alike.

use crate::protocol::FailureKind;
use crate::spawn::SpawnError;
use crate::users::{self, ExecUser};

/// A program's user and complete environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    pub user: ExecUser,
    pub env: Vec<(String, String)>,
}

impl Launch {
    /// Resolve `user` (`docker exec -u` syntax; `None`: root) and build the environment: the
    /// sandbox's (`base`), `HOME` for the user, then the call's `extra`.
    pub fn resolve(
        base: &[(String, String)],
        user: Option<&str>,
        extra: &[(String, String)],
    ) -> Result<Self, SpawnError> {
        let files = users::Files::read();
        let user = files.resolve(user).map_err(|e| (FailureKind::User, e))?;
        let root_home = files.resolve(None).map(|u| u.home).unwrap_or_else(|_| "/".into());
        let env = environment(base, extra, &user, &root_home);
        Ok(Self { user, env })
    }
}

/// The environment: `base`, `HOME` for `user`, then `extra` (a key already set is replaced in
/// place, a new one appended).
pub fn environment(
    base: &[(String, String)],
    extra: &[(String, String)],
    user: &ExecUser,
    root_home: &str,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = base.to_vec();
    // `docker exec -u 0` gave the agent root's HOME unless the sandbox's env sets one; a
    // program of another user gets its own, as `docker exec -u` would.
    if let Some(home) = env.iter_mut().find(|(k, _)| k == "HOME") {
        if home.1 == root_home {
            home.1 = user.home.clone();
        }
    } else {
        env.push(("HOME".into(), user.home.clone()));
    }
    for (k, v) in extra {
        match env.iter_mut().find(|(ek, _)| ek == k) {
            Some(slot) => slot.1 = v.clone(),
            None => env.push((k.clone(), v.clone())),
        }
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn user(home: &str) -> ExecUser {
        ExecUser { uid: 1000, gid: 1000, groups: Vec::new(), home: home.into() }
    }

    #[test]
    fn home_follows_the_user_unless_the_sandbox_set_its_own() {
        let base = pairs(&[("PATH", "/bin"), ("HOME", "/root")]);
        let env = environment(&base, &[], &user("/home/u"), "/root");
        assert_eq!(env, pairs(&[("PATH", "/bin"), ("HOME", "/home/u")]), "root's HOME becomes the user's");
        let base = pairs(&[("HOME", "/data")]);
        assert_eq!(environment(&base, &[], &user("/home/u"), "/root"), base, "a HOME the sandbox set stays");
        let env = environment(&pairs(&[("PATH", "/bin")]), &[], &user("/home/u"), "/root");
        assert_eq!(env, pairs(&[("PATH", "/bin"), ("HOME", "/home/u")]), "no HOME: the user's is added");
    }

    #[test]
    fn the_calls_variables_replace_in_place_and_append() {
        let base = pairs(&[("A", "1"), ("HOME", "/root"), ("B", "2")]);
        let extra = pairs(&[("B", "two"), ("C", "3"), ("HOME", "/x")]);
        let env = environment(&base, &extra, &user("/home/u"), "/root");
        assert_eq!(env, pairs(&[("A", "1"), ("HOME", "/x"), ("B", "two"), ("C", "3")]));
    }
}
