//! Cluster mode on Docker Swarm (`cluster.mode: swarm`): the second backend beside `backends/docker/`.
//!
//! A sandbox is a one-replica Swarm service (`restart-condition none`) whose labels carry its
//! metadata and lease, so any manager can say what exists and where it runs; placement,
//! membership, node health and drain are Swarm's. `backend` (`SwarmBackend`) wraps this node's
//! Docker backend, which drives the task containers on this node; `relay` tells the relay layer
//! (`service/forward.rs`) where a sandbox runs, so a call about a sandbox on another node goes
//! to that node's sandboxd; `placement`
//! reads Swarm's state (task → node → address); `create` and `inventory` are `Create` and
//! `List`/status/sweep; `watch` merges the other nodes' events into a `Watch`; `pools` and
//! `records` are the warm pools kept in Swarm's state; `argv` every docker command line of
//! cluster mode, `engine` the few Engine API calls made without the CLI;
//! `runtimes` keeps a create on the nodes whose tasks run on the OCI runtime it asks for.

pub mod argv;
mod backend;
mod create;
pub mod engine;
mod images;
mod inventory;
mod node_images;
mod peer_calls;
pub mod placement;
mod pools;
pub mod records;
mod relay;
mod runtimes;
mod snapshots;
mod watch;

pub use backend::SwarmBackend;
pub use placement::Swarm;
pub use pools::ClusterPools;
