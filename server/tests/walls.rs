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
    let label = TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    let server = tenants_server(&label, dir.path(), serde_json::json!({}));
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

    // The tenant's network goes with its last sandbox.
    a.stop().await.unwrap();
    assert!(testkit::docker(&["network", "inspect", &red_net]).status.success(), "in use by a2");
    a2.stop().await.unwrap();
    let gone = !testkit::docker(&["network", "inspect", &red_net]).status.success();
    assert!(gone, "{red_net} outlived red's last sandbox");
    b.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sandbox_writing_past_its_disk_bound_gets_enospc_alone() {
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
    assert_eq!(std::fs::read_dir(&disks).unwrap().count(), 2, "one disk file per sandbox");

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

    // Removal takes the disk files (and Docker the mounts) with the sandboxes.
    for s in [&full, &other, &big] {
        s.stop().await.unwrap();
    }
    assert_eq!(std::fs::read_dir(&disks).unwrap().count(), 0, "disk files outlived their sandboxes");
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

#[tokio::test(flavor = "multi_thread")]
async fn the_sweep_removes_disk_files_whose_container_is_gone() {
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
    assert_eq!(std::fs::read_dir(&disks).unwrap().count(), 1);

    let _again = tenants_server(&label, dir.path(), serde_json::json!({}));
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::read_dir(&disks).unwrap().count() > 0 {
        assert!(Instant::now() < deadline, "the sweep left a gone container's disk file");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn defaults_hold_a_fork_bomb_and_a_memory_hog_in_their_sandbox() {
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
    // The close returns once the container is killed and renamed; its removal (the disk
    // detached first, then `docker rm`, then the file) finishes in the background.
    let disks = docker.path("state").join("disks");
    let removed = || {
        let left = docker.docker(&["ps", "-aq"]);
        String::from_utf8_lossy(&left.stdout).trim().is_empty()
            && std::fs::read_dir(&disks).unwrap().count() == 0
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !removed() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let left = docker.docker(&["ps", "-aq"]);
    assert!(String::from_utf8_lossy(&left.stdout).trim().is_empty(), "the container outlived its close");
    assert_eq!(std::fs::read_dir(&disks).unwrap().count(), 0, "the disk file outlived its close");
}

/// With `disk_bound: loop`, a sandbox made without a loop disk says so in a label: its removal
/// asks the daemon nothing about its layer, whether this server made it or another one (a
/// restart) that knows it only by its labels.
#[tokio::test(flavor = "multi_thread")]
async fn a_removal_reads_the_disk_label_instead_of_inspecting_the_layer() {
    use sandboxd::config::{DiskBound, DockerConfig};
    use sandboxd::core::spec::SandboxSpec;

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
    let restarted = testkit::provider_with_binary(&label, wrapper, edit);
    restarted.close(&adopted.id()).await.unwrap();

    let calls = std::fs::read_to_string(&log).unwrap();
    assert!(calls.lines().any(|c| c.starts_with("rm ")), "the closes removed containers: {calls}");
    assert!(!calls.contains("GraphDriver"), "a removal inspected the layer: {calls}");
    for h in [&own, &adopted] {
        assert!(!testkit::container_exists(&h.sandbox_id), "{} outlived its close", h.sandbox_id);
    }
}
