//! `cluster.mode: swarm` on the test cluster of `scripts/cluster-up.sh` (3 private daemons in a
//! real Swarm, a sandboxd on each), one cluster for the whole suite, its steps in order:
//! sandboxes placed by Swarm over every node; every RPC about a sandbox answered through a node
//! that does not own it as the owner answers it (a PTY session, a 64 MiB upload downloaded byte
//! for byte through a third node, server streams, the caller's deadline); a cluster-wide `List`
//! and `Watch` (each node's events merged; a peer whose sandboxd dies neither ends nor stalls the
//! stream, and is followed again once it is back); E2B's envd calls (commands, files, a terminal)
//! and the console's terminal through a node that does not own the sandbox (the front-ends
//! enter the relaying stack); what Swarm cannot express refused by name; snapshots and forks
//! through a node that does not own the sandbox (committed on its node, the children and a
//! create from the snapshot placed there, listed and deleted from any node); a paused node getting no new sandboxes; `Close` through a node that does not own the sandbox.
//! Nothing of the cluster is left afterwards. Node loss, drain and restarts are
//! `cluster_recovery.rs`; warm pools in the cluster `cluster_pools.rs`.

mod cluster_front_ends;
mod e2b_http;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandboxd_client::{
    from_pool, proto, spec, Client, EventKind, ExecEvent, ExecOptions, ListOptions, PoolDefinition, PtySpec,
    Sandbox, SandboxEvent, SandboxStatus, WatchOptions,
};
use testkit::cluster::TestCluster;
use testkit::images;
use testkit::wait::until;

const T: Option<Duration> = Some(Duration::from_secs(30));
/// Every wait on the cluster: generous, CI is slower than a quiet machine.
const WAIT: Duration = Duration::from_secs(120);

fn sandboxd_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_sandboxd"))
}

fn step(what: &str) {
    eprintln!("cluster: {what}");
}

async fn read_until(session: &sandboxd_client::PtySession, needle: &str) -> String {
    testkit::wait::read_until(needle, Duration::from_secs(60), |left| session.read(Some(left))).await
}

/// A `Watch`'s events as they come, and how it ended (if it did).
#[derive(Default)]
struct Seen {
    events: Vec<SandboxEvent>,
    ended: Option<String>,
}

impl Seen {
    fn has(&self, id: &str, kind: EventKind) -> bool {
        self.events.iter().any(|e| e.sandbox_id == id && e.kind == kind)
    }
}

/// Follows `client`'s `Watch` of every sandbox in the background.
async fn watch_all(client: &Client) -> Arc<Mutex<Seen>> {
    let mut stream = client.watch(WatchOptions::default()).await.expect("Watch");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let into = seen.clone();
    tokio::spawn(async move {
        loop {
            match stream.next().await {
                Ok(Some(event)) => into.lock().unwrap().events.push(event),
                Ok(None) => break into.lock().unwrap().ended = Some("ended cleanly".into()),
                Err(e) => break into.lock().unwrap().ended = Some(e.to_string()),
            }
        }
    });
    seen
}

/// Waits until the watcher saw `kind` for `id`; fails naming what it saw.
async fn saw(seen: &Arc<Mutex<Seen>>, id: &str, kind: EventKind) {
    until(WAIT, &format!("the watcher to see {kind} of {id}"), || async {
        let seen = seen.lock().unwrap();
        if let Some(ended) = &seen.ended {
            panic!("the watch ended: {ended}");
        }
        if seen.has(id, kind) {
            Ok(())
        } else {
            Err(format!("{} events", seen.events.len()))
        }
    })
    .await
}

/// How a server-streaming call ended: its status code (OK after the last message).
async fn stream_code<T>(answer: Result<tonic::Response<tonic::Streaming<T>>, tonic::Status>) -> tonic::Code {
    match answer {
        Err(status) => status.code(),
        Ok(response) => {
            let mut stream = response.into_inner();
            loop {
                match stream.message().await {
                    Ok(Some(_)) => continue,
                    Ok(None) => return tonic::Code::Ok,
                    Err(status) => return status.code(),
                }
            }
        }
    }
}

