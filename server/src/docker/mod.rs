//! The Docker provider: sandboxes as detached containers driven through the docker CLI.
//!
//! `cli` starts docker subprocesses, `argv` builds their command lines, `classify` reads the
//! client's stderr, `tarstream` frames file transfers, `provider` puts them together.

pub mod argv;
pub mod classify;
pub mod cli;
pub mod mask;
pub mod provider;
pub mod sessions;
pub mod tarstream;

pub use provider::{DockerProvider, Download, ExecParams, SandboxDescriptor, SandboxHandle};
pub use sessions::PtySpec;
