//! Swarm as the relay layer's [`Cluster`] (`service/forward.rs`): where a sandbox runs is its
//! service's task's node.

use tonic::transport::Channel;

use super::placement::Swarm;
use crate::error::Result;
use crate::service::forward::{Cluster, NodePlace};

#[async_trait::async_trait]
impl Cluster for Swarm {
    fn name(&self) -> &str {
        "Swarm"
    }

    fn token(&self) -> &str {
        Swarm::token(self)
    }

    async fn locate(&self, id: &str) -> Result<Option<NodePlace>> {
        Ok(Swarm::locate(self, id).await?.map(|p| NodePlace {
            local: p.local,
            down: p.node.is_down(),
            hostname: p.node.hostname,
            addr: p.node.addr,
            state: p.node.state,
        }))
    }

    fn channel(&self, addr: &str) -> Result<Channel> {
        Swarm::channel(self, addr)
    }
}
