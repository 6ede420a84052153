//! Terminal sessions in real containers: busybox, bash and dash images, root and non-root.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sandboxd::backends::docker::pty::{PtyError, TerminalProcess};
use sandboxd::backends::docker::DockerProvider;
use sandboxd::core::spec::SandboxSpec;
use sandboxd::core::spec::{ExecParams, PtySpec, SandboxHandle, TerminalMode};
use testkit::images;
use testkit::{docker, provider, provider_with, TestLabel};

const T: Option<Duration> = Some(Duration::from_secs(20));

/// Read until `needle` shows up in the accumulated output (which is returned).
async fn read_until(session: &TerminalProcess, needle: &str) -> String {
    testkit::wait::read_until(needle, Duration::from_secs(20), |left| session.read(Some(left))).await
}

async fn exec_ok(p: &DockerProvider, h: &SandboxHandle, command: &str) -> String {
    let r = p.exec(h, command, &ExecParams::default()).await.unwrap();
    assert_eq!(r.return_code, 0, "{command}: {r:?}");
    r.stdout_str()
}

fn shell_spec(rows: u16, cols: u16) -> PtySpec {
    PtySpec { rows, cols, ..Default::default() }
}

fn command_spec(command: &str, pty: bool) -> PtySpec {
    let mode = if pty { TerminalMode::Pty } else { TerminalMode::Pipe };
    PtySpec { command: Some(command.into()), mode, ..Default::default() }
}

#[tokio::test]
async fn interactive_shell_echoes_resizes_and_survives_sigint() {
    let label = TestLabel::new();
    let p = provider(&label);
    for image in [images::BUSYBOX, images::BASH, images::DASH, images::NONROOT] {
        let h = p.create(&SandboxSpec::new(image)).await.unwrap();
        let s = p.create_pty(&h, &shell_spec(30, 100)).await.unwrap();
        // Typed input is echoed by the container's terminal; the command's output follows.
        s.write(b"stty size; echo typed-$((40+2))\n").await.unwrap();
        let out = read_until(&s, "typed-42").await;
        assert!(out.contains("30 100"), "{image}: spawn size first: {out:?}");
        assert!(out.contains("echo typed-$((40+2))"), "{image}: echo of the input: {out:?}");

        // Once resize returns, the container's terminal has the new size: the very next
        // command sees it.
        s.resize(40, 120).await.unwrap();
        s.write(b"stty size\n").await.unwrap();
        read_until(&s, "\n40 120\r").await;
        s.resize(50, 132).await.unwrap();
        s.write(b"stty size\n").await.unwrap();
        read_until(&s, "\n50 132\r").await;

        // SIGINT reaches the foreground job; the shell survives it.
        s.write(b"sleep 30; echo after-sleep-$?\n").await.unwrap();
        tokio::time::sleep(Duration::from_millis(700)).await;
        let started = Instant::now();
        s.send_signal("SIGINT").await.unwrap();
        s.write(b"echo alive-$((1+1))\n").await.unwrap();
        read_until(&s, "alive-2").await;
        assert!(started.elapsed() < Duration::from_secs(15), "{image}: sleep was not interrupted");
        assert!(!s.closed(), "{image}: the shell must survive SIGINT");

        let err = s.send_signal("SIGUSR1").await.unwrap_err();
        assert!(matches!(err, PtyError::Invalid { .. }), "{err:?}");
        assert!(err.to_string().contains("SIGINT"), "supported ones are listed: {err}");

        s.write(b"exit 7\n").await.unwrap();
        assert_eq!(s.wait_exit(T).await.unwrap(), 7, "{image}");
        s.close().await.unwrap();
        p.close(&h.id()).await.unwrap();
    }
}

#[tokio::test]
async fn sigterm_ends_a_command_session_in_both_modes() {
    let label = TestLabel::new();
    let p = provider(&label);
    for image in [images::BUSYBOX, images::DASH, images::BASH] {
        let h = p.create(&SandboxSpec::new(image)).await.unwrap();
        for pty in [true, false] {
            let s = p.create_pty(&h, &command_spec("echo started; sleep 60", pty)).await.unwrap();
            read_until(&s, "started").await;
            let t = Instant::now();
            s.send_signal("SIGTERM").await.unwrap();
            let code = s.wait_exit(T).await.unwrap();
            assert!(t.elapsed() < Duration::from_secs(15));
            assert_eq!(code, 128 + 15, "{image} pty={pty}");
            s.close().await.unwrap();
        }
        p.close(&h.id()).await.unwrap();
    }
}

