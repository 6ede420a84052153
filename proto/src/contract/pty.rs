//! What a terminal session asks for (`PtyOpen` without its sandbox), and its checks.

use std::collections::BTreeMap;

use super::words::TerminalMode;

/// What a terminal session runs and how: a `PtyOpen` without its sandbox. The client sends one,
/// the server opens it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PtySpec {
    /// Shell command line to run; `None` runs the sandbox's shell interactively.
    pub command: Option<String>,
    /// Working directory; `None` uses the sandbox's workdir.
    pub cwd: Option<String>,
    /// Extra environment.
    pub env: BTreeMap<String, String>,
    /// Terminal rows (default 24).
    pub rows: u16,
    /// Terminal columns (default 80).
    pub cols: u16,
    /// User name or uid; `None` is the exec's default user.
    pub user: Option<String>,
    /// A terminal (default), or pipes with stdout and stderr apart.
    pub mode: TerminalMode,
    /// How long the session outlives a stream dropped without a detach (`None`: it ends with
    /// the stream). Seconds on the wire (`PtyOpen.detach_timeout_s`).
    pub detach_timeout: Option<std::time::Duration>,
}

/// A `PtyOpen` field out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidField {
    /// The field's name in the request.
    pub field: &'static str,
    pub message: String,
}

impl Default for PtySpec {
    fn default() -> Self {
        PtySpec {
            command: None,
            cwd: None,
            env: BTreeMap::new(),
            rows: PtySpec::DEFAULT_ROWS,
            cols: PtySpec::DEFAULT_COLS,
            user: None,
            mode: TerminalMode::Pty,
            detach_timeout: None,
        }
    }
}

impl PtySpec {
    /// Rows when none are asked for (a `PtyOpen` with `rows = 0`).
    pub const DEFAULT_ROWS: u16 = 24;
    /// Columns when none are asked for.
    pub const DEFAULT_COLS: u16 = 80;
    /// Longest `detach_timeout_s` a caller may ask for: one year, as every client duration.
    pub const MAX_DETACH_TIMEOUT_S: f64 = 31_536_000.0;

    /// A terminal running `command`.
    pub fn command(command: impl Into<String>) -> Self {
        PtySpec { command: Some(command.into()), ..Default::default() }
    }

    /// The `PtyOpen` asking for this session in `sandbox_id`.
    pub fn to_open(&self, sandbox_id: &str) -> crate::v1::PtyOpen {
        crate::v1::PtyOpen {
            sandbox_id: sandbox_id.to_string(),
            command: self.command.clone(),
            cwd: self.cwd.clone(),
            env: self.env.clone().into_iter().collect(),
            rows: u32::from(self.rows),
            cols: u32::from(self.cols),
            user: self.user.clone(),
            pipe: self.mode == TerminalMode::Pipe,
            detach_timeout_s: self.detach_timeout.map(|d| d.as_secs_f64()),
        }
    }

    /// What `open` asks for: a size of 0 is the default, one over 65535 is refused.
    pub fn from_open(open: &crate::v1::PtyOpen) -> Result<Self, InvalidField> {
        let dimension = |field: &'static str, value: u32, default: u16| match value {
            0 => Ok(default),
            v => u16::try_from(v)
                .map_err(|_| InvalidField { field, message: format!("must be <= 65535 (got {v})") }),
        };
        Ok(PtySpec {
            command: open.command.clone(),
            cwd: open.cwd.clone(),
            env: open.env.clone().into_iter().collect(),
            rows: dimension("rows", open.rows, PtySpec::DEFAULT_ROWS)?,
            cols: dimension("cols", open.cols, PtySpec::DEFAULT_COLS)?,
            user: open.user.clone(),
            mode: if open.pipe { TerminalMode::Pipe } else { TerminalMode::Pty },
            detach_timeout: match open.detach_timeout_s {
                None => None,
                Some(s) if s > 0.0 && s <= Self::MAX_DETACH_TIMEOUT_S => {
                    Some(std::time::Duration::from_secs_f64(s))
                }
                Some(s) => {
                    return Err(InvalidField {
                        field: "detach_timeout_s",
                        message: format!(
                            "must be > 0 and at most {} seconds (one year), got {s}",
                            Self::MAX_DETACH_TIMEOUT_S
                        ),
                    })
                }
            },
        })
    }
}
