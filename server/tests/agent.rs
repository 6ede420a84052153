//! The agent exec engine against the real daemon: what it fixes beyond `docker exec` (whole
//! command trees stopped, accounting, private channel, read-only and network-less sandboxes,
//! agent death, restarts, sandboxes without an agent). Always runs on the agent engine, on the
//! transport under test (`SANDBOXD_TEST_TRANSPORT`).

use std::collections::BTreeMap;
use std::time::Duration;

use sandboxd::agent_client::channel::Transport;
use sandboxd::config::{ExecEngineKind, ExecTransport};
use sandboxd::core::backend::SandboxBackend;
use sandboxd::core::spec::{ExecErrorType, ExecParams, SandboxHandle, SandboxSpec};
use testkit::images;
use testkit::{agent_provider, docker, exec_params as params, provider_with, TestLabel};

/// Run as root through `docker exec` (outside the agent), for inspecting the sandbox.
fn outside(h: &SandboxHandle, script: &str) -> String {
    let out = docker(&["exec", "-u", "0", &h.sandbox_id, "sh", "-c", script]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A sandbox started the way a sandbox without the agent's socket is (its `docker run` flags
/// set the user, so the agent is not its keep-alive): the `docker exec -i … serve` channel.
fn exec_channel_spec(image: &str) -> SandboxSpec {
    let mut spec = SandboxSpec::new(image);
    spec.provider_options.run_args = vec!["--user".into(), "0".into()];
    spec
}

/// The agent's pid inside the sandbox (the `serve` agent of the exec channel, else `init`'s).
fn agent_pid(h: &SandboxHandle) -> String {
    let pid = outside(
        h,
        "for p in /proc/[0-9]*; do case \"$(tr '\\0' ' ' < $p/cmdline 2>/dev/null)\" in '/.sandboxd/agent serve '*) echo ${p#/proc/};; esac; done",
    );
    let pid = match pid.split_whitespace().next() {
        Some(pid) => pid.to_string(),
        None => outside(
            h,
            "for p in /proc/[0-9]*; do case \"$(tr '\\0' ' ' < $p/cmdline 2>/dev/null)\" in '/.sandboxd/agent init '*) echo ${p#/proc/};; esac; done",
        ),
    };
    let pid = pid.split_whitespace().next().unwrap_or_default().to_string();
    assert!(!pid.is_empty(), "the agent runs in the sandbox");
    pid
}

#[tokio::test]
async fn commands_run_through_the_agent_with_accounting() {
    let label = TestLabel::new();
    let p = agent_provider(&label, |_| {});
    let h = p.create(&SandboxSpec::new(images::BASH)).await.unwrap();
    let burn = "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; printf done";
    let r = p.exec(&h, burn, &params()).await.unwrap();
    assert_eq!((r.stdout_str().as_str(), r.return_code, r.error_type), ("done", 0, None));
    let usage = r.usage.expect("the agent engine measures every command");
    assert!(usage.user_cpu + usage.system_cpu > Duration::ZERO, "{usage:?}");
    assert!(usage.wall_time >= usage.user_cpu / 2, "{usage:?}");
    assert!(usage.peak_rss_bytes > 0, "{usage:?}");
    agent_pid(&h);
    p.close(&h.id()).await.unwrap();
    p.settle_removals().await; // Docker's removal runs after close answered
    assert!(label.containers().is_empty());
}

#[tokio::test]
async fn timeout_stops_a_setsid_grandchild() {
    let label = TestLabel::new();
    let p = agent_provider(&label, |_| {});
    let h = p.create(&SandboxSpec::new(images::BUSYBOX)).await.unwrap();
    // The grandchild leaves the process group and the session; its parent exits at once.
    let cmd = "(setsid sh -c 'sleep 301' &); sleep 302";
    let r = p.exec(&h, cmd, &ExecParams { timeout: Some(Duration::from_secs(2)), ..params() }).await.unwrap();
    assert_eq!((r.return_code, r.error_type), (125, Some(ExecErrorType::Timeout)));
    let left = outside(&h, "ps -o args | grep 'sleep 30[12]' || true");
    assert!(left.trim().is_empty(), "processes the command started survived its timeout: {left}");
    p.close(&h.id()).await.unwrap();
}

#[tokio::test]
async fn background_processes_of_a_finished_command_keep_running() {
    let label = TestLabel::new();
    let p = agent_provider(&label, |_| {});
    let h = p.create(&SandboxSpec::new(images::BUSYBOX)).await.unwrap();
    let r = p.exec(&h, "sleep 303 >/dev/null 2>&1 & printf started", &params()).await.unwrap();
    assert_eq!(r.stdout_str(), "started");
    let left = outside(&h, "ps -o args | grep 'sleep 30[3]' || true");
    assert!(!left.trim().is_empty(), "a detached server started by a command outlives the command");
    p.close(&h.id()).await.unwrap();
}

#[tokio::test]
async fn a_nobody_command_cannot_drive_or_replace_the_agent() {
    let label = TestLabel::new();
    let p = agent_provider(&label, |_| {});
    let h = p.create(&SandboxSpec::new(images::BUSYBOX)).await.unwrap();
    p.exec(&h, "true", &params()).await.unwrap();
    let pid = agent_pid(&h);
    let nobody = ExecParams { user: Some("nobody".into()), ..params() };
    let attempts = [
        format!("printf x > /proc/{pid}/fd/0"),
        format!("cat /proc/{pid}/fd/1"),
        format!("ls /proc/{pid}/fd"),
        format!("kill -9 {pid}"),
        "printf x > /.sandboxd/agent".to_string(),
        "rm -f /.sandboxd/agent".to_string(),
        "mv /.sandboxd/agent /.sandboxd/old".to_string(),
    ];
    for attempt in &attempts {
        let r = p.exec(&h, attempt, &nobody).await.unwrap();
        assert_ne!(r.return_code, 0, "nobody could `{attempt}`: {r:?}");
    }
    // Not even root inside the sandbox can replace the binary: it is a read-only mount.
    let root = p.exec(&h, "printf x > /.sandboxd/agent", &params()).await.unwrap();
    assert_ne!(root.return_code, 0, "{root:?}");
    assert_eq!(agent_pid(&h), pid, "the agent is untouched");
    let r = p.exec(&h, "id -u", &nobody).await.unwrap();
    assert_eq!(r.stdout_str().trim(), "65534");
    p.close(&h.id()).await.unwrap();
}

#[tokio::test]
async fn read_only_root_without_tmp_and_no_network() {
    let label = TestLabel::new();
    let p = agent_provider(&label, |c| {
        c.create.read_only = true;
        c.create.network = Some("none".into());
    });
    let h = p.create(&SandboxSpec::new(images::READONLY)).await.unwrap();
    let r = p.exec(&h, "printf ok; test -e /tmp || printf ' no-tmp'", &params()).await.unwrap();
    assert_eq!(r.stdout_str(), "ok no-tmp");
    assert!(r.usage.is_some(), "the agent runs in a read-only, network-less sandbox");
    let on = match testkit::transport() {
        ExecTransport::Socket => Transport::Socket,
        ExecTransport::Channel => Transport::Exec,
    };
    assert_eq!(p.agent_transport(&h.sandbox_id), Some(on), "served on the transport under test");
    let mut download = p.download(&h, "/etc/passwd").await.unwrap();
    assert!(download.next_chunk().await.unwrap().is_some_and(|c| c.starts_with(b"root:")));
    p.close(&h.id()).await.unwrap();
}

#[tokio::test]
async fn agent_killed_mid_call_is_a_sandbox_error_and_the_next_call_works() {
    let label = TestLabel::new();
    let p = std::sync::Arc::new(agent_provider(&label, |_| {}));
    let h = p.create(&exec_channel_spec(images::BUSYBOX)).await.unwrap();
    p.exec(&h, "true", &params()).await.unwrap();
    let pid = agent_pid(&h);
    let (p2, h2) = (p.clone(), h.clone());
    let call = tokio::spawn(async move { p2.exec(&h2, "printf before; sleep 60", &params()).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(500)).await;
    outside(&h, &format!("kill -9 {pid}"));
    let r = call.await.unwrap();
    assert_eq!((r.return_code, r.error_type), (125, Some(ExecErrorType::Sandbox)), "{r:?}");
    assert!(r.stderr_str().contains("agent"), "the message says what went away: {r:?}");
    let next = p.exec(&h, "printf again", &params()).await.unwrap();
    assert_eq!((next.stdout_str().as_str(), next.return_code), ("again", 0));
    assert!(next.usage.is_some(), "a new agent answers");
    assert_ne!(agent_pid(&h), pid);
    p.close(&h.id()).await.unwrap();
}

#[tokio::test]
async fn a_restarted_server_uses_the_agents_of_sandboxes_it_did_not_create() {
    let label = TestLabel::new();
    let first = agent_provider(&label, |_| {});
    let h = first.create(&SandboxSpec::new(images::BUSYBOX)).await.unwrap();
    first.exec(&h, "true", &params()).await.unwrap();
    drop(first);
    let second = agent_provider(&label, |_| {});
    let h2 = second.handle(&h.sandbox_id).await.unwrap();
    let r = second.exec(&h2, "printf hi", &params()).await.unwrap();
    assert_eq!(r.stdout_str(), "hi");
    assert!(r.usage.is_some(), "the agent already in the sandbox answers the new server");
    second.close(&h2.id()).await.unwrap();
}

#[tokio::test]
async fn a_sandbox_without_an_agent_uses_docker_exec() {
    let label = TestLabel::new();
    let old = provider_with(&label, |c| c.exec.engine = ExecEngineKind::Docker);
    let h = old.create(&SandboxSpec::new(images::BUSYBOX)).await.unwrap();
    let p = agent_provider(&label, |_| {});
    let h = p.handle(&h.sandbox_id).await.unwrap();
    for _ in 0..2 {
        let r = p.exec(&h, "printf hi", &params()).await.unwrap();
        assert_eq!((r.stdout_str().as_str(), r.return_code), ("hi", 0));
        assert!(r.usage.is_none(), "docker exec answered");
    }
    p.close(&h.id()).await.unwrap();
}

/// A late hello is a slow daemon, not a missing agent: the call that met it falls back to
/// `docker exec`, and the next call opens the channel (a hello timeout used to put the sandbox
/// on `docker exec` for its whole life, which loaded soaks showed as missing channels).
#[tokio::test]
async fn an_agent_slow_to_say_hello_is_tried_again_on_the_next_call() {
    let label = TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    let real = sandboxd::backends::docker::cli::DockerCli::locate().expect("docker on PATH");
    let wrapper = dir.path().join("docker");
    // The first `docker exec … serve` (the agent's start) takes longer than the hello timeout.
    let script = format!(
        "#!/bin/sh\nfor last; do :; done\nif [ \"$1\" = exec ] && [ \"$last\" = serve ] && mkdir {marker} 2>/dev/null; then sleep 60; fi\nexec {real} \"$@\"\n",
        marker = dir.path().join("slowed").display(),
        real = real.display(),
    );
    std::fs::write(&wrapper, script).unwrap();
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let p = testkit::provider_with_binary(&label, wrapper, |c| c.exec.engine = ExecEngineKind::Agent);
    let h = p.create(&exec_channel_spec(images::BUSYBOX)).await.unwrap();
    assert!(dir.path().join("slowed").exists(), "the first agent start was slowed");
    let r = p.exec(&h, "printf hi", &params()).await.unwrap();
    assert_eq!((r.stdout_str().as_str(), r.return_code), ("hi", 0));
    assert!(r.usage.is_some(), "the agent answered the call after the slow start");
    agent_pid(&h);
    p.close(&h.id()).await.unwrap();
}

#[tokio::test]
async fn env_values_and_commands_never_reach_a_host_command_line() {
    let label = TestLabel::new();
    let p = std::sync::Arc::new(agent_provider(&label, |_| {}));
    let h = p.create(&SandboxSpec::new(images::BUSYBOX)).await.unwrap();
    let secret = format!("s3cret-{}", uuid::Uuid::new_v4().simple());
    let env: BTreeMap<String, String> = [("TOKEN".to_string(), secret.clone())].into();
    let (p2, h2) = (p.clone(), h.clone());
    let command = format!("sleep 3 # {secret}");
    let call =
        tokio::spawn(async move { p2.exec(&h2, &command, &ExecParams { env, ..params() }).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let host = std::process::Command::new("ps").args(["-eo", "args"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&host.stdout).contains(&secret), "a secret is on a host command line");
    assert_eq!(call.await.unwrap().return_code, 0);
    p.close(&h.id()).await.unwrap();
}

#[tokio::test]
async fn an_interrupted_upload_leaves_the_old_file() {
    let label = TestLabel::new();
    let p = agent_provider(&label, |_| {});
    let h = p.create(&SandboxSpec::new(images::BUSYBOX)).await.unwrap();
    p.upload_reader(&h, &b"old"[..], 3, "/data/file", None, &[]).await.unwrap();
    /// A reader that fails after some bytes, like a client that drops its upload stream.
    struct Broken(usize);
    impl tokio::io::AsyncRead for Broken {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            if self.0 == 0 {
                return std::task::Poll::Ready(Err(std::io::Error::other("client went away")));
            }
            let n = self.0.min(buf.remaining()).min(4096);
            buf.put_slice(&vec![b'n'; n]);
            self.0 -= n;
            std::task::Poll::Ready(Ok(()))
        }
    }
    let err = p
        .upload_reader(&h, tokio::io::BufReader::new(Broken(100_000)), 1_000_000, "/data/file", None, &[])
        .await;
    assert!(err.is_err());
    let r = p.exec(&h, "cat /data/file; ls -A /data | wc -l", &params()).await.unwrap();
    assert_eq!(r.stdout_str(), "old1\n", "old content, and no partial file beside it");
    p.close(&h.id()).await.unwrap();
}
