//! Faults and repairs of a `cluster.mode: swarm` test cluster (3 nodes, `scripts/cluster-up.sh`,
//! faults by `scripts/cluster-node.sh`), one cluster for the whole suite, its steps in order:
//! a node's dockerd killed (its sandboxes answer UNAVAILABLE naming it, every other sandbox works
//! on, `List` says UNKNOWN for the lost ones); the dockerd back (the lost sandboxes, whose tasks
//! ended, are removed by the sweep and nothing of them, their pool claim included, is left in
//! Swarm's state; the node takes new sandboxes again); a node drained (its sandboxes end and are
//! removed cleanly, watchers told why, no new sandbox lands there); the entry node's sandboxd
//! restarted (calls through it work again). Nothing of the cluster is left afterwards.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandboxd_client::{
    from_pool, spec, Client, EventKind, ListOptions, PoolDefinition, Sandbox, SandboxEvent, SandboxStatus,
    WatchOptions,
};
use testkit::cluster::{ClusterNode, TestCluster};
use testkit::images;
use testkit::wait::until;

/// Every wait on the cluster: generous (Swarm reads a node down within ~12 s on a quiet
/// machine; CI is slower).
const WAIT: Duration = Duration::from_secs(150);

fn sandboxd_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_sandboxd"))
}

fn step(what: &str) {
    eprintln!("cluster_recovery: {what}");
}

/// A sandbox created through `client` on `node` (the other nodes paused meanwhile; node 1
/// is asked, it is never the one lost).
async fn try_create_on(
    cluster: &TestCluster,
    client: &Client,
    node: &ClusterNode,
) -> Result<Sandbox, String> {
    let manager = &cluster.nodes[0];
    let others: Vec<&ClusterNode> = cluster.nodes.iter().filter(|n| n.name != node.name).collect();
    for other in &others {
        manager.set_availability(&other.name, "pause");
    }
    let mut s = spec(images::BUSYBOX);
    s.metadata.insert("run".into(), "recovery".into());
    let made = Sandbox::start(client, s).await;
    for other in &others {
        manager.set_availability(&other.name, "active");
    }
    let sandbox = made.map_err(|e| e.to_string())?;
    match manager.placements().get(sandbox.id()) {
        Some(placed) if *placed == node.name => Ok(sandbox),
        other => Err(format!("placed on {other:?}")),
    }
}

async fn create_on(cluster: &TestCluster, client: &Client, node: &ClusterNode) -> Sandbox {
    try_create_on(cluster, client, node).await.unwrap()
}

/// Waits until node 1 reads `node` as Ready in the swarm.
async fn ready_in_swarm(cluster: &TestCluster, node: &ClusterNode) {
    until(WAIT, &format!("{} Ready in the swarm", node.name), || async {
        let out = cluster.nodes[0].docker(&["node", "inspect", "--format", "{{.Status.State}}", &node.name]);
        match String::from_utf8_lossy(&out.stdout).trim() {
            "ready" => Ok(()),
            other => Err(other.to_string()),
        }
    })
    .await
}

/// `List`'s status of `id` through `client` (`None`: not listed).
async fn listed_status(client: &Client, id: &str) -> Result<Option<SandboxStatus>, String> {
    let listed = client.list_all(ListOptions::default()).await.map_err(|e| e.to_string())?;
    Ok(listed.iter().find(|s| s.sandbox_id == id).map(|s| s.status))
}

