//! The backends behind the `core::backend::SandboxBackend` seam, side by side: `docker` (one
//! daemon, containers driven through the docker CLI) and `swarm` (cluster mode on Docker Swarm,
//! which wraps this node's Docker backend). Swarm may use Docker's pieces, never the reverse.

pub mod docker;
pub mod swarm;
