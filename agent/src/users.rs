//! `docker exec -u` semantics without NSS: the user spec resolved against the container's own
//! `/etc/passwd` and `/etc/group`, as runc's `GetExecUser` does (a static binary must not call
//! `getpwnam`: glibc would try to load NSS modules the image does not have).

/// Who a command runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecUser {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (the groups that list the user by name; none with an explicit group).
    pub groups: Vec<u32>,
    /// `HOME` when the environment does not set one.
    pub home: String,
}

/// The image's `/etc/passwd` and `/etc/group` as read once for a request (a missing file reads
/// as empty: numbers still resolve, names do not).
pub struct Files {
    passwd: String,
    group: String,
}

impl Files {
    pub fn read() -> Self {
        Self {
            passwd: std::fs::read_to_string("/etc/passwd").unwrap_or_default(),
            group: std::fs::read_to_string("/etc/group").unwrap_or_default(),
        }
    }

    /// [`resolve`] against these files.
    pub fn resolve(&self, spec: Option<&str>) -> Result<ExecUser, String> {
        resolve(spec, &self.passwd, &self.group)
    }
}

struct PasswdEntry<'a> {
    name: &'a str,
    uid: u32,
    gid: u32,
    home: &'a str,
}

struct GroupEntry<'a> {
    name: &'a str,
    gid: u32,
    members: Vec<&'a str>,
}

fn passwd_entries(text: &str) -> impl Iterator<Item = PasswdEntry<'_>> {
    text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')).filter_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        Some(PasswdEntry {
            name: f.first()?,
            uid: f.get(2)?.trim().parse().ok()?,
            gid: f.get(3)?.trim().parse().ok()?,
            home: f.get(5).copied().unwrap_or(""),
        })
    })
}

fn group_entries(text: &str) -> impl Iterator<Item = GroupEntry<'_>> {
    text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')).filter_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        Some(GroupEntry {
            name: f.first()?,
            gid: f.get(2)?.trim().parse().ok()?,
            members: f
                .get(3)
                .map(|m| m.split(',').map(str::trim).filter(|m| !m.is_empty()).collect())
                .unwrap_or_default(),
        })
    })
}

/// Resolve `user[:group]` (names or numbers; empty means root) against the files' contents.
pub fn resolve(spec: Option<&str>, passwd: &str, group: &str) -> Result<ExecUser, String> {
    let spec = spec.unwrap_or("");
    let (user_arg, group_arg) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g).filter(|g| !g.is_empty())),
        None => (spec, None),
    };
    let mut user = ExecUser { uid: 0, gid: 0, groups: Vec::new(), home: "/".into() };
    let uid_arg: Option<u32> = user_arg.parse().ok();
    let found = passwd_entries(passwd).find(|e| match (user_arg, uid_arg) {
        ("", _) => e.uid == 0,
        (_, Some(uid)) => e.uid == uid,
        (name, None) => e.name == name,
    });
    let matched_name = match found {
        Some(e) => {
            user.uid = e.uid;
            user.gid = e.gid;
            user.home = e.home.to_string();
            Some(e.name)
        }
        None => match (user_arg, uid_arg) {
            ("", _) => None,
            (_, Some(uid)) => {
                user.uid = uid;
                None
            }
            (name, None) => {
                return Err(format!("unable to find user {name}: no matching entries in passwd file"))
            }
        },
    };
    match group_arg {
        Some(g) => {
            let gid_arg: Option<u32> = g.parse().ok();
            let found = group_entries(group).find(|e| match gid_arg {
                Some(gid) => e.gid == gid,
                None => e.name == g,
            });
            user.gid = match (found, gid_arg) {
                (Some(e), _) => e.gid,
                (None, Some(gid)) => gid,
                (None, None) => {
                    return Err(format!("unable to find group {g}: no matching entries in group file"))
                }
            };
        }
        None => {
            if let Some(name) = matched_name {
                user.groups =
                    group_entries(group).filter(|e| e.members.contains(&name)).map(|e| e.gid).collect();
            }
        }
    }
    Ok(user)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\n\
        nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n\
        sandbox:x:1000:1000::/home/sandbox:/bin/bash\n";
    const GROUP: &str = "root:x:0:\nnogroup:x:65534:\nsandbox:x:1000:\n\
        wheel:x:10:sandbox,other\ndocker:x:999: sandbox \n";

    #[test]
    fn names_uids_and_groups_resolve_like_docker_exec() {
        let root = resolve(None, PASSWD, GROUP).unwrap();
        assert_eq!((root.uid, root.gid, root.home.as_str()), (0, 0, "/root"));
        let by_name = resolve(Some("sandbox"), PASSWD, GROUP).unwrap();
        assert_eq!((by_name.uid, by_name.gid), (1000, 1000));
        assert_eq!(by_name.groups, vec![10, 999], "supplementary groups list the user by name");
        assert_eq!(by_name.home, "/home/sandbox");
        let by_uid = resolve(Some("1000"), PASSWD, GROUP).unwrap();
        assert_eq!(by_uid, by_name, "a uid with a passwd entry is that user");
        let explicit = resolve(Some("sandbox:nogroup"), PASSWD, GROUP).unwrap();
        assert_eq!((explicit.uid, explicit.gid), (1000, 65534));
        assert!(explicit.groups.is_empty(), "an explicit group replaces the supplementary ones");
        let numeric = resolve(Some("4242:4343"), PASSWD, GROUP).unwrap();
        assert_eq!((numeric.uid, numeric.gid, numeric.home.as_str()), (4242, 4343, "/"));
        let bare = resolve(Some("4242"), PASSWD, GROUP).unwrap();
        assert_eq!((bare.uid, bare.gid), (4242, 0), "a uid without an entry keeps gid 0");
    }

    #[test]
    fn unknown_names_are_errors_naming_them() {
        let e = resolve(Some("ghost"), PASSWD, GROUP).unwrap_err();
        assert!(e.contains("ghost"), "{e}");
        let e = resolve(Some("sandbox:ghosts"), PASSWD, GROUP).unwrap_err();
        assert!(e.contains("ghosts"), "{e}");
        let none = resolve(Some("root"), "", "").unwrap_err();
        assert!(none.contains("root"), "no passwd file: names cannot resolve ({none})");
        assert_eq!(resolve(Some("0"), "", "").unwrap().uid, 0, "numbers need no file");
    }
}
