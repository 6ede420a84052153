//! Live snapshots, live forks and hibernation (issue 28), against whatever daemon DOCKER_HOST
//! names. On gVisor (`SANDBOXD_TEST_RUNTIME=runsc`, the daemon of `scripts/runsc-daemon.sh`,
//! whose `runsc-checkpoint` runtime is gVisor with `--network=none`): a process keeping state
//! only in memory goes on in every fork, each fork with its own memory and files; a terminal
//! session re-attaches in a fork with its output; hibernate stops the container and resume
//! brings the process back; a live pool hands out restored sandboxes; E2B's pause hibernates
//! and E2B's snapshot is a live one. On runc: every live call is FAILED_PRECONDITION naming
//! runsc, and nothing is made; E2B's pause freezes and its snapshot is the filesystem.

mod e2b_http;

use std::time::Duration;

use sandboxd_client::proto;
use sandboxd_client::proto::pty_request::Request as In;
use serde_json::json;
use testkit::pty::{session, Stream};
use testkit::raw::{busybox, create_id, exec, RawClient};
use testkit::service::TestService;
use testkit::TestLabel;
use tonic::Code;

/// The server's runtimes: on gVisor, `runsc` is the daemon's checkpointing registration.
fn runtimes() -> serde_json::Value {
    if testkit::on_runsc() {
        json!([{"name": "runc"}, {"name": "runsc", "daemon_name": "runsc-checkpoint", "checkpoint": true, "transport": "channel"}])
    } else {
        json!([{"name": "runc"}])
    }
}

fn service(label: &TestLabel) -> TestService {
    TestService::start_json(label, json!({"docker": {"runtimes": runtimes()}}))
}

fn spec() -> proto::SandboxSpec {
    proto::SandboxSpec { runtime: testkit::runtime_name().into(), ..busybox() }
}

/// A background loop whose state lives in its memory: a random tag drawn once and a counter,
/// both written to /tmp/c each tick (whole: written aside, then renamed); SIGUSR1 adds a million to the counter (in that process
/// only).
const LOOP: &str = "sh -c 'trap \"i=\\$((i+1000000))\" USR1; n=$(head -c4 /dev/urandom | od -An -tu4 | tr -d \" \"); \
                    i=0; echo $$ > /tmp/pid; while :; do i=$((i+1)); echo \"$n $i\" > /tmp/c.new; mv /tmp/c.new /tmp/c; sleep 0.1; done' \
                    </dev/null >/dev/null 2>&1 &";

/// (tag, counter) the loop last wrote, or what /tmp/c and the exec said.
async fn try_read_loop(raw: &mut RawClient, id: &str) -> Result<(String, u64), String> {
    let out = exec(raw, id, "cat /tmp/c").await;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut parts = text.split_whitespace();
    let tag = parts.next().unwrap_or_default().to_string();
    match parts.next().and_then(|c| c.parse().ok()) {
        Some(count) if !tag.is_empty() => Ok((tag, count)),
        _ => Err(format!("/tmp/c reads {text:?} (stderr {:?})", String::from_utf8_lossy(&out.stderr))),
    }
}

async fn read_loop(raw: &mut RawClient, id: &str) -> (String, u64) {
    try_read_loop(raw, id).await.unwrap_or_else(|e| panic!("sandbox {id}: {e}"))
}

