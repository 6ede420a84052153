//! Walls that hold (issue 27) on real Docker: tenants share no network (by address or by name,
//! nor with a container sandboxd did not make), a sandbox writing past its disk bound gets
//! ENOSPC and nothing else notices, and the server's defaults (caps, no-new-privileges,
//! capabilities, pids, lease) contain a fork bomb and a memory hog.

use std::path::Path;
use std::time::{Duration, Instant};

use sandboxd_client::{proto, Client, ExecOptions, Sandbox};
use testkit::images::BUSYBOX;
use testkit::service::TestService;
use testkit::TestLabel;

/// Docker 20.10 deletes and re-inserts `FORWARD`'s jumps to its isolation chains at every
/// network create (moby/moby#43585): a connection between two bridges opened in that moment
/// passes, and conntrack keeps it. The tests that check sandboxes are kept apart hold this for
/// writing while they run; every other test here makes networks and holds it for reading.
static NETWORK_MAKING: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// A server with tenants `red` and `blue` (keys `red-key`, `blue-key`) and `extra` config.
fn tenants_server(label: &TestLabel, dir: &Path, extra: serde_json::Value) -> TestService {
    let tenants = serde_json::json!({"tenants": [
        {"name": "red", "key_sha256": sandboxd::auth::tenants::key_sha256("red-key")},
        {"name": "blue", "key_sha256": sandboxd::auth::tenants::key_sha256("blue-key")},
    ]});
    let tenants_file = dir.join("tenants.json");
    std::fs::write(&tenants_file, tenants.to_string()).unwrap();
    let mut config = serde_json::json!({"server": {
        "state_dir": dir.join("state"),
        "sweep_interval_s": 1,
        "auth": {"tenants_file": tenants_file},
    }});
    testkit::config::merge(&mut config, extra);
    TestService::start_json(label, config)
}

fn quick(timeout_s: f64) -> ExecOptions {
    ExecOptions { timeout_s: Some(timeout_s), ..Default::default() }
}

async fn sh(sandbox: &Sandbox, command: &str) -> (i32, String, String) {
    let r = sandbox.exec_with(command, quick(60.0)).await.expect("exec");
    (
        r.return_code,
        String::from_utf8_lossy(&r.stdout).into_owned(),
        String::from_utf8_lossy(&r.stderr).into_owned(),
    )
}

/// Docker's view of a container: `{{json .NetworkSettings.Networks}}` as a map name → ip.
fn networks_of(id: &str) -> std::collections::BTreeMap<String, String> {
    let out = testkit::docker(&[
        "inspect",
        "-f",
        "{{range $k, $v := .NetworkSettings.Networks}}{{$k}}\t{{$v.IPAddress}}\n{{end}}",
        id,
    ]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('\t').map(|(n, ip)| (n.to_string(), ip.to_string())))
        .collect()
}

fn ip_of(id: &str) -> String {
    let nets = networks_of(id);
    assert_eq!(nets.len(), 1, "{id} is on exactly one network: {nets:?}");
    nets.into_values().next().unwrap()
}

/// Whether `from` fetches the secret served on port 8080 at `host` (2 s to connect).
async fn fetches(from: &Sandbox, host: &str) -> bool {
    let cmd = format!("printf 'GET /f HTTP/1.0\\r\\n\\r\\n' | nc -w 2 {host} 8080");
    let (_, out, _) = sh(from, &cmd).await;
    out.contains("walls-secret")
}

