//! The Docker provider against the real daemon and the real docker CLI.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

use sandboxd::core::lease::{LeaseStore, SweepReason};
use sandboxd::core::spec::{ExecErrorType, SandboxSpec, SandboxStatus};
use sandboxd::core::spec::{ExecParams, SandboxDescriptor};
use sandboxd::ProviderError;
use sha2::{Digest, Sha256};
use testkit::images;
use testkit::{docker, provider, provider_with, require_docker, TestLabel};

fn spec(image: &str) -> SandboxSpec {
    SandboxSpec::new(image)
}

fn params() -> ExecParams {
    ExecParams::default()
}

#[tokio::test]
async fn create_exec_and_close_on_busybox_and_bash() {
    let label = TestLabel::new();
    let p = provider(&label);
    for (image, shell) in [(images::BUSYBOX, "sh"), (images::BASH, "bash"), (images::DASH, "sh")] {
        let mut s = spec(image);
        s.env.insert("FROM_SPEC".into(), "spec".into());
        s.env.insert("OVERRIDE".into(), "spec".into());
        s.workdir = Some("/tmp".into());
        let h = p.create(&s).await.unwrap();
        assert_eq!(h.shell, shell, "{image}");
        assert_eq!(p.status(&h.id()).await.unwrap(), SandboxStatus::Running);

        let env: BTreeMap<String, String> = [("OVERRIDE".to_string(), "call".to_string())].into();
        let r = p
            .exec(
                &h,
                "echo \"$FROM_SPEC $OVERRIDE $(pwd)\"; echo err >&2; exit 3",
                &ExecParams { env, ..params() },
            )
            .await
            .unwrap();
        assert_eq!(r.stdout, b"spec call /tmp\n");
        assert_eq!(r.stderr, b"err\n");
        assert_eq!(r.return_code, 3);
        assert_eq!(r.error_type, None);

        // Bytes are kept lossless, stdin is fed, cwd applies.
        let r = p
            .exec(
                &h,
                "cat; printf '\\377\\000\\001'; pwd",
                &ExecParams { stdin: Some(b"in\xff".to_vec()), cwd: Some("/etc".into()), ..params() },
            )
            .await
            .unwrap();
        assert_eq!(r.stdout, b"in\xff\xff\x00\x01/etc\n");

        p.close(&h.id()).await.unwrap();
        p.close(&h.id()).await.unwrap(); // already gone is success
        assert_eq!(p.status(&h.id()).await.unwrap(), SandboxStatus::Stopped);
        p.settle_removals().await; // Docker's removal runs after close answered
    }
    assert!(label.containers().is_empty());
}

#[tokio::test]
async fn missing_image_fails_create_and_leaves_nothing() {
    let label = TestLabel::new();
    let p = provider(&label);
    // A registry on loopback that refuses: the pull the `missing` policy tries never leaves the host.
    let err = p.create(&spec("127.0.0.1:9/sandboxd-test/does-not-exist:1")).await.unwrap_err();
    assert!(matches!(err, ProviderError::Create(_)), "{err:?}");
    assert!(err.to_string().contains("does-not-exist"), "{err}");
    assert!(err.to_string().contains("pull_policy") && !err.to_string().contains("--help"), "{err}");
    assert!(label.containers().is_empty());
    // `never`: only images already on the daemon; the error says so and what to do.
    let never = provider_with(&label, |c| c.create.pull_policy = "never".into());
    let err = never.create(&spec("sandboxd-test/does-not-exist:1")).await.unwrap_err().to_string();
    assert!(
        err.contains("\"sandboxd-test/does-not-exist:1\"")
            && err.contains("\"never\"")
            && err.contains("docker load"),
        "{err}"
    );
    never.create(&spec(images::BUSYBOX)).await.expect("a present image starts under never");
    label.remove_all();
}

