//! Background processes and port forwarding as the backend takes and gives them (neutral
//! types, the argument checks). A process is a session in the sandbox's agent: it outlives every
//! client until it exits, the sandbox closes, or it is signalled.

use std::collections::BTreeMap;

use tokio::sync::mpsc;

use crate::core::spec::{validate_abs_path, validate_env, User};
use crate::error::{ProviderError, Result};

/// Largest accepted command line (as `Exec`'s agent path takes it in one frame, well under).
const MAX_COMMAND: usize = 1 << 20;

/// A process to start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessStart {
    /// A shell command line (run as `<shell> -c`); or `argv`.
    pub command: String,
    /// Program and arguments without a shell; or `command`.
    pub argv: Vec<String>,
    pub cwd: Option<String>,
    pub env: BTreeMap<String, String>,
    pub user: Option<String>,
    /// `Some((rows, cols))`: under a terminal.
    pub pty: Option<(u16, u16)>,
}

impl ProcessStart {
    /// The one argument check, fields named; the normalised user.
    pub fn check(&self) -> Result<Option<User>> {
        match (self.command.trim().is_empty(), self.argv.is_empty()) {
            (true, true) => return Err(ProviderError::invalid("command", "is required (or argv)")),
            (false, false) => return Err(ProviderError::invalid("argv", "give command or argv, not both")),
            _ => {}
        }
        if self.command.contains('\0') || self.argv.iter().any(|a| a.contains('\0')) {
            return Err(ProviderError::invalid(
                if self.argv.is_empty() { "command" } else { "argv" },
                "must not contain NUL bytes",
            ));
        }
        if self.argv.first().is_some_and(|p| p.is_empty()) {
            return Err(ProviderError::invalid("argv", "the program (argv[0]) must not be empty"));
        }
        let size = self.command.len() + self.argv.iter().map(String::len).sum::<usize>();
        if size > MAX_COMMAND {
            return Err(ProviderError::invalid("command", format!("is {size} bytes; at most {MAX_COMMAND}")));
        }
        if let Some(cwd) = &self.cwd {
            validate_abs_path("cwd", cwd)?;
        }
        validate_env("env", &self.env)?;
        self.user.as_deref().map(|u| User::parse("user", u)).transpose()
    }

    /// The argv the agent runs: `argv`, or `<shell> -c command`.
    pub fn argv_with(&self, shell: &str) -> Result<Vec<String>> {
        if !self.argv.is_empty() {
            return Ok(self.argv.clone());
        }
        if shell.is_empty() {
            return Err(ProviderError::FailedPrecondition(
                "the sandbox's image has no shell to run command with; give argv instead".into(),
            ));
        }
        Ok(vec![shell.to_string(), "-c".into(), self.command.clone()])
    }

    /// How `ListProcesses` shows it.
    pub fn display(&self) -> String {
        if self.argv.is_empty() {
            self.command.clone()
        } else {
            self.argv.join(" ")
        }
    }
}

/// Rows and columns of a process's terminal: 0 means the default (24 x 80).
pub fn terminal_size(rows: u32, cols: u32) -> Result<(u16, u16)> {
    let pick = |field: &str, v: u32, default: u16| match v {
        0 => Ok(default),
        v => u16::try_from(v).map_err(|_| ProviderError::invalid(field, format!("{v} is over 65535"))),
    };
    Ok((pick("rows", rows, 24)?, pick("cols", cols, 80)?))
}

/// A started process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    pub process_id: String,
    pub pid: u32,
}

/// One row of `ListProcesses`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessInfo {
    pub process_id: String,
    pub pid: u32,
    pub command: String,
    pub user: String,
    pub started_at_unix_ms: u64,
    pub exit_code: Option<i32>,
    pub pty: bool,
    pub attached: bool,
    pub oldest_offset: u64,
    pub end_offset: u64,
}

/// What an attached stream carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessEvent {
    Attached { offset: u64, pid: u32 },
    Output { data: Vec<u8>, offset: u64, stderr: bool },
    Exited { code: i32 },
}

/// An attached process's events; `Err` once, last, when the stream failed. Dropping it detaches
/// (the process runs on).
pub type ProcessStream = mpsc::Receiver<Result<ProcessEvent>>;

/// Signals `SignalProcess` takes by name.
const SIGNALS: [(&str, i32); 11] = [
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("KILL", 9),
    ("USR1", 10),
    ("USR2", 12),
    ("ALRM", 14),
    ("TERM", 15),
    ("CONT", 18),
    ("STOP", 19),
    ("WINCH", 28),
];

