//! Cluster mode on Docker Swarm (`cluster.mode: swarm`): the second backend beside `docker/`.
//!
//! A sandbox is a one-replica Swarm service (`restart-condition none`) whose labels carry its
//! metadata and lease, so any manager can say what exists and where it runs; placement,
//! membership, node health and drain are Swarm's. `backend` (`SwarmBackend`) wraps this node's
//! Docker backend, which drives the task containers on this node; `forward` is the tower layer
//! that relays a call about a sandbox on another node to that node's sandboxd; `placement`
//! reads Swarm's state (task → node → address); `create` and `inventory` are `Create` and
//! `List`/status/sweep; `watch` merges the other nodes' events into a `Watch`; `pools` and
//! `records` are the warm pools kept in Swarm's state; `argv` every docker command line of
//! cluster mode, `engine` the few Engine API calls made without the CLI.

pub mod argv;
mod backend;
mod create;
pub mod engine;
pub mod forward;
mod inventory;
pub mod placement;
mod pools;
pub mod records;
mod watch;

pub use backend::SwarmBackend;
pub use forward::ForwardLayer;
pub use placement::Swarm;
pub use pools::ClusterPools;