/// The codes of the calls cluster mode does not offer on the `docker` exec engine (or that
/// fail for this sandbox: no ports), as `client` answers them for sandbox `id`.
async fn unoffered_codes(client: &Client, id: &str) -> Vec<(&'static str, tonic::Code)> {
    let code = |r: Result<tonic::Code, tonic::Status>| r.unwrap_or_else(|s| s.code());
    let sandbox_id = id.to_string();
    let mut r = client.raw();
    vec![
        (
            "Endpoint",
            code(
                r.endpoint(proto::EndpointRequest { sandbox_id: sandbox_id.clone(), port: 80 })
                    .await
                    .map(|_| tonic::Code::Ok),
            ),
        ),
        (
            "NetworkAddress",
            code(
                r.network_address(proto::NetworkAddressRequest { sandbox_id: sandbox_id.clone() })
                    .await
                    .map(|_| tonic::Code::Ok),
            ),
        ),
        (
            "ListPtySessions",
            code(
                r.list_pty_sessions(proto::ListPtySessionsRequest { sandbox_id: sandbox_id.clone() })
                    .await
                    .map(|_| tonic::Code::Ok),
            ),
        ),
        (
            "ListProcesses",
            code(
                r.list_processes(proto::ListProcessesRequest { sandbox_id: sandbox_id.clone() })
                    .await
                    .map(|_| tonic::Code::Ok),
            ),
        ),
        (
            "Stat",
            code(
                r.stat(proto::StatRequest {
                    sandbox_id: sandbox_id.clone(),
                    path: b"/".to_vec(),
                    ..Default::default()
                })
                .await
                .map(|_| tonic::Code::Ok),
            ),
        ),
        (
            "ListDir",
            stream_code(
                r.list_dir(proto::ListDirRequest { sandbox_id, path: b"/".to_vec(), ..Default::default() })
                    .await,
            )
            .await,
        ),
    ]
}

