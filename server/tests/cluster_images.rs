//! Images and node loss in a `cluster.mode: swarm` test cluster (3 nodes, `scripts/cluster-up.sh`,
//! only busybox loaded), one cluster for the whole suite, its steps in order (issue 29):
//! a create of an image no node has is FAILED_PRECONDITION naming it, at once; an image only one
//! node has is created there; `PrefetchImages` copies it from that node to the others (no
//! registry: `docker save` there, `docker load` here, node to node) with progress; pools keyed by
//! image set from a schedule in one call; then the Swarm leader's dockerd is killed and every
//! sandbox on the other nodes answers through every entry node throughout the election, while
//! the lost node's sandbox fails with NODE_LOST. Nothing of the cluster is left afterwards.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use sandboxd_client::{pool_target, spec, Client, FailureKind, ImagePrefetchState, Sandbox};
use testkit::cluster::{ClusterNode, TestCluster};
use testkit::images::{self, BASH, BUSYBOX};
use testkit::wait::until;

const WAIT: Duration = Duration::from_secs(150);

fn sandboxd_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_sandboxd"))
}

fn step(what: &str) {
    eprintln!("cluster_images: {what}");
}

/// A sandbox created through `client` on `node` (the other nodes paused meanwhile).
async fn create_on(cluster: &TestCluster, client: &Client, node: &ClusterNode) -> Sandbox {
    let manager = &cluster.nodes[0];
    let others: Vec<&ClusterNode> = cluster.nodes.iter().filter(|n| n.name != node.name).collect();
    for other in &others {
        manager.set_availability(&other.name, "pause");
    }
    let made = Sandbox::start(client, spec(BUSYBOX)).await;
    for other in &others {
        manager.set_availability(&other.name, "active");
    }
    let sandbox = made.unwrap();
    assert_eq!(manager.placements().get(sandbox.id()), Some(&node.name));
    sandbox
}

/// Whether `node`'s daemon has `image`.
fn has_image(node: &ClusterNode, image: &str) -> bool {
    node.docker(&["image", "inspect", "--format", "{{.Id}}", image]).status.success()
}

/// The Swarm leader's hostname, as `node`'s daemon says (`None`: no answer, no leader).
fn leader(node: &ClusterNode) -> Option<String> {
    let out = node.docker(&["node", "ls", "--format", "{{.Hostname}} {{.ManagerStatus}}"]);
    if !out.status.success() {
        return None;
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.ends_with(" Leader"))
        .map(|l| l.split_whitespace().next().unwrap_or_default().to_string())
}

