//! `cluster.mode: swarm` on the test cluster of `scripts/cluster-up.sh` (3 private daemons in a
//! real Swarm, a sandboxd on each): sandboxes placed by Swarm over every node, every kind of
//! call (unary, server-streaming, the bidirectional `Pty` and `Upload` streams) answered
//! through a node that does not own the sandbox, a cluster-wide `List`, what Swarm cannot
//! express refused by name, `Close` removing the service, and a node whose dockerd is killed
//! answering UNAVAILABLE for its sandboxes only. Nothing of the cluster is left afterwards.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use sandboxd_client::{spec, Client, ExecEvent, ExecOptions, ListOptions, PtySpec, Sandbox, SandboxStatus};
use testkit::cluster::{ClusterNode, TestCluster};
use testkit::images;

const T: Option<Duration> = Some(Duration::from_secs(20));

fn sandboxd_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_sandboxd"))
}

/// The node (hostname) each sandbox service's task runs on, asked of `node`'s daemon.
fn placements(node: &ClusterNode) -> BTreeMap<String, String> {
    let ids = node.docker(&["service", "ls", "-q", "--filter", "label=sandboxd.sandbox=1"]);
    let ids: Vec<String> =
        String::from_utf8_lossy(&ids.stdout).split_whitespace().map(String::from).collect();
    if ids.is_empty() {
        return BTreeMap::new();
    }
    let mut args = vec!["service", "ps", "--format", "{{.Name}} {{.Node}}"];
    args.extend(ids.iter().map(String::as_str));
    let out = node.docker(&args);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (task, host) = l.split_once(' ')?;
            Some((task.rsplit_once('.')?.0.to_string(), host.to_string()))
        })
        .collect()
}

