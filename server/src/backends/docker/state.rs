//! Docker's container states (`State.Status`) as a type, and what each means for a sandbox.

use crate::core::spec::SandboxStatus;

/// A container's `State.Status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerState {
    Created,
    Running,
    Paused,
    Restarting,
    Removing,
    Exited,
    Dead,
    /// A state this version does not know (kept for messages).
    Other(String),
}

impl ContainerState {
    /// From docker's word for it (any case, surrounding space ignored).
    pub fn parse(state: &str) -> Self {
        match state.trim().to_ascii_lowercase().as_str() {
            "created" => Self::Created,
            "running" => Self::Running,
            "paused" => Self::Paused,
            "restarting" => Self::Restarting,
            "removing" => Self::Removing,
            "exited" => Self::Exited,
            "dead" => Self::Dead,
            other => Self::Other(other.to_string()),
        }
    }

    /// The sandbox lifecycle state: `created|restarting` starting, `exited|removing|dead`
    /// stopped, anything unknown unknown.
    pub fn sandbox_status(&self) -> SandboxStatus {
        match self {
            Self::Running => SandboxStatus::Running,
            Self::Paused => SandboxStatus::Paused,
            Self::Created | Self::Restarting => SandboxStatus::Starting,
            Self::Exited | Self::Removing | Self::Dead => SandboxStatus::Stopped,
            Self::Other(_) => SandboxStatus::Unknown,
        }
    }

    /// Whether processes in it can be reached right now.
    pub fn is_running(&self) -> bool {
        *self == Self::Running
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_map_to_sandbox_statuses() {
        use SandboxStatus::*;
        for (s, want) in [
            ("running", Running),
            ("paused", Paused),
            ("created", Starting),
            ("restarting", Starting),
            ("exited", Stopped),
            ("removing", Stopped),
            ("dead", Stopped),
            ("weird", Unknown),
        ] {
            assert_eq!(ContainerState::parse(s).sandbox_status(), want, "{s}");
        }
        assert_eq!(ContainerState::parse(" Running\n"), ContainerState::Running);
    }
}