#[test]
fn the_cluster_survives_a_lost_node_a_drain_and_a_restarted_entry_node() {
    let cluster = TestCluster::start(3, sandboxd_bin(), &[("SANDBOXD_CLUSTER_IMAGES", images::BUSYBOX)]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let clients = cluster.clients().await;
        let [n1, n2, n3] = [&cluster.nodes[0], &cluster.nodes[1], &cluster.nodes[2]];

        step("a sandbox on each node, and a claimed pool member on node 3");
        let on1 = create_on(&cluster, &clients[0], n1).await;
        let on2 = create_on(&cluster, &clients[0], n2).await;
        let lost = create_on(&cluster, &clients[0], n3).await;
        for other in [n1, n2] {
            n3.set_availability(&other.name, "pause");
        }
        clients[0].create_pool(PoolDefinition::new("rec", images::BUSYBOX, 1, 2)).await.unwrap();
        until(WAIT, "the pool's member ready on node 3", || async {
            let pools = clients[1].list_pools().await.map_err(|e| e.to_string())?;
            match pools.iter().find(|p| p.name == "rec") {
                Some(p) if p.ready == 1 => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        let claimed = Sandbox::start(&clients[1], from_pool("rec")).await.unwrap();
        assert_eq!(n3.placements().get(claimed.id()), Some(&n3.name));
        // The pool refills on the other nodes from now on.
        clients[0].delete_pool("rec").await.unwrap();
        for other in [n1, n2] {
            n3.set_availability(&other.name, "active");
        }
        let claim_config = format!("sandboxd-claim-{}", claimed.id());
        assert!(n1.swarm_names("config").unwrap().contains(&claim_config));

        step("node 3's dockerd is killed: its sandboxes answer UNAVAILABLE naming it");
        cluster.node_action("kill", n3, "dockerd");
        for via in [0, 1] {
            until(WAIT, "UNAVAILABLE naming the node Swarm reads as down", || async {
                let exec = async { Sandbox::connect(&clients[via], lost.id()).await?.exec("true").await };
                match exec.await {
                    Err(e)
                        if e.code() == tonic::Code::Unavailable
                            && e.to_string().contains("Swarm reads as down") =>
                    {
                        assert!(e.to_string().contains(&format!("node {}", n3.name)), "names the node: {e}");
                        Ok(())
                    }
                    other => Err(format!("{other:?}")),
                }
            })
            .await;
        }

        step("every other sandbox works on, through every node that answers; List says UNKNOWN for the lost");
        for via in [0, 1] {
            for id in [on1.id(), on2.id()] {
                let sandbox = Sandbox::connect(&clients[via], id).await.unwrap();
                assert_eq!(sandbox.exec("echo still-here").await.unwrap().stdout_str(), "still-here\n");
            }
        }
        until(WAIT, "List to say UNKNOWN for the lost sandbox", || async {
            match listed_status(&clients[0], lost.id()).await? {
                Some(SandboxStatus::Unknown) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        assert_eq!(listed_status(&clients[1], on2.id()).await.unwrap(), Some(SandboxStatus::Running));

        step("node 3's dockerd is back: the lost sandboxes are removed, nothing of them left in Swarm");
        cluster.node_action("start", n3, "dockerd");
        ready_in_swarm(&cluster, n3).await;
        until(WAIT, "the lost sandboxes' services and claim gone from Swarm", || async {
            let services = n1.swarm_names("service").ok_or("no answer")?;
            let configs = n1.swarm_names("config").ok_or("no answer")?;
            let left: Vec<&String> = services
                .iter()
                .chain(&configs)
                .filter(|n| n.contains(lost.id()) || n.contains(claimed.id()))
                .collect();
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("{left:?}"))
            }
        })
        .await;
        for client in &clients {
            let listed = client.list_all(ListOptions::default()).await.unwrap();
            let ids: Vec<&str> = listed.iter().map(|s| s.sandbox_id.as_str()).collect();
            assert!(!ids.contains(&lost.id()) && !ids.contains(&claimed.id()), "{ids:?}");
        }
        let err = Sandbox::connect(&clients[0], lost.id()).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::NotFound, "{err}");
        let again = until(WAIT, "node 3 takes (and serves) a new sandbox", || async {
            let sandbox = try_create_on(&cluster, &clients[0], n3).await?;
            let out = async { Sandbox::connect(&clients[1], sandbox.id()).await?.exec("echo back").await };
            let out = out.await;
            match out {
                Ok(out) if out.stdout_str() == "back\n" => Ok(sandbox),
                other => Err(format!("{other:?}")),
            }
        })
        .await;

        step(
            "node 2 drained: its sandboxes end and are removed, watchers learn why, nothing new lands there",
        );
        let seen: Arc<Mutex<Vec<SandboxEvent>>> = Arc::default();
        let mut watch = clients[0].watch(WatchOptions::default()).await.unwrap();
        let into = seen.clone();
        tokio::spawn(async move {
            while let Ok(Some(event)) = watch.next().await {
                into.lock().unwrap().push(event);
            }
        });
        n1.set_availability(&n2.name, "drain");
        until(WAIT, "the drained node's sandbox removed, with its reason", || async {
            let removed = seen.lock().unwrap().iter().any(|e| {
                e.sandbox_id == on2.id() && e.kind == EventKind::Removed && e.reason == "its task ended"
            });
            let gone = !n1.swarm_names("service").unwrap_or_default().iter().any(|s| s == on2.id());
            if removed && gone {
                Ok(())
            } else {
                Err(format!("removed event {removed}, service gone {gone}"))
            }
        })
        .await;
        for _ in 0..3 {
            let sandbox = Sandbox::start(&clients[0], spec(images::BUSYBOX)).await.unwrap();
            assert_ne!(n1.placements().get(sandbox.id()), Some(&n2.name), "placed on the drained node");
            sandbox.stop().await.unwrap();
        }
        assert_eq!(
            Sandbox::connect(&clients[1], on1.id())
                .await
                .unwrap()
                .exec("echo ok")
                .await
                .unwrap()
                .stdout_str(),
            "ok\n"
        );
        n1.set_availability(&n2.name, "active");

        step("node 1's sandboxd (the entry node) restarted: calls through it work again");
        cluster.node_action("restart", n1, "sandboxd");
        let via1 = Sandbox::connect(&clients[0], again.id()).await.unwrap();
        until(WAIT, "an exec through the restarted entry node", || async {
            match via1.exec("echo through-1").await {
                Ok(out) if out.stdout_str() == "through-1\n" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        let listed = clients[0].list_all(ListOptions::default()).await.unwrap();
        assert!(listed.iter().any(|s| s.sandbox_id == again.id()), "{listed:?}");
        let mut watch = clients[0].watch(WatchOptions::default()).await.unwrap();
        let fresh = Sandbox::start(&clients[1], spec(images::BUSYBOX)).await.unwrap();
        let seen_fresh = tokio::time::timeout(WAIT, async {
            while let Some(event) = watch.next().await.unwrap() {
                if event.sandbox_id == fresh.id() && event.kind == EventKind::Ready {
                    return;
                }
            }
            panic!("the watch ended");
        })
        .await;
        assert!(seen_fresh.is_ok(), "no READY of a new sandbox through the restarted entry node");
    });

    assert!(cluster.down(), "cluster-down.sh failed");
    assert_eq!(cluster.leftovers(), Vec::<String>::new());
}
