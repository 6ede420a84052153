//! The words client and server share beside the generated messages: signal names, exec error
//! types, terminal modes, sandbox states, diff entries and what a terminal session asks for.
//! Each has one spelling on the wire, parsed and printed here only.

use std::collections::BTreeMap;
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
}

impl SandboxStatus {
    /// Every state, in the order the docs list them.
    pub const ALL: [SandboxStatus; 6] = [
        SandboxStatus::Starting,
        SandboxStatus::Running,
        SandboxStatus::Stopped,
        SandboxStatus::Error,
        SandboxStatus::Unknown,
        SandboxStatus::Paused,
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

/// How a path changed since a sandbox started (or since its snapshot).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DiffKind {
    /// Created.
    Added,
    /// Modified (content, metadata, or a directory's entries).
    Changed,
    /// Removed.
    Deleted,
}

/// One changed path (`DiffEntry`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DiffEntry {
    /// The absolute path in the sandbox.
    pub path: String,
    /// How it changed.
    pub kind: DiffKind,
}

/// A `DiffEntry` on the wire without a kind this contract knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("diff entry {0:?} without a kind")]
pub struct DiffEntryWithoutKind(pub String);

impl TryFrom<crate::v1::DiffEntry> for DiffEntry {
    type Error = DiffEntryWithoutKind;

    fn try_from(e: crate::v1::DiffEntry) -> Result<Self, Self::Error> {
        let kind = match crate::v1::DiffKind::try_from(e.kind) {
            Ok(crate::v1::DiffKind::Added) => DiffKind::Added,
            Ok(crate::v1::DiffKind::Changed) => DiffKind::Changed,
            Ok(crate::v1::DiffKind::Deleted) => DiffKind::Deleted,
            _ => return Err(DiffEntryWithoutKind(e.path)),
        };
        Ok(DiffEntry { path: e.path, kind })
    }
}

impl From<DiffEntry> for crate::v1::DiffEntry {
    fn from(e: DiffEntry) -> Self {
        let kind = match e.kind {
            DiffKind::Added => crate::v1::DiffKind::Added,
            DiffKind::Changed => crate::v1::DiffKind::Changed,
            DiffKind::Deleted => crate::v1::DiffKind::Deleted,
        };
        crate::v1::DiffEntry { path: e.path, kind: kind as i32 }
    }
}

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

/// Return code of an exec that did not reach the command's exit (Docker's own convention).
pub const SANDBOX_RUNTIME_RETURN_CODE: i32 = 125;

/// What one command's process tree used (from `wait4`'s rusage on the agent engine).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExecUsage {
    /// Wall-clock time from start to exit.
    pub wall_time: std::time::Duration,
    /// User CPU time of the command and its waited-for descendants.
    pub user_cpu: std::time::Duration,
    /// System CPU time of the command and its waited-for descendants.
    pub system_cpu: std::time::Duration,
    /// Peak resident set size of the largest process in the tree.
    pub peak_rss_bytes: u64,
}

impl From<crate::v1::ExecUsage> for ExecUsage {
    fn from(u: crate::v1::ExecUsage) -> Self {
        let seconds = |s: f64| std::time::Duration::try_from_secs_f64(s).unwrap_or_default();
        ExecUsage {
            wall_time: seconds(u.wall_time_s),
            user_cpu: seconds(u.user_cpu_s),
            system_cpu: seconds(u.system_cpu_s),
            peak_rss_bytes: u.peak_rss_bytes,
        }
    }
}

impl From<ExecUsage> for crate::v1::ExecUsage {
    fn from(u: ExecUsage) -> Self {
        crate::v1::ExecUsage {
            wall_time_s: u.wall_time.as_secs_f64(),
            user_cpu_s: u.user_cpu.as_secs_f64(),
            system_cpu_s: u.system_cpu.as_secs_f64(),
            peak_rss_bytes: u.peak_rss_bytes,
        }
    }
}

/// What a command did. A failing command is a result, never an error.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecResult {
    /// Standard output, byte for byte (the merged terminal output for a terminal's exec).
    pub stdout: Vec<u8>,
    /// Standard error, byte for byte.
    pub stderr: Vec<u8>,
    /// The exit code; 125 with an `error_type`.
    pub return_code: i32,
    /// `None` when the command ran to its exit; why it did not otherwise.
    pub error_type: Option<ExecErrorType>,
    /// What the command's process tree used, when the exec engine measures it.
    pub usage: Option<ExecUsage>,
}

impl ExecResult {
    /// A command that did not reach its own exit: 125 and why.
    pub fn failed(error_type: ExecErrorType, stderr: impl Into<Vec<u8>>) -> Self {
        Self {
            stdout: Vec::new(),
            stderr: stderr.into(),
            return_code: SANDBOX_RUNTIME_RETURN_CODE,
            error_type: Some(error_type),
            usage: None,
        }
    }