#[tokio::test]
async fn pipe_mode_keeps_stderr_apart_and_non_root_sessions_work() {
    let label = TestLabel::new();
    let p = provider(&label);
    let h = p.create(&SandboxSpec::new(images::NONROOT)).await.unwrap();
    let s = p.create_pty(&h, &command_spec("id -u; echo to-err >&2; exit 4", false)).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&s.read(T).await.unwrap()), "1000\n");
    assert_eq!(String::from_utf8_lossy(&s.read_stderr(T).await.unwrap()), "to-err\n");
    assert_eq!(s.wait_exit(T).await.unwrap(), 4);
    s.close().await.unwrap();

    // Signals reach a non-root session's process (read as its user, sent as root).
    let spec = PtySpec { user: Some("1000".into()), ..command_spec("echo up; sleep 60", true) };
    let s = p.create_pty(&h, &spec).await.unwrap();
    read_until(&s, "up").await;
    s.send_signal("SIGTERM").await.unwrap();
    assert_eq!(s.wait_exit(T).await.unwrap(), 143);
    s.close().await.unwrap();
    p.close(&h.id()).await.unwrap();
}

#[tokio::test]
async fn read_only_root_falls_back_to_dev_shm_or_refuses_to_run() {
    let label = TestLabel::new();
    let p = provider_with(&label, |c| c.create.read_only = true);
    let h = p.create(&SandboxSpec::new(images::READONLY)).await.unwrap();
    let s = p.create_pty(&h, &command_spec("echo ready; sleep 60", false)).await.unwrap();
    read_until(&s, "ready").await;
    let listing = exec_ok(&p, &h, &format!("ls -a /dev/shm; test ! -e /tmp/.sandboxd-pty-{}", s.id())).await;
    assert!(listing.contains(&format!(".sandboxd-pty-{}", s.id())), "{listing}");
    s.send_signal("SIGTERM").await.unwrap();
    assert_eq!(s.wait_exit(T).await.unwrap(), 143);
    s.close().await.unwrap();
    p.close(&h.id()).await.unwrap();

    // Without /dev/shm (--ipc=none) the pid can be recorded nowhere: the launcher says so and
    // exits 1 instead of running an unsignallable program.
    let p = provider_with(&label, |c| {
        c.create.read_only = true;
        c.create.extra_run_args.extend(["--ipc".to_string(), "none".to_string()]);
    });
    let h = p.create(&SandboxSpec::new(images::READONLY)).await.unwrap();
    let s = p.create_pty(&h, &command_spec("echo SHOULD-NOT-RUN", true)).await.unwrap();
    let mut out = Vec::new();
    loop {
        match s.read(T).await {
            Ok(c) if c.is_empty() => break,
            Ok(c) => out.extend(c),
            Err(e) => panic!("{e}"),
        }
    }
    let out = String::from_utf8_lossy(&out);
    assert!(!out.contains("SHOULD-NOT-RUN"), "{out}");
    assert!(out.to_lowercase().contains("pid"), "the launcher says why: {out:?}");
    assert_eq!(s.wait_exit(T).await.unwrap(), 1);
    s.close().await.unwrap();
    p.close(&h.id()).await.unwrap();
}

