//! Async Rust client for sandboxd, mirroring NeMo Gym's `AsyncSandbox`.
//!
//! ```no_run
//! # async fn demo() -> sandboxd_client::Result<()> {
//! use sandboxd_client::{spec, Client, Sandbox};
//! let client = Client::connect("http://127.0.0.1:50051").await?;
//! let sandbox = Sandbox::start(&client, spec("python:3.12-slim")).await?;
//! let out = sandbox.exec("echo hi").await?;
//! assert_eq!(out.stdout_str(), "hi\n");
//! sandbox.stop().await?;
//! # Ok(()) }
//! ```

/// The generated `sandbox.v1` messages and stubs.
pub use sandboxd_proto::v1 as proto;

mod access;
mod branching;
mod client;
mod defaults;
mod descriptor;
mod error;
mod events;
mod exec_stream;
mod files;
mod images;
mod inventory;
mod logs;
mod pools;
mod port_forward;
mod processes;
mod pty;
mod sandbox;
mod tenant_usage;

pub use access::{Grant, TokenScope};
pub use branching::{DiffEntry, DiffKind, Fork, Hibernated, Snapshot};
pub use client::{BearerAuth, Client, RawClient};
pub use descriptor::IntoSandboxRef;
pub use error::{failure_kind_of, ClientError, FailureKind, Result};
pub use events::{EventKind, SandboxEvent, SandboxStats, StatsStream, WatchOptions, WatchStream};
pub use exec_stream::{ExecEvent, ExecEventStream, ExecExit};
pub use files::{
    FileEntry, FileEvent, FileEventType, FileType, ListDirOptions, ListDirStream, MakeDirOptions,
    WatchDirStream,
};
pub use images::{is_final, pool_target, ImagePrefetchState, PrefetchStep, PrefetchStream};
pub use inventory::{ListOptions, ListPage, SandboxInfo};
pub use logs::{LogChunk, LogStream, LogsOptions};
pub use pools::{from_pool, PoolDefinition, PoolInfo};
pub use port_forward::{Forward, ForwardChunk};
pub use processes::{ProcessEvent, ProcessInfo, ProcessStream, StartProcess, StartedProcess};
pub use pty::{Pty, PtyExecOptions, PtyOptions, PtySession, PtySessionInfo, PtySpec};
pub use sandbox::{
    spec, spec_on, Endpoint, ExecOptions, Sandbox, SandboxSpecExt, SandboxStatus, DEFAULT_EXEC_TIMEOUT_S,
    UPLOAD_CHUNK_BYTES,
};
pub use sandboxd_proto::contract::{
    code_name, ExecErrorType, ExecResult, ExecUsage, SandboxDescriptor, Signal, TerminalMode,
};
