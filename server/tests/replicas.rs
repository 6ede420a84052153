//! Several servers over one Docker daemon (issue 34): a restart with the old server still
//! draining, replicas, an operator's second instance. Nothing one server does leaves another
//! unable to create: what they share (tenant networks first of all) is made idempotently,
//! removed only when Docker says nobody uses it, and made again by a create that finds it gone.

use std::path::Path;
use std::time::{Duration, Instant};

use sandboxd_client::proto;
use testkit::raw::busybox;
use testkit::service::TestService;
use testkit::TestLabel;

/// A server of the deployment `label` (servers of one label share its tenant network), its
/// state under `dir`, with `extra` config.
fn replica(label: &TestLabel, dir: &Path, extra: serde_json::Value) -> TestService {
    let mut config = serde_json::json!({"server": {"state_dir": dir, "sweep_interval_s": 1}});
    testkit::config::merge(&mut config, extra);
    TestService::start_json(label, config)
}

async fn create(server: &TestService) -> Result<String, tonic::Status> {
    let mut raw = server.raw().await;
    let request = proto::CreateRequest { spec: Some(busybox()) };
    Ok(raw.create(request).await?.into_inner().sandbox.expect("a sandbox").sandbox_id)
}

async fn close(server: &TestService, id: &str) {
    let mut raw = server.raw().await;
    raw.close(proto::CloseRequest { sandbox_id: id.into() })
        .await
        .unwrap_or_else(|e| panic!("close {id}: {e:?}"));
}

/// The Docker networks sandbox `id` is on.
fn networks_of(id: &str) -> Vec<String> {
    let out = testkit::docker(&[
        "inspect",
        "-f",
        "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}",
        id,
    ]);
    String::from_utf8_lossy(&out.stdout).split_whitespace().map(String::from).collect()
}

