//! Placement by OCI runtime in `cluster.mode: swarm` (issue 27), on a 2-node test cluster of
//! `scripts/cluster-up.sh` whose node 2 is a gVisor node (`SANDBOXD_CLUSTER_RUNSC_NODES=2`: its
//! daemon has runsc registered as its default runtime, since a Swarm task runs on its node's
//! default) and node 1 a runc one that advertises nothing. Node 2's sandboxd advertises runsc
//! at start (node label `sandboxd.runtime`, from its daemon's `docker info`); then a create
//! asking for runsc goes only to node 2 and runs on gVisor (its `dmesg`), one asking for runc
//! (or nothing) only to node 1, and with node 2 paused a runsc create is FAILED_PRECONDITION
//! naming runsc, nothing created. Needs gVisor 2024 in `/opt/sandboxd/runsc-2024`
//! (`scripts/install-deps.sh`), or the runsc `RUNSC` names.

use std::path::Path;
use std::time::Duration;

use sandboxd_client::{spec, spec_on, Sandbox};
use testkit::cluster::TestCluster;
use testkit::images::BUSYBOX;
use testkit::wait::until;

const WAIT: Duration = Duration::from_secs(120);

fn sandboxd_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_sandboxd"))
}

fn step(what: &str) {
    eprintln!("cluster_runtimes: {what}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_create_goes_to_a_node_that_runs_its_runtime() {
    let runsc = std::env::var("RUNSC").unwrap_or_else(|_| "/opt/sandboxd/runsc-2024/usr/bin/runsc".into());
    assert!(Path::new(&runsc).exists(), "{runsc} is missing: scripts/install-deps.sh unpacks it");
    let config = "docker:\n  runtimes:\n    - name: runc\n    - name: runsc\n";
    let cluster = TestCluster::start(
        2,
        sandboxd_bin(),
        &[("SANDBOXD_CLUSTER_RUNSC_NODES", "2"), ("SANDBOXD_CLUSTER_CONFIG", config)],
    );
    let clients = cluster.clients().await;
    let (n1, n2) = (&cluster.nodes[0], &cluster.nodes[1]);

    step("node 2's sandboxd advertised its daemon's default runtime; node 1 advertises none");
    let label = |node: &str| {
        let out =
            n1.docker(&["node", "inspect", "--format", "{{index .Spec.Labels \"sandboxd.runtime\"}}", node]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    until(WAIT, "node 2 to advertise runsc", || async {
        match label(&n2.name) {
            l if l == "runsc" => Ok(()),
            other => Err(other),
        }
    })
    .await;
    let none = label(&n1.name);
    assert!(none.is_empty() || none == "<no value>", "node 1 (runc) advertises nothing, not {none:?}");

    step("runsc creates (through either node) land on node 2 and run on gVisor");
    let mut made = Vec::new();
    for client in &clients {
        let sandbox = Sandbox::start(client, spec_on(BUSYBOX, "runsc")).await.unwrap();
        assert_eq!(n1.placements().get(sandbox.id()), Some(&n2.name), "a runsc sandbox off the runsc node");
        assert_eq!(sandbox.runtime().await.unwrap(), "runsc");
        let dmesg = sandbox.exec("dmesg | head -n 1").await.unwrap();
        assert!(dmesg.stdout_str().contains("Starting gVisor"), "{:?}", dmesg.stdout_str());
        made.push(sandbox);
    }

    // (Written outside /tmp: gVisor mounts a tmpfs of its own there, which no snapshot holds.)
    step("a fork of a gVisor sandbox through node 1: its children on node 2, on gVisor; a live fork is not offered");
    let source = &made[0];
    assert_eq!(source.exec("echo gvisor-branch > /gvisor-branch").await.unwrap().return_code, 0);
    let fork = source.fork(1, Default::default()).await.unwrap();
    for child in &fork.sandboxes {
        assert_eq!(n1.placements().get(child.id()), Some(&n2.name), "a fork child off its snapshot's node");
        assert_eq!(child.runtime().await.unwrap(), "runsc");
        let out = child.exec("cat /gvisor-branch; dmesg | head -n 1").await.unwrap();
        assert!(out.stdout_str().starts_with("gvisor-branch\n"), "{:?}", out.stdout_str());
        assert!(out.stdout_str().contains("Starting gVisor"), "{:?}", out.stdout_str());
        child.stop().await.unwrap();
    }
    let e = source.fork_live(1, Default::default(), None).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unimplemented, "{e:?}");
    assert!(e.to_string().contains("live_checkpoints"), "{e}");
    until(WAIT, "the fork's snapshot deleted once its child is gone", || async {
        clients[1].delete_snapshot(fork.snapshot_id.as_str()).await.map_err(|e| e.to_string())
    })
    .await;

    step("runc creates, named or by default, land on node 1 (the host's kernel)");
    for s in [spec_on(BUSYBOX, "runc"), spec(BUSYBOX)] {
        let sandbox = Sandbox::start(&clients[1], s).await.unwrap();
        assert_eq!(n1.placements().get(sandbox.id()), Some(&n1.name), "a runc sandbox on the runsc node");
        let dmesg = sandbox.exec("dmesg 2>&1 | head -n 1").await.unwrap();
        assert!(!dmesg.stdout_str().contains("gVisor"), "{:?}", dmesg.stdout_str());
        made.push(sandbox);
    }

    step("with node 2 paused, no node runs runsc: FAILED_PRECONDITION naming it, nothing created");
    let services = |n: &testkit::cluster::ClusterNode| n.placements().len();
    let before = services(n1);
    n1.set_availability(&n2.name, "pause");
    let e = Sandbox::start(&clients[0], spec_on(BUSYBOX, "runsc")).await.unwrap_err();
    n1.set_availability(&n2.name, "active");
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert!(e.to_string().contains("\"runsc\"") && e.to_string().contains("spec.runtime"), "{e}");
    assert_eq!(services(n1), before, "a refused create left a service");

    step("a runtime the cluster does not offer is INVALID_ARGUMENT naming the offered ones");
    let e = Sandbox::start(&clients[0], spec_on(BUSYBOX, "kata")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.to_string().contains("runc, runsc"), "{e}");

    for sandbox in made {
        sandbox.stop().await.unwrap();
    }
    assert!(cluster.down(), "cluster-down.sh failed");
    assert_eq!(cluster.leftovers(), Vec::<String>::new());
}
