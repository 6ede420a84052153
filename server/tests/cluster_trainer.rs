//! What a trainer's loop needs, in a `cluster.mode: swarm` test cluster (3 nodes,
//! `scripts/cluster-up.sh`, busybox only; issue 29), one cluster for the whole suite, its steps in
//! order: `CreateBatch` through one entry node spreads its sandboxes over every node; each is
//! driven through a node that does not own it; `Reset` through a relaying node puts a sandbox
//! back in place on its owning node (an episode's files and processes gone, the spec's files
//! back, the same container, its id and labels kept), for a sandbox whose create another node
//! completed and for one created by the node it runs on; `Usage` through a relaying node; a
//! batch past every node's room is CAPACITY at once, past a tenant's quota QUOTA at once (both
//! RESOURCE_EXHAUSTED with a retry delay, nothing left in Swarm); a recycling pool is refused by
//! name (a cluster's pools remove what is closed); `Close` through another node. Nothing of the
//! cluster is left afterwards. `PrefetchImages` and `SetPoolTargets` in the cluster are
//! `cluster_images.rs`.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use sandboxd_client::{failure_kind_of, proto, spec, Client, FailureKind, PoolDefinition, Sandbox};
use sha2::Digest;
use testkit::cluster::{ClusterNode, TestCluster};
use testkit::images::{self, BUSYBOX};
use tonic::Code;
use tonic_types::StatusExt;

/// How quickly a refusal must come: far below a create's deadline (a timeout is not a refusal).
const AT_ONCE: Duration = Duration::from_secs(15);

fn sandboxd_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_sandboxd"))
}

fn step(what: &str) {
    eprintln!("cluster_trainer: {what}");
}