#[tokio::test]
async fn probe_that_never_passes_fails_verification_and_leaves_nothing() {
    let label = TestLabel::new();
    let p = provider_with(&label, |c| {
        c.probe.command = Some("echo not-yet; exit 1".into());
        c.probe.deadline = Some(Duration::from_secs(1));
    });
    let started = Instant::now();
    let err = p.create(&spec(images::BUSYBOX)).await.unwrap_err();
    // Past its readiness deadline: CREATE_TIMEOUT's error.
    assert!(matches!(err, ProviderError::ReadyTimeout(_)), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(label.containers().is_empty());

    // Wrong output with a zero exit also fails, and without a deadline it fails at once.
    let p = provider_with(&label, |c| c.probe.expected_stdout = Some("something else".into()));
    let err = p.create(&spec(images::BUSYBOX)).await.unwrap_err();
    assert!(matches!(err, ProviderError::CreateVerification(_)), "{err:?}");
    assert!(label.containers().is_empty());
}

#[tokio::test]
async fn probe_stable_count_and_configured_shell() {
    let label = TestLabel::new();
    let p = provider_with(&label, |c| {
        c.probe.stable_count = 3;
        c.probe.stable_delay = Duration::from_millis(50);
        c.exec.exec_shell = Some("sh".into());
    });
    let h = p.create(&spec(images::BASH)).await.unwrap();
    assert_eq!(h.shell, "sh", "a configured shell wins over detection");
    p.close(&h.id()).await.unwrap();
}

#[tokio::test]
async fn invalid_input_is_refused_before_docker() {
    let label = TestLabel::new();
    let p = provider(&label);
    for (bad, field) in [
        (spec("--privileged"), "spec.image"),
        (SandboxSpec { ports: vec![80, 80], ..spec(images::BUSYBOX) }, "spec.ports"),
        (SandboxSpec { ttl_s: Some(-1.0), ..spec(images::BUSYBOX) }, "spec.ttl_s"),
    ] {
        let err = p.create(&bad).await.unwrap_err();
        assert!(matches!(err, ProviderError::InvalidArgument { .. }), "{err:?}");
        assert!(err.to_string().contains(field), "{err}");
    }
    assert!(label.containers().is_empty());
    let err = p.handle("--privileged").await.unwrap_err();
    assert!(matches!(err, ProviderError::SandboxNotFound(_)));
}

#[tokio::test]
async fn exec_timeout_and_user() {
    let label = TestLabel::new();
    let p = provider(&label);
    let h = p.create(&spec(images::BUSYBOX)).await.unwrap();
    let started = Instant::now();
    let r = p
        .exec(&h, "sleep 30", &ExecParams { timeout: Some(Duration::from_millis(500)), ..params() })
        .await
        .unwrap();
    assert_eq!((r.return_code, r.error_type), (125, Some(ExecErrorType::Timeout)));
    assert!(started.elapsed() < Duration::from_secs(10));

    // The returned command line names the variable but never its value.
    let env: BTreeMap<String, String> = [("API_TOKEN".to_string(), "hunter2".to_string())].into();
    let r = p
        .exec(&h, "sleep 30", &ExecParams { env, timeout: Some(Duration::from_millis(300)), ..params() })
        .await
        .unwrap();
    let message = r.stderr_str();
    assert!(!message.contains("hunter2"), "{message}");
    if testkit::engine() == sandboxd::config::ExecEngineKind::Docker {
        assert!(message.contains("--env API_TOKEN "), "{message}");
    }

    let r = p.exec(&h, "id -u", &ExecParams { user: Some("nobody".into()), ..params() }).await.unwrap();
    assert_eq!(r.stdout_str().trim(), "65534");
    let r = p.exec(&h, "id -u", &ExecParams { user: Some("root".into()), ..params() }).await.unwrap();
    assert_eq!(r.stdout_str().trim(), "0");
    let err = p.exec(&h, "true", &ExecParams { user: Some("-x".into()), ..params() }).await.unwrap_err();
    assert!(err.to_string().contains("user"));
    p.close(&h.id()).await.unwrap();
}

#[tokio::test]
async fn a_command_that_prints_docker_errors_keeps_its_own_exit() {
    // Classification is by docker's own failure (its codes, its error line, confirmed by
    // inspect), never by what the command prints.
    let label = TestLabel::new();
    let p = provider(&label);
    let h = p.create(&spec(images::BUSYBOX)).await.unwrap();
    for code in [3, 1, 125] {
        let cmd = format!("echo 'Error response from daemon: Container x is not running' >&2; exit {code}");
        let r = p.exec(&h, &cmd, &params()).await.unwrap();
        assert_eq!((r.return_code, r.error_type), (code, None), "{r:?}");
        assert!(r.stderr_str().contains("Error response from daemon"));
    }
    // Killed by a signal in a running container: its own exit too (inspect says running).
    let r = p.exec(&h, "kill -9 $$", &params()).await.unwrap();
    assert_eq!((r.return_code, r.error_type), (137, None), "{r:?}");
    p.close(&h.id()).await.unwrap();
}

#[tokio::test]
async fn killed_container_is_stopped_and_exec_reports_sandbox() {
    let label = TestLabel::new();
    let p = provider(&label);
    let h = p.create(&spec(images::BUSYBOX)).await.unwrap();
    assert!(docker(&["kill", &h.sandbox_id]).status.success());
    assert_eq!(p.status(&h.id()).await.unwrap(), SandboxStatus::Stopped);
    let r = p.exec(&h, "echo hi", &params()).await.unwrap();
    assert_eq!((r.return_code, r.error_type), (125, Some(ExecErrorType::Sandbox)));
    p.close(&h.id()).await.unwrap();
    p.settle_removals().await; // Docker's removal runs after close answered
    assert!(label.containers().is_empty());
}

#[tokio::test]
/// A paused sandbox reports `Paused` (issue 12 gave paused its own status).
async fn paused_container_reports_paused() {
    let label = TestLabel::new();
    let p = provider(&label);
    let h = p.create(&spec(images::BUSYBOX)).await.unwrap();
    assert!(docker(&["pause", &h.sandbox_id]).status.success());
    assert_eq!(p.status(&h.id()).await.unwrap(), SandboxStatus::Paused);
    // Issue 12: exec on a paused sandbox is refused (FAILED_PRECONDITION), naming the state.
    let err = p.exec(&h, "echo hi", &params()).await.unwrap_err();
    assert!(matches!(err, ProviderError::Paused(_)), "{err}");
    assert!(err.to_string().contains("paused"), "{err}");
    p.close(&h.id()).await.unwrap();
}

/// Sweep until `gone` is removed (each sweep lists the whole daemon's owned containers).
async fn sweep_until_gone(
    p: &sandboxd::backends::docker::DockerProvider,
    leases: &LeaseStore,
    gone: &str,
) -> Vec<(String, SweepReason)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut removed = Vec::new();
    loop {
        removed.extend(sandboxd::core::sweep::sweep(p, leases).await.expect("sweep").removed);
        if !exists(gone) {
            return removed;
        }
        assert!(Instant::now() < deadline, "{gone} still present after 30 s of sweeps");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn exists(name: &str) -> bool {
    docker(&["inspect", "--type", "container", name]).status.success()
}

#[tokio::test]
async fn the_sweep_ends_leases_even_with_a_custom_entrypoint_and_keeps_the_rest() {
    let label = TestLabel::new();
    let p = provider(&label);
    let dir = tempfile::tempdir().unwrap();
    let leases = LeaseStore::open(dir.path()).unwrap();
    let short = p.create(&SandboxSpec { ttl_s: Some(1.0), ..spec(images::BUSYBOX) }).await.unwrap();
    let custom = SandboxSpec {
        ttl_s: Some(1.0),
        entrypoint: Some(vec!["/bin/sh".into(), "-c".into(), "exec sleep 1000".into()]),
        ..spec(images::BUSYBOX)
    };
    let custom = p.create(&custom).await.unwrap();
    let long = p.create(&SandboxSpec { ttl_s: Some(3600.0), ..spec(images::BUSYBOX) }).await.unwrap();
    let forever = p.create(&spec(images::BUSYBOX)).await.unwrap();
    let removed = sweep_until_gone(&p, &leases, &short.sandbox_id).await;
    let removed = [removed, sweep_until_gone(&p, &leases, &custom.sandbox_id).await].concat();
    assert!(removed.iter().all(|(_, why)| *why == SweepReason::LeaseExpired), "{removed:?}");
    assert_eq!(p.status(&short.id()).await.unwrap(), SandboxStatus::Stopped);
    assert!(
        exists(&long.sandbox_id) && exists(&forever.sandbox_id),
        "completed sandboxes within their lease stay"
    );
    assert_eq!(p.exec(&long, "echo ok", &params()).await.unwrap().stdout, b"ok\n");

    // A lease moved into the store wins over the label, both ways.
    leases.set(&long.sandbox_id, sandboxd::core::lease::now_ms() - 1).unwrap();
    leases.set(&forever.sandbox_id, sandboxd::core::lease::now_ms() + 3_600_000).unwrap();
    sweep_until_gone(&p, &leases, &long.sandbox_id).await;
    assert_eq!(leases.get(&long.sandbox_id), None, "a removed sandbox's moved lease is forgotten");
    assert!(exists(&forever.sandbox_id));
    p.close(&forever.id()).await.unwrap();
}

#[tokio::test]
async fn the_sweep_removes_creates_that_never_completed_and_nothing_else() {
    // What a server killed mid-create leaves: an owned container still under its creating name.
    let label = TestLabel::new();
    require_docker();
    let dir = tempfile::tempdir().unwrap();
    let leases = LeaseStore::open(dir.path()).unwrap();
    let p = provider(&label);
    let now = sandboxd::core::lease::now_ms();
    let start = |name: &str, owned: bool, deadline_ms: i64| {
        let mut args: Vec<String> = vec!["run".into(), "-d".into(), "--name".into(), name.into()];
        args.extend(label.run_args());
        if owned {
            args.extend(["--label".into(), "sandboxd.sandbox=1".into()]);
        }
        args.extend([
            "--label".into(),
            format!("sandboxd.created_ms={now}"),
            "--label".into(),
            format!("sandboxd.create_deadline_ms={deadline_ms}"),
            "--entrypoint".into(),
            "/bin/sh".into(),
            images::BUSYBOX.into(),
            "-c".into(),
            "exec sleep 1000".into(),
        ]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert!(docker(&args).status.success());
    };
    let hex = || uuid::Uuid::new_v4().simple().to_string();
    let abandoned = format!("sandboxd-creating-{}", hex());
    let in_progress = format!("sandboxd-creating-{}", hex());
    let stranger = format!("sandboxd-creating-{}", hex());
    start(&abandoned, true, now - 120_000);
    start(&in_progress, true, now + 600_000);
    start(&stranger, false, now - 120_000);
    let removed = sweep_until_gone(&p, &leases, &abandoned).await;
    assert!(removed.iter().all(|(name, _)| *name != in_progress && *name != stranger), "{removed:?}");
    assert!(exists(&in_progress), "a create within its deadline is left alone");
    assert!(exists(&stranger), "a container without the ownership label is never touched");
}

#[tokio::test]
async fn published_port_serves_http_from_the_host() {
    let label = TestLabel::new();
    let p = provider(&label);
    let h = p.create(&SandboxSpec { ports: vec![8080], ..spec(images::BUSYBOX) }).await.unwrap();
    let r = p
        .exec(
            &h,
            "mkdir -p /www && echo hello-from-sandbox > /www/index.html && httpd -p 8080 -h /www",
            &params(),
        )
        .await
        .unwrap();
    assert_eq!(r.return_code, 0, "{r:?}");
    let ep = p.endpoint(&h, 8080).await.unwrap();
    assert!(ep.endpoint.starts_with("http://127.0.0.1:"), "{}", ep.endpoint);
    let addr = ep.endpoint.trim_start_matches("http://").to_string();
    // A private daemon publishes inside its own network namespace: the client goes there.
    let body = testkit::in_daemon_netns(move || {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(mut s) = std::net::TcpStream::connect(&addr) {
                s.write_all(b"GET /index.html HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
                let mut buf = String::new();
                let _ = s.read_to_string(&mut buf);
                if buf.contains("hello-from-sandbox") {
                    return buf;
                }
            }
            assert!(Instant::now() < deadline, "no HTTP answer from {addr}");
            std::thread::sleep(Duration::from_millis(100));
        }
    })
    .await;
    assert!(body.starts_with("HTTP/1."), "{body}");
    let err = p.endpoint(&h, 9999).await.unwrap_err();
    assert!(err.to_string().contains("8080"), "declared ports are listed: {err}");
    p.close(&h.id()).await.unwrap();
}

fn write_random_file(path: &std::path::Path, size: usize) -> Vec<u8> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut hasher = Sha256::new();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut block = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        for b in block.iter_mut() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *b = state as u8;
        }
        let n = left.min(block.len());
        f.write_all(&block[..n]).unwrap();
        hasher.update(&block[..n]);
        left -= n;
    }
    f.flush().unwrap();
    hasher.finalize().to_vec()
}