    /// `stdout` as text (invalid UTF-8 replaced).
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// `stderr` as text (invalid UTF-8 replaced).
    pub fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }

    /// True when the command ran and exited 0.
    pub fn success(&self) -> bool {
        self.return_code == 0 && self.error_type.is_none()
    }
}

impl From<crate::v1::ExecResponse> for ExecResult {
    fn from(r: crate::v1::ExecResponse) -> Self {
        ExecResult {
            stdout: r.stdout,
            stderr: r.stderr,
            return_code: r.return_code,
            error_type: ExecErrorType::from_response(&r.error_type),
            usage: r.usage.map(ExecUsage::from),
        }
    }
}

impl From<ExecResult> for crate::v1::ExecResponse {
    fn from(r: ExecResult) -> Self {
        crate::v1::ExecResponse {
            stdout: r.stdout,
            stderr: r.stderr,
            return_code: r.return_code,
            error_type: ExecErrorType::to_wire(r.error_type),
            usage: r.usage.map(Into::into),
        }
    }
}

/// How a streamed command ended (`ExecExit`): an [`ExecResult`] without its output, which went
/// out as it was produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecExit {
    /// The exit code; 125 with an `error_type`.
    pub return_code: i32,
    /// `None` when the command ran to its exit; why it did not otherwise.
    pub error_type: Option<ExecErrorType>,
    /// What the command's process tree used, when the exec engine measures it.
    pub usage: Option<ExecUsage>,
    /// Why the command did not run to its exit (a missing cwd, an unknown user, a timeout);
    /// empty when it did.
    pub message: String,
}

/// The result of a streamed command: its output already went out, so a failure's reason
/// (which both exec engines put in `stderr`, as unary `Exec` returns it) becomes `message`.
impl From<ExecResult> for ExecExit {
    fn from(r: ExecResult) -> Self {
        let message = match r.error_type {
            Some(_) => String::from_utf8_lossy(&r.stderr).trim().to_string(),
            None => String::new(),
        };
        ExecExit { return_code: r.return_code, error_type: r.error_type, usage: r.usage, message }
    }
}

impl From<crate::v1::ExecExit> for ExecExit {
    fn from(x: crate::v1::ExecExit) -> Self {
        ExecExit {
            return_code: x.return_code,
            error_type: ExecErrorType::from_response(&x.error_type),
            usage: x.usage.map(ExecUsage::from),
            message: x.message,
        }
    }
}

impl From<ExecExit> for crate::v1::ExecExit {
    fn from(x: ExecExit) -> Self {
        crate::v1::ExecExit {
            return_code: x.return_code,
            error_type: ExecErrorType::to_wire(x.error_type),
            usage: x.usage.map(Into::into),
            message: x.message,
        }
    }
}

/// One message of a streamed exec (`ExecStreamResponse`): output as it is produced, then how
/// the command ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecEvent {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    /// The last event.
    Exit(ExecExit),
}

/// An `ExecStreamResponse` with nothing in it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an empty ExecStreamResponse")]
pub struct EmptyResponse;

impl TryFrom<crate::v1::ExecStreamResponse> for ExecEvent {
    type Error = EmptyResponse;

    fn try_from(message: crate::v1::ExecStreamResponse) -> Result<Self, Self::Error> {
        use crate::v1::exec_stream_response::Response;
        match message.response.ok_or(EmptyResponse)? {
            Response::Stdout(data) => Ok(ExecEvent::Stdout(data)),
            Response::Stderr(data) => Ok(ExecEvent::Stderr(data)),
            Response::Exit(exit) => Ok(ExecEvent::Exit(exit.into())),
        }
    }
}

impl From<ExecEvent> for crate::v1::ExecStreamResponse {
    fn from(event: ExecEvent) -> Self {
        use crate::v1::exec_stream_response::Response;
        let response = match event {
            ExecEvent::Stdout(data) => Response::Stdout(data),
            ExecEvent::Stderr(data) => Response::Stderr(data),
            ExecEvent::Exit(exit) => Response::Exit(exit.into()),
        };
        crate::v1::ExecStreamResponse { response: Some(response) }
    }
}

/// What `Sandbox::serialize` returns and `Connect` takes, as JSON: `sandbox_id` required,
/// `ports` and `workdir` optional. The same shape as NeMo Gym's serialized handle.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SandboxDescriptor {
    pub sandbox_id: String,
    #[serde(default)]
    pub ports: Option<Vec<u16>>,
    #[serde(default)]
    pub workdir: Option<String>,
}

