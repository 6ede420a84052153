//! The words client and server share beside the generated messages: signal names, exec error
//! types, terminal modes, sandbox states, diff entries and what a terminal session asks for.
//! Each has one spelling on the wire, parsed and printed here only.
//!
//! One file per kind: `words.rs` (Signal, ExecErrorType, TerminalMode, SandboxStatus),
//! `exec.rs` (ExecResult, ExecExit, ExecEvent, ExecUsage), `pty.rs` (PtySpec), `diff.rs`
//! (DiffKind, DiffEntry), `descriptor.rs` (SandboxDescriptor), `logs.rs` (LogOptions, LogChunk);
//! `code_name` here.

mod descriptor;
mod diff;
mod exec;
mod failure;
mod logs;
mod pty;
mod words;

pub use descriptor::*;
pub use diff::*;
pub use exec::*;
pub use failure::*;
pub use logs::*;
pub use pty::*;
pub use words::*;

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
mod tests;