/// Wait until the launcher has written its record (the forgery must come before the first read).
async fn wait_for_record(p: &DockerProvider, h: &SandboxHandle, s: &TerminalProcess) -> String {
    let path = format!("/tmp/.sandboxd-pty-{}", s.id());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = p.exec(h, &format!("test -f {path}"), &ExecParams::default()).await.unwrap();
        if r.return_code == 0 {
            return path;
        }
        assert!(Instant::now() < deadline, "no pid record");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn forged_pid_records_never_get_a_signal() {
    let label = TestLabel::new();
    let p = provider(&label);
    let h = p.create(&SandboxSpec::new(images::NONROOT)).await.unwrap();
    // A victim the agent (uid 1000) could name: started inside, so its parent is in the container.
    exec_ok(&p, &h, "sleep 600 >/dev/null 2>&1 & echo $! > /home/sandbox/victim").await;
    let victim = exec_ok(&p, &h, "cat /home/sandbox/victim").await.trim().to_string();
    let forgeries = [
        format!("echo {victim} > $F"),
        "echo 1 > $F".to_string(),
        format!("echo {victim} > /home/sandbox/v2; rm -f $F; ln -s /home/sandbox/v2 $F"),
        "rm -f $F; mkfifo $F".to_string(),
        "printf '1; kill -9 -1\\n' > $F".to_string(),
        "head -c 4096 /dev/zero | tr '\\0' 7 > $F".to_string(),
    ];
    for forge in forgeries {
        for pty in [true, false] {
            let s = p.create_pty(&h, &command_spec("echo running; sleep 600", pty)).await.unwrap();
            read_until(&s, "running").await;
            let path = wait_for_record(&p, &h, &s).await;
            exec_ok(&p, &h, &format!("F={path}; {forge}")).await;
            let t = Instant::now();
            let err = s.send_signal("SIGKILL").await;
            assert!(err.is_err(), "forgery {forge:?} (pty={pty}) was accepted");
            assert!(t.elapsed() < Duration::from_secs(40), "a forged record must not stall the signal");
            // Nobody was signalled: the victim and the session's own program still run.
            exec_ok(&p, &h, &format!("kill -0 {victim}")).await;
            assert!(!s.closed(), "the session must not have been killed by a forged record");
            s.abandon().await;
        }
    }
    p.close(&h.id()).await.unwrap();
}

#[tokio::test]
async fn large_output_is_byte_exact_in_pipe_mode_and_complete_in_pty_mode() {
    let label = TestLabel::new();
    let p = provider(&label);
    let h = p.create(&SandboxSpec::new(images::BUSYBOX)).await.unwrap();
    let size = 100usize << 20;
    let digest =
        exec_ok(&p, &h, &format!("head -c {size} /dev/urandom > /tmp/big; sha256sum /tmp/big")).await;
    let digest = digest.split_whitespace().next().unwrap().to_string();

    let s = p.create_pty(&h, &command_spec("cat /tmp/big", false)).await.unwrap();
    let mut hasher = <sha2::Sha256 as sha2::Digest>::new();
    let mut n = 0usize;
    loop {
        let chunk = s.read(T).await.unwrap();
        if chunk.is_empty() {
            break;
        }
        n += chunk.len();
        sha2::Digest::update(&mut hasher, &chunk);
    }
    assert_eq!(n, size);
    let got: String = sha2::Digest::finalize(hasher).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(got, digest);
    assert_eq!(s.wait_exit(T).await.unwrap(), 0);
    s.close().await.unwrap();

    let s = p.create_pty(&h, &command_spec(&format!("head -c {size} /dev/zero"), true)).await.unwrap();
    let mut zeros = 0usize;
    loop {
        let chunk = s.read(T).await.unwrap();
        if chunk.is_empty() {
            break;
        }
        zeros += chunk.iter().filter(|b| **b == 0).count();
    }
    assert_eq!(zeros, size, "every byte arrives in PTY mode");
    s.close().await.unwrap();
    p.close(&h.id()).await.unwrap();
}

#[tokio::test]
async fn a_slow_reader_neither_blocks_other_sessions_nor_loses_bytes() {
    let label = TestLabel::new();
    let p = provider(&label);
    let h = p.create(&SandboxSpec::new(images::BUSYBOX)).await.unwrap();
    let slow = p.create_pty(&h, &command_spec("sleep 8; head -c 1048576 | wc -c", false)).await.unwrap();
    let fast = p.create_pty(&h, &shell_spec(24, 80)).await.unwrap();
    let payload = vec![b'x'; 1 << 20];
    let writer = {
        let slow = Arc::clone(&slow);
        tokio::spawn(async move { slow.write(&payload).await })
    };
    let t = Instant::now();
    fast.write(b"echo quick-$((3*3))\n").await.unwrap();
    read_until(&fast, "quick-9").await;
    assert!(t.elapsed() < Duration::from_secs(6), "another session waited for the slow one");
    assert!(!writer.is_finished(), "the write must still be waiting on the slow reader");
    writer.await.unwrap().unwrap();
    let out = {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut out = Vec::new();
        while Instant::now() < deadline {
            let c = slow.read(T).await.unwrap();
            if c.is_empty() {
                break;
            }
            out.extend(c);
        }
        String::from_utf8_lossy(&out).trim().to_string()
    };
    assert_eq!(out, (1 << 20).to_string());
    slow.close().await.unwrap();
    fast.close().await.unwrap();
    p.close(&h.id()).await.unwrap();
}

#[tokio::test]
async fn a_container_removed_under_a_live_session_ends_it_with_a_pty_error() {
    let label = TestLabel::new();
    let p = provider(&label);
    let h = p.create(&SandboxSpec::new(images::BUSYBOX)).await.unwrap();
    let s = p.create_pty(&h, &shell_spec(24, 80)).await.unwrap();
    s.write(b"echo live\n").await.unwrap();
    read_until(&s, "live").await;
    assert!(docker(&["rm", "-f", &h.sandbox_id]).status.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let ended = loop {
        match s.read(T).await {
            Ok(c) if c.is_empty() => break s.wait_exit(T).await,
            Ok(_) => assert!(Instant::now() < deadline),
            Err(e) => break Err(e),
        }
    };
    assert!(matches!(ended, Err(PtyError::Failed(_))), "{ended:?}");
    s.close().await.unwrap();
    // Opening a session on a container that is gone fails the same way.
    let s = p.create_pty(&h, &shell_spec(24, 80)).await.unwrap();
    assert!(matches!(s.wait_exit(T).await, Err(PtyError::Failed(_))));
    s.close().await.unwrap();
}

fn host_clients_of(session_id: &str) -> usize {
    let mut n = 0;
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            if String::from_utf8_lossy(&cmdline).contains(session_id) {
                n += 1;
            }
        }
    }
    n
}