fn sha256_file(path: &std::path::Path) -> Vec<u8> {
    let mut f = std::fs::File::open(path).unwrap();
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    hasher.finalize().to_vec()
}

#[tokio::test]
async fn upload_download_round_trip_200_mib() {
    let label = TestLabel::new();
    let p = provider(&label);
    let h = p.create(&spec(images::NONROOT)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("big.bin");
    let digest = write_random_file(&src, 200 << 20);
    let target = "/home/sandbox/new/deeper/big.bin";
    assert_eq!(testkit::upload_file(&p, &h, &src, target).await.unwrap(), 200 << 20);
    // Parents are created as root; the file lands owned by root.
    let r = p
        .exec(&h, "stat -c '%u %a' /home/sandbox/new/deeper /home/sandbox/new/deeper/big.bin", &params())
        .await;
    assert_eq!(r.unwrap().stdout_str(), "0 755\n0 644\n");
    // The existing parent keeps its owner and mode.
    let r = p.exec(&h, "stat -c '%u %a' /home/sandbox /tmp", &params()).await.unwrap();
    assert_eq!(r.stdout_str(), "1000 755\n0 1777\n");
    let back = dir.path().join("sub/back.bin");
    assert_eq!(testkit::download_file(&p, &h, target, &back).await.unwrap(), 200 << 20);
    assert_eq!(sha256_file(&back), digest);
    p.close(&h.id()).await.unwrap();
}

fn small_src(dir: &tempfile::TempDir) -> std::path::PathBuf {
    let path = dir.path().join("small-src");
    std::fs::write(&path, b"x").unwrap();
    path
}

#[tokio::test]
async fn file_transfer_errors_are_clear() {
    let label = TestLabel::new();
    let p = provider(&label);
    let h = p.create(&spec(images::BUSYBOX)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();

    let err = testkit::upload_file(&p, &h, &dir.path().join("missing"), "/tmp/x").await.unwrap_err();
    assert!(matches!(err, ProviderError::FileNotFound(_)), "{err:?}");
    let err = testkit::upload_file(&p, &h, dir.path(), "/tmp/x").await.unwrap_err();
    assert!(matches!(err, ProviderError::FileNotFound(_)), "{err:?}");
    let err = testkit::download_file(&p, &h, "/nope/file", &dir.path().join("o")).await.unwrap_err();
    assert!(matches!(err, ProviderError::FileNotFound(_)), "{err:?}");
    let err = testkit::download_file(&p, &h, "/etc", &dir.path().join("o")).await.unwrap_err();
    assert!(err.to_string().contains("directory"), "{err}");

    let err = testkit::upload_file(&p, &h, &small_src(&dir), "/tmp").await.unwrap_err();
    assert!(matches!(err, ProviderError::InvalidArgument { .. }), "{err:?}");
    assert!(err.to_string().contains("directory"), "{err}");

    // A link is followed to its file.
    let r =
        p.exec(&h, "printf linked > /tmp/target && ln -s /tmp/target /tmp/link", &params()).await.unwrap();
    assert_eq!(r.return_code, 0);
    let got = dir.path().join("via-link");
    assert_eq!(testkit::download_file(&p, &h, "/tmp/link", &got).await.unwrap(), 6);
    assert_eq!(std::fs::read(&got).unwrap(), b"linked");

    // Small files, an empty file and a long path make the round trip too.
    let small = dir.path().join("small.txt");
    std::fs::write(&small, b"").unwrap();
    let long_target = format!("/tmp/{}/f.txt", "d".repeat(120));
    testkit::upload_file(&p, &h, &small, &long_target).await.unwrap();
    assert_eq!(testkit::download_file(&p, &h, &long_target, &dir.path().join("e")).await.unwrap(), 0);

    p.close(&h.id()).await.unwrap();
    let err = testkit::upload_file(&p, &h, &small, "/tmp/x").await.unwrap_err();
    assert!(matches!(err, ProviderError::SandboxNotFound(_)), "{err:?}");
    let err = testkit::download_file(&p, &h, "/etc/passwd", &dir.path().join("o")).await.unwrap_err();
    assert!(matches!(err, ProviderError::SandboxNotFound(_)), "{err:?}");
}

#[tokio::test]
async fn read_only_root_filesystem() {
    let label = TestLabel::new();
    let p = provider_with(&label, |c| c.create.read_only = true);
    let h = p.create(&spec(images::READONLY)).await.unwrap();
    let r = p.exec(&h, "touch /x", &params()).await.unwrap();
    assert_ne!(r.return_code, 0);
    assert!(r.stderr_str().contains("Read-only"), "{r:?}");
    let r =
        p.exec(&h, "test -d /tmp || echo no-tmp; echo ok > /dev/shm/f && cat /dev/shm/f", &params()).await;
    // gVisor mounts a tmpfs at /tmp of its own (runsc's `mountTmp`), read-only root or not.
    let expected = if testkit::on_runsc() { "ok\n" } else { "no-tmp\nok\n" };
    assert_eq!(r.unwrap().stdout_str(), expected);
    p.close(&h.id()).await.unwrap();
}

#[tokio::test]
async fn non_root_image() {
    let label = TestLabel::new();
    let p = provider(&label);
    let h = p.create(&spec(images::NONROOT)).await.unwrap();
    let r = p.exec(&h, "id -u", &params()).await.unwrap();
    assert_eq!(r.stdout_str().trim(), "1000");
    let r = p.exec(&h, "id -u", &ExecParams { user: Some("0".into()), ..params() }).await.unwrap();
    assert_eq!(r.stdout_str().trim(), "0");
    p.close(&h.id()).await.unwrap();
}

#[tokio::test]
async fn serialize_connect_and_ownership() {
    let label = TestLabel::new();
    let p = provider(&label);
    let h = p
        .create(&SandboxSpec { ports: vec![80], workdir: Some("/tmp".into()), ..spec(images::BASH) })
        .await
        .unwrap();
    let descriptor = p.serialize_handle(&h);
    let json = serde_json::to_value(&descriptor).unwrap();
    assert_eq!(json["sandbox_id"], h.sandbox_id.as_str());

    // Another provider (another process, a restarted server) reconnects from the descriptor.
    let other = provider(&label);
    let again = other.connect(&serde_json::from_value(json).unwrap()).await.unwrap();
    assert_eq!(again.image, images::BASH);
    assert_eq!(again.shell, "bash");
    assert_eq!(again.ports, vec![80]);
    // Or from the id alone: ports come back from the container's label.
    let lazily = provider(&label).handle(&h.sandbox_id).await.unwrap();
    assert_eq!((lazily.ports.clone(), lazily.workdir.clone()), (vec![80], Some("/tmp".into())));

    // A container without the ownership label is never reached, even with a valid-looking name.
    let stranger = format!("sandboxd-{}", uuid::Uuid::new_v4().simple());
    let out = docker(&[
        "run",
        "-d",
        "--name",
        &stranger,
        "--label",
        "sandboxd.test=1",
        "--label",
        &format!("sandboxd.test.case={}", label.value),
        "--entrypoint",
        "/bin/sh",
        images::BUSYBOX,
        "-c",
        "sleep 600",
    ]);
    assert!(out.status.success(), "{out:?}");
    let err = other.connect(&SandboxDescriptor { sandbox_id: stranger.clone(), ..Default::default() }).await;
    assert!(matches!(err, Err(ProviderError::SandboxNotFound(_))), "{err:?}");
    assert!(matches!(other.handle(&stranger).await, Err(ProviderError::SandboxNotFound(_))));

    p.close(&h.id()).await.unwrap();
    // Another server sees the closed sandbox stopped until the closing server's background
    // removal took its container, then gone.
    let err = other.connect(&descriptor).await.unwrap_err();
    assert!(matches!(err, ProviderError::SandboxNotFound(_) | ProviderError::Stopped(_)), "{err:?}");
}

#[tokio::test]
async fn concurrent_execs_share_the_semaphore() {
    let label = TestLabel::new();
    let p = std::sync::Arc::new(provider_with(&label, |c| c.exec.concurrency = 2));
    let h = p.create(&spec(images::BUSYBOX)).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (p, h) = (p.clone(), h.clone());
        tasks.push(tokio::spawn(
            async move { p.exec(&h, &format!("echo {i}"), &ExecParams::default()).await },
        ));
    }
    for (i, t) in tasks.into_iter().enumerate() {
        assert_eq!(t.await.unwrap().unwrap().stdout_str(), format!("{i}\n"));
    }
    p.close(&h.id()).await.unwrap();
}

#[tokio::test]
async fn flooding_output_is_bounded_and_said_so() {
    let label = TestLabel::new();
    let p = provider_with(&label, |c| c.exec.max_output_bytes = 1 << 20);
    let h = p.create(&spec(images::BUSYBOX)).await.unwrap();
    let r = p.exec(&h, "head -c 3145728 /dev/zero; echo done >&2", &params()).await.unwrap();
    assert_eq!(r.return_code, 0, "the command ran to its end");
    assert_eq!(r.stdout.len(), 1 << 20);
    let stderr = r.stderr_str();
    assert!(stderr.starts_with("done\n") && stderr.contains("2097152 bytes"), "{stderr}");
    p.close(&h.id()).await.unwrap();
}

#[tokio::test]
async fn long_empty_and_misdirected_commands() {
    let label = TestLabel::new();
    let p = provider(&label);
    let h = p.create(&spec(images::BUSYBOX)).await.unwrap();
    // 300 KiB in one command: more than one argv string may hold. The agent runs it; through
    // `docker exec` (a host command line) it is a clean sandbox failure.
    let long = format!("X={}; printf ${{#X}}", "y".repeat(300 * 1024));
    let r = p.exec(&h, &long, &params()).await.unwrap();
    let want = match testkit::engine() {
        sandboxd::config::ExecEngineKind::Agent => ("307200", 0, None),
        sandboxd::config::ExecEngineKind::Docker => ("", 125, Some(ExecErrorType::Sandbox)),
    };
    assert_eq!((r.stdout_str().as_str(), r.return_code, r.error_type), want, "rc {}", r.return_code);
    for empty in ["", "  \n"] {
        let err = p.exec(&h, empty, &params()).await.unwrap_err();
        assert!(matches!(&err, ProviderError::InvalidArgument { field, .. } if field == "command"), "{err}");
    }
    let r = p.exec(&h, "true", &ExecParams { cwd: Some("/no/such/dir".into()), ..params() }).await.unwrap();
    assert_eq!((r.return_code, r.error_type), (125, Some(ExecErrorType::Sandbox)), "{r:?}");
    assert!(r.stderr_str().contains("/no/such/dir"), "the message names the cwd: {r:?}");
    // What a command prints never makes it a sandbox failure.
    let r = p
        .exec(&h, "echo 'Error response from daemon: no such container' >&2; exit 3", &params())
        .await
        .unwrap();
    assert_eq!((r.return_code, r.error_type), (3, None), "{r:?}");
    p.close(&h.id()).await.unwrap();
}
