//! What a `Logs` call asks for and reads.

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