async fn read_until(session: &sandboxd_client::PtySession, needle: &str) -> String {
    let mut seen = String::new();
    let end = Instant::now() + Duration::from_secs(20);
    while !seen.contains(needle) {
        assert!(Instant::now() < end, "never saw {needle:?} in {seen:?}");
        let chunk = session.read(Some(Duration::from_secs(5))).await.unwrap_or_default();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    seen
}

#[test]
fn a_swarm_of_three_answers_for_every_sandbox_from_every_node() {
    images::ensure_images().expect("test images");
    let cluster = TestCluster::up_with(3, sandboxd_bin(), &[("SANDBOXD_CLUSTER_IMAGES", images::BUSYBOX)]);
    let token = cluster.token();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut clients = Vec::new();
        for node in &cluster.nodes {
            clients.push(Client::connect_with_token(node.url(), token.clone()).await.unwrap());
        }
        let entry = &clients[0];

        // Placement is Swarm's: six creates through one entry node spread over all three.
        let mut ids = Vec::new();
        for i in 0..6 {
            let mut s = spec(images::BUSYBOX);
            s.metadata.insert("run".into(), "cluster".into());
            s.metadata.insert("n".into(), i.to_string());
            let sandbox = Sandbox::start(entry, s).await.unwrap();
            ids.push(sandbox.id().to_string());
        }
        let placed = placements(&cluster.nodes[0]);
        let mut per_node: HashMap<&str, usize> = HashMap::new();
        for id in &ids {
            *per_node
                .entry(placed.get(id).map(String::as_str).expect("every sandbox placed"))
                .or_default() += 1;
        }
        for node in &cluster.nodes {
            assert!(
                per_node.get(node.name.as_str()).copied().unwrap_or(0) >= 1,
                "nothing on {}: {per_node:?}",
                node.name
            );
        }
        let index_of = |name: &str| cluster.nodes.iter().position(|n| n.name == name).unwrap();
        let owner_of = |id: &str| index_of(&placed[id]);

        // A sandbox on node 2 (index 1), driven through nodes 1 and 3, which do not own it.
        let far = ids.iter().find(|id| owner_of(id) == 1).unwrap().clone();
        let owner = &cluster.nodes[1];
        let ps =
            owner.docker(&["ps", "-q", "--filter", &format!("label=com.docker.swarm.service.name={far}")]);
        assert!(
            !String::from_utf8_lossy(&ps.stdout).trim().is_empty(),
            "the task's container is on {}",
            owner.name
        );
        for via in [0, 2] {
            let sandbox = Sandbox::connect(&clients[via], far.as_str()).await.unwrap();
            let out = sandbox.exec("echo hi-$((40+2))").await.unwrap();
            assert_eq!(
                (out.return_code, out.stdout_str().as_str()),
                (0, "hi-42\n"),
                "via node {via}: {out:?}"
            );
            assert_eq!(sandbox.status().await.unwrap(), SandboxStatus::Running);
        }

        // Upload through node 1, download through node 3: a few MiB, byte for byte.
        let dir = tempfile::tempdir().unwrap();
        let payload: Vec<u8> = (0..4u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        std::fs::write(dir.path().join("up.bin"), &payload).unwrap();
        let via1 = Sandbox::connect(&clients[0], far.as_str()).await.unwrap();
        assert_eq!(
            via1.upload(dir.path().join("up.bin"), "/tmp/up.bin").await.unwrap(),
            payload.len() as u64
        );
        let via3 = Sandbox::connect(&clients[2], far.as_str()).await.unwrap();
        via3.download("/tmp/up.bin", dir.path().join("down.bin")).await.unwrap();
        assert!(std::fs::read(dir.path().join("down.bin")).unwrap() == payload, "the download differs");

        // A terminal through a node that does not own the sandbox: typed input, output, exit.
        let session = via3.pty().create(PtySpec { rows: 30, cols: 100, ..Default::default() }).await.unwrap();
        session.write(b"stty size; echo pty-$((40+2))\n").await.unwrap();
        let seen = read_until(&session, "pty-42").await;
        assert!(seen.contains("30 100"), "{seen:?}");
        session.write(b"exit 3\n").await.unwrap();
        assert_eq!(session.wait_exit(T).await.unwrap(), 3);

        // A server stream through a node that does not own the sandbox, in order, exit last.
        let mut stream =
            via1.exec_stream("echo out; echo err >&2; exit 4", ExecOptions::default()).await.unwrap();
        let (mut out, mut err_bytes, mut exit) = (Vec::new(), Vec::new(), None);
        while let Some(event) = stream.next().await.unwrap() {
            match event {
                ExecEvent::Stdout(b) => out.extend(b),
                ExecEvent::Stderr(b) => err_bytes.extend(b),
                ExecEvent::Exit(e) => exit = Some(e.return_code),
            }
        }
        assert_eq!((out.as_slice(), err_bytes.as_slice(), exit), (&b"out\n"[..], &b"err\n"[..], Some(4)));

        // The caller's deadline travels with the relayed call.
        let mut request = tonic::Request::new(sandboxd_client::proto::ExecRequest {
            sandbox_id: far.clone(),
            command: "sleep 20".into(),
            ..Default::default()
        });
        request.set_timeout(Duration::from_secs(2));
        let started = Instant::now();
        let status = clients[0].raw().exec(request).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());

        // A node the operator pauses gets no new sandboxes; the ones it has work on.
        let paused = &cluster.nodes[1];
        let update = |availability: &str| {
            let out =
                cluster.nodes[0].docker(&["node", "update", "--availability", availability, &paused.name]);
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        };
        update("pause");
        let mut extra = Vec::new();
        for _ in 0..3 {
            extra.push(Sandbox::start(entry, spec(images::BUSYBOX)).await.unwrap());
        }
        let placed_now = placements(&cluster.nodes[0]);
        for s in &extra {
            assert_ne!(placed_now.get(s.id()), Some(&paused.name), "placed on the paused node");
        }
        assert_eq!(via3.exec("echo on-paused").await.unwrap().stdout_str(), "on-paused\n");
        for s in extra {
            s.stop().await.unwrap();
        }
        update("active");

        // List is cluster-wide, from every node (the closed extra ones gone from it).
        for client in &clients {
            let mut options = ListOptions::default();
            options.labels.insert("run".into(), "cluster".into());
            let listed = client.list_all(options).await.unwrap();
            let mut seen: Vec<String> = listed.iter().map(|s| s.sandbox_id.clone()).collect();
            seen.sort();
            let mut want = ids.clone();
            want.sort();
            assert_eq!(seen, want);
            assert!(listed.iter().all(|s| s.status == SandboxStatus::Running), "{listed:?}");
        }

        // What Swarm cannot express is refused, naming the option; nothing is made.
        let before = placements(&cluster.nodes[0]).len();
        let mut with_ports = spec(images::BUSYBOX);
        with_ports.ports = vec![80];
        let err = Sandbox::start(entry, with_ports).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
        assert!(err.to_string().contains("spec.ports"), "{err}");
        assert_eq!(placements(&cluster.nodes[0]).len(), before);
        // Snapshots stay on one node, and there is no registry: said so.
        let err = via1.snapshot(HashMap::new()).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unimplemented, "{err}");

        // Close through a node that does not own it removes the service.
        via1.stop().await.unwrap();
        let start = Instant::now();
        while placements(&cluster.nodes[2]).contains_key(&far) {
            assert!(start.elapsed() < Duration::from_secs(20), "the service of {far} is still there");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        // Node 3's dockerd dies: its sandboxes answer UNAVAILABLE naming it, the others work on.
        let victim = cluster.nodes[2].clone();
        let lost = ids.iter().find(|id| owner_of(id) == 2).unwrap().clone();
        let kept = ids.iter().find(|id| owner_of(id) == 0).unwrap().clone();
        let lost_via2 = Sandbox::connect(&clients[1], lost.as_str()).await.unwrap();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(victim.dockerd_pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let start = Instant::now();
        loop {
            match lost_via2.exec("true").await {
                Err(e) if e.code() == tonic::Code::Unavailable => {
                    assert!(e.to_string().contains(&victim.name), "names the node: {e}");
                    break;
                }
                other => {
                    assert!(start.elapsed() < Duration::from_secs(45), "still {other:?}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
        // List still answers for the whole cluster; the lost node's sandboxes are UNKNOWN.
        let listed = clients[0].list_all(ListOptions::default()).await.unwrap();
        let status_of = |id: &str| listed.iter().find(|s| s.sandbox_id == id).map(|s| s.status);
        assert_eq!(status_of(&lost), Some(SandboxStatus::Unknown), "{listed:?}");
        assert_eq!(status_of(&kept), Some(SandboxStatus::Running), "{listed:?}");
        for via in [0, 1] {
            let sandbox = Sandbox::connect(&clients[via], kept.as_str()).await.unwrap();
            let out = sandbox.exec("echo still-here").await.unwrap();
            assert_eq!(out.stdout_str(), "still-here\n", "via node {via}");
        }
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
/// `docker run -d` on one node's daemon, and where 24 creates through one entry node land.
#[test]
#[ignore]
fn figures() {
    images::ensure_images().expect("test images");
    let bin = std::env::var_os("SANDBOXD_CLUSTER_BIN").map(std::path::PathBuf::from);
    let bin = bin.as_deref().unwrap_or(sandboxd_bin());
    let cluster = TestCluster::up_with(3, bin, &[("SANDBOXD_CLUSTER_IMAGES", images::BUSYBOX)]);
    let token = cluster.token();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut clients = Vec::new();
        for node in &cluster.nodes {
            clients.push(Client::connect_with_token(node.url(), token.clone()).await.unwrap());
        }
        let mut creates = Vec::new();
        let mut ids = Vec::new();
        for _ in 0..24 {
            let start = Instant::now();
            let sandbox = Sandbox::start(&clients[0], spec(images::BUSYBOX)).await.unwrap();
            creates.push(start.elapsed());
            ids.push(sandbox.id().to_string());
        }
        let placed = placements(&cluster.nodes[0]);
        let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
        for id in &ids {
            *per_node.entry(placed[id].as_str()).or_default() += 1;
        }
        let mut runs = Vec::new();
        for i in 0..10 {
            let name = format!("figures-run-{i}");
            let start = Instant::now();
            let out = cluster.nodes[0].docker(&["run", "-d", "--name", &name, images::BUSYBOX, "sleep", "600"]);
            runs.push(start.elapsed());
            assert!(out.status.success());
            cluster.nodes[0].docker(&["rm", "-f", &name]);
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
        println!("24 creates through node 1 landed: {per_node:?}");
    });
    assert!(cluster.down());
}
