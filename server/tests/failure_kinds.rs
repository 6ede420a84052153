//! Failure kinds caused for real on one host, end to end through the in-process service and
//! the Rust client: a memory hog past its sandbox's cap (OOM_KILLED on the result; the sandbox
//! lives on), a container killed from outside (SANDBOX_GONE, on the call and on Watch), a
//! paused sandbox (SANDBOX_PAUSED), a command past its timeout (TIMEOUT), a missing working
//! directory (EXEC_REFUSED), a create past its readiness deadline (CREATE_TIMEOUT), a create
//! still starting when its own deadline passes (STARTUP_TIMEOUT), a setup command that hangs
//! (SETUP_TIMEOUT), a killed
//! agent (AGENT_LOST), a closed sandbox (SANDBOX_GONE); a non-zero exit is a result with no
//! kind. `Usage` and `Close` report the sandbox's totals. (QUOTA is checked in `access.rs`,
//! DAEMON_UNAVAILABLE in `daemon_faults.rs`, Watch's OOM_KILLED in `docker/watch_events.rs`.)

use std::time::Duration;

use sandboxd_client::{
    failure_kind_of, proto, spec, ClientError, EventKind, FailureKind, Sandbox, WatchOptions,
};
use testkit::images::BUSYBOX;
use testkit::service::TestService;
use testkit::{docker, TestLabel};
use tonic::Code;

/// The kind an error names (the client's reading of the status's ErrorInfo).
fn kind(err: &ClientError) -> Option<FailureKind> {
    err.failure_kind()
}

fn with_memory(mib: u64) -> proto::SandboxSpec {
    let mut s = spec(BUSYBOX);
    s.resources = Some(proto::SandboxResources { memory_mib: Some(mib), ..Default::default() });
    s
}

