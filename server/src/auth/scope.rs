//! What a caller may do on one sandbox: the three token scopes, ordered by width, and which
//! scope each RPC needs.

use serde::{Deserialize, Serialize};

/// A token's scope. `Owner` > `Operate` > `Read`: a wider scope allows all a narrower one does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Status, download, stat, list-dir, watch, diff.
    Read,
    /// Commands, files, terminals, ports, status; not ending or reshaping the sandbox.
    Operate,
    /// Everything, including close, set-timeout, snapshot, fork, pause, resume and grant.
    Owner,
}

impl Scope {
    /// Whether a holder of `self` may do what needs `needed`.
    pub fn allows(self, needed: Scope) -> bool {
        self >= needed
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Operate => "operate",
            Scope::Owner => "owner",
        }
    }

    /// The wire enum (`TokenScope`); `None` for `TOKEN_SCOPE_UNSPECIFIED` or an unknown value.
    pub fn from_wire(value: i32) -> Option<Scope> {
        use sandboxd_proto::v1::TokenScope;
        match TokenScope::try_from(value).ok()? {
            TokenScope::Owner => Some(Scope::Owner),
            TokenScope::Operate => Some(Scope::Operate),
            TokenScope::Read => Some(Scope::Read),
            TokenScope::Unspecified => None,
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wider_allows_narrower_never_the_reverse() {
        assert!(Scope::Owner.allows(Scope::Operate) && Scope::Owner.allows(Scope::Read));
        assert!(Scope::Operate.allows(Scope::Read) && Scope::Operate.allows(Scope::Operate));
        assert!(!Scope::Operate.allows(Scope::Owner) && !Scope::Read.allows(Scope::Operate));
        assert_eq!(Scope::from_wire(0), None);
        assert_eq!(Scope::from_wire(2), Some(Scope::Operate));
        assert_eq!(Scope::from_wire(99), None);
    }
}
