//! The Docker side of the transport seam (`crate::core::exec_engine`, re-exported here so the
//! Docker code keeps its paths): `cli.rs` implements [`ExecEngine`] with `docker exec`,
//! `docker cp` (`super::files`) and a `docker exec -it` terminal (`super::pty::open`);
//! `agent_client::AgentEngine` implements it with the sandbox's resident agent, reaching the
//! sandbox through `super::agent_host` (falling back to `cli.rs` where the agent cannot run).

pub mod cli;

use crate::config::DockerConfig;
pub use crate::core::backend::{ExecStream, FileDownload, StreamEvent, TerminalSession, UploadSource};
pub use crate::core::exec_engine::{
    no_sessions, note_dropped, spawn_stream, timed_out, ExecEngine, ExecSpec,
};

/// Bytes one `exec` keeps per stream (`exec.max_output_bytes`).
pub fn output_limit(config: &DockerConfig) -> usize {
    usize::try_from(config.exec.max_output_bytes).unwrap_or(usize::MAX)
}