/// Whether `from` fetches the secret at `host` within 10 s (a reachability a test expects:
/// tried again, as a loaded gVisor sandbox's first name lookup can outlast `nc -w 2`).
async fn eventually_fetches(from: &Sandbox, host: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if fetches(from, host).await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Serve `walls-secret` at `/f` on port 8080 in `sandbox`, and wait until it answers.
async fn serve(sandbox: &Sandbox) {
    let (rc, _, err) =
        sh(sandbox, "mkdir -p /www && echo walls-secret > /www/f && httpd -p 8080 -h /www").await;
    assert_eq!(rc, 0, "httpd: {err}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !fetches(sandbox, "127.0.0.1").await {
        assert!(Instant::now() < deadline, "httpd in {} never answered", sandbox.id());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tenants_share_no_network_and_strangers_are_out_of_reach() {
    let _networks = NETWORK_MAKING.write().await;
    let label = TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    let server =
        tenants_server(&label, dir.path(), serde_json::json!({"docker": {"create": {"network_idle_s": 1}}}));
    let red = Client::connect_with_token(server.url.clone(), "red-key").await.unwrap();
    let blue = Client::connect_with_token(server.url.clone(), "blue-key").await.unwrap();
    let (a, a2, b) = tokio::join!(
        Sandbox::start(&red, sandboxd_client::spec(BUSYBOX)),
        Sandbox::start(&red, sandboxd_client::spec(BUSYBOX)),
        Sandbox::start(&blue, sandboxd_client::spec(BUSYBOX)),
    );
    let (a, a2, b) = (a.unwrap(), a2.unwrap(), b.unwrap());
    serve(&a).await;

    // Each on its tenant's own bridge, none on Docker's default one.
    let (red_nets, blue_nets) = (networks_of(a.id()), networks_of(b.id()));
    let red_net = red_nets.keys().next().unwrap().clone();
    assert!(red_net.starts_with("sandboxd-net-red.default"), "{red_nets:?}");
    assert!(blue_nets.keys().all(|n| n.starts_with("sandboxd-net-blue.default")), "{blue_nets:?}");
    assert_eq!(networks_of(a2.id()), [(red_net.clone(), ip_of(a2.id()))].into());

    // Another tenant: neither by address nor by name.
    let a_ip = ip_of(a.id());
    assert!(!fetches(&b, &a_ip).await, "blue reached red's sandbox at {a_ip}");
    assert!(!fetches(&b, a.id()).await, "blue reached red's sandbox by its name");
    // The same tenant: both (sandboxes of one tenant share its network by default).
    assert!(eventually_fetches(&a2, &a_ip).await, "red's second sandbox did not reach the first at {a_ip}");
    assert!(eventually_fetches(&a2, a.id()).await, "red's second sandbox did not reach the first by name");

    // A container sandboxd did not make, on Docker's default bridge.
    let stranger = format!("walls-stranger-{}", &label.value[..12]);
    let mut run = vec!["run", "-d", "--name", &stranger];
    let run_args = label.run_args();
    run.extend(run_args.iter().map(String::as_str));
    run.extend([
        BUSYBOX,
        "sh",
        "-c",
        "mkdir /www && echo walls-secret > /www/f && exec httpd -f -p 8080 -h /www",
    ]);
    let out = testkit::docker(&run);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stranger_ip = ip_of(&stranger);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let probe = testkit::docker(&[
            "exec",
            &stranger,
            "sh",
            "-c",
            "printf 'GET /f HTTP/1.0\\r\\n\\r\\n' | nc -w 2 127.0.0.1 8080",
        ]);
        if String::from_utf8_lossy(&probe.stdout).contains("walls-secret") {
            break;
        }
        assert!(Instant::now() < deadline, "the stranger's httpd never answered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!fetches(&a, &stranger_ip).await, "a sandbox reached a stranger on the default bridge");
    assert!(!fetches(&b, &stranger).await, "a sandbox resolved a stranger by name");

    // The tenant's network stays while in use; unused for network_idle_s, the sweep removes it
    // (never a close: another server may be about to use it, docs/walls.md).
    a.stop().await.unwrap();
    assert!(testkit::docker(&["network", "inspect", &red_net]).status.success(), "in use by a2");
    a2.stop().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while testkit::docker(&["network", "inspect", &red_net]).status.success() {
        assert!(Instant::now() < deadline, "{red_net} outlived red's last sandbox past network_idle_s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    b.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sandbox_writing_past_its_disk_bound_gets_enospc_alone() {
    let _networks = NETWORK_MAKING.read().await;
    let label = TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    // The server's default bound (1 GiB) applies to a spec that names none.
    let server = tenants_server(
        &label,
        dir.path(),
        serde_json::json!({"docker": {"create": {"default_disk_gib": 1}}}),
    );
    let red = Client::connect_with_token(server.url.clone(), "red-key").await.unwrap();
    let (full, other) = tokio::join!(
        Sandbox::start(&red, sandboxd_client::spec(BUSYBOX)),
        Sandbox::start(&red, sandboxd_client::spec(BUSYBOX)),
    );
    let (full, other) = (full.unwrap(), other.unwrap());
    let disks = dir.path().join("state").join("disks");
    let files = || std::fs::read_dir(&disks).unwrap().flatten().filter(|e| e.path().is_file()).count();
    assert_eq!(files(), 2, "one disk file per sandbox (the stock is a directory of its own)");

    let (rc, out, _) = sh(&full, "df -k / | tail -1").await;
    assert_eq!(rc, 0);
    let size_kib: u64 = out.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0);
    assert!((900_000..=1_048_576).contains(&size_kib), "the root is bounded at 1 GiB: {out}");

    let (rc, _, err) = sh(&full, "dd if=/dev/zero of=/big bs=1M count=1300").await;
    assert_ne!(rc, 0, "writing 1.3 GiB into a 1 GiB bound succeeded");
    assert!(err.contains("No space left on device"), "{err}");
    // The full sandbox still answers, and frees its space.
    assert_eq!(sh(&full, "rm /big && echo freed").await.1.trim(), "freed");
    // Its neighbour never noticed, nor did the host: the disk files hold what was written.
    let (rc, _, err) = sh(&other, "dd if=/dev/zero of=/tmp/ok bs=1M count=64 && sync").await;
    assert_eq!(rc, 0, "{err}");
    for entry in std::fs::read_dir(&disks).unwrap() {
        use std::os::unix::fs::MetadataExt;
        let meta = entry.unwrap().metadata().unwrap();
        assert!(meta.blocks() * 512 <= (1 << 30) + (64 << 20), "a disk file outgrew its bound");
    }

    // A bound asked for explicitly, and a refusal where none can be enforced.
    let mut spec = sandboxd_client::spec(BUSYBOX);
    spec.resources = Some(proto::SandboxResources { disk_gib: Some(2), ..Default::default() });
    let big = Sandbox::start(&red, spec.clone()).await.unwrap();
    let (_, out, _) = sh(&big, "df -k / | tail -1").await;
    let size_kib: u64 = out.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0);
    assert!((1_900_000..=2_097_152).contains(&size_kib), "{out}");

    // Removal takes the disk files (and Docker the mounts) with the sandboxes: in the
    // background, after the closes answered.
    for s in [&full, &other, &big] {
        s.stop().await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_dir(&disks).unwrap().flatten().any(|e| e.path().is_file()) {
        assert!(Instant::now() < deadline, "disk files outlived their sandboxes");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(&disks.display().to_string()), "a loop mount outlived its sandbox");
    drop(server);

    let refusing_dir = tempfile::tempdir().unwrap();
    let refusing = tenants_server(
        &label,
        refusing_dir.path(),
        serde_json::json!({"docker": {"create": {"disk_bound": "refuse", "default_disk_gib": null}}}),
    );
    let red = Client::connect_with_token(refusing.url.clone(), "red-key").await.unwrap();
    let before = label.containers().len();
    let err = Sandbox::start(&red, spec).await.unwrap_err();
    let status = err.to_string();
    assert!(status.contains("spec.resources.disk_gib") && status.contains("disk_bound"), "{status}");
    assert_eq!(label.containers().len(), before, "a refused create made a container");
}

/// Root's non-login shells and some service managers give a `PATH` without `/usr/sbin`: the
/// walls' programs (`mkfs.ext4`) are found where Debian installs them all the same.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_started_without_sbin_on_its_path_bounds_disks_all_the_same() {
    let _networks = NETWORK_MAKING.read().await;
    let label = TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    let server = testkit::server::TestServer::launch(env!("CARGO_BIN_EXE_sandboxd"), &label)
        .config(serde_json::json!({"server": {"state_dir": dir.path()}, "docker": {"create": {"default_disk_gib": 1}}}))
        .env(&[("PATH", "/usr/bin:/bin")])
        .start();
    let client = server.client().await;
    let sandbox = Sandbox::start(&client, sandboxd_client::spec(BUSYBOX))
        .await
        .unwrap_or_else(|e| panic!("create with PATH=/usr/bin:/bin: {e}\n{}", server.logs()));
    let (rc, out, _) = sh(&sandbox, "df -k / | tail -1").await;
    let size_kib: u64 = out.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0);
    assert!(rc == 0 && (900_000..=1_048_576).contains(&size_kib), "the root is bounded at 1 GiB: {out}");
    sandbox.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sweep_removes_disk_files_whose_container_is_gone() {
    let _networks = NETWORK_MAKING.read().await;
    let label = TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    let server = tenants_server(
        &label,
        dir.path(),
        serde_json::json!({"docker": {"create": {"default_disk_gib": 1}}}),
    );
    let red = Client::connect_with_token(server.url.clone(), "red-key").await.unwrap();
    let sandbox = Sandbox::start(&red, sandboxd_client::spec(BUSYBOX)).await.unwrap();
    drop(server); // the server goes away; then the container, behind its back
    let out = testkit::docker(&["rm", "-f", sandbox.id()]);
    assert!(out.status.success());
    let disks = dir.path().join("state").join("disks");
    let files = || std::fs::read_dir(&disks).unwrap().flatten().filter(|e| e.path().is_file()).count();
    assert_eq!(files(), 1);

    let _again = tenants_server(&label, dir.path(), serde_json::json!({}));
    let deadline = Instant::now() + Duration::from_secs(20);
    while files() > 0 {
        assert!(Instant::now() < deadline, "the sweep left a gone container's disk file");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn defaults_hold_a_fork_bomb_and_a_memory_hog_in_their_sandbox() {
    let _networks = NETWORK_MAKING.read().await;
    let label = TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    // Small defaults keep the test cheap; the shipped ones are checked below.
    let server = tenants_server(
        &label,
        dir.path(),
        serde_json::json!({"docker": {"create": {"default_memory_mib": 128, "pids_limit": 200}}}),
    );
    let red = Client::connect_with_token(server.url.clone(), "red-key").await.unwrap();
    let (bad, good) = tokio::join!(
        Sandbox::start(&red, sandboxd_client::spec(BUSYBOX)),
        Sandbox::start(&red, sandboxd_client::spec(BUSYBOX)),
    );
    let (bad, good) = (bad.unwrap(), good.unwrap());

    let bomber = if testkit::on_runsc() {
        // On gVisor the host's caps bound the whole sandbox (its sentry holds the sandbox's
        // memory, and under ptrace every task is a host thread): the memory hog is the
        // sentry's OOM kill and the fork bomb leaves the sentry without a thread (it exits),
        // so each ends its own sandbox; the wall is that the neighbour never notices.
        let r = bad.exec_with("dd if=/dev/zero of=/dev/null bs=512M count=1", quick(60.0)).await;
        assert!(r.map_or(true, |r| r.return_code != 0), "a 512 MiB buffer fitted in a 128 MiB default");
        bad.stop().await.unwrap();
        Sandbox::start(&red, sandboxd_client::spec(BUSYBOX)).await.unwrap()
    } else {
        // The memory hog: a 512 MiB buffer in a 128 MiB sandbox is killed, the sandbox lives on.
        let (rc, _, _) = sh(&bad, "dd if=/dev/zero of=/dev/null bs=512M count=1").await;
        assert_ne!(rc, 0, "a 512 MiB buffer fitted in a 128 MiB default");
        bad
    };
    // The fork bomb: bounded by the pids limit, left running while the neighbour works.
    let (rc, _, err) = sh(&bomber, "(b() { b | b & }; b) >/dev/null 2>&1 &").await;
    assert_eq!(rc, 0, "{err}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pids = testkit::docker(&["inspect", "-f", "{{.HostConfig.PidsLimit}}", bomber.id()]);
    assert_eq!(String::from_utf8_lossy(&pids.stdout).trim(), "200");
    for i in 0..5 {
        let started = Instant::now();
        let r =
            good.exec_with(format!("echo alive-{i}"), quick(20.0)).await.expect("exec in the good sandbox");
        assert_eq!(String::from_utf8_lossy(&r.stdout).trim(), format!("alive-{i}"));
        assert!(started.elapsed() < Duration::from_secs(10), "exec took {:?}", started.elapsed());
    }
    bomber.stop().await.unwrap();
    good.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_shipped_defaults_cap_a_sandbox_that_names_nothing() {
    let _networks = NETWORK_MAKING.read().await;
    let label = TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    let server = tenants_server(&label, dir.path(), serde_json::json!({}));
    let red = Client::connect_with_token(server.url.clone(), "red-key").await.unwrap();
    let sandbox = Sandbox::start(&red, sandboxd_client::spec(BUSYBOX)).await.unwrap();
    let out = testkit::docker(&[
        "inspect",
        "-f",
        "{{.HostConfig.Memory}} {{.HostConfig.NanoCpus}} {{.HostConfig.PidsLimit}} {{json .HostConfig.SecurityOpt}} {{json .HostConfig.CapDrop}}",
        sandbox.id(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with(&format!("{} 2000000000 4096 ", 4096u64 << 20)), "{text}");
    assert!(text.contains("no-new-privileges"), "{text}");
    for cap in ["NET_RAW", "MKNOD", "SYS_CHROOT"] {
        assert!(text.contains(cap), "{cap} is not dropped: {text}");
    }
    // Inside: no new privileges, no raw sockets (bit 13 of the bounding set).
    let (_, status, _) = sh(&sandbox, "cat /proc/self/status").await;
    // gVisor's status has no NoNewPrivs line (release 2022-12-19); its kernel answers
    // PR_GET_NO_NEW_PRIVS with 1 for every process, the option given or not.
    let nnp = testkit::on_runsc() || status.lines().any(|l| l.starts_with("NoNewPrivs:") && l.ends_with('1'));
    assert!(nnp, "{status}");
    let bnd = status.lines().find_map(|l| l.strip_prefix("CapBnd:")).unwrap().trim();
    let bnd = u64::from_str_radix(bnd, 16).unwrap();
    assert_eq!(bnd & (1 << 13), 0, "CAP_NET_RAW is in the bounding set");
    assert_ne!(bnd & (1 << 6), 0, "CAP_SETGID (exec as another user) was dropped");
    // And a lease: an hour from its create.
    let listed = red.raw().list(proto::ListRequest::default()).await.unwrap().into_inner();
    let info =
        listed.sandboxes.iter().find(|i| i.sandbox.as_ref().is_some_and(|r| r.sandbox_id == sandbox.id()));
    let expires = info.and_then(|i| i.expires_at_unix_ms).expect("a default lease");
    let now = sandboxd::core::lease::now_ms();
    assert!((now + 3_500_000..=now + 3_600_000).contains(&expires), "lease ends at {expires}, now {now}");
    sandbox.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn egress_policies_hold_on_the_tenants_network() {
    use proto::EgressAction::{Allow, Deny};
    let _networks = NETWORK_MAKING.read().await;
    let label = TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    let server = tenants_server(&label, dir.path(), serde_json::json!({}));
    let red = Client::connect_with_token(server.url.clone(), "red-key").await.unwrap();
    let a = Sandbox::start(&red, sandboxd_client::spec(BUSYBOX)).await.unwrap();
    serve(&a).await;
    let a_ip = ip_of(a.id());
    let with_policy = |default: proto::EgressAction, action: proto::EgressAction| {
        let mut spec = sandboxd_client::spec(BUSYBOX);
        spec.network_policy = Some(proto::NetworkPolicy {
            default_action: default as i32,
            rules: vec![proto::EgressRule {
                action: action as i32,
                cidr: format!("{a_ip}/32"),
                ports: vec![8080],
            }],
            allow_domains: vec![],
        });
        spec
    };
    let (allowed, denied) = tokio::join!(
        Sandbox::start(&red, with_policy(Deny, Allow)),
        Sandbox::start(&red, with_policy(Allow, Deny)),
    );
    let (allowed, denied) = (allowed.unwrap(), denied.unwrap());
    // Peers of one tenant reach each other unless a policy says otherwise.
    assert!(eventually_fetches(&allowed, &a_ip).await, "a policy allowing the peer did not reach it");
    assert!(!fetches(&denied, &a_ip).await, "a policy denying the peer reached it");
    for s in [&a, &allowed, &denied] {
        s.stop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sandboxes_claimed_from_everyones_pool_by_two_tenants_never_meet() {
    let _networks = NETWORK_MAKING.write().await;
    let label = TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    let server = tenants_server(
        &label,
        dir.path(),
        serde_json::json!({"pools": [{"name": "everyone", "image": BUSYBOX, "target": 2, "max": 4}]}),
    );
    let red = Client::connect_with_token(server.url.clone(), "red-key").await.unwrap();
    let blue = Client::connect_with_token(server.url.clone(), "blue-key").await.unwrap();
    // Both members ready (renamed to their ids), so both claims get one.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pools = red.raw().list_pools(proto::ListPoolsRequest::default()).await.unwrap().into_inner();
        let ready = pools.pools.iter().find(|p| p.name == "everyone").map_or(0, |p| p.ready);
        let creating = label.names().iter().filter(|n| n.starts_with("sandboxd-creating-")).count();
        if ready == 2 && creating == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the pool never had 2 ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let claim = || proto::SandboxSpec { pool: Some("everyone".into()), ..Default::default() };
    let a = Sandbox::start(&red, claim()).await.unwrap();
    let b = Sandbox::start(&blue, claim()).await.unwrap();
    let (a_net, b_net) = (networks_of(a.id()), networks_of(b.id()));
    assert_eq!(
        a_net.keys().collect::<Vec<_>>(),
        b_net.keys().collect::<Vec<_>>(),
        "both from the pool's bridge"
    );
    assert!(a_net.keys().all(|n| n.starts_with("sandboxd-net-isolated")), "{a_net:?}");
    serve(&a).await;
    assert!(!fetches(&b, &ip_of(a.id())).await, "blue reached red's pool sandbox on the pool's bridge");
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

/// The loop disk on a private daemon's overlay2 (on a filesystem without project quotas, so
/// no `--storage-opt size=`): ENOSPC at the bound, and a close that removes the container
/// (overlay2 cannot remove a layer with a mount on it: the disk is detached first).
#[tokio::test(flavor = "multi_thread")]
async fn the_loop_disk_bounds_a_private_overlay2_daemon_and_closes_cleanly() {
    if testkit::on_runsc() {
        // Its daemon is a private runc one (no runsc registered); on gVisor the loop disk is
        // `a_sandbox_writing_past_its_disk_bound_gets_enospc_alone`'s.
        return;
    }
    let _networks = NETWORK_MAKING.read().await;
    let label = TestLabel::new();
    let docker = testkit::private_docker::PrivateDocker::start(&[BUSYBOX]);
    let driver = docker.docker(&["info", "-f", "{{.Driver}}"]);
    assert_eq!(String::from_utf8_lossy(&driver.stdout).trim(), "overlay2");
    let server = testkit::server::TestServer::launch(env!("CARGO_BIN_EXE_sandboxd"), &label)
        .config(serde_json::json!({
            "docker": {"create": {"network": "none", "default_disk_gib": 1}},
            "server": {"state_dir": docker.path("state"), "sweep_interval_s": 1.0},
        }))
        .env(&[("DOCKER_HOST", &docker.host())])
        .log_file(docker.path("sandboxd.log"))
        .start();
    let client = Client::connect(server.url.clone()).await.unwrap();
    let sandbox = Sandbox::start(&client, sandboxd_client::spec(BUSYBOX)).await.unwrap();
    let (rc, _, err) = sh(&sandbox, "dd if=/dev/zero of=/big bs=1M count=1300").await;
    assert_ne!(rc, 0);
    assert!(err.contains("No space left on device"), "{err}");
    sandbox.stop().await.unwrap();
    // The close returns once nothing in the sandbox runs; its removal (the disk detached
    // first, then `docker rm`, then the file) finishes in the background. The stock of
    // formatted files (a directory of its own) stays.
    let disks = docker.path("state").join("disks");
    let removed = || {
        let left = docker.docker(&["ps", "-aq"]);
        String::from_utf8_lossy(&left.stdout).trim().is_empty()
            && !std::fs::read_dir(&disks).unwrap().flatten().any(|e| e.path().is_file())
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !removed() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let left = docker.docker(&["ps", "-aq"]);
    assert!(String::from_utf8_lossy(&left.stdout).trim().is_empty(), "the container outlived its close");
    let files = std::fs::read_dir(&disks).unwrap().flatten().filter(|e| e.path().is_file()).count();
    assert_eq!(files, 0, "the disk file outlived its close");
}

/// With `disk_bound: loop`, a sandbox made without a loop disk says so in a label: its removal
/// asks the daemon nothing about its layer, whether this server made it or another one (a
/// restart) that knows it only by its labels.
#[tokio::test(flavor = "multi_thread")]
async fn a_removal_reads_the_disk_label_instead_of_inspecting_the_layer() {
    use sandboxd::config::{DiskBound, DockerConfig};
    use sandboxd::core::spec::SandboxSpec;

    let _networks = NETWORK_MAKING.read().await;
    let label = TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    let (wrapper, log) = testkit::recording_docker(dir.path(), "\"$*\"");
    let edit = |c: &mut DockerConfig| {
        c.create.disk_bound = DiskBound::Loop;
        c.create.default_disk_gib = None;
    };
    let creator = testkit::provider_with_binary(&label, wrapper.clone(), edit);
    let own = creator.create(&SandboxSpec::new(BUSYBOX)).await.unwrap();
    let adopted = creator.create(&SandboxSpec::new(BUSYBOX)).await.unwrap();

    std::fs::write(&log, "").unwrap();
    creator.close(&own.id()).await.unwrap();
    creator.settle_removals().await;
    let restarted = testkit::provider_with_binary(&label, wrapper, edit);
    restarted.close(&adopted.id()).await.unwrap();
    restarted.settle_removals().await;

    let calls = std::fs::read_to_string(&log).unwrap();
    assert!(calls.lines().any(|c| c.starts_with("rm ")), "the closes removed containers: {calls}");
    assert!(!calls.contains("GraphDriver"), "a removal inspected the layer: {calls}");
    for h in [&own, &adopted] {
        assert!(!testkit::container_exists(&h.sandbox_id), "{} outlived its close", h.sandbox_id);
    }
}

/// Tenant networks carved from `docker.create.tenant_subnets`: each tenant's bridge gets a piece
/// of the range, and when the range is full the create that needs another network is refused
/// with the reason and the setting that raises it, leaving nothing behind.
#[tokio::test(flavor = "multi_thread")]
async fn tenant_subnets_are_carved_from_the_range_and_a_full_range_refuses_naming_the_setting() {
    let _networks = NETWORK_MAKING.read().await;
    let label = TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    // Two /26 of a /25 (a range no stock daemon pool uses).
    let server = tenants_server(
        &label,
        dir.path(),
        serde_json::json!({"docker": {"create": {"tenant_subnets": "10.213.77.0/25", "tenant_subnet_prefix": 26}}}),
    );
    let mut tenants = Vec::new();
    for tenant in ["red", "blue"] {
        let client = Client::connect_with_token(server.url.clone(), format!("{tenant}-key")).await.unwrap();
        let sandbox =
            Sandbox::start(&client, sandboxd_client::spec(BUSYBOX)).await.expect("a create in range");
        let ip: std::net::Ipv4Addr = ip_of(sandbox.id()).parse().unwrap();
        assert_eq!(ip.octets()[..3], [10, 213, 77], "{tenant}'s sandbox at {ip}");
        tenants.push(sandbox);
    }
    let subnet = |s: &Sandbox| ip_of(s.id()).parse::<std::net::Ipv4Addr>().unwrap().octets()[3] / 64;
    assert_ne!(subnet(&tenants[0]), subnet(&tenants[1]), "two tenants on one subnet");
    // A third network does not fit: the range is full.
    let red = Client::connect_with_token(server.url.clone(), "red-key").await.unwrap();
    let before = label.containers().len();
    let mut spec = sandboxd_client::spec(BUSYBOX);
    spec.network = Some("lab".into());
    let err = Sandbox::start(&red, spec).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err}");
    assert!(err.to_string().contains("docker.create.tenant_subnets"), "{err}");
    assert_eq!(label.containers().len(), before, "a refused create made a container");
    for sandbox in tenants {
        sandbox.stop().await.unwrap();
    }
}

/// On demand (a bench, not the gate; it makes N-1 bridges): the first create of the N-th tenant
/// (default 1,000) with every wall on, its network carved from `tenant_subnets` while N-1 other
/// tenant networks exist, against that tenant's second create (its network made already).
/// `SANDBOXD_TENANTS=1000 cargo test --release -p sandboxd --test walls -- --ignored --nocapture thousandth`
/// runs it on the machine's daemon; with `SANDBOXD_TENANTS_DAEMON=private` it runs on a private
/// daemon of its own (testkit's `PrivateDocker` with a bridge, in a network namespace of its
/// own), so the N-1 bridges never reach the daemon other work shares, and go with it.
#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn the_thousandth_tenants_first_create() {
    use sandboxd::backends::docker::argv;
    use testkit::private_docker::{PrivateDocker, PrivateNetwork};
    let n: usize = std::env::var("SANDBOXD_TENANTS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let private = match std::env::var("SANDBOXD_TENANTS_DAEMON").as_deref() {
        Ok("private") => Some(PrivateDocker::start_with(&[BUSYBOX], PrivateNetwork::Bridge)),
        Ok("") | Err(_) => None,
        Ok(other) => panic!("SANDBOXD_TENANTS_DAEMON={other}: `private` or unset (the machine's daemon)"),
    };
    let docker = |args: &[&str]| match &private {
        Some(daemon) => daemon.docker(args),
        None => testkit::docker(args),
    };
    let _networks = NETWORK_MAKING.read().await;
    let label = TestLabel::new();
    let operator = argv::operator_labels(&label.run_args());
    // The first N-1 tenants' networks, as the server makes them (labels, subnets of the range).
    let made = std::sync::atomic::AtomicUsize::new(0);
    let networks_started = Instant::now();
    std::thread::scope(|s| {
        for part in 0..4 {
            let (operator, made, docker) = (&operator, &made, &docker);
            s.spawn(move || {
                for t in (part..n - 1).step_by(4) {
                    let tenant = format!("t{t}");
                    let name = argv::network_name(Some(&tenant), &argv::tenant_network_name(operator));
                    let mut create =
                        argv::network_create_args(&name, &argv::resource_labels(Some(&tenant), operator));
                    create = argv::with_subnet(create, &format!("10.{}.{}.0/24", 128 + t / 256, t % 256));
                    let args: Vec<&str> = create.iter().map(String::as_str).collect();
                    let out = docker(&args);
                    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
                    made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
    });
    let networks_s = networks_started.elapsed().as_secs_f64();
    let last = format!("t{}", n - 1);
    let dir = tempfile::tempdir().unwrap();
    let tenants_file = dir.path().join("tenants.json");
    let entry =
        serde_json::json!({"name": last, "key_sha256": sandboxd::auth::tenants::key_sha256("last-key")});
    std::fs::write(&tenants_file, serde_json::json!({"tenants": [entry]}).to_string()).unwrap();
    let config = serde_json::json!({
        "server": {"state_dir": dir.path().join("state"), "auth": {"tenants_file": tenants_file}},
        "docker": {"create": {"tenant_subnets": "10.128.0.0/14"}},
    });
    // The server: in-process on the machine's daemon; the binary, with `DOCKER_HOST`, on a
    // private one (its docker commands must reach that daemon, not the test process's).
    let (_in_process, _binary, url) = match &private {
        None => {
            let server = TestService::start_json(&label, config);
            let url = server.url.clone();
            (Some(server), None, url)
        }
        Some(daemon) => {
            let server = testkit::server::TestServer::launch(env!("CARGO_BIN_EXE_sandboxd"), &label)
                .config(config)
                .env(&[("DOCKER_HOST", &daemon.host())])
                .log_file(daemon.path("sandboxd.log"))
                .start();
            let url = server.url.clone();
            (None, Some(server), url)
        }
    };
    let client = Client::connect_with_token(url, "last-key").await.unwrap();
    let started = Instant::now();
    let first = Sandbox::start(&client, sandboxd_client::spec(BUSYBOX))
        .await
        .expect("the last tenant's first create");
    let first_s = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let second = Sandbox::start(&client, sandboxd_client::spec(BUSYBOX)).await.expect("its second create");
    let second_s = started.elapsed().as_secs_f64();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "tenant {n}'s first create: {first_s:.3} s (its network made beside {} others, made in {networks_s:.1} s); its second: {second_s:.3} s; load {}; daemon: {}",
        made.load(std::sync::atomic::Ordering::Relaxed),
        load.trim(),
        if private.is_some() { "private" } else { "the machine's" },
    );
    first.stop().await.unwrap();
    second.stop().await.unwrap();
}
