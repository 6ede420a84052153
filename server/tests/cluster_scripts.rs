//! `scripts/cluster-up.sh` and `scripts/cluster-down.sh` against real private daemons: a swarm of
//! test hosts in network namespaces of their own, a sandboxd on each that a client on the host
//! reaches, a node whose dockerd dies read `Down` by the others, and nothing left afterwards.

use std::path::Path;
use std::time::{Duration, Instant};

use sandboxd_client::{spec, Client, Sandbox};
use testkit::cluster::{ClusterNode, TestCluster};
use testkit::images;

fn sandboxd_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_sandboxd"))
}

/// `docker node ls` as NAME STATUS AVAILABILITY lines, asked of `node`.
fn node_list(node: &ClusterNode) -> Vec<(String, String, String)> {
    let out = node.docker(&["node", "ls", "--format", "{{.Hostname}} {{.Status}} {{.Availability}}"]);
    assert!(out.status.success(), "docker node ls: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?.to_string(), f.next()?.to_string(), f.next()?.to_string()))
        })
        .collect()
}

#[test]
fn cluster_up_forms_a_swarm_whose_nodes_serve_and_down_leaves_nothing() {
    images::ensure_images().expect("test images");
    // Each node on its own: this test is about the scripts (cluster mode is `cluster.rs`'s).
    let cluster = TestCluster::up_with(3, sandboxd_bin(), &[("SANDBOXD_CLUSTER_MODE", "single")]);

    let names: Vec<&str> = cluster.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, [1, 2, 3].map(|i| format!("{}-n{i}", cluster.name)));
    for node in &cluster.nodes {
        assert!(node.sandboxd_addr.starts_with("127.0.0.1:"), "{node:?}");
        assert!(node.docker_host.starts_with("unix:///tmp/"), "{node:?}");
        assert!(Path::new(&format!("/proc/{}", node.dockerd_pid)).exists(), "dockerd pid {node:?}");
    }

    // One swarm: every node sees all three, Ready and Active, each under its own name.
    for node in &cluster.nodes {
        let mut seen: Vec<String> = node_list(node)
            .into_iter()
            .map(|(name, status, availability)| {
                assert_eq!((status.as_str(), availability.as_str()), ("Ready", "Active"), "{name}");
                name
            })
            .collect();
        seen.sort();
        assert_eq!(seen, names, "as seen from {}", node.name);
    }

    // The test images are on every node, and each node's sandboxd runs a sandbox on its daemon.
    let token = cluster.token();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for node in &cluster.nodes {
        let out = node.docker(&["image", "inspect", "--format", "{{.Id}}", images::BUSYBOX]);
        assert!(out.status.success(), "{} lacks {}", node.name, images::BUSYBOX);
        runtime.block_on(async {
            assert!(
                Client::connect(node.url())
                    .await
                    .unwrap()
                    .raw()
                    .list(sandboxd_client::proto::ListRequest::default())
                    .await
                    .is_err(),
                "a call without the cluster token must be refused"
            );
            let client = Client::connect_with_token(node.url(), token.clone()).await.unwrap();
            let sandbox = Sandbox::start(&client, spec(images::BUSYBOX)).await.unwrap();
            let out = sandbox.exec("echo hi from $(hostname)").await.unwrap();
            assert_eq!(out.return_code, 0, "{out:?}");
            assert!(out.stdout_str().starts_with("hi from "), "{out:?}");
            // The container is on this node's daemon, not the machine's.
            let ps = node.docker(&["ps", "-q", "--filter", &format!("name={}", sandbox.id())]);
            assert!(!String::from_utf8_lossy(&ps.stdout).trim().is_empty(), "not on {}", node.name);
            sandbox.stop().await.unwrap();
        });
    }

    // A node whose dockerd dies reads Down from the others within Swarm's detection time.
    let victim = cluster.nodes[2].clone();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(victim.dockerd_pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let start = Instant::now();
    loop {
        let list = node_list(&cluster.nodes[0]);
        if list.iter().any(|(name, status, _)| *name == victim.name && status == "Down") {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(45), "{} never read Down: {list:?}", victim.name);
        std::thread::sleep(Duration::from_millis(500));
    }

    assert!(cluster.down(), "cluster-down.sh failed");
    assert_eq!(cluster.leftovers(), Vec::<String>::new());
    assert!(cluster.down(), "a second cluster-down.sh must succeed too");
}

#[test]
fn a_cluster_up_that_fails_says_why_and_leaves_nothing() {
    images::ensure_images().expect("test images");
    // A config sandboxd refuses: the daemons and the swarm are up by then, so the failure path
    // must tear all of them down.
    let (cluster, outcome) =
        TestCluster::try_up(2, sandboxd_bin(), &[("SANDBOXD_CLUSTER_CONFIG", "no_such_section: {}")]);
    assert!(!outcome.success, "cluster-up.sh must fail: {}", outcome.stdout);
    assert!(outcome.stderr.contains("exited"), "stderr names the exited sandboxd: {}", outcome.stderr);
    assert!(outcome.stdout.trim().is_empty(), "no node lines on failure: {}", outcome.stdout);
    assert_eq!(cluster.leftovers(), Vec::<String>::new());
}

#[test]
fn cluster_up_refuses_a_bad_node_count_before_making_anything() {
    for bad in ["0", "x", "21", "-1"] {
        let out = std::process::Command::new("bash")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/cluster-up.sh"))
            .arg(bad)
            .env("SANDBOXD_CLUSTER_NAME", "tbadn")
            .env("SANDBOXD_BIN", sandboxd_bin())
            .output()
            .unwrap();
        assert!(!out.status.success(), "N={bad} accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("N must be a number of nodes from 1 to 20"), "N={bad}: {stderr}");
        assert!(!Path::new("/tmp/tbadn").exists());
    }
}
