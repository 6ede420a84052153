//! The Docker provider: sandboxes as detached containers driven through the docker CLI.

pub mod classify;
pub mod cli;
pub mod mask;