impl SandboxDescriptor {
    /// From a JSON value, with a message naming what is wrong.
    pub fn from_json_value(value: &serde_json::Value) -> Result<Self, String> {
        if !value.is_object() {
            return Err("must be a JSON object".into());
        }
        let descriptor: SandboxDescriptor = serde_json::from_value(value.clone()).map_err(|e| {
            format!(
                "{e} (expected `sandbox_id` string, `ports` array of 1..=65535, `workdir` string or null)"
            )
        })?;
        if descriptor.sandbox_id.is_empty() {
            return Err("`sandbox_id` must be a non-empty string".into());
        }
        if descriptor.ports.iter().flatten().any(|p| *p == 0) {
            return Err("`ports` must hold integers in 1..=65535".into());
        }
        Ok(descriptor)
    }

    /// As JSON.
    pub fn to_json_value(&self) -> serde_json::Value {
        serde_json::json!({"sandbox_id": self.sandbox_id, "ports": self.ports.clone().unwrap_or_default(), "workdir": self.workdir})
    }
}

/// The canonical name of a gRPC code (`NOT_FOUND`), as the README's table spells it: what
/// the server's metrics label calls with and what `sandboxctl` prints.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streamed_exit_carries_the_reason_only_of_a_failure() {
        let failed =
            ExecResult::failed(ExecErrorType::Sandbox, "cwd \"/nope\" does not exist in the sandbox\n");
        let exit = ExecExit::from(failed);
        assert_eq!(
            (exit.return_code, exit.message.as_str()),
            (125, "cwd \"/nope\" does not exist in the sandbox")
        );
        let wire = crate::v1::ExecExit::from(exit.clone());
        assert_eq!((wire.error_type.as_str(), wire.message.as_str()), ("sandbox", exit.message.as_str()));
        assert_eq!(ExecExit::from(wire), exit);
        // A command's own stderr is its output, never the exit's message.
        let ran = ExecResult { return_code: 3, stderr: b"oops".to_vec(), ..Default::default() };
        assert_eq!(ExecExit::from(ran).message, "");
    }

    #[test]
    fn signals_parse_in_every_spelling() {
        for s in Signal::ALL {
            assert_eq!(Signal::try_from(s.as_str()), Ok(s));
            assert_eq!(Signal::try_from(s.short_name()), Ok(s));
            assert_eq!(Signal::try_from(s.as_str().to_lowercase().as_str()), Ok(s));
        }
        let err = Signal::try_from("SIGUSR1").unwrap_err().to_string();
        assert!(err.contains("SIGUSR1") && err.contains("SIGHUP"), "{err}");
        assert_eq!(Signal::supported(), "SIGINT, SIGTERM, SIGKILL, SIGQUIT, SIGHUP");
    }

    #[test]
    fn descriptors_parse_and_refuse_bad_shapes() {
        let d = SandboxDescriptor::from_json_value(
            &serde_json::json!({"sandbox_id": "s", "ports": [80], "workdir": "/w"}),
        )
        .unwrap();
        assert_eq!(d.ports, Some(vec![80]));
        assert_eq!(SandboxDescriptor::from_json_value(&d.to_json_value()).unwrap(), d);
        for bad in [
            serde_json::json!("s"),
            serde_json::json!({}),
            serde_json::json!({"sandbox_id": ""}),
            serde_json::json!({"sandbox_id": "x", "ports": [0]}),
            serde_json::json!({"sandbox_id": "x", "ports": [70000]}),
            serde_json::json!({"sandbox_id": "x", "ports": [true]}),
            serde_json::json!({"sandbox_id": "x", "workdir": 3}),
        ] {
            assert!(SandboxDescriptor::from_json_value(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn wire_values_round_trip() {
        for e in [ExecErrorType::Timeout, ExecErrorType::Sandbox, ExecErrorType::Pty] {
            assert_eq!(ExecErrorType::from_wire(e.as_str()), Some(e));
        }
        assert_eq!(ExecErrorType::from_wire(""), None);
        assert_eq!(ExecErrorType::to_wire(None), "");
        for m in [TerminalMode::Pty, TerminalMode::Pipe] {
            assert_eq!(TerminalMode::from_wire(m.as_str()), Some(m));
        }
    }
}

/// What a `Logs` call reads (`LogsRequest` without its sandbox): both the client that asks and
/// the backend that answers use this one type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogOptions {
    /// Keep reading what the process writes next, until the stream is dropped or the sandbox
    /// stops.
    pub follow: bool,
    /// Only the last this many lines of what was written so far (`None`: all of it).
    pub tail_lines: Option<u32>,
}

/// One piece of a sandbox's main-process output (`LogsResponse`), in the order it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogChunk {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
}