fn sha256_hex(key: &str) -> String {
    sha2::Sha256::digest(key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// The id of `sandbox`'s task container on its node's daemon.
fn container_of(node: &ClusterNode, sandbox: &str) -> String {
    let out = node.docker(&[
        "ps",
        "-aq",
        "--no-trunc",
        "--filter",
        &format!("label=com.docker.swarm.service.name={sandbox}"),
    ]);
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(!id.is_empty() && !id.contains('\n'), "one container of {sandbox} on {}: {id:?}", node.name);
    id
}

/// The sandbox services Swarm has, asked of `node`.
fn services(node: &ClusterNode) -> Vec<String> {
    let out = node.docker(&["service", "ls", "-q", "--filter", "label=sandboxd.sandbox=1"]);
    String::from_utf8_lossy(&out.stdout).split_whitespace().map(String::from).collect()
}

async fn sh(sandbox: &Sandbox, command: &str) -> String {
    let result = sandbox.exec(command).await.expect("exec");
    assert_eq!(result.return_code, 0, "{command}: {result:?}");
    result.stdout_str().to_string()
}

/// The episode: a file added, a spec file changed, an image file changed, a background process.
const EPISODE: &str = "echo episode > /episode.txt && echo changed > /work/seed.txt \
    && echo intruder:x:0:0::/:/bin/sh >> /etc/passwd \
    && (setsid sleep 1000 </dev/null >/dev/null 2>&1 &) && echo ok";

/// After a reset: the episode's traces gone, the spec's and the image's files as created.
const CHECK: &str = "test ! -e /episode.txt && cat /work/seed.txt && grep -c intruder /etc/passwd; \
    ps -o args | grep -c '^sleep 1000'; exit 0";

#[test]
fn a_trainers_loop_runs_through_any_node_of_the_cluster() {
    let tenants = tempfile::tempdir().unwrap();
    let tenants_file = tenants.path().join("tenants.yaml");
    std::fs::write(
        &tenants_file,
        format!(
            "tenants:\n  - name: trainer\n    key_sha256: {}\n    quotas:\n      sandboxes: 2\n",
            sha256_hex("trainer-key")
        ),
    )
    .unwrap();
    let config = format!("server:\n  auth:\n    tenants_file: {}\n", tenants_file.display());
    let cluster = TestCluster::start(
        3,
        sandboxd_bin(),
        &[("SANDBOXD_CLUSTER_IMAGES", images::BUSYBOX), ("SANDBOXD_CLUSTER_CONFIG", &config)],
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let clients = cluster.clients().await;
        let n1 = &cluster.nodes[0];
        let index_of = |name: &str| cluster.nodes.iter().position(|n| n.name == name).unwrap();

        step("CreateBatch of 6 through node 1: every item a sandbox, over all three nodes");
        let mut batch_spec = spec(BUSYBOX);
        batch_spec.files = HashMap::from([("/work/seed.txt".to_string(), b"seed\n".to_vec())]);
        batch_spec.metadata = HashMap::from([("run".to_string(), "trainer".to_string())]);
        let started = Instant::now();
        let items = Sandbox::start_batch(&clients[0], batch_spec, 6).await.expect("CreateBatch");
        eprintln!("6 sandboxes in {:?}", started.elapsed());
        let batch: Vec<Sandbox> = items.into_iter().map(|i| i.expect("a sandbox")).collect();
        let placed = n1.placements();
        let owner: BTreeMap<String, usize> =
            batch.iter().map(|s| (s.id().to_string(), index_of(&placed[s.id()]))).collect();
        for (i, node) in cluster.nodes.iter().enumerate() {
            assert!(owner.values().any(|o| *o == i), "nothing of the batch on {}: {placed:?}", node.name);
        }

        step("each sandbox driven through a node that does not own it: the episode");
        let mut on = Vec::new();
        for sandbox in &batch {
            let entry = (owner[sandbox.id()] + 1) % 3;
            let s = Sandbox::connect(&clients[entry], sandbox.id()).await.unwrap();
            assert_eq!(s.metadata().get("run").map(String::as_str), Some("trainer"));
            assert_eq!(sh(&s, "cat /work/seed.txt").await, "seed\n");
            assert_eq!(sh(&s, EPISODE).await, "ok\n");
            on.push(s);
        }

        // One whose create node 1 completed on another node (the baseline handed over), and one
        // node 1 created on itself; each reset through a node that does not own it.
        let remote = batch.iter().find(|s| owner[s.id()] != 0).expect("a sandbox off node 1");
        let local = batch.iter().find(|s| owner[s.id()] == 0).expect("a sandbox on node 1");
        for sandbox in [remote, local] {
            let home = owner[sandbox.id()];
            let entry = (home + 2) % 3;
            step(&format!(
                "Reset of a sandbox on {} through {}: in place, nothing of the episode left",
                cluster.nodes[home].name, cluster.nodes[entry].name
            ));
            let container = container_of(&cluster.nodes[home], sandbox.id());
            let through = Sandbox::connect(&clients[entry], sandbox.id()).await.unwrap();
            let report = through.reset().await.expect("Reset");
            assert!(report.processes_killed >= 1, "{report:?}");
            assert!(report.paths_restored >= 3, "{report:?}");
            eprintln!("reset: {report:?}");
            assert_eq!(sh(&through, CHECK).await, "seed\n0\n0\n");
            assert_eq!(container_of(&cluster.nodes[home], sandbox.id()), container, "the same container");
            let again = Sandbox::connect(&clients[(home + 1) % 3], sandbox.id()).await.unwrap();
            assert_eq!(again.id(), sandbox.id());
            assert_eq!(again.metadata().get("run").map(String::as_str), Some("trainer"));
            assert_eq!(sh(&again, "echo next episode").await, "next episode\n");
        }

        step("Usage through a relaying node");
        let home = owner[remote.id()];
        let through = Sandbox::connect(&clients[(home + 1) % 3], remote.id()).await.unwrap();
        let usage = through.usage().await.expect("Usage");
        assert!(usage.wall_time_s > 0.0, "{usage:?}");
        assert!(usage.processes_started >= 3, "the relayed execs count on the owner: {usage:?}");
        assert!(usage.peak_memory_bytes > 0, "{usage:?}");

        step("a batch past every node's room: CAPACITY at once, nothing left in Swarm");
        let before = services(n1).len();
        let mut huge = spec(BUSYBOX);
        huge.resources = Some(proto::SandboxResources { cpu: Some(1000.0), ..Default::default() });
        let started = Instant::now();
        let items = Sandbox::start_batch(&clients[1], huge.clone(), 2).await.expect("the call succeeds");
        assert_eq!(items.len(), 2);
        for item in items {
            let err = item.expect_err("no node has 1000 CPUs");
            assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
            assert_eq!(err.failure_kind(), Some(FailureKind::Capacity), "{err}");
        }
        let status = clients[2]
            .raw()
            .create(proto::CreateRequest { spec: Some(huge) })
            .await
            .expect_err("no node has 1000 CPUs");
        eprintln!("a batch of 2 and a create refused for room in {:?}", started.elapsed());
        assert!(started.elapsed() < AT_ONCE, "refused at once, not timed out: {:?}", started.elapsed());
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
        assert_eq!(failure_kind_of(&status), Some(FailureKind::Capacity), "{status:?}");
        assert!(status.get_details_retry_info().and_then(|r| r.retry_delay).is_some(), "{status:?}");
        assert_eq!(services(n1).len(), before, "a refused create leaves no service");

        step("a tenant's batch past its quota: QUOTA at once, nothing made");
        let tenant = Client::connect_with_token(cluster.nodes[2].url(), "trainer-key").await.unwrap();
        let one = Sandbox::start(
            &Client::connect_with_token(n1.url(), "trainer-key").await.unwrap(),
            spec(BUSYBOX),
        )
        .await
        .unwrap();
        let started = Instant::now();
        let status = tenant
            .raw()
            .create_batch(proto::CreateBatchRequest { spec: Some(spec(BUSYBOX)), count: 2 })
            .await
            .expect_err("past the quota");
        assert!(started.elapsed() < AT_ONCE, "{:?}", started.elapsed());
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
        assert_eq!(failure_kind_of(&status), Some(FailureKind::Quota), "{status:?}");
        assert!(status.get_details_retry_info().and_then(|r| r.retry_delay).is_some(), "{status:?}");
        assert!(status.message().contains("sandboxes"), "{}", status.message());
        assert_eq!(services(n1).len(), before + 1, "only the tenant's one sandbox");
        one.stop().await.unwrap();

        step("a recycling pool is refused by name in cluster mode");
        let err = clients[1]
            .create_pool(PoolDefinition { recycle: true, ..PoolDefinition::new("recycler", BUSYBOX, 1, 1) })
            .await
            .expect_err("no recycling in a cluster");
        assert_eq!(err.code(), Code::InvalidArgument, "{err}");
        assert!(err.to_string().contains("recycle"), "{err}");

        step("Close of every sandbox through a node that does not own it");
        for sandbox in &on {
            let entry = (owner[sandbox.id()] + 2) % 3;
            Sandbox::connect(&clients[entry], sandbox.id()).await.unwrap().stop().await.unwrap();
        }
        assert_eq!(services(n1), Vec::<String>::new());
    });
    assert!(cluster.down(), "cluster-down.sh failed");
    assert_eq!(cluster.leftovers(), Vec::<String>::new());
}