#[test]
fn images_reach_every_node_without_a_registry_and_a_lost_leader_takes_no_other_node_down() {
    images::ensure_images().expect("test images");
    let cluster = TestCluster::up_with(3, sandboxd_bin(), &[("SANDBOXD_CLUSTER_IMAGES", BUSYBOX)]);
    let token = cluster.token();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut clients = Vec::new();
        for node in &cluster.nodes {
            clients.push(Client::connect_with_token(node.url(), token.clone()).await.unwrap());
        }
        let [n1, n2, n3] = [&cluster.nodes[0], &cluster.nodes[1], &cluster.nodes[2]];

        step("a create of an image no node has: FAILED_PRECONDITION naming it, at once");
        assert!(!has_image(n1, BASH) && !has_image(n2, BASH) && !has_image(n3, BASH));
        let started = Instant::now();
        let err = Sandbox::start(&clients[1], spec(BASH)).await.expect_err("no node has it");
        assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err}");
        assert!(err.to_string().contains(BASH) && err.to_string().contains("no node"), "{err}");
        eprintln!("refused in {:?}", started.elapsed());
        assert!(n1.docker(&["service", "ls", "-q"]).stdout.is_empty(), "a service was left behind");

        step("the image loaded on node 1 only: a create of it through node 3 lands there");
        let load = Command::new("sh")
            .arg("-c")
            .arg(format!("docker save {BASH} | docker -H {} load -q", n1.docker_host))
            .output()
            .unwrap();
        assert!(load.status.success(), "{}", String::from_utf8_lossy(&load.stderr));
        let on1 = Sandbox::start(&clients[2], spec(BASH)).await.unwrap();
        assert_eq!(n1.placements().get(on1.id()), Some(&n1.name));
        on1.stop().await.unwrap();

        step("PrefetchImages through node 2 copies it from node 1 to nodes 2 and 3, with progress");
        let mut stream = clients[1].prefetch_images([BASH, BUSYBOX], Vec::<String>::new()).await.unwrap();
        let mut steps = Vec::new();
        while let Some(step) = stream.next().await.unwrap() {
            steps.push(step);
        }
        let last = |image: &str, node: &str| {
            steps
                .iter()
                .rev()
                .find(|s| s.image == image && s.node == node)
                .unwrap_or_else(|| panic!("no step of {image} on {node}: {steps:?}"))
        };
        assert_eq!(last(BASH, &n1.name).state(), ImagePrefetchState::Present, "{steps:?}");
        for node in [n2, n3] {
            let done = last(BASH, &node.name);
            assert_eq!(done.state(), ImagePrefetchState::Ready, "{done:?}");
            assert_eq!(done.source, n1.name, "{done:?}");
            assert!(done.bytes_done > 0 && done.bytes_done == done.bytes_total, "{done:?}");
            assert!(
                steps.iter().any(|s| s.image == BASH
                    && s.node == node.name
                    && s.state() == ImagePrefetchState::Copying
                    && s.bytes_total > 0),
                "no COPYING step with the size for {}: {steps:?}",
                node.name
            );
            assert!(has_image(node, BASH), "{} lacks the image after the copy", node.name);
            assert_eq!(last(BUSYBOX, &node.name).state(), ImagePrefetchState::Present);
        }
        // Again: every node has it now; an unknown node is refused by name.
        let again = clients[0].prefetch_images([BASH], [n3.name.clone()]).await.unwrap().finish().await.unwrap();
        assert_eq!(again.len(), 1, "{again:?}");
        assert_eq!(again[0].state(), ImagePrefetchState::Present);
        let err = match clients[0].prefetch_images([BASH], ["no-such-node"]).await {
            Ok(stream) => stream.finish().await.expect_err("unknown node"),
            Err(e) => e,
        };
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
        assert!(err.to_string().contains("nodes[0]") && err.to_string().contains("no-such-node"), "{err}");
        // The copy runs: a sandbox of it on node 3.
        let s = Sandbox::start(&clients[2], spec(BASH)).await.unwrap();
        assert_eq!(s.exec("echo copied").await.unwrap().stdout_str(), "copied\n");
        s.stop().await.unwrap();

        step("SetPoolTargets: the image's pool made through node 3, filled, re-targeted through node 1");
        let set = clients[2].set_pool_targets([pool_target(BASH, 2)]).await.unwrap();
        assert_eq!((set[0].target, set[0].created), (2, true), "{set:?}");
        let name = set[0].pool.clone();
        until(WAIT, "the pool's 2 members ready", || async {
            let pools = clients[1].list_pools().await.map_err(|e| e.to_string())?;
            match pools.iter().find(|p| p.name == name) {
                Some(p) if p.ready == 2 => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        let set = clients[0].set_pool_targets([pool_target(BASH, 3)]).await.unwrap();
        assert_eq!((set[0].target, set[0].max, set[0].created), (3, 3, false), "{set:?}");
        until(WAIT, "the pool at its new target, spread over the nodes", || async {
            let set = clients[0].set_pool_targets([pool_target(BASH, 3)]).await.map_err(|e| e.to_string())?;
            let ready: u32 = set[0].nodes.iter().map(|n| n.ready).sum();
            if ready == 3 {
                Ok(())
            } else {
                Err(format!("{:?}", set[0].nodes))
            }
        })
        .await;
        clients[1].delete_pool(&name).await.unwrap();

        step("a sandbox on each node, each reached through each entry node");
        let mut sandboxes = Vec::new();
        for node in &cluster.nodes {
            sandboxes.push((node.name.clone(), create_on(&cluster, &clients[0], node).await));
        }
        for client in &clients {
            for (_, sandbox) in &sandboxes {
                let s = Sandbox::connect(client, sandbox.id()).await.unwrap();
                assert_eq!(s.exec("echo warm").await.unwrap().stdout_str(), "warm\n");
            }
        }
        let lost_name = leader(n1).expect("a leader");
        let lost = cluster.nodes.iter().find(|n| n.name == lost_name).unwrap();
        let survivors: Vec<&ClusterNode> = cluster.nodes.iter().filter(|n| n.name != lost_name).collect();
        step(&format!("the leader {lost_name}'s dockerd killed: the others answer throughout the election"));
        cluster.node_action("kill", lost, "dockerd");
        let start = Instant::now();
        let (mut rounds, mut elected_at, mut lost_seen, mut slowest) = (0, None, false, Duration::ZERO);
        loop {
            rounds += 1;
            for (entry, client) in cluster.nodes.iter().zip(&clients) {
                for (owner, sandbox) in &sandboxes {
                    let exec = async { Sandbox::connect(client, sandbox.id()).await?.exec("echo alive").await };
                    let asked = Instant::now();
                    let answer = exec.await;
                    if *owner != lost_name {
                        slowest = slowest.max(asked.elapsed());
                    }
                    if *owner != lost_name {
                        match answer {
                            Ok(out) => assert_eq!(out.stdout_str(), "alive\n"),
                            Err(e) => panic!(
                                "round {rounds}, {:?} after the kill: the sandbox on surviving node {owner} failed \
                                 through {}: {e}",
                                start.elapsed(),
                                entry.name
                            ),
                        }
                    } else if entry.name != lost_name {
                        if let Err(e) = answer {
                            if e.failure_kind() == Some(FailureKind::NodeLost) {
                                assert_eq!(e.code(), tonic::Code::Unavailable, "{e}");
                                assert!(e.to_string().contains(&lost_name), "names the node: {e}");
                                lost_seen = true;
                            }
                        }
                    }
                }
            }
            if elected_at.is_none() && survivors.iter().all(|n| leader(n).is_some_and(|l| l != lost_name)) {
                elected_at = Some(start.elapsed());
            }
            // Done once a new leader is in place and the lost node's sandbox reads as lost
            // (and a few rounds ran, so the election was crossed more than once).
            if elected_at.is_some() && lost_seen && rounds >= 5 {
                break;
            }
            assert!(
                start.elapsed() < WAIT,
                "after {rounds} rounds: new leader at {elected_at:?}, lost node's sandbox NODE_LOST: {lost_seen}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        eprintln!(
            "{rounds} rounds over {:?}: every surviving sandbox answered through every entry node (slowest {slowest:?}); \
             new leader at {elected_at:?}",
            start.elapsed()
        );
    });
    assert!(cluster.down(), "cluster-down.sh failed");
    assert_eq!(cluster.leftovers(), Vec::<String>::new());
}