#[tokio::test]
async fn close_leaves_no_process_in_the_container_and_no_client_on_the_host() {
    let label = TestLabel::new();
    let p = provider(&label);
    for image in [images::BASH, images::BUSYBOX, images::DASH] {
        let h = p.create(&SandboxSpec::new(image)).await.unwrap();
        let s = p.create_pty(&h, &shell_spec(24, 80)).await.unwrap();
        s.write(b"sleep 1001 & sleep 1002 & echo bg-started\n").await.unwrap();
        read_until(&s, "bg-started").await;
        s.write(b"sleep 1003\n").await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(exec_ok(&p, &h, "ps").await.contains("sleep 1003"));
        assert!(host_clients_of(s.id()) > 0);
        s.close().await.unwrap();
        s.close().await.unwrap(); // idempotent
        let ps = exec_ok(&p, &h, "ps -o pid,args").await;
        assert!(!ps.contains("sleep 100"), "{image}: left in the container: {ps}");
        let records = exec_ok(&p, &h, "ls -a /tmp /dev/shm").await;
        assert!(!records.contains(s.id()), "{image}: pid records remain: {records}");
        assert_eq!(host_clients_of(s.id()), 0, "{image}: a docker client is left on the host");
        p.close(&h.id()).await.unwrap();
    }
}

#[tokio::test]
async fn provider_close_releases_live_sessions() {
    let label = TestLabel::new();
    let p = provider(&label);
    let h = p.create(&SandboxSpec::new(images::BASH)).await.unwrap();
    let s = p.create_pty(&h, &shell_spec(24, 80)).await.unwrap();
    s.write(b"echo live-$((2*21))\n").await.unwrap();
    let out = read_until(&s, "live-42").await;
    assert!(out.contains("live-42"), "{out:?}");
    let id = s.id().to_string();
    p.close(&h.id()).await.unwrap();
    assert!(s.closed());
    assert_eq!(host_clients_of(&id), 0);
}