fn network_exists(name: &str) -> bool {
    let out = testkit::docker(&["network", "ls", "-q", "--filter", &format!("name=^{name}$")]);
    !String::from_utf8_lossy(&out.stdout).trim().is_empty()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_close_or_a_sweep_on_one_server_never_breaks_anothers_create() {
    let label = TestLabel::new();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let idle = serde_json::json!({"docker": {"create": {"network_idle_s": 3}}});
    let a = replica(&label, dir_a.path(), idle.clone());
    let b = replica(&label, dir_b.path(), idle);

    // B makes the tenant network with its first sandbox; A closes that sandbox (a replica
    // serving a sandbox the other made), leaving nobody on the network.
    let first = create(&b).await.expect("B's first create");
    let nets = networks_of(&first);
    assert_eq!(nets.len(), 1, "{nets:?}");
    let network = nets[0].clone();
    assert!(network.starts_with("sandboxd-net-default"), "{network}");
    close(&a, &first).await;

    // B's next create works whatever A did with the network meanwhile.
    let second = create(&b).await.unwrap_or_else(|e| panic!("B's create after A's close: {e:?}"));
    assert_eq!(networks_of(&second), [network.as_str()]);
    close(&b, &second).await;

    // Empty for network_idle_s, the sweep (of either server) removes it; B still believes it
    // is there, finds it gone at its next create and makes it again.
    let deadline = Instant::now() + Duration::from_secs(30);
    while network_exists(&network) {
        assert!(Instant::now() < deadline, "the sweep did not remove the idle network {network}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let third = create(&b).await.unwrap_or_else(|e| panic!("B's create after the sweep: {e:?}"));
    assert_eq!(networks_of(&third), [network.as_str()]);
    let fourth = create(&a).await.expect("A's create on the network B made again");
    assert_eq!(networks_of(&fourth), [network.as_str()]);
    // A network in use is never removed, however long ago it was made.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(network_exists(&network), "the sweep removed a network in use");
    close(&a, &third).await;
    close(&b, &fourth).await;
}

const SANDBOXD: &str = env!("CARGO_BIN_EXE_sandboxd");
const TENANTS: [&str; 3] = ["red", "green", "blue"];
/// How long the replicas are worked (a gate suite: bounded; longer on demand with
/// `SANDBOXD_REPLICAS_CHURN_S`).
const CHURN: Duration = Duration::from_secs(40);
const WORKERS: usize = 4;
const POOL: &str = "warm";

/// The three servers: where each listens now (`None` while it is down), and a generation
/// bumped whenever one goes down or comes up, so a call that failed can tell whether the
/// test's own restart or kill caused it.
struct Fleet {
    urls: std::sync::Mutex<[Option<String>; 3]>,
    generation: [std::sync::atomic::AtomicU64; 3],
}

impl Fleet {
    fn url(&self, i: usize) -> Option<(String, u64)> {
        let url = self.urls.lock().unwrap()[i].clone()?;
        Some((url, self.generation[i].load(std::sync::atomic::Ordering::SeqCst)))
    }

    /// Whether server `i` went down or came up since generation `seen`.
    fn disturbed(&self, i: usize, seen: u64) -> bool {
        self.generation[i].load(std::sync::atomic::Ordering::SeqCst) != seen
            || self.urls.lock().unwrap()[i].is_none()
    }

    fn set(&self, i: usize, url: Option<String>) {
        self.generation[i].fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.urls.lock().unwrap()[i] = url;
    }
}

/// The suite's deployment: tenants `red`, `green`, `blue` (key `<name>-key`), a short create
/// bound (a create a SIGKILL cut is swept soon), quick sweeps and network idling.
fn replica_launch(label: &TestLabel, state: &Path, tenants_file: &Path) -> testkit::server::Launch {
    testkit::server::TestServer::launch(SANDBOXD, label).config(serde_json::json!({
        "server": {
            "state_dir": state,
            "sweep_interval_s": 1,
            "create_timeout_s": 15,
            "auth": {"tenants_file": tenants_file},
        },
        "docker": {"create": {"network_idle_s": 2, "default_disk_gib": 1}},
    }))
}

/// What the workers saw: failures nobody caused but the servers, and what is left to clean.
#[derive(Default)]
struct Tally {
    creates: usize,
    excused: usize,
    failures: Vec<String>,
    leftovers: Vec<(usize, String)>,
    /// Snapshots forks answered with whose deletion a restart or kill cut.
    snapshots: Vec<(usize, String)>,
}

/// A client of tenant `tenant` on a live server, starting the search at `start`.
async fn client_on(
    fleet: &Fleet,
    start: usize,
    tenant: &str,
) -> Option<(usize, u64, sandboxd_client::Client)> {
    for k in 0..3 {
        let i = (start + k) % 3;
        let Some((url, generation)) = fleet.url(i) else { continue };
        if let Ok(client) = sandboxd_client::Client::connect_with_token(url, format!("{tenant}-key")).await {
            return Some((i, generation, client));
        }
    }
    None
}

/// One worker: create (from the pool on server 0 now and then), exec, `Reset`, fork, close,
/// each step on another server, until `until`.
async fn work(fleet: std::sync::Arc<Fleet>, worker: usize, until: Instant) -> Tally {
    use sandboxd_client::Sandbox;
    let tenant = TENANTS[worker % TENANTS.len()];
    let mut tally = Tally::default();
    let mut round = 0usize;
    while Instant::now() < until {
        round += 1;
        let Some((i, seen, client)) = client_on(&fleet, worker + round, tenant).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let mut spec = if i == 0 && tenant == "red" && round.is_multiple_of(2) {
            sandboxd_client::from_pool(POOL)
        } else {
            sandboxd_client::spec(testkit::images::BUSYBOX)
        };
        spec.ttl_s = Some(30.0);
        let sandbox = match Sandbox::start(&client, spec).await {
            Ok(s) => s,
            Err(e) if fleet.disturbed(i, seen) => {
                tally.excused += 1;
                tracing_free_note(&e);
                continue;
            }
            Err(e) => {
                tally.failures.push(format!("create on server {i} (tenant {tenant}): {e}"));
                continue;
            }
        };
        tally.creates += 1;
        let id = sandbox.id().to_string();
        // Each step on the next server that is up; a step cut by the test's restart or kill
        // is tried on another.
        let mut steps: Vec<&str> = vec!["exec"];
        if round.is_multiple_of(2) {
            steps.push("reset");
        }
        if round.is_multiple_of(5) {
            steps.push("fork");
        }
        steps.push("close");
        for (n, step) in steps.iter().enumerate() {
            // `Reset` restores what the sandbox was created with, which only the server
            // process that created it knows: asked there, and skipped once that server was
            // restarted or killed (a replica answers FAILED_PRECONDITION, docs/walls.md).
            let pinned = *step == "reset";
            if pinned && fleet.disturbed(i, seen) {
                continue;
            }
            let mut done = false;
            // Whether a try of this step was cut by the test's restart or kill: dockerd goes on
            // with what that try asked (a fork's `docker commit` pauses the sandbox until it
            // ends), so the next try may find the sandbox paused for a moment.
            let mut cut_before = false;
            for attempt in 0..6 {
                let start = if pinned { i } else { i + n + attempt + 1 };
                let Some((j, seen, client)) = client_on(&fleet, start, tenant).await else {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                };
                if pinned && j != i {
                    done = true;
                    break;
                }
                let mut forked = None;
                let result = step_on(&client, &id, step, &mut forked).await;
                if let (Err(_), Some(snapshot)) = (&result, forked) {
                    tally.snapshots.push((worker, snapshot));
                }
                match result {
                    Ok(()) => {
                        done = true;
                        break;
                    }
                    Err(e) if fleet.disturbed(j, seen) => {
                        tally.excused += 1;
                        tracing_free_note(&e);
                        cut_before = true;
                        if pinned {
                            done = true;
                            break;
                        }
                    }
                    Err(e) if cut_before && e.contains("is paused") => {
                        tally.excused += 1;
                        eprintln!("excused (the cut try's commit still holds the sandbox paused): {e}");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    Err(e) => {
                        tally.failures.push(format!("{step} of {id} on server {j}: {e}"));
                        break;
                    }
                }
            }
            if !done {
                tally.leftovers.push((worker, id.clone()));
                break;
            }
        }
    }
    tally
}

/// A failure the test's own restart or kill caused, shown for the log only.
fn tracing_free_note(e: &impl std::fmt::Display) {
    eprintln!("excused (a server was restarted or killed under the call): {e}");
}

/// One step; a fork's snapshot id goes to `forked` as soon as the fork answers.
async fn step_on(
    client: &sandboxd_client::Client,
    id: &str,
    step: &str,
    forked: &mut Option<String>,
) -> Result<(), String> {
    use sandboxd_client::Sandbox;
    if step == "close" {
        // By id, as a caller retrying a close does: a try cut by the test's kill may have
        // stopped the sandbox (Connect would refuse it) or removed it (gone is closed).
        return match client.raw().close(proto::CloseRequest { sandbox_id: id.into() }).await {
            Ok(_) => Ok(()),
            Err(status) if status.code() == tonic::Code::NotFound => Ok(()),
            Err(status) => Err(format!("close: {status}")),
        };
    }
    let sandbox = Sandbox::connect(client, id).await.map_err(|e| format!("connect: {e}"))?;
    match step {
        "exec" => {
            let r = sandbox
                .exec("echo replicas-ok > /tmp/mark && cat /tmp/mark")
                .await
                .map_err(|e| e.to_string())?;
            if r.return_code != 0 || !String::from_utf8_lossy(&r.stdout).contains("replicas-ok") {
                return Err(format!("exec answered {r:?}"));
            }
        }
        "reset" => {
            sandbox.reset().await.map_err(|e| e.to_string())?;
            let r = sandbox
                .exec("test -e /tmp/mark && echo kept || echo gone")
                .await
                .map_err(|e| e.to_string())?;
            if !String::from_utf8_lossy(&r.stdout).contains("gone") {
                return Err(format!("Reset left the sandbox's file: {r:?}"));
            }
        }
        "fork" => {
            let fork = sandbox.fork(1, Default::default()).await.map_err(|e| e.to_string())?;
            *forked = Some(fork.snapshot_id.clone());
            for child in &fork.sandboxes {
                child.stop().await.map_err(|e| format!("close of fork child: {e}"))?;
            }
            client.delete_snapshot(&fork.snapshot_id).await.map_err(|e| format!("delete snapshot: {e}"))?;
        }
        _ => unreachable!(),
    }
    Ok(())
}

/// Three servers over one daemon, tenants and a pool, creates, execs, `Reset`s, forks and
/// closes spread over all of them while one is restarted and another killed with SIGKILL: no
/// create fails that the test did not cause, and afterwards nothing is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_survive_a_restart_and_a_sigkill_and_leave_nothing_behind() {
    use nix::sys::signal::Signal;
    let label = TestLabel::new();
    let root = tempfile::tempdir().unwrap();
    let tenants: Vec<serde_json::Value> = TENANTS
        .iter()
        .map(|t| serde_json::json!({"name": t, "key_sha256": sandboxd::auth::tenants::key_sha256(&format!("{t}-key"))}))
        .collect();
    let tenants_file = root.path().join("tenants.json");
    std::fs::write(&tenants_file, serde_json::json!({ "tenants": tenants }).to_string()).unwrap();
    let states: Vec<std::path::PathBuf> = (0..3).map(|i| root.path().join(format!("state-{i}"))).collect();
    let launch = |i: usize| replica_launch(&label, &states[i], &tenants_file);
    let mut servers: Vec<Option<testkit::server::TestServer>> =
        (0..3).map(|i| Some(launch(i).start())).collect();
    let fleet = std::sync::Arc::new(Fleet {
        urls: std::sync::Mutex::new(std::array::from_fn(|i| servers[i].as_ref().map(|s| s.url.clone()))),
        generation: Default::default(),
    });
    // A pool of red's on server 0 (the one never disturbed: runtime pools live in its process).
    let red =
        sandboxd_client::Client::connect_with_token(servers[0].as_ref().unwrap().url.clone(), "red-key")
            .await
            .unwrap();
    red.create_pool(sandboxd_client::PoolDefinition::new(POOL, testkit::images::BUSYBOX, 2, 4))
        .await
        .expect("red's pool");

    let churn = std::env::var("SANDBOXD_REPLICAS_CHURN_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(CHURN);
    let until = Instant::now() + churn;
    let workers: Vec<_> = (0..WORKERS).map(|w| tokio::spawn(work(fleet.clone(), w, until))).collect();

    // A quarter in: server 1 restarted (SIGTERM, then again on its state directory).
    tokio::time::sleep(churn / 4).await;
    fleet.set(1, None);
    let mut old = servers[1].take().unwrap();
    tokio::task::block_in_place(|| old.terminate(Duration::from_secs(30)));
    drop(old);
    let again = tokio::task::block_in_place(|| launch(1).start());
    fleet.set(1, Some(again.url.clone()));
    servers[1] = Some(again);
    // Half-way: server 2 killed with SIGKILL, started again a few seconds later.
    tokio::time::sleep(churn / 4).await;
    fleet.set(2, None);
    let mut killed = servers[2].take().unwrap();
    killed.signal(Signal::SIGKILL);
    tokio::task::block_in_place(|| killed.wait_exit(Duration::from_secs(10)));
    drop(killed);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let again = tokio::task::block_in_place(|| launch(2).start());
    fleet.set(2, Some(again.url.clone()));
    servers[2] = Some(again);

    let mut tally = Tally::default();
    for w in workers {
        let t = w.await.unwrap();
        tally.creates += t.creates;
        tally.excused += t.excused;
        tally.failures.extend(t.failures);
        tally.leftovers.extend(t.leftovers);
        tally.snapshots.extend(t.snapshots);
    }
    eprintln!(
        "replicas: {} creates, {} calls cut by the test's restart or kill",
        tally.creates, tally.excused
    );
    assert!(tally.failures.is_empty(), "failures the callers did not cause:\n{}", tally.failures.join("\n"));
    assert!(tally.creates >= WORKERS, "only {} creates in {churn:?}", tally.creates);

    // Clean-up through the servers, as a caller would: the pool, then what a cut call left.
    red.delete_pool(POOL).await.expect("delete the pool");
    for (worker, id) in &tally.leftovers {
        let tenant = TENANTS[worker % TENANTS.len()];
        let (_, _, client) = client_on(&fleet, 0, tenant).await.expect("a live server");
        if let Ok(s) = sandboxd_client::Sandbox::connect(&client, id.as_str()).await {
            let _ = s.stop().await;
        }
    }
    for (worker, snapshot) in &tally.snapshots {
        let tenant = TENANTS[worker % TENANTS.len()];
        let (_, _, client) = client_on(&fleet, 0, tenant).await.expect("a live server");
        let _ = client.delete_snapshot(snapshot).await;
    }
    // Creates a SIGKILL cut are swept past their create bound, sandboxes whose answer was
    // lost past their lease: the surviving servers do it, nobody else.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let left = label.containers();
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "containers left behind: {left:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let case = format!("label=sandboxd.test.case={}", label.value);
    let listed = |args: &[&str]| -> Vec<String> {
        let out = testkit::docker(args);
        String::from_utf8_lossy(&out.stdout).split_whitespace().map(String::from).collect()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let networks = listed(&["network", "ls", "-q", "--filter", &case]);
        // Docker 20.10 sometimes counts an endpoint nobody holds on a network after heavy
        // churn (moby/moby#42119): it refuses `network rm` though no container is on it, until
        // the daemon restarts. The servers' sweep notes such a network and stops asking; what
        // is left must be exactly that, never a network a container of ours is on.
        if networks.is_empty() {
            break;
        }
        // Asked only once the sweep had its time: the check's own `network rm` must not do
        // the sweep's work.
        if Instant::now() >= deadline {
            let ours: Vec<&String> = networks.iter().filter(|n| !held_by_docker(n)).collect();
            assert!(ours.is_empty(), "networks left behind: {ours:?}");
            eprintln!("networks Docker keeps though no container is on them (moby/moby#42119): {networks:?}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for server in servers.iter_mut().flatten() {
        tokio::task::block_in_place(|| server.terminate(Duration::from_secs(30)));
    }
    let images = listed(&["images", "-q", "--filter", &case]);
    let described: Vec<String> = images
        .iter()
        .map(|i| {
            let out = testkit::docker(&[
                "image",
                "inspect",
                "-f",
                "{{.RepoTags}} {{json .Config.Labels}} {{.Created}}",
                i,
            ]);
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        })
        .collect();
    assert!(images.is_empty(), "snapshots left behind: {described:?}");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let root_s = root.path().display().to_string();
    assert!(!mounts.contains(&root_s), "mounts left behind under {root_s}");
    let loops: Vec<String> = std::fs::read_dir("/sys/block")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("loop/backing_file")).ok())
        .filter(|f| f.starts_with(&root_s))
        .collect();
    assert!(loops.is_empty(), "loop devices left behind: {loops:?}");
    for state in &states {
        // `disks/stock` holds disk files formatted ahead for the next creates (disk_stock.rs),
        // kept by design; a sandbox's own disk file is `disks/<container id>.img`.
        let disks: Vec<_> = std::fs::read_dir(state.join("disks"))
            .map(|d| d.flatten().filter(|e| e.file_name() != "stock").collect())
            .unwrap_or_default();
        assert!(disks.is_empty(), "disk files left behind in {}: {disks:?}", state.display());
    }
}

/// Whether Docker refuses to remove `network` for "active endpoints" while it shows no
/// container on it: an endpoint count Docker leaked (moby/moby#42119), not one of ours.
fn held_by_docker(network: &str) -> bool {
    let containers = testkit::docker(&["network", "inspect", "--format", "{{len .Containers}}", network]);
    if String::from_utf8_lossy(&containers.stdout).trim() != "0" {
        return false;
    }
    let rm = testkit::docker(&["network", "rm", network]);
    !rm.status.success() && String::from_utf8_lossy(&rm.stderr).contains("has active endpoints")
}