/// Wait until the loop's counter passes `above` (it runs), returning (tag, counter).
async fn goes_on(raw: &mut RawClient, id: &str, above: u64) -> (String, u64) {
    let mut last = String::new();
    for _ in 0..150 {
        match try_read_loop(raw, id).await {
            Ok((tag, count)) if count > above => return (tag, count),
            Ok(seen) => last = format!("{seen:?}"),
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("sandbox {id}: the loop's counter did not pass {above} (last: {last})");
}

async fn has(raw: &mut RawClient, id: &str, path: &str) -> bool {
    exec(raw, id, &format!("test -e {path}")).await.return_code == 0
}

async fn status(raw: &mut RawClient, id: &str) -> proto::SandboxStatus {
    let s = raw.status(proto::StatusRequest { sandbox_id: id.into() }).await.unwrap().into_inner();
    proto::SandboxStatus::try_from(s.status).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn live_calls_on_runc_are_failed_precondition_naming_runsc_and_make_nothing() {
    let label = TestLabel::new();
    let service = service(&label);
    let mut raw = service.raw().await;
    let id = create_id(&mut raw, proto::SandboxSpec { runtime: "runc".into(), ..busybox() }).await;
    let refused = |e: tonic::Status| {
        assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
        assert!(e.message().contains("runsc") && e.message().contains("\"runc\""), "{}", e.message());
    };
    refused(
        raw.checkpoint(proto::CheckpointRequest { sandbox_id: id.clone(), ..Default::default() })
            .await
            .unwrap_err(),
    );
    refused(raw.hibernate(proto::HibernateRequest { sandbox_id: id.clone() }).await.unwrap_err());
    let live = proto::ForkRequest { sandbox_id: id.clone(), count: 2, live: true, ..Default::default() };
    refused(raw.fork(live).await.unwrap_err());
    let snapshots = raw.list_snapshots(proto::ListSnapshotsRequest::default()).await.unwrap().into_inner();
    assert!(
        snapshots.snapshots.iter().all(|s| s.source_sandbox_id != id),
        "a refused call left a snapshot: {:?}",
        snapshots.snapshots
    );
    assert_eq!(label.containers().len(), 1, "a refused call made a container");
    assert_eq!(status(&mut raw, &id).await, proto::SandboxStatus::Running, "the source was left running");
    // A live fork from a files-only snapshot is refused by name.
    let plain = raw.snapshot(proto::SnapshotRequest { sandbox_id: id.clone(), ..Default::default() }).await;
    let plain = plain.unwrap().into_inner().snapshot.unwrap();
    assert!(!plain.live);
    let from_plain = proto::ForkRequest {
        count: 1,
        live: true,
        snapshot_id: Some(plain.snapshot_id.clone()),
        ..Default::default()
    };
    let e = raw.fork(from_plain).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().contains("snapshot_id") && e.message().contains("not a live snapshot"),
        "{}",
        e.message()
    );
    raw.delete_snapshot(proto::DeleteSnapshotRequest { snapshot_id: plain.snapshot_id }).await.unwrap();
    assert_eq!(label.containers().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_fork_goes_on_from_the_checkpointed_memory_in_each_child_with_its_own_files() {
    if !testkit::on_runsc() {
        return; // the refusals above are what runc shows
    }
    let label = TestLabel::new();
    let service = service(&label);
    let mut raw = service.raw().await;
    let source = create_id(&mut raw, spec()).await;
    exec(&mut raw, &source, LOOP).await;
    let (tag, _) = goes_on(&mut raw, &source, 3).await;
    exec(&mut raw, &source, "echo before > /tmp/before").await;

    // Checkpoint: a live snapshot the snapshot calls list; the source goes on.
    let snap = raw
        .checkpoint(proto::CheckpointRequest { sandbox_id: source.clone(), ..Default::default() })
        .await
        .expect("checkpoint")
        .into_inner()
        .snapshot
        .unwrap();
    assert!(snap.live && snap.runtime == "runsc", "{snap:?}");
    let (_, at_checkpoint) = read_loop(&mut raw, &source).await;
    let listed = raw.list_snapshots(proto::ListSnapshotsRequest::default()).await.unwrap().into_inner();
    assert!(listed.snapshots.iter().any(|s| s.snapshot_id == snap.snapshot_id && s.live));
    // Its size counts the memory image beside the files: more than a files-only snapshot of
    // the same sandbox, and the same whichever call reports it.
    let files = raw
        .snapshot(proto::SnapshotRequest { sandbox_id: source.clone(), ..Default::default() })
        .await
        .expect("files-only snapshot")
        .into_inner()
        .snapshot
        .unwrap();
    assert!(snap.size_bytes > files.size_bytes, "live {snap:?} against files only {files:?}");
    let listed_size =
        listed.snapshots.iter().find(|s| s.snapshot_id == snap.snapshot_id).map(|s| s.size_bytes);
    assert_eq!(listed_size, Some(snap.size_bytes));
    raw.delete_snapshot(proto::DeleteSnapshotRequest { snapshot_id: files.snapshot_id }).await.unwrap();
    let (source_tag, _) = goes_on(&mut raw, &source, at_checkpoint).await;
    assert_eq!(source_tag, tag, "the source's loop is the same process after its checkpoint");

    // Fork ×4 from it: each child's loop is the checkpointed process, going on.
    let forked = raw
        .fork(proto::ForkRequest {
            count: 4,
            live: true,
            snapshot_id: Some(snap.snapshot_id.clone()),
            sandbox_id: source.clone(),
            ..Default::default()
        })
        .await
        .expect("live fork")
        .into_inner();
    assert_eq!(forked.snapshot_id, snap.snapshot_id);
    let children: Vec<String> = forked.sandboxes.iter().map(|s| s.sandbox_id.clone()).collect();
    assert_eq!(children.len(), 4);
    for child in &children {
        assert_ne!(child, &source);
        assert_eq!(status(&mut raw, child).await, proto::SandboxStatus::Running);
        let (child_tag, _) = goes_on(&mut raw, child, at_checkpoint).await;
        assert_eq!(child_tag, tag, "child {child} runs the checkpointed process (same in-memory tag)");
        assert!(
            has(&mut raw, child, "/tmp/before").await,
            "child {child} has the file written before the checkpoint"
        );
    }
    // Each child's memory and files are its own: a signal changes one child's counter, a file
    // written in one child is in no other sandbox.
    exec(&mut raw, &children[0], "kill -USR1 $(cat /tmp/pid); echo later > /tmp/later").await;
    let (_, jumped) = goes_on(&mut raw, &children[0], 1_000_000).await;
    assert!(jumped > 1_000_000);
    for other in children[1..].iter().chain([&source]) {
        let (_, count) = read_loop(&mut raw, other).await;
        assert!(count < 1_000_000, "{other}'s counter moved with child 0's signal: {count}");
        assert!(!has(&mut raw, other, "/tmp/later").await, "{other} sees a file child 0 wrote");
    }

    // Create from the live snapshot id: restored as well.
    let created = create_id(
        &mut raw,
        proto::SandboxSpec { snapshot_id: Some(snap.snapshot_id.clone()), image: String::new(), ..spec() },
    )
    .await;
    let (created_tag, _) = goes_on(&mut raw, &created, at_checkpoint).await;
    assert_eq!(created_tag, tag);

    // A live pool of the snapshot: its ready member is a restored process; a claim hands it out.
    let pool = proto::PoolSpec {
        name: format!("live-{}", &label.value[..8]),
        template: Some(proto::SandboxSpec {
            snapshot_id: Some(snap.snapshot_id.clone()),
            image: String::new(),
            ..spec()
        }),
        target: 1,
        max: 2,
        ..Default::default()
    };
    raw.create_pool(proto::CreatePoolRequest { pool: Some(pool.clone()) }).await.expect("live pool");
    let mut ready = 0;
    for _ in 0..300 {
        let pools = raw.list_pools(proto::ListPoolsRequest::default()).await.unwrap().into_inner().pools;
        ready = pools.iter().find(|p| p.name == pool.name).map_or(0, |p| p.ready);
        if ready > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(ready, 1, "the live pool did not fill");
    let claimed =
        create_id(&mut raw, proto::SandboxSpec { pool: Some(pool.name.clone()), ..Default::default() }).await;
    let (claimed_tag, _) = goes_on(&mut raw, &claimed, at_checkpoint).await;
    assert_eq!(claimed_tag, tag, "a claim from the live pool runs the checkpointed process");
    let pools = raw.list_pools(proto::ListPoolsRequest::default()).await.unwrap().into_inner().pools;
    assert_eq!(pools.iter().find(|p| p.name == pool.name).map(|p| p.claimed), Some(1), "served by the pool");
    raw.delete_pool(proto::DeletePoolRequest { name: pool.name.clone() }).await.unwrap();

    for id in children.iter().chain([&created, &source, &claimed]) {
        raw.close(proto::CloseRequest { sandbox_id: id.clone() }).await.unwrap();
    }
    raw.delete_snapshot(proto::DeleteSnapshotRequest { snapshot_id: snap.snapshot_id }).await.unwrap();
}

/// A terminal session the agent holds survives a live checkpoint: the stream on the source is
/// detached by the checkpoint (cleanly, as `PtyDetach`), and in the source and in each fork the
/// session is attached by its id with the output it retained; each fork's session is its own
/// (input in one is not in the other).
#[tokio::test(flavor = "multi_thread")]
async fn a_terminal_session_reattaches_by_id_in_each_live_fork_with_its_output() {
    if !testkit::on_runsc() {
        return;
    }
    let label = TestLabel::new();
    let service = service(&label);
    let mut raw = service.raw().await;
    let source = create_id(&mut raw, spec()).await;
    // A terminal (PTY mode) running a line echoer; no detach timeout: a checkpoint detaches.
    let open = proto::PtyOpen {
        sandbox_id: source.clone(),
        command: Some("echo session-up; while read l; do echo \"got:$l\"; done".into()),
        ..Default::default()
    };
    let (mut stream, opened) = Stream::open(&mut raw, open).await;
    assert_eq!(opened.mode, "pty");
    let session_id = opened.session_id.clone();
    stream.read_until("session-up").await;
    stream.send(In::Input(b"before\n".to_vec())).await;
    stream.read_until("got:before").await;

    let forked = raw
        .fork(proto::ForkRequest { sandbox_id: source.clone(), count: 2, live: true, ..Default::default() })
        .await
        .expect("live fork")
        .into_inner();
    // The checkpoint detached the source's stream: it ends without an exit or an error.
    let end = stream.drain().await;
    assert!(end.status.is_none() && end.exit.is_none(), "the checkpoint detaches the stream: {end:?}");
    let children: Vec<String> = forked.sandboxes.iter().map(|s| s.sandbox_id.clone()).collect();
    assert_eq!(children.len(), 2);

    // Each fork lists the session, unheld and running, and replays what it had retained.
    let mut attached = Vec::new();
    for child in &children {
        let listed = session(&mut raw, child, &session_id).await;
        assert!(listed.running && !listed.attached, "{child}: {listed:?}");
        let (mut s, opened) =
            Stream::attach(&mut raw, child, &session_id, false, 0).await.expect("attach in the fork");
        assert_eq!((opened.session_id.as_str(), opened.offset), (session_id.as_str(), 0));
        let replay = s.read_until("got:before").await;
        assert!(String::from_utf8_lossy(&replay.output).contains("session-up"), "{replay:?}");
        attached.push(s);
    }
    // Input in one fork's session is that session's alone.
    attached[0].send(In::Input(b"alpha\n".to_vec())).await;
    attached[0].read_until("got:alpha").await;
    attached[1].send(In::Input(b"beta\n".to_vec())).await;
    let seen = attached[1].read_until("got:beta").await;
    assert!(!String::from_utf8_lossy(&seen.output).contains("alpha"), "fork 1 saw fork 0's input: {seen:?}");
    // A fresh attach from the start in each: its whole retained output, its own input only.
    for (child, (mine, other)) in children.iter().zip([("alpha", "beta"), ("beta", "alpha")]) {
        let (mut s, _) =
            Stream::attach(&mut raw, child, &session_id, true, 0).await.expect("takeover in the fork");
        s.send(In::Input(b"end\n".to_vec())).await;
        let all = String::from_utf8_lossy(&s.read_until("got:end").await.output).to_string();
        for want in ["session-up", "got:before", &format!("got:{mine}")] {
            assert!(all.contains(want), "{child}'s session lacks {want:?}: {all:?}");
        }
        assert!(!all.contains(other), "{child}'s session holds the other fork's input: {all:?}");
    }
    // The source's session goes on as well, attached by id.
    let (mut s, _) =
        Stream::attach(&mut raw, &source, &session_id, false, 0).await.expect("attach in the source");
    let all = String::from_utf8_lossy(&s.read_until("got:before").await.output).to_string();
    assert!(!all.contains("alpha") && !all.contains("beta"), "{all:?}");
    drop(s);
    drop(attached);

    for id in children.iter().chain([&source]) {
        raw.close(proto::CloseRequest { sandbox_id: id.clone() }).await.unwrap();
    }
    raw.delete_snapshot(proto::DeleteSnapshotRequest { snapshot_id: forked.snapshot_id }).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn hibernate_stops_the_sandbox_and_resume_brings_its_process_back() {
    if !testkit::on_runsc() {
        return;
    }
    let label = TestLabel::new();
    let service = service(&label);
    let mut raw = service.raw().await;
    let id = create_id(&mut raw, spec()).await;
    exec(&mut raw, &id, LOOP).await;
    let (tag, _) = goes_on(&mut raw, &id, 3).await;
    // Checkpointed twice first (each time restored in place): a restored sandbox is
    // checkpointed again and restored again (runsc's stale "paused" state once made the
    // second restore fail with "id already in use"; it is settled after each checkpoint).
    let mut snapshots = Vec::new();
    for _ in 0..2 {
        let snap = raw
            .checkpoint(proto::CheckpointRequest { sandbox_id: id.clone(), ..Default::default() })
            .await
            .expect("checkpoint of a restored sandbox");
        snapshots.push(snap.into_inner().snapshot.unwrap().snapshot_id);
        let (_, count) = read_loop(&mut raw, &id).await;
        let (again, _) = goes_on(&mut raw, &id, count).await;
        assert_eq!(again, tag, "restored in place after its checkpoint");
    }
    let slept = raw.hibernate(proto::HibernateRequest { sandbox_id: id.clone() }).await.expect("hibernate");
    let slept = slept.into_inner();
    assert!(slept.checkpoint_bytes > 0, "{slept:?}");
    assert_eq!(status(&mut raw, &id).await, proto::SandboxStatus::Hibernated);
    // A call that needs it running does not wake it: FAILED_PRECONDITION naming Resume.
    let asleep = raw
        .exec(proto::ExecRequest { sandbox_id: id.clone(), command: "true".into(), ..Default::default() })
        .await
        .expect_err("an exec on a hibernated sandbox is refused");
    assert_eq!(asleep.code(), Code::FailedPrecondition, "{asleep:?}");
    assert!(asleep.message().contains("hibernated") && asleep.message().contains("Resume"), "{asleep:?}");
    assert_eq!(
        status(&mut raw, &id).await,
        proto::SandboxStatus::Hibernated,
        "the refused call woke nothing"
    );
    let (_, asleep_at) = read_loop_after_wake(&mut raw, &id).await;
    let (woken_tag, _) = goes_on(&mut raw, &id, asleep_at).await;
    assert_eq!(woken_tag, tag, "the woken loop is the process that slept");
    assert_eq!(status(&mut raw, &id).await, proto::SandboxStatus::Running);
    raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
    for snapshot_id in snapshots {
        raw.delete_snapshot(proto::DeleteSnapshotRequest { snapshot_id }).await.unwrap();
    }
}

/// Resume a hibernated sandbox; the loop's state right after.
async fn read_loop_after_wake(raw: &mut RawClient, id: &str) -> (String, u64) {
    raw.resume(proto::ResumeRequest { sandbox_id: id.into() }).await.expect("resume");
    read_loop(raw, id).await
}

/// PSS in bytes of the host processes whose command line names `needle` (a container's id:
/// gVisor's sandbox and gofer processes).
fn host_pss(needle: &str) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = entry.file_name();
        if !pid.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if !String::from_utf8_lossy(&cmdline).contains(needle) {
            continue;
        }
        let rollup = std::fs::read_to_string(entry.path().join("smaps_rollup")).unwrap_or_default();
        let kib: u64 = rollup
            .lines()
            .find(|l| l.starts_with("Pss:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        total += kib * 1024;
    }
    total
}

fn container_id(name: &str) -> String {
    let out = std::process::Command::new("docker").args(["inspect", "-f", "{{.Id}}", name]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The figures in docs/runtimes.md (one run; not part of CI): `DOCKER_HOST=… SANDBOXD_TEST_RUNTIME=runsc
/// cargo test -p sandboxd --test live_fork -- --ignored --nocapture live_figures`.
#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn live_figures() {
    assert!(testkit::on_runsc(), "run on the runsc daemon (SANDBOXD_TEST_RUNTIME=runsc)");
    let label = TestLabel::new();
    let service = service(&label);
    let mut raw = service.raw().await;
    let ms = |t: std::time::Instant| t.elapsed().as_secs_f64() * 1000.0;
    let id = create_id(&mut raw, spec()).await;
    // 256 MiB of random data in the sandbox's memory (a file in gVisor's own tmpfs under /dev:
    // /dev/shm is capped at docker's 64 MiB; random, so no compression hides its cost), and the
    // counting loop.
    let ballast: u64 =
        std::env::var("SANDBOXD_LIVE_BALLAST_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(256);
    let hold = format!(
        "sh -c 'head -c {} /dev/urandom > /dev/sbx-ballast && echo held > /tmp/held' </dev/null >/dev/null 2>&1 &",
        ballast << 20
    );
    exec(&mut raw, &id, &hold).await;
    exec(&mut raw, &id, LOOP).await;
    for _ in 0..600 {
        if has(&mut raw, &id, "/tmp/held").await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(has(&mut raw, &id, "/tmp/held").await, "the 256 MiB were not written in time");
    let (tag, _) = goes_on(&mut raw, &id, 3).await;
    let full = container_id(&id);
    let pss_running = host_pss(&full);

    let t = std::time::Instant::now();
    let snap = raw
        .checkpoint(proto::CheckpointRequest { sandbox_id: id.clone(), ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .snapshot
        .unwrap();
    let checkpoint_ms = ms(t);

    let mut fork_ms = Vec::new();
    let mut children = Vec::new();
    for count in [1u32, 8] {
        let t = std::time::Instant::now();
        let forked = raw
            .fork(proto::ForkRequest {
                sandbox_id: id.clone(),
                count,
                live: true,
                snapshot_id: Some(snap.snapshot_id.clone()),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let ids: Vec<String> = forked.sandboxes.iter().map(|s| s.sandbox_id.clone()).collect();
        let answers = futures_util::future::join_all(ids.iter().map(|c| {
            let mut raw = raw.clone();
            async move { read_loop(&mut raw, c).await }
        }))
        .await;
        fork_ms.push((count, ms(t)));
        assert!(answers.iter().all(|(t, _)| t == &tag));
        children.extend(ids);
    }
    for c in &children {
        raw.close(proto::CloseRequest { sandbox_id: c.clone() }).await.unwrap();
    }

    let t = std::time::Instant::now();
    let slept = raw.hibernate(proto::HibernateRequest { sandbox_id: id.clone() }).await.unwrap().into_inner();
    let hibernate_ms = ms(t);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pss_hibernated = host_pss(&full);
    let t = std::time::Instant::now();
    raw.resume(proto::ResumeRequest { sandbox_id: id.clone() }).await.unwrap();
    let (woken, _) = read_loop(&mut raw, &id).await;
    let resume_ms = ms(t);
    assert_eq!(woken, tag);

    let pool = proto::PoolSpec {
        name: format!("fig-{}", &label.value[..8]),
        template: Some(proto::SandboxSpec {
            snapshot_id: Some(snap.snapshot_id.clone()),
            image: String::new(),
            ..spec()
        }),
        target: 1,
        max: 2,
        ..Default::default()
    };
    raw.create_pool(proto::CreatePoolRequest { pool: Some(pool.clone()) }).await.unwrap();
    for _ in 0..600 {
        let pools = raw.list_pools(proto::ListPoolsRequest::default()).await.unwrap().into_inner().pools;
        if pools.iter().any(|p| p.name == pool.name && p.ready > 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let t = std::time::Instant::now();
    let claimed =
        create_id(&mut raw, proto::SandboxSpec { pool: Some(pool.name.clone()), ..Default::default() }).await;
    let claim_ms = ms(t);
    let (claimed_tag, _) = read_loop(&mut raw, &claimed).await;
    assert_eq!(claimed_tag, tag);

    let mib = |b: u64| b as f64 / 1048576.0;
    println!("(a sandbox holding {} MiB of random data in memory)", mib(ballast << 20));
    println!("| step | result |");
    println!("|---|---|");
    println!(
        "| checkpoint (leave running) | {checkpoint_ms:.0} ms (checkpoint {:.0} MiB) |",
        mib(snap.size_bytes)
    );
    for (count, t) in &fork_ms {
        println!("| live fork x{count} (wall to all answering an exec) | {t:.0} ms |");
    }
    println!(
        "| hibernate | {hibernate_ms:.0} ms (checkpoint {:.0} MiB on disk; cgroup memory before {:.0} MiB) |",
        mib(slept.checkpoint_bytes),
        mib(slept.memory_freed_bytes)
    );
    println!("| resume (wall to an exec answering) | {resume_ms:.0} ms |");
    println!(
        "| host memory (PSS of the sandbox's gVisor processes) | {:.0} MiB running, {:.0} MiB hibernated |",
        mib(pss_running),
        mib(pss_hibernated)
    );
    println!("| live-pool claim | {claim_ms:.0} ms |");
    raw.delete_pool(proto::DeletePoolRequest { name: pool.name.clone() }).await.unwrap();
    raw.close(proto::CloseRequest { sandbox_id: claimed }).await.unwrap();
    raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
    // A refill under way when the pool went may still use the snapshot: the label's clean-up
    // removes both then.
    let _ = raw.delete_snapshot(proto::DeleteSnapshotRequest { snapshot_id: snap.snapshot_id }).await;
}

/// Median of `samples` in milliseconds.
fn median_ms(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(|a, b| a.total_cmp(b));
    samples[samples.len() / 2]
}

/// The docker CLI against DOCKER_HOST, its wall time in milliseconds; it must succeed.
fn docker_ms(args: &[&str]) -> (f64, String) {
    let t = std::time::Instant::now();
    let out = std::process::Command::new("docker").args(args).output().unwrap();
    assert!(out.status.success(), "docker {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    (t.elapsed().as_secs_f64() * 1000.0, String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// docs/gvisor.md's exec and create figures on runsc (the daemon's `runsc` registration, the
/// agent on its socket) beside `docker exec` and `docker run -d --runtime=runsc` on the same
/// daemon, medians of 20 execs and 5 creates (one run; not part of CI):
/// `DOCKER_HOST=… SANDBOXD_TEST_RUNTIME=runsc cargo test -p sandboxd --test live_fork --
/// --ignored --nocapture runsc_exec_and_create_figures`.
#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn runsc_exec_and_create_figures() {
    assert!(testkit::on_runsc(), "run on the runsc daemon (SANDBOXD_TEST_RUNTIME=runsc)");
    let label = TestLabel::new();
    let service = TestService::start_json(
        &label,
        json!({"docker": {"runtimes": [{"name": "runc"}, {"name": "runsc"}]}}),
    );
    let mut raw = service.raw().await;
    let on_runsc = || proto::SandboxSpec { runtime: "runsc".into(), ..busybox() };
    let id = create_id(&mut raw, on_runsc()).await;
    exec(&mut raw, &id, "true").await;
    let mut sandboxd_exec = Vec::new();
    let mut docker_exec = Vec::new();
    for _ in 0..20 {
        let t = std::time::Instant::now();
        let out = exec(&mut raw, &id, "printf x").await;
        sandboxd_exec.push(t.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(out.stdout, b"x");
        docker_exec.push(docker_ms(&["exec", &container_id(&id), "printf", "x"]).0);
    }
    let mut sandboxd_create = Vec::new();
    let mut docker_run = Vec::new();
    let mut made = vec![id];
    for _ in 0..5 {
        let t = std::time::Instant::now();
        made.push(create_id(&mut raw, on_runsc()).await);
        sandboxd_create.push(t.elapsed().as_secs_f64() * 1000.0);
        let mut args = vec!["run".to_string(), "-d".into(), "--runtime=runsc".into()];
        args.extend(label.run_args());
        args.extend([testkit::images::BUSYBOX.to_string(), "sleep".into(), "100000".into()]);
        let (ms, cid) = docker_ms(&args.iter().map(String::as_str).collect::<Vec<_>>());
        docker_run.push(ms);
        docker_ms(&["rm", "-f", &cid]);
    }
    let (exec_s, exec_d) = (median_ms(sandboxd_exec), median_ms(docker_exec));
    let (create_s, create_d) = (median_ms(sandboxd_create), median_ms(docker_run));
    println!("| step (runsc, medians) | sandboxd | docker CLI | ratio |");
    println!("|---|---|---|---|");
    println!(
        "| exec `printf x` (20) | {exec_s:.1} ms | {exec_d:.1} ms (docker exec) | {:.2}x |",
        exec_s / exec_d
    );
    println!(
        "| create, ready (5) | {create_s:.0} ms | {create_d:.0} ms (docker run -d --runtime=runsc) | {:.2}x |",
        create_s / create_d
    );
    for id in made {
        raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
    }
}

/// E2B's pause, snapshot and fork keep a sandbox's memory. On a runtime that checkpoints they
/// are `Hibernate` (the container stopped, its memory on disk), `Checkpoint` and a live `Fork`:
/// the process in the sandbox goes on after a connect wakes it, and in the fork. On runc the
/// pause is `Pause` (frozen) and the snapshot and fork are the filesystem. Either way E2B shows
/// the sandbox paused, and a connect resumes it.
#[tokio::test(flavor = "multi_thread")]
async fn an_e2b_pause_hibernates_and_e2b_snapshots_and_forks_are_live_where_the_runtime_checkpoints() {
    let label = TestLabel::new();
    let server = testkit::server::TestServer::launch(env!("CARGO_BIN_EXE_sandboxd"), &label)
        .config(json!({
            "docker": {"runtimes": runtimes(), "create": {"runtime": testkit::runtime_name()}},
            "server": {"e2b": {"listen": "127.0.0.1:0", "templates": {"base": testkit::images::BUSYBOX}}},
        }))
        .start();
    let e2b = e2b_http::E2b::new(server.e2b_addr.clone().expect("the E2B endpoint's line"));
    let key = || vec![("x-api-key", "any".to_string())];
    let mut raw = server.raw().await;
    let made = e2b.create("any", "base", None).await;
    let id = made.id.clone();
    assert_eq!(exec(&mut raw, &id, LOOP).await.return_code, 0);
    let (tag, before) = goes_on(&mut raw, &id, 0).await;

    let paused = e2b.call("POST", &format!("/sandboxes/{id}/pause"), &key(), "application/json", "").await;
    assert_eq!(paused.status, 204, "{}", paused.text());
    let want =
        if testkit::on_runsc() { proto::SandboxStatus::Hibernated } else { proto::SandboxStatus::Paused };
    assert_eq!(status(&mut raw, &id).await, want);
    let shown = e2b.call("GET", &format!("/sandboxes/{id}"), &key(), "application/json", "").await;
    assert_eq!(shown.json()["state"], "paused", "{}", shown.text());
    let again = e2b.call("POST", &format!("/sandboxes/{id}/pause"), &key(), "application/json", "").await;
    assert_eq!(again.status, 409, "pausing a paused sandbox: {}", again.text());
    let listed = e2b.call("GET", "/v2/sandboxes?state=paused", &key(), "application/json", "").await;
    assert!(listed.text().contains(&id), "listed as paused: {}", listed.text());

    let connected = e2b
        .call("POST", &format!("/sandboxes/{id}/connect"), &key(), "application/json", r#"{"timeout": 60}"#)
        .await;
    assert!(matches!(connected.status, 200 | 201), "{}", connected.text());
    assert_eq!(status(&mut raw, &id).await, proto::SandboxStatus::Running);
    let (tag_after, _) = goes_on(&mut raw, &id, before).await;
    assert_eq!(tag_after, tag, "the same process, its memory kept through the pause");

    let snapshot = e2b
        .call(
            "POST",
            &format!("/sandboxes/{id}/snapshots"),
            &key(),
            "application/json",
            r#"{"name": "kept"}"#,
        )
        .await;
    assert_eq!(snapshot.status, 201, "{}", snapshot.text());
    let snapshots = raw.list_snapshots(proto::ListSnapshotsRequest::default()).await.unwrap().into_inner();
    let taken = snapshots.snapshots.iter().find(|s| s.source_sandbox_id == id).expect("the snapshot");
    assert_eq!(taken.live, testkit::on_runsc(), "{taken:?}");
    raw.delete_snapshot(proto::DeleteSnapshotRequest { snapshot_id: taken.snapshot_id.clone() })
        .await
        .unwrap();

    // E2B's fork: live where the runtime checkpoints (the child's loop goes on from the
    // parent's memory, the same tag), the filesystem elsewhere (the loop's file, no loop).
    let forked = e2b
        .call("POST", &format!("/sandboxes/{id}/fork"), &key(), "application/json", r#"{"count": 1}"#)
        .await;
    assert_eq!(forked.status, 201, "{}", forked.text());
    let child = forked.json()[0]["sandbox"]["sandboxID"].as_str().expect("the child's id").to_string();
    if testkit::on_runsc() {
        let (child_tag, _) = goes_on(&mut raw, &child, 0).await;
        assert_eq!(child_tag, tag, "the child goes on from the parent's memory");
    } else {
        assert!(has(&mut raw, &child, "/tmp/c").await, "the child has the parent's files");
        let (_, first) = read_loop(&mut raw, &child).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(read_loop(&mut raw, &child).await.1, first, "no loop runs in a filesystem fork");
    }
    assert_eq!(e2b.kill("any", &child).await.status, 204);
    assert_eq!(e2b.kill("any", &id).await.status, 204);
}
