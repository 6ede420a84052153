//! Warm pools and tenants in a `cluster.mode: swarm` test cluster (3 nodes, `scripts/cluster-up.sh`,
//! a tenants file shared by every node), one cluster for the whole suite, its steps in order: a
//! pool made through one node is every node's (its definition a Swarm config) and is filled by
//! the Swarm leader; concurrent claims through all three nodes never get one member twice (the
//! claim record is the compare-and-swap), each claim's env, files and metadata apply through any
//! node; the pool refills; closing a claimed sandbox leaves nothing in Swarm; a tenant's pool and
//! `Watch` are its own across nodes; `DeletePool` through another node; a stale claim record is
//! cleaned by the leader. Nothing of the cluster is left afterwards.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use sandboxd_client::{
    from_pool, proto, spec, Client, EventKind, ListOptions, PoolDefinition, Sandbox, WatchStream,
};
use sha2::Digest;
use testkit::cluster::{ClusterNode, TestCluster};
use testkit::images;
use testkit::wait::until;

const WAIT: Duration = Duration::from_secs(120);

fn sandboxd_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_sandboxd"))
}

fn step(what: &str) {
    eprintln!("cluster_pools: {what}");
}

/// Waits until `client` lists pool `name` with `ready` ready sandboxes.
async fn ready(client: &Client, name: &str, ready: u32) {
    until(WAIT, &format!("pool {name} with {ready} ready"), || async {
        let pools = client.list_pools().await.map_err(|e| e.to_string())?;
        match pools.iter().find(|p| p.name == name) {
            Some(p) if p.ready == ready => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

/// The Swarm claim records (`sandboxd-claim-<id>`) and pool definitions node 1 lists.
fn records(node: &ClusterNode) -> (BTreeSet<String>, usize) {
    let configs = node.swarm_names("config").expect("docker config ls");
    let claims = configs.iter().filter_map(|c| c.strip_prefix("sandboxd-claim-")).map(String::from).collect();
    let pools = configs.iter().filter(|c| c.starts_with("sandboxd-pool-")).count();
    (claims, pools)
}

/// The members (services labelled with a pool key) that no claim record names.
fn unclaimed_members(node: &ClusterNode) -> Vec<String> {
    let out = node.docker(&["service", "ls", "--filter", "label=sandboxd.pool.key", "--format", "{{.Name}}"]);
    let (claims, _) = records(node);
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter(|s| !claims.contains(*s))
        .map(String::from)
        .collect()
}

/// The sandbox ids of `watch`'s events up to and including `id`'s READY.
async fn events_until(watch: &mut WatchStream, id: &str) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let event = tokio::time::timeout(WAIT, watch.next()).await.expect("an event in time");
        let event = event.expect("the watch goes on").expect("the watch goes on");
        let ready = event.sandbox_id == id && event.kind == EventKind::Ready;
        seen.push(event.sandbox_id);
        if ready {
            return seen;
        }
    }
}

fn sha256_hex(key: &str) -> String {
    sha2::Sha256::digest(key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn pools_are_the_clusters_and_a_member_goes_to_one_caller() {
    let tenants = tempfile::tempdir().unwrap();
    let tenants_file = tenants.path().join("tenants.yaml");
    std::fs::write(
        &tenants_file,
        format!(
            "tenants:\n  - name: red\n    key_sha256: {}\n  - name: blue\n    key_sha256: {}\n",
            sha256_hex("red-key"),
            sha256_hex("blue-key")
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

        step("a pool made through node 1 is filled by the leader and listed by every node");
        let mut warm = PoolDefinition::new("warm", images::BUSYBOX, 3, 20);
        warm.template.env.insert("BASE".into(), "from-template".into());
        warm.template.files.insert("/etc/pool-file".into(), b"template file\n".to_vec());
        clients[0].create_pool(warm).await.unwrap();
        for client in &clients {
            ready(client, "warm", 3).await;
        }
        assert_eq!(records(n1).1, 1, "one definition in Swarm");
        let again =
            clients[2].create_pool(PoolDefinition::new("warm", images::BUSYBOX, 1, 1)).await.unwrap_err();
        assert_eq!(again.code(), tonic::Code::AlreadyExists, "{again}");

        step("six claims at once through the three nodes: six sandboxes, no member twice");
        let claims = (0..6).map(|i| {
            let client = clients[i % 3].clone();
            async move {
                let mut s = from_pool("warm");
                s.env.insert("WHO".into(), format!("claim-{i}"));
                s.metadata.insert("claim".into(), i.to_string());
                s.files.insert("/tmp/who".into(), format!("file-{i}").into_bytes());
                let started = Instant::now();
                let sandbox = Sandbox::start(&client, s).await.unwrap();
                (i, sandbox.id().to_string(), started.elapsed())
            }
        });
        let claimed = futures_util::future::join_all(claims).await;
        let ids: BTreeSet<&str> = claimed.iter().map(|(_, id, _)| id.as_str()).collect();
        assert_eq!(ids.len(), 6, "a sandbox handed out twice: {claimed:?}");
        let (records_now, _) = records(n1);
        let members: Vec<&&str> = ids.iter().filter(|id| records_now.contains(**id)).collect();
        assert!(members.len() >= 3, "the three ready members were claimed: {members:?} of {claimed:?}");
        eprintln!(
            "cluster_pools: concurrent claims took {:?}",
            claimed.iter().map(|c| c.2).collect::<Vec<_>>()
        );

        step("each claim's env, files and metadata apply, through a node other than the one claimed through");
        for (i, id, _) in &claimed {
            let via = &clients[(i + 1) % 3];
            let sandbox = Sandbox::connect(via, id.as_str()).await.unwrap();
            let out = sandbox.exec("echo $WHO $BASE; cat /tmp/who; echo; cat /etc/pool-file").await.unwrap();
            assert_eq!(
                out.stdout_str(),
                format!("claim-{i} from-template\nfile-{i}\ntemplate file\n"),
                "{id}"
            );
            let mut options = ListOptions::default();
            options.labels.insert("claim".into(), i.to_string());
            let listed = clients[(i + 2) % 3].list_all(options).await.unwrap();
            assert_eq!(listed.iter().map(|s| s.sandbox_id.as_str()).collect::<Vec<_>>(), [id.as_str()]);
        }
        let listed: BTreeSet<String> = clients[1]
            .list_all(ListOptions::default())
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.sandbox_id)
            .collect();
        for member in unclaimed_members(n1) {
            assert!(!listed.contains(&member), "an unclaimed member is listed: {member}");
        }

        step("the pool refills; a claim from a full pool, timed");
        ready(&clients[1], "warm", 3).await;
        let mut timed = Vec::new();
        for client in &clients {
            let started = Instant::now();
            let sandbox = Sandbox::start(client, from_pool("warm")).await.unwrap();
            timed.push(started.elapsed());
            assert!(records(n1).0.contains(sandbox.id()), "claimed from the pool");
        }
        eprintln!("cluster_pools: claims from a ready pool through nodes 1, 2, 3 took {timed:?}");
        let info = clients[2].list_pools().await.unwrap().into_iter().find(|p| p.name == "warm").unwrap();
        assert!(info.in_use >= 6, "{info:?}");

        step("closing a claimed sandbox through another node leaves nothing of it in Swarm");
        let (_, closed, _) = &claimed[0];
        Sandbox::connect(&clients[2], closed.as_str()).await.unwrap().stop().await.unwrap();
        until(WAIT, "the closed claim's service and record gone", || async {
            let services = n1.swarm_names("service").ok_or("no answer")?;
            let left = services.contains(closed) || records(n1).0.contains(closed);
            if left {
                Err("still there".to_string())
            } else {
                Ok(())
            }
        })
        .await;

        step("a tenant's pool and Watch are its own, across nodes");
        let red: Vec<Client> = futures_util::future::join_all(
            cluster.nodes.iter().map(|n| Client::connect_with_token(n.url(), "red-key".to_string())),
        )
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
        let blue = Client::connect_with_token(cluster.nodes[0].url(), "blue-key".to_string()).await.unwrap();
        let blue_on_3 =
            Client::connect_with_token(cluster.nodes[2].url(), "blue-key".to_string()).await.unwrap();
        // Watch first: once red has a pool, a plain busybox create of red's is a claim from it
        // (its template matches), and a claim tells no CREATED or READY.
        let mut red_watch = red[0].watch(Default::default()).await.unwrap();
        let mut blue_watch = blue.watch(Default::default()).await.unwrap();
        // Both made through node 2 or 3 and placed anywhere; each watches through node 1. (A
        // workdir of their own: the operator's pool would be claimed from otherwise.)
        let own = || proto::SandboxSpec { workdir: Some("/tmp".into()), ..spec(images::BUSYBOX) };
        let red_made = Sandbox::start(&red[1], own()).await.unwrap();
        let blue_made = Sandbox::start(&blue_on_3, own()).await.unwrap();
        let red_saw = events_until(&mut red_watch, red_made.id()).await;
        assert!(red_saw.iter().all(|id| id != blue_made.id()), "red saw blue's sandbox: {red_saw:?}");
        let blue_saw = events_until(&mut blue_watch, blue_made.id()).await;
        assert!(blue_saw.iter().all(|id| id != red_made.id()), "blue saw red's sandbox: {blue_saw:?}");
        red[1].create_pool(PoolDefinition::new("mine", images::BUSYBOX, 1, 2)).await.unwrap();
        ready(&red[2], "mine", 1).await;
        assert!(!blue.list_pools().await.unwrap().iter().any(|p| p.name == "mine"), "blue sees red's pool");
        let err = Sandbox::start(&blue, from_pool("mine")).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::NotFound, "{err}");
        let reds = Sandbox::start(&red[2], from_pool("mine")).await.unwrap();
        assert!(records(n1).0.contains(reds.id()), "claimed from red's pool");
        assert_eq!(
            Sandbox::connect(&red[0], reds.id()).await.unwrap().exec("echo red").await.unwrap().stdout_str(),
            "red\n"
        );
        let err = Sandbox::connect(&blue, reds.id()).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::NotFound, "{err}");

        step("DeletePool through node 3 removes the unclaimed members; claimed ones work on");
        ready(&clients[2], "warm", 3).await;
        let removed = clients[2].delete_pool("warm").await.unwrap();
        assert!(removed >= 1, "{removed}");
        red[0].delete_pool("mine").await.unwrap();
        until(WAIT, "no pool definition and no unclaimed member left in Swarm", || async {
            let (_, pools) = records(n1);
            let unclaimed = unclaimed_members(n1);
            if pools == 0 && unclaimed.is_empty() {
                Ok(())
            } else {
                Err(format!("{pools} definitions, unclaimed {unclaimed:?}"))
            }
        })
        .await;
        assert!(clients[0].list_pools().await.unwrap().is_empty());
        let (_, kept, _) = &claimed[1];
        let out =
            Sandbox::connect(&clients[0], kept.as_str()).await.unwrap().exec("echo $WHO").await.unwrap();
        assert_eq!(out.stdout_str(), "claim-1\n");

        step("a claim record whose sandbox does not exist is cleaned by the leader");
        let stale = "sandboxd-claim-sandboxd-00000000000000000000000000000000";
        let data = tenants.path().join("claim.json");
        std::fs::write(&data, "{}").unwrap();
        let out = n1.docker(&[
            "config",
            "create",
            "--label",
            "sandboxd.claim=1",
            "--label",
            "sandboxd.claim.sandbox=sandboxd-00000000000000000000000000000000",
            stale,
            &data.display().to_string(),
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        until(WAIT, "the stale claim record removed", || async {
            if records(n1).0.iter().any(|c| c == "sandboxd-00000000000000000000000000000000") {
                Err("still there".to_string())
            } else {
                Ok(())
            }
        })
        .await;
    });

    assert!(cluster.down(), "cluster-down.sh failed");
    assert_eq!(cluster.leftovers(), Vec::<String>::new());
}