/// `SIGTERM`, `term`, `15`: the signal number (1..=64).
pub fn parse_signal(field: &str, signal: &str) -> Result<i32> {
    let s = signal.trim();
    if let Ok(n) = s.parse::<i32>() {
        return if (1..=64).contains(&n) {
            Ok(n)
        } else {
            Err(ProviderError::invalid(field, format!("signal number {n} is outside 1..=64")))
        };
    }
    let upper = s.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    SIGNALS.iter().find(|(n, _)| *n == name).map(|(_, v)| *v).ok_or_else(|| {
        let names: Vec<String> = SIGNALS.iter().map(|(n, _)| format!("SIG{n}")).collect();
        ProviderError::invalid(
            field,
            format!("unknown signal {signal:?}; a number 1..=64 or one of {}", names.join(", ")),
        )
    })
}

/// Where a forwarded connection goes, as the sandbox sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardTarget {
    /// Empty means 127.0.0.1.
    pub host: String,
    pub port: u16,
}

impl ForwardTarget {
    pub fn parse(host: &str, port: u32) -> Result<Self> {
        let port = u16::try_from(port)
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| ProviderError::invalid("open.port", format!("must be 1..=65535 (got {port})")))?;
        if host.len() > 253 || host.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(ProviderError::invalid(
                "open.host",
                format!("must be an IP address or host name (got {host:?})"),
            ));
        }
        Ok(Self { host: host.to_string(), port })
    }

    /// `host:port` for messages.
    pub fn display(&self) -> String {
        let host = if self.host.is_empty() { "127.0.0.1" } else { &self.host };
        if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]:{}", self.port)
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

/// Bytes for the sandbox side, or the end of them (half-close).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForwardInput {
    Data(Vec<u8>),
    End,
}

/// Bytes from the sandbox side, or its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForwardOutput {
    Data(Vec<u8>),
    Eof,
}

/// One forwarded connection. `output` ends (`None`) once both halves closed, or with one `Err`;
/// dropping both ends drops the connection.
pub struct ForwardConnection {
    /// Where it connected (`ip:port`).
    pub address: String,
    pub input: mpsc::Sender<ForwardInput>,
    pub output: mpsc::Receiver<Result<ForwardOutput>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_by_name_or_number() {
        assert_eq!(parse_signal("signal", "SIGTERM").unwrap(), 15);
        assert_eq!(parse_signal("signal", "kill").unwrap(), 9);
        assert_eq!(parse_signal("signal", " 10 ").unwrap(), 10);
        let e = parse_signal("signal", "SIGFOO").unwrap_err().to_string();
        assert!(e.contains("signal") && e.contains("SIGTERM"), "{e}");
        assert!(parse_signal("signal", "0").is_err());
        assert!(parse_signal("signal", "65").is_err());
    }

    #[test]
    fn starts_are_checked() {
        let ok = ProcessStart { command: "sleep 1".into(), ..Default::default() };
        assert!(ok.check().is_ok());
        assert_eq!(ok.argv_with("sh").unwrap(), ["sh", "-c", "sleep 1"]);
        assert!(ok.argv_with("").is_err());
        let none = ProcessStart::default();
        assert!(none.check().unwrap_err().to_string().contains("command"));
        let both = ProcessStart { command: "x".into(), argv: vec!["y".into()], ..Default::default() };
        assert!(both.check().unwrap_err().to_string().contains("argv"));
        let rel = ProcessStart { command: "x".into(), cwd: Some("tmp".into()), ..Default::default() };
        assert!(rel.check().unwrap_err().to_string().contains("cwd"));
        let user =
            ProcessStart { command: "x".into(), user: Some("--privileged".into()), ..Default::default() };
        assert!(user.check().unwrap_err().to_string().contains("user"));
        assert_eq!(terminal_size(0, 0).unwrap(), (24, 80));
        assert!(terminal_size(70000, 1).unwrap_err().to_string().contains("rows"));
    }

    #[test]
    fn forward_targets_are_checked() {
        assert_eq!(ForwardTarget::parse("", 80).unwrap().display(), "127.0.0.1:80");
        assert_eq!(ForwardTarget::parse("::1", 22).unwrap().display(), "[::1]:22");
        assert!(ForwardTarget::parse("", 0).unwrap_err().to_string().contains("open.port"));
        assert!(ForwardTarget::parse("", 70000).is_err());
        assert!(ForwardTarget::parse("a b", 1).unwrap_err().to_string().contains("open.host"));
    }
}
