//! The single words of the contract, each with one spelling on the wire: signal names, exec
//! error types, terminal modes and sandbox states.

use std::fmt;

/// `Display` as the wire spelling (`as_str`), for each word of the contract.
macro_rules! display_as_str {
    ($($word:ty),*) => {$(
        impl fmt::Display for $word {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )*};
}

display_as_str!(Signal, ExecErrorType, TerminalMode, SandboxStatus);

/// A signal a terminal session accepts (`PtySignal.name`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Signal {
    Int,
    Term,
    Kill,
    Quit,
    Hup,
}

impl Signal {
    /// Every supported signal, in the order the docs list them.
    pub const ALL: [Signal; 5] = [Signal::Int, Signal::Term, Signal::Kill, Signal::Quit, Signal::Hup];

    /// The wire name, for example `SIGINT`.
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::Int => "SIGINT",
            Signal::Term => "SIGTERM",
            Signal::Kill => "SIGKILL",
            Signal::Quit => "SIGQUIT",
            Signal::Hup => "SIGHUP",
        }
    }

    /// The name without `SIG`, as `kill -NAME` takes it.
    pub fn short_name(self) -> &'static str {
        &self.as_str()[3..]
    }

    /// The signal number on Linux.
    pub fn number(self) -> i32 {
        match self {
            Signal::Int => 2,
            Signal::Term => 15,
            Signal::Kill => 9,
            Signal::Quit => 3,
            Signal::Hup => 1,
        }
    }

    /// The supported names, comma-separated, for error messages.
    pub fn supported() -> String {
        Self::ALL.map(Signal::as_str).join(", ")
    }
}

/// A name that is not one of `Signal::ALL`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported signal {0:?}; supported: SIGINT, SIGTERM, SIGKILL, SIGQUIT, SIGHUP")]
pub struct UnknownSignal(pub String);

impl TryFrom<&str> for Signal {
    type Error = UnknownSignal;

    /// Accepts `SIGINT`, `INT` and `int` alike.
    fn try_from(name: &str) -> Result<Self, Self::Error> {
        let upper = name.trim().to_ascii_uppercase();
        let short = upper.strip_prefix("SIG").unwrap_or(&upper);
        Signal::ALL.into_iter().find(|s| s.short_name() == short).ok_or_else(|| UnknownSignal(name.into()))
    }
}

/// Why an exec did not run to the command's own exit (`ExecResponse.error_type`; "" is none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExecErrorType {
    /// Stopped at its timeout.
    Timeout,
    /// The sandbox or the daemon failed it.
    Sandbox,
    /// A terminal session failed.
    Pty,
}

impl ExecErrorType {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            ExecErrorType::Timeout => "timeout",
            ExecErrorType::Sandbox => "sandbox",
            ExecErrorType::Pty => "pty",
        }
    }

    /// From the wire value: `None` for "" (no error) and for values this version does not know.
    pub fn from_wire(value: &str) -> Option<Self> {
        match value {
            "timeout" => Some(ExecErrorType::Timeout),
            "sandbox" => Some(ExecErrorType::Sandbox),
            "pty" => Some(ExecErrorType::Pty),
            _ => None,
        }
    }

    /// From a response's field: "" is none; a value this version does not know still means
    /// the command did not finish, so it reads as `Sandbox`.
    pub fn from_response(value: &str) -> Option<Self> {
        match value {
            "" => None,
            wire => Some(Self::from_wire(wire).unwrap_or(ExecErrorType::Sandbox)),
        }
    }

    /// The wire value of an optional error type ("" for none).
    pub fn to_wire(value: Option<Self>) -> String {
        value.map(|e| e.as_str().to_string()).unwrap_or_default()
    }
}

/// Whether a terminal session has a terminal (`PtyOpened.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TerminalMode {
    /// A pseudo-terminal: one output stream, `\r\n` line ends, signals by key.
    Pty,
    /// Pipes: stdout and stderr separate, no terminal.
    Pipe,
}

impl TerminalMode {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            TerminalMode::Pty => "pty",
            TerminalMode::Pipe => "pipe",
        }
    }

    /// From the wire value.
    pub fn from_wire(value: &str) -> Option<Self> {
        match value {
            "pty" => Some(TerminalMode::Pty),
            "pipe" => Some(TerminalMode::Pipe),
            _ => None,
        }
    }
}

/// Lifecycle state of a sandbox (`SandboxStatus` on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SandboxStatus {
    /// Created or restarting, not yet running.
    Starting,
    /// Running.
    Running,
    /// Exited, being removed, dead, gone, or stopped through this handle.
    Stopped,
    /// Docker reported an error state.
    Error,
    /// The daemon could not be asked.
    Unknown,
    /// Frozen by `Pause` until `Resume`: exec and terminals are refused.
    Paused,
    /// Checkpointed to disk by `Hibernate`, its container stopped, until `Resume`.
    Hibernated,
}

impl SandboxStatus {
    /// Every state, in the order the docs list them.
    pub const ALL: [SandboxStatus; 7] = [
        SandboxStatus::Starting,
        SandboxStatus::Running,
        SandboxStatus::Stopped,
        SandboxStatus::Error,
        SandboxStatus::Unknown,
        SandboxStatus::Paused,
        SandboxStatus::Hibernated,
    ];

    /// The lower-case name NeMo Gym uses (`running`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxStatus::Starting => "starting",
            SandboxStatus::Running => "running",
            SandboxStatus::Stopped => "stopped",
            SandboxStatus::Error => "error",
            SandboxStatus::Unknown => "unknown",
            SandboxStatus::Paused => "paused",
            SandboxStatus::Hibernated => "hibernated",
        }
    }

    /// The wire value.
    pub fn to_wire(self) -> crate::v1::SandboxStatus {
        match self {
            SandboxStatus::Starting => crate::v1::SandboxStatus::Starting,
            SandboxStatus::Running => crate::v1::SandboxStatus::Running,
            SandboxStatus::Stopped => crate::v1::SandboxStatus::Stopped,
            SandboxStatus::Error => crate::v1::SandboxStatus::Error,
            SandboxStatus::Unknown => crate::v1::SandboxStatus::Unknown,
            SandboxStatus::Paused => crate::v1::SandboxStatus::Paused,
            SandboxStatus::Hibernated => crate::v1::SandboxStatus::Hibernated,
        }
    }

    /// The state a wire value names; `None` for `UNSPECIFIED` and numbers the contract lacks.
    pub fn try_from_wire(value: i32) -> Option<Self> {
        let wire = crate::v1::SandboxStatus::try_from(value).ok()?;
        SandboxStatus::ALL.into_iter().find(|s| s.to_wire() == wire)
    }

    /// From the wire value, leniently: what `try_from_wire` refuses is `Unknown`.
    pub fn from_wire(value: i32) -> Self {
        Self::try_from_wire(value).unwrap_or(SandboxStatus::Unknown)
    }
}