/// The next event of `kind` for `id` within 30 s.
async fn next_event(
    stream: &mut sandboxd_client::WatchStream,
    id: &str,
    kind: EventKind,
) -> sandboxd_client::SandboxEvent {
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let event = stream.next().await.expect("watch").expect("an event");
            if event.sandbox_id == id && event.kind == kind {
                return event;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no {kind:?} event for {id}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_and_errors_name_what_failed() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let client = server.client().await;

    // A non-zero exit is the command's result: no kind.
    let sandbox = Sandbox::start(&client, spec(BUSYBOX)).await.expect("create");
    let r = sandbox.exec("exit 3").await.expect("exec");
    assert_eq!((r.return_code, r.error_type, r.failure_kind), (3, None, None));

    // TIMEOUT: stopped at its own timeout.
    let options = sandboxd_client::ExecOptions { timeout_s: Some(0.5), ..Default::default() };
    let r = sandbox.exec_with("sleep 10", options).await.expect("exec");
    assert_eq!(r.failure_kind, Some(FailureKind::Timeout), "{r:?}");
    assert!(FailureKind::Timeout.is_task_fault());

    // EXEC_REFUSED: the command could not start as asked (the caller's request, no retry).
    let options = sandboxd_client::ExecOptions { cwd: Some("/no/such/dir".into()), ..Default::default() };
    let r = sandbox.exec_with("true", options).await.expect("exec");
    assert_eq!((r.return_code, r.failure_kind), (125, Some(FailureKind::ExecRefused)), "{r:?}");
    assert!(!FailureKind::ExecRefused.is_retry_safe());

    // SANDBOX_PAUSED: refused while frozen, with the kind in the status.
    sandbox.pause().await.expect("pause");
    let err = sandbox.exec("true").await.expect_err("paused");
    assert_eq!(
        (err.code(), kind(&err)),
        (Code::FailedPrecondition, Some(FailureKind::SandboxPaused)),
        "{err}"
    );
    sandbox.resume().await.expect("resume");
    assert_eq!(sandbox.exec("true").await.expect("exec after resume").failure_kind, None);

    // Usage: totals of a live sandbox, then the same at Close.
    sandbox.exec("dd if=/dev/zero of=/tmp/f bs=1k count=512 2>/dev/null; sync").await.expect("write");
    let usage = sandbox.usage().await.expect("usage");
    assert!(usage.wall_time_s > 0.0 && usage.cpu_time_s > 0.0, "{usage:?}");
    assert!(usage.peak_memory_bytes > 0, "{usage:?}");
    // Five execs were started (the one refused while paused never was).
    assert_eq!(usage.processes_started, 5, "execs counted: {usage:?}");
    let last = sandbox.stop_with_usage().await.expect("close").expect("usage at close");
    assert!(last.wall_time_s >= usage.wall_time_s && last.processes_started == 5, "{last:?}");

    // SANDBOX_GONE: a closed sandbox is no longer there.
    let mut raw = client.raw();
    let request =
        proto::ExecRequest { sandbox_id: sandbox.id().into(), command: "true".into(), ..Default::default() };
    let status = raw.exec(request).await.expect_err("closed");
    assert_eq!((status.code(), failure_kind_of(&status)), (Code::NotFound, Some(FailureKind::SandboxGone)));
    let status =
        raw.usage(proto::UsageRequest { sandbox_id: sandbox.id().into() }).await.expect_err("closed");
    assert_eq!(status.code(), Code::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oom_kill_and_a_kill_from_outside_are_told_apart() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let client = server.client().await;
    let mut events = client.watch(WatchOptions::default()).await.expect("watch");

    // OOM_KILLED: a hog past the sandbox's 32 MiB cap is killed by the kernel (SIGKILL, 137),
    // which the sandbox's own cgroup counted; the sandbox lives on.
    let sandbox = Sandbox::start(&client, with_memory(32)).await.expect("create");
    // The agent's commands are the OOM killer's first choice (the agent, which every call
    // needs, is not): each command carries a raised `oom_score_adj`.
    let score = sandbox.exec("cat /proc/self/oom_score_adj").await.expect("exec");
    assert_eq!(score.stdout_str(), "500\n", "{score:?}");
    // One 300 MiB buffer filled by the kernel: killed at once. (`head -c 300m /dev/zero | tail`
    // can thrash for seconds instead: tail's buffer fits with a few pages to spare, and head
    // refaults its text through fuse-overlayfs at every step.)
    let r = sandbox.exec("dd if=/dev/zero of=/dev/null bs=300M count=1").await.expect("exec");
    assert_eq!((r.return_code, r.failure_kind), (137, Some(FailureKind::OomKilled)), "{r:?}");
    assert!(FailureKind::OomKilled.is_task_fault());
    // A SIGKILL that was no OOM kill is the command's own exit.
    let r = sandbox.exec("kill -9 $$").await.expect("exec");
    assert_eq!((r.return_code, r.failure_kind), (137, None), "{r:?}");
    assert_eq!(sandbox.exec("echo alive").await.expect("exec").stdout_str(), "alive\n");

    // SANDBOX_GONE: killed from outside (`docker kill`): the next call says so, and Watch
    // reports why it stopped.
    let victim = Sandbox::start(&client, spec(BUSYBOX)).await.expect("create");
    let out = docker(&["kill", victim.id()]);
    assert!(out.status.success(), "docker kill: {}", String::from_utf8_lossy(&out.stderr));
    let stopped = next_event(&mut events, victim.id(), EventKind::Stopped).await;
    assert_eq!(stopped.failure_kind, Some(FailureKind::SandboxGone), "{stopped:?}");
    match victim.exec("true").await {
        Ok(r) => assert_eq!(r.failure_kind, Some(FailureKind::SandboxGone), "{r:?}"),
        Err(e) => assert_eq!(kind(&e), Some(FailureKind::SandboxGone), "{e}"),
    }
    assert!(!FailureKind::SandboxGone.is_task_fault() && FailureKind::SandboxGone.is_retry_safe());

    // A close is no failure: its STOPPED and REMOVED events name none.
    sandbox.stop().await.expect("close");
    let stopped = next_event(&mut events, sandbox.id(), EventKind::Stopped).await;
    assert_eq!(stopped.failure_kind, None, "{stopped:?}");
    let removed = next_event(&mut events, sandbox.id(), EventKind::Removed).await;
    assert_eq!(removed.failure_kind, None, "{removed:?}");
    victim.stop().await.expect("close the killed one");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_past_its_readiness_deadline_is_create_timeout() {
    let label = TestLabel::new();
    // A probe that never passes: past the spec's 1 s readiness deadline the create fails.
    let probe = serde_json::json!({"docker": {"probe": {"command": "exit 1", "timeout_s": 5}}});
    let server = TestService::start_json(&label, probe);
    let mut raw = server.raw().await;
    let mut s = spec(BUSYBOX);
    s.ready_timeout_s = Some(1.0);
    let status = raw.create(proto::CreateRequest { spec: Some(s) }).await.expect_err("never ready");
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert_eq!(failure_kind_of(&status), Some(FailureKind::CreateTimeout), "{status:?}");
    assert!(label.containers().is_empty(), "nothing left behind");

    // A create still starting when `server.create_timeout_s` passes (a probe holding it 30 s):
    // the create's own deadline, so the host's kind, STARTUP_TIMEOUT, and nothing left behind.
    let label = TestLabel::new();
    let mut config = testkit::config::slow_probe(30);
    testkit::config::merge(&mut config, serde_json::json!({"server": {"create_timeout_s": 2.0}}));
    let server = TestService::start_json(&label, config);
    let mut raw = server.raw().await;
    let status = raw.create(proto::CreateRequest { spec: Some(spec(BUSYBOX)) }).await.expect_err("too slow");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert_eq!(failure_kind_of(&status), Some(FailureKind::StartupTimeout), "{status:?}");
    assert!(label.containers().is_empty(), "nothing left behind");

    // The same under the caller's own deadline (3 s, the server's bound left at its default):
    // the server answers STARTUP_TIMEOUT before the caller's timer fires.
    let server = TestService::start_json(&label, testkit::config::slow_probe(30));
    let mut raw = server.raw().await;
    let mut call = tonic::Request::new(proto::CreateRequest { spec: Some(spec(BUSYBOX)) });
    call.set_timeout(Duration::from_secs(3));
    let status = raw.create(call).await.expect_err("too slow for the call");
    assert_eq!(failure_kind_of(&status), Some(FailureKind::StartupTimeout), "{status:?}");
    // The answer left at the deadline; the create's task removes what it started right after.
    testkit::wait::eventually(Duration::from_secs(60), "the half-started container is removed", || {
        label.containers().is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setup_command_that_hangs_is_setup_timeout_and_one_that_fails_is_create_failed() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let mut raw = server.raw().await;
    let mut hangs = spec(BUSYBOX);
    hangs.setup = Some("echo started > /tmp/setup; sleep 600".into());
    hangs.setup_timeout_s = Some(1.5);
    let started = std::time::Instant::now();
    let status = raw.create(proto::CreateRequest { spec: Some(hangs) }).await.expect_err("setup hangs");
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert_eq!(failure_kind_of(&status), Some(FailureKind::SetupTimeout), "{status:?}");
    assert!(status.message().contains("spec.setup_timeout_s"), "{status:?}");
    assert!(started.elapsed() < Duration::from_secs(60), "ended at the setup's bound");
    assert!(label.containers().is_empty(), "nothing left behind");

    let mut fails = spec(BUSYBOX);
    fails.setup = Some("echo no-such-dependency >&2; exit 3".into());
    let status = raw.create(proto::CreateRequest { spec: Some(fails) }).await.expect_err("setup fails");
    assert_eq!(failure_kind_of(&status), Some(FailureKind::CreateFailed), "{status:?}");
    assert!(
        status.message().contains("exited with 3") && status.message().contains("no-such-dependency"),
        "{status:?}"
    );
    assert!(label.containers().is_empty(), "nothing left behind");

    // A setup that works runs before the create returns.
    let mut works = spec(BUSYBOX);
    works.setup = Some("echo ready > /tmp/setup-done".into());
    let id = raw
        .create(proto::CreateRequest { spec: Some(works) })
        .await
        .expect("create")
        .into_inner()
        .sandbox
        .unwrap()
        .sandbox_id;
    let out = testkit::raw::exec(&mut raw, &id, "cat /tmp/setup-done").await;
    assert_eq!(out.stdout, b"ready\n");
    raw.close(proto::CloseRequest { sandbox_id: id }).await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_agent_is_agent_lost() {
    let label = TestLabel::new();
    // On the agent's exec channel the agent is a process of its own (not the sandbox's init),
    // so it can die while the sandbox runs on.
    let config = serde_json::json!({"docker": {"exec": {"engine": "agent", "transport": "channel"}}});
    let server = TestService::start_json(&label, config);
    let client = server.client().await;
    let sandbox = Sandbox::start(&client, spec(BUSYBOX)).await.expect("create");
    assert_eq!(sandbox.exec("true").await.expect("exec").failure_kind, None);
    let id = sandbox.id().to_string();
    let running = tokio::spawn({
        let sandbox = sandbox.clone();
        async move { sandbox.exec("sleep 20").await }
    });
    tokio::time::sleep(Duration::from_millis(800)).await;
    // Kill every agent process in the sandbox from outside (its init is not one).
    let out = docker(&[
        "exec",
        &id,
        "sh",
        "-c",
        "for d in /proc/[0-9]*; do case \"$(cat $d/cmdline 2>/dev/null | tr '\\0' ' ')\" in \
         /.sandboxd/agent*) [ \"${d#/proc/}\" != 1 ] && kill -9 \"${d#/proc/}\";; esac; done; true",
    ]);
    assert!(out.status.success(), "kill: {}", String::from_utf8_lossy(&out.stderr));
    let r = tokio::time::timeout(Duration::from_secs(30), running).await.expect("exec ends").expect("join");
    let r = r.expect("a result, not an error");
    assert_eq!(r.failure_kind, Some(FailureKind::AgentLost), "{r:?}");
    assert!(!FailureKind::AgentLost.is_task_fault() && FailureKind::AgentLost.is_retry_safe());
    // The next call starts a new agent.
    assert_eq!(sandbox.exec("echo again").await.expect("exec").stdout_str(), "again\n");
    sandbox.stop().await.expect("close");
}