#[test]
fn a_swarm_of_three_answers_for_every_sandbox_from_every_node() {
    let front_ends = cluster_front_ends::config(images::BUSYBOX);
    let cluster = TestCluster::start(
        3,
        sandboxd_bin(),
        &[("SANDBOXD_CLUSTER_IMAGES", images::BUSYBOX), ("SANDBOXD_CLUSTER_CONFIG", &front_ends)],
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let clients = cluster.clients().await;
        let entry = &clients[0];

        step("a watcher through node 3, before anything is made");
        let seen = watch_all(&clients[2]).await;

        step("six creates through node 1 land on all three nodes");
        let mut ids = Vec::new();
        for i in 0..6 {
            let mut s = spec(images::BUSYBOX);
            s.metadata.insert("run".into(), "cluster".into());
            s.metadata.insert("n".into(), i.to_string());
            let sandbox = Sandbox::start(entry, s).await.unwrap();
            ids.push(sandbox.id().to_string());
        }
        let placed = cluster.nodes[0].placements();
        let mut per_node: HashMap<&str, usize> = HashMap::new();
        for id in &ids {
            *per_node.entry(placed.get(id).map(String::as_str).expect("every sandbox placed")).or_default() += 1;
        }
        for node in &cluster.nodes {
            assert!(per_node.get(node.name.as_str()).copied().unwrap_or(0) >= 1, "nothing on {}: {per_node:?}", node.name);
        }
        let index_of = |name: &str| cluster.nodes.iter().position(|n| n.name == name).unwrap();
        let owner_of = |id: &str| index_of(&placed[id]);

        step("the watcher on node 3 saw every create, on every node (CREATED from the owner, READY from node 1)");
        for id in &ids {
            saw(&seen, id, EventKind::Created).await;
            saw(&seen, id, EventKind::Ready).await;
        }

        step("a sandbox on node 2, driven through nodes 1 and 3");
        let far = ids.iter().find(|id| owner_of(id) == 1).unwrap().clone();
        let owner = Sandbox::connect(&clients[1], far.as_str()).await.unwrap();
        for via in [0, 2] {
            let sandbox = Sandbox::connect(&clients[via], far.as_str()).await.unwrap();
            let out = sandbox.exec("echo hi-$((40+2))").await.unwrap();
            assert_eq!((out.return_code, out.stdout_str().as_str()), (0, "hi-42\n"), "via node {via}: {out:?}");
            assert_eq!(sandbox.status().await.unwrap(), SandboxStatus::Running);
        }
        step("E2B's commands, files and terminal, and the console's terminal, through node 1");
        cluster_front_ends::drive(&cluster, 0, &far, &cluster.token()).await;
        let via1 = Sandbox::connect(&clients[0], far.as_str()).await.unwrap();
        let via3 = Sandbox::connect(&clients[2], far.as_str()).await.unwrap();

        step("64 MiB uploaded through node 1, downloaded through node 3 byte for byte");
        let dir = tempfile::tempdir().unwrap();
        let payload: Vec<u8> = (0..64u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        std::fs::write(dir.path().join("up.bin"), &payload).unwrap();
        assert_eq!(via1.upload(dir.path().join("up.bin"), "/tmp/up.bin").await.unwrap(), payload.len() as u64);
        via3.download("/tmp/up.bin", dir.path().join("down.bin")).await.unwrap();
        assert!(std::fs::read(dir.path().join("down.bin")).unwrap() == payload, "the download differs");
        drop(payload);

        step("a terminal through node 3: typed input, its size, output, exit");
        let session = via3.pty().create(PtySpec { rows: 30, cols: 100, ..Default::default() }).await.unwrap();
        session.write(b"stty size; echo pty-$((40+2))\n").await.unwrap();
        let out = read_until(&session, "pty-42").await;
        assert!(out.contains("30 100"), "{out:?}");
        session.write(b"exit 3\n").await.unwrap();
        assert_eq!(session.wait_exit(T).await.unwrap(), 3);

        step("a server stream through node 1, in order, exit last; the caller's deadline travels");
        let mut stream = via1.exec_stream("echo out; echo err >&2; exit 4", ExecOptions::default()).await.unwrap();
        let (mut out, mut err_bytes, mut exit) = (Vec::new(), Vec::new(), None);
        while let Some(event) = stream.next().await.unwrap() {
            match event {
                ExecEvent::Stdout(b) => out.extend(b),
                ExecEvent::Stderr(b) => err_bytes.extend(b),
                ExecEvent::Exit(e) => exit = Some(e.return_code),
            }
        }
        assert_eq!((out.as_slice(), err_bytes.as_slice(), exit), (&b"out\n"[..], &b"err\n"[..], Some(4)));
        let mut request = tonic::Request::new(proto::ExecRequest {
            sandbox_id: far.clone(),
            command: "sleep 20".into(),
            ..Default::default()
        });
        request.set_timeout(Duration::from_secs(2));
        let started = Instant::now();
        let status = clients[0].raw().exec(request).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
        assert!(started.elapsed() < Duration::from_secs(15), "{:?}", started.elapsed());

        step("the other calls about one sandbox through nodes 1 and 3: lease, logs, diff, stats, pause");
        let mut lease = clients[2].raw();
        let moved = lease
            .set_timeout(proto::SetTimeoutRequest { sandbox_id: far.clone(), ttl_s: 3600.0 })
            .await
            .unwrap()
            .into_inner();
        assert!(moved.expires_at_unix_ms > 0);
        let mut logs = via1.logs(Default::default()).await.unwrap();
        while logs.next().await.unwrap().is_some() {}
        let diff = via3.diff(Some("/tmp")).await.unwrap();
        assert!(diff.iter().any(|d| d.path == "/tmp/up.bin"), "{diff:?}");
        let stats = clients[0].stats(far.as_str()).await.unwrap();
        assert!(stats.memory_usage_bytes > 0, "{stats:?}");
        via3.pause().await.unwrap();
        assert_eq!(via1.status().await.unwrap(), SandboxStatus::Paused);
        saw(&seen, &far, EventKind::Paused).await;
        via1.resume().await.unwrap();
        assert_eq!(owner.exec("echo resumed").await.unwrap().stdout_str(), "resumed\n");

        step("what cluster mode does not offer is answered through a relay exactly as by the owner");
        let direct = unoffered_codes(&clients[1], &far).await;
        eprintln!("cluster: on the owner: {direct:?}");
        assert!(direct.iter().all(|(_, code)| *code != tonic::Code::Ok), "{direct:?}");
        for via in [0, 2] {
            assert_eq!(unoffered_codes(&clients[via], &far).await, direct, "via node {via}");
        }

        step("a paused node gets no new sandboxes; the ones it has work on");
        let paused = &cluster.nodes[1];
        cluster.nodes[0].set_availability(&paused.name, "pause");
        let mut extra = Vec::new();
        for _ in 0..3 {
            extra.push(Sandbox::start(entry, spec(images::BUSYBOX)).await.unwrap());
        }
        let placed_now = cluster.nodes[0].placements();
        for s in &extra {
            assert_ne!(placed_now.get(s.id()), Some(&paused.name), "placed on the paused node");
        }
        assert_eq!(via3.exec("echo on-paused").await.unwrap().stdout_str(), "on-paused\n");

        step("a peer's sandboxd dies: the watch on node 3 goes on with the other nodes' events");
        cluster.node_action("kill", paused, "sandboxd");
        for s in &extra {
            s.stop().await.unwrap();
            saw(&seen, s.id(), EventKind::Removed).await;
        }
        let fresh = Sandbox::start(entry, spec(images::BUSYBOX)).await.unwrap();
        saw(&seen, fresh.id(), EventKind::Ready).await;
        assert!(seen.lock().unwrap().ended.is_none());

        step("back, it is followed again: a sandbox made there is seen");
        cluster.node_action("start", paused, "sandboxd");
        cluster.nodes[0].set_availability(&paused.name, "active");
        for other in [&cluster.nodes[0], &cluster.nodes[2]] {
            cluster.nodes[0].set_availability(&other.name, "pause");
        }
        let on_paused: String = until(WAIT, "a CREATED event from node 2 once its sandboxd is back", || async {
            let sandbox = Sandbox::start(entry, spec(images::BUSYBOX)).await.map_err(|e| e.to_string())?;
            let id = sandbox.id().to_string();
            let end = Instant::now() + Duration::from_secs(10);
            while Instant::now() < end {
                if seen.lock().unwrap().has(&id, EventKind::Created) {
                    return Ok(id);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            sandbox.stop().await.map_err(|e| e.to_string())?;
            Err(format!("no CREATED of {id} yet"))
        })
        .await;
        assert_eq!(cluster.nodes[0].placements().get(&on_paused), Some(&paused.name));
        for other in [&cluster.nodes[0], &cluster.nodes[2]] {
            cluster.nodes[0].set_availability(&other.name, "active");
        }

        step("List is cluster-wide, from every node");
        for client in &clients {
            let mut options = ListOptions::default();
            options.labels.insert("run".into(), "cluster".into());
            let listed = client.list_all(options).await.unwrap();
            let mut got: Vec<String> = listed.iter().map(|s| s.sandbox_id.clone()).collect();
            got.sort();
            let mut want = ids.clone();
            want.sort();
            assert_eq!(got, want);
            assert!(listed.iter().all(|s| s.status == SandboxStatus::Running), "{listed:?}");
        }

        step("what Swarm cannot express is refused, naming the option; nothing is made");
        let before = cluster.nodes[0].placements().len();
        let mut with_ports = spec(images::BUSYBOX);
        with_ports.ports = vec![80];
        let err = Sandbox::start(entry, with_ports).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
        assert!(err.to_string().contains("spec.ports"), "{err}");
        assert_eq!(cluster.nodes[0].placements().len(), before);

        step("Snapshot and Fork through node 1 of the sandbox on node 2: committed there, the children placed there");
        let out = via1.exec("echo branch-$((6*7)) > /tmp/branch").await.unwrap();
        assert_eq!(out.return_code, 0, "{out:?}");
        let branch_labels = HashMap::from([("run".to_string(), "cluster-branch".to_string())]);
        let snapshot = via1.snapshot(branch_labels.clone()).await.unwrap();
        assert_eq!(snapshot.source_sandbox_id, far);
        let fork = via1.fork(2, branch_labels.clone()).await.unwrap();
        assert_eq!(fork.sandboxes.len(), 2);
        let placed_now = cluster.nodes[0].placements();
        for child in &fork.sandboxes {
            assert_eq!(placed_now.get(child.id()), Some(&cluster.nodes[1].name), "child {} not on the source's node", child.id());
            let through3 = Sandbox::connect(&clients[2], child.id()).await.unwrap();
            let out = through3.exec("cat /tmp/branch").await.unwrap();
            assert_eq!((out.return_code, out.stdout_str().as_str()), (0, "branch-42\n"), "child {}: {out:?}", child.id());
        }
        step("ListSnapshots from every node lists both; a Create from the snapshot through node 1 lands on node 2");
        for (n, client) in clients.iter().enumerate() {
            let listed: Vec<String> =
                client.list_snapshots(branch_labels.clone()).await.unwrap().into_iter().map(|s| s.snapshot_id).collect();
            let mut want = vec![snapshot.snapshot_id.clone(), fork.snapshot_id.clone()];
            want.sort();
            let mut got = listed.clone();
            got.sort();
            assert_eq!(got, want, "ListSnapshots through node {}", n + 1);
        }
        let restored = Sandbox::start_from_snapshot(entry, snapshot.snapshot_id.as_str(), proto::SandboxSpec::default())
            .await
            .unwrap();
        assert_eq!(cluster.nodes[0].placements().get(restored.id()), Some(&cluster.nodes[1].name));
        let out = restored.exec("cat /tmp/branch").await.unwrap();
        assert_eq!(out.stdout_str(), "branch-42\n", "{out:?}");
        step("DeleteSnapshot through node 3 keeps a snapshot a sandbox runs from, then removes both");
        let err = clients[2].delete_snapshot(snapshot.snapshot_id.as_str()).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err}");
        assert!(err.to_string().contains(restored.id()), "the refusal names the sandbox using it: {err}");
        let err = clients[2].delete_snapshot("sandboxd-snapshot:0123456789abcdef0123456789abcdef").await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::NotFound, "{err}");
        restored.stop().await.unwrap();
        for child in &fork.sandboxes {
            child.stop().await.unwrap();
        }
        for snapshot_id in [&snapshot.snapshot_id, &fork.snapshot_id] {
            // The closed sandboxes' task containers go in Swarm's own time.
            until(WAIT, &format!("DeleteSnapshot of {snapshot_id} through node 3"), || async {
                clients[2].delete_snapshot(snapshot_id.as_str()).await.map_err(|e| e.to_string())
            })
            .await;
        }
        assert!(clients[0].list_snapshots(branch_labels).await.unwrap().is_empty());

        step("Close through node 1 removes the service; the watcher learns who closed it");
        via1.stop().await.unwrap();
        until(WAIT, "the service of the closed sandbox gone", || async {
            if cluster.nodes[2].placements().contains_key(&far) {
                Err("still there".to_string())
            } else {
                Ok(())
            }
        })
        .await;
        saw(&seen, &far, EventKind::Removed).await;
        let reasons: Vec<String> = seen
            .lock()
            .unwrap()
            .events
            .iter()
            .filter(|e| e.sandbox_id == far && e.kind == EventKind::Removed)
            .map(|e| e.reason.clone())
            .collect();
        assert_eq!(reasons, ["closed by Close (operator)"]);

        step("the backend conformance suite (testkit::conformance) through node 2, the sandboxes wherever Swarm puts them");
        testkit::conformance::run_all(&clients[1], images::BUSYBOX).await;
    });

    assert!(cluster.down(), "cluster-down.sh failed");
    assert_eq!(cluster.leftovers(), Vec::<String>::new());
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Bench rows (run on demand, with the binary the cluster runs):
/// `SANDBOXD_CLUSTER_BIN=target/release/sandboxd cargo test -p sandboxd --test cluster figures -- --ignored --nocapture`.
/// Exec through a node that relays vs on the owning node, a create placed by Swarm vs a
/// `docker run -d` on one node's daemon, where 64 creates through one entry node land, and a
/// claim from a ready pool.
#[test]
#[ignore]
fn figures() {
    let bin = std::env::var_os("SANDBOXD_CLUSTER_BIN").map(std::path::PathBuf::from);
    let bin = bin.as_deref().unwrap_or(sandboxd_bin());
    let cluster = TestCluster::start(3, bin, &[("SANDBOXD_CLUSTER_IMAGES", images::BUSYBOX)]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let clients = cluster.clients().await;
        let mut creates = Vec::new();
        let mut runs = Vec::new();
        let mut ids = Vec::new();
        // Interleaved, so both sides see the same load.
        for i in 0..64 {
            let start = Instant::now();
            let sandbox = Sandbox::start(&clients[0], spec(images::BUSYBOX)).await.unwrap();
            creates.push(start.elapsed());
            ids.push(sandbox.id().to_string());
            if i % 4 == 0 {
                let name = format!("figures-run-{i}");
                let start = Instant::now();
                let out = cluster.nodes[0].docker(&["run", "-d", "--name", &name, images::BUSYBOX, "sleep", "600"]);
                runs.push(start.elapsed());
                assert!(out.status.success());
                cluster.nodes[0].docker(&["rm", "-f", &name]);
            }
        }
        let placed = cluster.nodes[0].placements();
        let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
        for id in &ids {
            *per_node.entry(placed[id].as_str()).or_default() += 1;
        }
        let far = ids.iter().find(|id| placed[id.as_str()] == cluster.nodes[1].name).unwrap();
        let owner = Sandbox::connect(&clients[1], far.as_str()).await.unwrap();
        let relay = Sandbox::connect(&clients[0], far.as_str()).await.unwrap();
        let (mut direct, mut relayed) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            owner.exec("true").await.unwrap();
            relay.exec("true").await.unwrap();
        }
        for _ in 0..40 {
            let start = Instant::now();
            owner.exec("true").await.unwrap();
            direct.push(start.elapsed());
            let start = Instant::now();
            relay.exec("true").await.unwrap();
            relayed.push(start.elapsed());
        }
        let (d, r) = (median(direct), median(relayed));
        println!("exec `true` on the owning node: median {d:?}; through a relaying node: median {r:?}; ratio {:.2}", r.as_secs_f64() / d.as_secs_f64());
        let (c, run) = (median(creates), median(runs));
        println!("create placed by Swarm (through node 1): median {c:?}; docker run -d on one node: median {run:?}; ratio {:.2}", c.as_secs_f64() / run.as_secs_f64());
        // Claims from a ready pool through a node that does not lead the swarm (the leader
        // refills), two rounds of eight.
        clients[0].create_pool(PoolDefinition::new("bench", images::BUSYBOX, 8, 64)).await.unwrap();
        let mut claims = Vec::new();
        for _ in 0..2 {
            until(WAIT, "the bench pool full", || async {
                let pools = clients[1].list_pools().await.map_err(|e| e.to_string())?;
                match pools.iter().find(|p| p.name == "bench") {
                    Some(p) if p.ready == 8 => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            })
            .await;
            for _ in 0..8 {
                let start = Instant::now();
                Sandbox::start(&clients[1], from_pool("bench")).await.unwrap();
                claims.push(start.elapsed());
            }
        }
        let claim = median(claims);
        println!("claim from a ready pool (through node 2): median {claim:?}; docker run -d on one node: median {run:?}; ratio {:.3}", claim.as_secs_f64() / run.as_secs_f64());
        let even = ids.len() as f64 / cluster.nodes.len() as f64;
        let worst = per_node.values().map(|n| (*n as f64 - even).abs() / even).fold(0.0, f64::max);
        println!("{} creates through node 1 landed: {per_node:?} (farthest from even: {:.0} %)", ids.len(), worst * 100.0);
    });
    assert!(cluster.down());
}
