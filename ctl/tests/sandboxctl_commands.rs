//! End to end (issue 22): `sandboxctl` (the real binary) against the service (in-process) and
//! Docker — why an exec could not run, `status` after `rm` and from a fresh server, `port`,
//! `cp -r` both ways (modes, links, links out of the tree refused), `logs`, `create --cpu
//! --memory`, `pause`/`resume`, `ttl`, `snapshot`, `fork`, and durations without a unit.
//! The interactive ones (`logs -f`, completion) are in `ctl_terminal_extras.rs`.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};

use testkit::ctl::text;
use testkit::images::BUSYBOX;
use testkit::service::TestService;
use testkit::TestLabel;

/// The sandboxctl binary Cargo built for these tests.
const SANDBOXCTL: &str = env!("CARGO_BIN_EXE_sandboxctl");

fn ctl(addr: &str, args: &[&str]) -> Output {
    testkit::ctl::ctl(SANDBOXCTL, addr, args, None)
}

/// `sandboxctl create ARGS…`'s id, asserting it succeeded.
fn create(addr: &str, args: &[&str]) -> String {
    let out = ctl(addr, &[&["create", BUSYBOX], args].concat());
    assert!(out.status.success(), "create: {}", text(&out.stderr));
    text(&out.stdout).trim().to_string()
}

/// `sandboxctl exec ID -- SCRIPT`'s stdout, asserting exit 0.
fn sh(addr: &str, id: &str, script: &str) -> String {
    let out = ctl(addr, &["exec", id, "--", script]);
    assert_eq!(out.status.code(), Some(0), "{script}: {}", text(&out.stderr));
    text(&out.stdout)
}

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().expect("docker");
    assert!(out.status.success(), "docker {args:?}: {}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn exec_says_why_a_command_could_not_run() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let addr = server.addr();
    let id = create(&addr, &[]);
    for (flag, value, words) in
        [("--cwd", "/nope", "\"/nope\" does not exist"), ("--user", "nosuch", "nosuch")]
    {
        let out = ctl(&addr, &["exec", flag, value, &id, "--", "echo ran"]);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(!stdout.contains("ran"), "{flag}: {stdout}");
        if out.status.code() == Some(126) && flag == "--user" {
            // The docker engine: the runtime's own exit and text, as Gym's provider gives them.
            assert!(format!("{stdout}{stderr}").contains(words), "{flag}: {stdout} {stderr}");
            continue;
        }
        assert_eq!(out.status.code(), Some(125), "{flag}: {stderr}");
        let last = stderr.lines().last().unwrap_or_default();
        assert!(
            last.starts_with("sandboxctl: ")
                && last.contains(words)
                && last.ends_with("(sandbox); exit code 125"),
            "{flag} {value}: {stderr}"
        );
    }
    assert!(ctl(&addr, &["rm", &id]).status.success());
    assert!(label.containers().is_empty());
}

#[test]
fn status_after_rm_is_stopped_here_and_after_a_restart() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let addr = server.addr();
    let id = create(&addr, &[]);
    assert_eq!(text(&ctl(&addr, &["status", &id]).stdout).trim(), "running");
    assert!(ctl(&addr, &["rm", &id]).status.success());
    let out = ctl(&addr, &["status", &id]);
    assert_eq!((out.status.code(), text(&out.stdout).trim()), (Some(0), "stopped"), "{}", text(&out.stderr));
    // A server process that never saw the sandbox answers the same.
    drop(server);
    let restarted = TestService::start(&label, None);
    let out = ctl(&restarted.addr(), &["status", &id]);
    assert_eq!((out.status.code(), text(&out.stdout).trim()), (Some(0), "stopped"), "{}", text(&out.stderr));
    assert!(label.containers().is_empty());
}

#[test]
fn port_prints_the_published_address() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let addr = server.addr();
    let id = create(&addr, &["--port", "8000", "--port", "8001"]);
    let published = docker(&["port", &id, "8000/tcp"]);
    let host_port = published.lines().next().unwrap().rsplit(':').next().unwrap().to_string();
    let out = ctl(&addr, &["port", &id, "8000"]);
    assert_eq!(text(&out.stdout).trim(), format!("127.0.0.1:{host_port}"), "{}", text(&out.stderr));
    let out = ctl(&addr, &["port", &id]);
    let lines: Vec<String> = text(&out.stdout).lines().map(String::from).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0], format!("8000/tcp -> 127.0.0.1:{host_port}"));
    assert!(lines[1].starts_with("8001/tcp -> 127.0.0.1:"), "{lines:?}");
    let out = ctl(&addr, &["port", &id, "9"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with("sandboxctl: INVALID_ARGUMENT: ") && text(&out.stderr).contains("8000")
    );
    assert!(ctl(&addr, &["rm", &id]).status.success());
    assert!(label.containers().is_empty());
}

#[test]
fn cp_r_copies_trees_both_ways_and_refuses_links_out_of_them() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let addr = server.addr();
    let id = create(&addr, &[]);
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    std::fs::create_dir_all(tree.join("bin")).unwrap();
    std::fs::create_dir_all(tree.join("empty")).unwrap();
    std::fs::write(tree.join("bin/run"), "#!/bin/sh\necho run\n").unwrap();
    std::fs::set_permissions(tree.join("bin/run"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(tree.join("secret"), "s").unwrap();
    std::fs::set_permissions(tree.join("secret"), std::fs::Permissions::from_mode(0o640)).unwrap();
    std::os::unix::fs::symlink("bin/run", tree.join("link")).unwrap();

    // Up: `ID:/tmp/up` becomes the tree; modes and the link are kept, files are root's.
    let out = ctl(&addr, &["cp", "-r", tree.to_str().unwrap(), &format!("{id}:/tmp/up")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listing =
        sh(&addr, &id, "cd /tmp/up && stat -c '%a %u %n' bin/run secret empty && readlink link && ./link");
    assert_eq!(listing, "755 0 bin/run\n640 0 secret\n755 0 empty\nbin/run\nrun\n");
    assert_eq!(
        sh(&addr, &id, "ls -a /tmp | grep -c sandboxctl || true").trim(),
        "0",
        "the archive is removed"
    );
    // A trailing `/` means into it, under the tree's name.
    assert!(ctl(&addr, &["cp", "-r", tree.to_str().unwrap(), &format!("{id}:/tmp/into/")]).status.success());
    assert_eq!(sh(&addr, &id, "cat /tmp/into/tree/secret"), "s");

    // Down: into a new local directory, modes and the link kept.
    let back = dir.path().join("back");
    let out = ctl(&addr, &["cp", "-r", &format!("{id}:/tmp/up"), back.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mode = |p: &str| std::fs::metadata(back.join(p)).unwrap().permissions().mode() & 0o777;
    assert_eq!((mode("bin/run"), mode("secret")), (0o755, 0o640));
    assert_eq!(std::fs::read_link(back.join("link")).unwrap().to_str(), Some("bin/run"));
    assert!(back.join("empty").is_dir());
    // `-r` on a file copies the file.
    let file = dir.path().join("one");
    assert!(ctl(&addr, &["cp", "-r", &format!("{id}:/tmp/up/secret"), file.to_str().unwrap()])
        .status
        .success());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "s");
    // Without -r a directory is refused with the hint.
    let out = ctl(&addr, &["cp", tree.to_str().unwrap(), &format!("{id}:/tmp/no")]);
    assert!(out.status.code() == Some(1) && text(&out.stderr).contains("cp -r"), "{}", text(&out.stderr));

    // A local link out of the tree: refused, nothing written in the sandbox.
    std::os::unix::fs::symlink("../../etc/passwd", tree.join("bin/away")).unwrap();
    let out = ctl(&addr, &["cp", "-r", tree.to_str().unwrap(), &format!("{id}:/tmp/bad")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("points out of the tree"), "{}", text(&out.stderr));
    assert_eq!(sh(&addr, &id, "test -e /tmp/bad && echo there || echo absent"), "absent\n");
    // A sandbox's link out of its tree: refused, nothing kept locally.
    sh(&addr, &id, "mkdir -p /tmp/evil && echo x > /tmp/evil/f && ln -s /etc /tmp/evil/etc");
    let evil = dir.path().join("evil");
    let out = ctl(&addr, &["cp", "-r", &format!("{id}:/tmp/evil"), evil.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("a link out of the tree"), "{}", text(&out.stderr));
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(!evil.exists() && !left.iter().any(|n| n.to_string_lossy().contains("evil")), "{left:?}");

    assert!(ctl(&addr, &["rm", &id]).status.success());
    assert!(label.containers().is_empty());
}

#[test]
fn logs_resources_pause_ttl_snapshot_fork() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let addr = server.addr();
    let run = format!("r{}", uuid::Uuid::new_v4().simple());
    let id = create(&addr, &["--cpu", "0.5", "--memory", "64m", "--label", &format!("run={run}")]);
    assert_eq!(
        docker(&["inspect", "-f", "{{.HostConfig.NanoCpus}} {{.HostConfig.Memory}}", &id]).trim(),
        "500000000 67108864"
    );

    // What the main process wrote (here written into its stdout and stderr by an exec).
    sh(&addr, &id, "echo to-out > /proc/1/fd/1; echo to-err > /proc/1/fd/2");
    let out = ctl(&addr, &["logs", &id]);
    assert_eq!((text(&out.stdout), text(&out.stderr)), ("to-out\n".to_string(), "to-err\n".to_string()));

    assert_eq!(text(&ctl(&addr, &["pause", &id]).stdout).trim(), id);
    assert_eq!(text(&ctl(&addr, &["status", &id]).stdout).trim(), "paused");
    let out = ctl(&addr, &["exec", &id, "--", "true"]);
    assert!(text(&out.stderr).starts_with("sandboxctl: FAILED_PRECONDITION: "), "{}", text(&out.stderr));
    assert!(ctl(&addr, &["resume", &id]).status.success());
    assert_eq!(text(&ctl(&addr, &["status", &id]).stdout).trim(), "running");

    let before =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let out = ctl(&addr, &["ttl", &id, "45m"]);
    assert!(text(&out.stdout).starts_with("expires at "), "{}", text(&out.stderr));
    let listed: serde_json::Value =
        serde_json::from_slice(&ctl(&addr, &["ls", "--label", &format!("run={run}"), "-o", "json"]).stdout)
            .unwrap();
    let lease = listed[0]["expires_at_unix_ms"].as_i64().unwrap() - before;
    assert!((2_700_000 - 1_000..=2_700_000 + 60_000).contains(&lease), "lease of {lease} ms for ttl 45m");
    // A duration without a unit is refused, naming the units; nothing changes.
    for args in [&["ttl", id.as_str(), "30"][..], &["create", BUSYBOX, "--ttl", "30"][..]] {
        let out = ctl(&addr, args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("no unit") && stderr.contains("m (minutes)"), "{stderr}");
    }
    let out = ctl(&addr, &["create", BUSYBOX, "--memory", "512"]);
    assert!(out.status.code() == Some(2) && text(&out.stderr).contains("no unit"), "{}", text(&out.stderr));

    let out = ctl(&addr, &["snapshot", &id, "--label", &format!("run={run}")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let snapshot = text(&out.stdout).trim().to_string();
    let out = ctl(&addr, &["fork", &id, "-n", "2", "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let forked: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let children: Vec<String> =
        forked["sandbox_ids"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
    assert_eq!(children.len(), 2);
    for child in &children {
        assert_eq!(sh(&addr, child, "echo child"), "child\n");
    }
    let out = ctl(&addr, &["rm", "--label", &format!("run={run}")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).lines().count(), 3, "the source and its two children");

    // The snapshots this test made go with it.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = server.client().await;
        for snap in [snapshot.as_str(), forked["snapshot_id"].as_str().unwrap()] {
            client.delete_snapshot(snap).await.expect("delete snapshot");
        }
    });
    assert!(label.containers().is_empty());
}

/// `create --runtime`: the sandbox runs on the runtime asked for (`ls -o json` shows it), and a
/// runtime the server does not offer is refused naming the offered ones, nothing created.
#[test]
fn create_takes_a_runtime_and_ls_shows_it() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let addr = server.addr();
    let runtime = testkit::runtime_name();
    let run = &label.value[..12];
    let id = create(&addr, &["--runtime", runtime, "--label", &format!("run={run}")]);
    let listed: serde_json::Value =
        serde_json::from_slice(&ctl(&addr, &["ls", "--label", &format!("run={run}"), "-o", "json"]).stdout)
            .unwrap();
    assert_eq!(listed[0]["sandbox_id"], id.as_str());
    assert_eq!(listed[0]["runtime"], runtime);
    let out = ctl(&addr, &["create", BUSYBOX, "--runtime", "kata"]);
    let stderr = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("spec.runtime") && stderr.contains("offered: runc"), "{stderr}");
    assert_eq!(label.containers().len(), 1, "the refused create made nothing");
    let out = ctl(&addr, &["rm", &id]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}
