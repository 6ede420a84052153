//! The PTY spawner and session with local programs (no daemon needed): terminal plumbing, pipes,
//! backpressure, exits, signals, close, startup-failure classification, and the in-container
//! path driven through a local `RunInContainer`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use sandboxd::backends::docker::pty::{
    fallback_pid_file_for, launcher_argv, session_marker, spawn, PtyError, RunInContainer, SpawnOptions,
    TerminalProcess,
};
use sandboxd::core::spec::ExecResult;

const T: Duration = Duration::from_secs(10);

fn argv(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

fn sh(script: &str) -> Vec<String> {
    argv(&["/bin/sh", "-c", script])
}

async fn start(args: Vec<String>, use_pty: bool, rows: u16, cols: u16) -> Arc<TerminalProcess> {
    spawn(SpawnOptions { argv: args, use_pty, rows, cols, ..Default::default() }).await.expect("spawn")
}

/// Everything until EOF.
async fn read_all(s: &TerminalProcess) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let chunk = s.read(Some(T)).await.expect("read");
        if chunk.is_empty() {
            return out;
        }
        out.extend_from_slice(&chunk);
    }
}

/// Output until `needle` appears (returns all of it).
async fn read_until(s: &TerminalProcess, needle: &str) -> String {
    testkit::wait::read_until(needle, T, |left| s.read(Some(left))).await
}

fn pid_alive(pid: i32) -> bool {
    // A zombie is gone for our purposes.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => false,
    }
}

async fn wait_dead(pid: i32) -> bool {
    let deadline = Instant::now() + T;
    while Instant::now() < deadline {
        if !pid_alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

#[tokio::test]
async fn early_write_waits_unchanged_in_raw_mode() {
    // The program reads only after a pause; what was written before arrives byte for byte
    // (no echo, no CR/LF translation, no ^C/^D handling by the host terminal).
    let s = start(sh("sleep 0.5; head -c 9 | od -An -tx1 -v"), true, 24, 80).await;
    let input = b"a\x03b\r\n\x04c\x1a\x7f";
    s.write(input).await.expect("early write");
    let out = String::from_utf8(read_all(&s).await).expect("utf8");
    let hex: String = out.split_whitespace().collect();
    let expected: String = input.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(hex, expected, "output {out:?}");
    assert_eq!(s.wait_exit(Some(T)).await, Ok(0));
}

#[tokio::test]
async fn terminal_has_spawn_size_then_resized_size() {
    let s = start(sh("stty size; read x; stty size"), true, 30, 100).await;
    let out = read_until(&s, "\n").await;
    assert_eq!(out.trim(), "30 100");
    s.resize(40, 120).await.expect("resize");
    s.write(b"\n").await.expect("write");
    let out = String::from_utf8(read_all(&s).await).expect("utf8");
    assert_eq!(out.trim(), "40 120");
    assert!(s.resize(0, 10).await.is_err(), "a zero size is refused");
}

#[tokio::test]
async fn resize_reaches_the_program_as_sigwinch() {
    let s = start(sh("trap 'stty size' WINCH; echo ready; while :; do sleep 0.05; done"), true, 24, 80).await;
    read_until(&s, "ready").await;
    s.resize(33, 77).await.expect("resize");
    read_until(&s, "33 77").await;
    s.close().await.expect("close");
}

#[tokio::test]
async fn launcher_sets_the_size_before_the_program_starts() {
    // The host pty is 24x80; the launcher is told 50x132 (what the client would learn only
    // after the program started on Engine API 1.41): the program's first look sees 50x132.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("pid");
    let g = dir.path().join("fallback");
    let args =
        launcher_argv("/bin/sh", f.to_str().unwrap(), g.to_str().unwrap(), Some("stty size"), 50, 132, true);
    let s = start(args, true, 24, 80).await;
    let out = String::from_utf8(read_all(&s).await).unwrap();
    assert_eq!(out.trim(), "50 132");
    assert_eq!(s.wait_exit(Some(T)).await, Ok(0));
    let recorded = std::fs::read_to_string(&f).expect("pid record");
    assert!(recorded.trim().parse::<u32>().is_ok(), "{recorded:?}");
}

#[tokio::test]
async fn eof_is_an_empty_read_and_timeout_a_distinct_error() {
    let s = start(sh("printf hello"), true, 24, 80).await;
    assert_eq!(read_all(&s).await, b"hello");
    assert_eq!(s.read(Some(T)).await, Ok(Vec::new()), "EOF stays EOF");
    assert_eq!(s.read_stderr(Some(T)).await, Ok(Vec::new()), "PTY mode has no stderr stream");
    assert_eq!(s.wait_exit(Some(T)).await, Ok(0));
    assert_eq!(s.returncode(), Some(0));
    assert!(s.closed());

    let s = start(argv(&["sleep", "30"]), true, 24, 80).await;
    let started = Instant::now();
    let err = s.read(Some(Duration::from_millis(200))).await.unwrap_err();
    assert!(matches!(err, PtyError::Timeout(_)), "{err:?}");
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert!(matches!(s.wait_exit(Some(Duration::from_millis(100))).await, Err(PtyError::Timeout(_))));
    assert!(!s.closed());
    s.close().await.unwrap();
}

#[tokio::test]
async fn pipe_mode_keeps_stderr_separate() {
    let s = start(sh("echo out; echo err >&2; echo out2"), false, 24, 80).await;
    assert_eq!(read_all(&s).await, b"out\nout2\n");
    let mut err = Vec::new();
    loop {
        let c = s.read_stderr(Some(T)).await.unwrap();
        if c.is_empty() {
            break;
        }
        err.extend_from_slice(&c);
    }
    assert_eq!(err, b"err\n");
    assert_eq!(s.wait_exit(Some(T)).await, Ok(0));
    // Resize is ignored without a terminal.
    s.resize(10, 10).await.expect("ignored");
}

/// Writes `n` pseudo-random bytes into `head -c n` and returns what came back with them.
async fn round_trip(use_pty: bool, n: usize, seed: u64) -> (Arc<TerminalProcess>, Vec<u8>, Vec<u8>) {
    let s = start(argv(&["head", "-c", &n.to_string()]), use_pty, 24, 80).await;
    let data = pseudo_random(n, seed);
    let writer = {
        let s = s.clone();
        let data = data.clone();
        tokio::spawn(async move { s.write(&data).await })
    };
    let got = read_all(&s).await;
    writer.await.unwrap().expect("write");
    (s, data, got)
}

#[tokio::test]
async fn eight_mib_through_a_pipe_byte_exact() {
    const N: usize = 8 * 1024 * 1024;
    let (s, data, got) = round_trip(false, N, 0x9E37_79B9_7F4A_7C15).await;
    assert_eq!(got.len(), N);
    assert!(got == data, "bytes differ");
    assert_eq!(s.wait_exit(Some(T)).await, Ok(0));
}

#[tokio::test]
async fn one_mib_through_the_pty_not_lost() {
    const N: usize = 1024 * 1024;
    let (_s, data, got) = round_trip(true, N, 42).await;
    assert_eq!(got.len(), N);
    assert!(got == data, "bytes differ");
}

#[tokio::test]
async fn a_stalled_write_does_not_block_other_sessions() {
    // Current-thread runtime: a write that blocked the thread would stall everything.
    let slow = start(sh("sleep 30"), true, 24, 80).await;
    let big = vec![b'x'; 1024 * 1024];
    let pending = {
        let slow = slow.clone();
        tokio::spawn(async move { slow.write(&big).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!pending.is_finished(), "1 MiB cannot fit in a pty nobody reads");

    let started = Instant::now();
    let other = start(sh("read line; echo got-$line"), true, 24, 80).await;
    other.write(b"ping\n").await.expect("write to the other session");
    read_until(&other, "got-ping").await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(!pending.is_finished());

    // Closing the stalled session fails its waiting write cleanly.
    slow.close().await.unwrap();
    let res = tokio::time::timeout(T, pending).await.expect("write returned").unwrap();
    assert!(matches!(res, Err(PtyError::Failed(_))), "{res:?}");
}

#[tokio::test]
async fn write_waiting_at_release_fails_and_never_touches_the_fd_again() {
    let s = start(argv(&["sleep", "30"]), false, 24, 80).await;
    let pending = {
        let s = s.clone();
        tokio::spawn(async move { s.write(&vec![b'y'; 4 * 1024 * 1024]).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!pending.is_finished());
    s.abandon().await;
    let res = tokio::time::timeout(T, pending).await.expect("write returned").unwrap();
    assert!(matches!(res, Err(PtyError::Failed(_))), "{res:?}");
    assert!(s.write(b"late").await.is_err(), "a write after release fails");
    // A session opened right after (likely reusing the descriptor numbers) is unaffected.
    let next = start(argv(&["head", "-c", "5"]), false, 24, 80).await;
    next.write(b"hello").await.unwrap();
    assert_eq!(read_all(&next).await, b"hello");
    s.close().await.expect("close after abandon is a no-op");
}

#[tokio::test]
async fn exit_codes_and_signal_exits() {
    let s = start(sh("exit 7"), true, 24, 80).await;
    assert_eq!(s.wait_exit(Some(T)).await, Ok(7));
    assert_eq!(s.returncode(), Some(7));
    assert!(s.closed());

    let s = start(sh("kill -TERM $$"), false, 24, 80).await;
    assert_eq!(s.wait_exit(Some(T)).await, Ok(128 + 15));

    let s = start(argv(&["sleep", "30"]), false, 24, 80).await;
    s.send_signal("SIGINT").await.expect("signal");
    assert_eq!(s.wait_exit(Some(T)).await, Ok(128 + 2));

    let s = start(argv(&["sleep", "30"]), true, 24, 80).await;
    let err = s.send_signal("SIGUSR1").await.unwrap_err();
    assert!(matches!(&err, PtyError::Invalid { .. }), "{err:?}");
    assert!(err.to_string().contains("SIGINT"), "names the supported ones: {err}");
    s.send_signal("SIGKILL").await.expect("signal");
    assert_eq!(s.wait_exit(Some(T)).await, Ok(128 + 9));
    // Nothing left to signal: not an error.
    s.send_signal("SIGTERM").await.expect("signal after exit");
}

#[tokio::test]
async fn pty_signal_reaches_the_foreground_group() {
    if !std::path::Path::new("/bin/bash").exists() {
        return;
    }
    let s = start(argv(&["/bin/bash", "--norc", "--noprofile", "-i"]), true, 24, 80).await;
    s.write(b"PS1='$ '; sleep 30; echo after-$((6*7))\n").await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // SIGINT goes to sleep's group (the terminal's foreground), not to bash: bash survives (it
    // drops the rest of the interrupted line) and answers.
    s.send_signal("SIGINT").await.expect("signal");
    s.write(b"echo alive-$((1+1))\n").await.unwrap();
    read_until(&s, "alive-2").await;
    assert_eq!(s.returncode(), None, "the shell survived");
    s.close().await.unwrap();
    assert!(s.wait_exit(Some(T)).await.is_ok());
}

#[tokio::test]
async fn close_is_idempotent_and_kills_the_local_group() {
    // A job that ignores SIGHUP: close must SIGKILL the group after the grace.
    let s = start(sh("trap '' HUP; sleep 300 & echo $!; wait"), false, 24, 80).await;
    let line = read_until(&s, "\n").await;
    let job: i32 = line.trim().parse().expect("job pid");
    let leader = s.client_pid();
    assert!(pid_alive(job));
    let (a, b) = tokio::join!(s.close(), s.close());
    assert_eq!((a, b), (Ok(()), Ok(())));
    assert!(s.closed());
    assert!(wait_dead(job).await, "job {job} survived close");
    assert!(wait_dead(leader).await, "leader {leader} survived close");
    s.close().await.expect("third close");
    assert!(s.write(b"x").await.is_err());
    assert!(s.send_signal("SIGINT").await.is_err(), "a closed session takes no signal");

    // A plain shell job dies of the SIGHUP.
    let s = start(sh("sleep 300 & echo $!; wait"), true, 24, 80).await;
    let job: i32 = read_until(&s, "\n").await.trim().parse().expect("job pid");
    s.close().await.unwrap();
    assert!(wait_dead(job).await, "job {job} survived close");
}

fn daemon_refusal(stderr: &str) -> bool {
    sandboxd::backends::docker::classify::is_runtime_failure(stderr)
}

#[tokio::test]
async fn a_refused_exec_is_a_pty_error_not_an_exit_code() {
    let refused = "echo 'Error response from daemon: Container 0123abcd is not running' >&2; exit 1";
    for use_pty in [true, false] {
        let s = spawn(SpawnOptions {
            argv: sh(refused),
            use_pty,
            runtime_failure: Some(daemon_refusal),
            ..Default::default()
        })
        .await
        .unwrap();
        match s.read(Some(T)).await {
            Err(PtyError::Failed(msg)) => assert!(msg.contains("is not running"), "{msg}"),
            other => panic!("pty={use_pty}: expected Failed, got {other:?}"),
        }
        match s.wait_exit(Some(T)).await {
            Err(PtyError::Failed(msg)) => assert!(msg.contains("Error response from daemon"), "{msg}"),
            other => panic!("pty={use_pty}: expected Failed, got {other:?}"),
        }
        let mut stream = s.output_stream();
        assert!(matches!(stream.next().await, Some(Err(PtyError::Failed(_)))));
        assert!(stream.next().await.is_none(), "the stream ends after its error");
    }

    // The program's own exit 1 with an unrelated complaint stays an exit code.
    let s = spawn(SpawnOptions {
        argv: sh("echo 'ls: nope: No such file' >&2; exit 1"),
        runtime_failure: Some(daemon_refusal),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(s.read(Some(T)).await, Ok(Vec::new()));
    assert_eq!(s.wait_exit(Some(T)).await, Ok(1));

    // A program that started (produced output) is not a startup failure.
    let s = spawn(SpawnOptions {
        argv: sh("echo started; echo 'Error response from daemon: x is not running' >&2; exit 1"),
        runtime_failure: Some(daemon_refusal),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(String::from_utf8(read_all(&s).await).unwrap(), "started\n");
    assert_eq!(s.wait_exit(Some(T)).await, Ok(1));
}

#[tokio::test]
async fn output_stream_and_read_share_one_queue() {
    let s = start(sh("echo one; sleep 0.2; echo two; sleep 0.2; echo three"), false, 24, 80).await;
    let first = read_until(&s, "one").await;
    assert_eq!(first, "one\n");
    let rest: Vec<u8> = s.output_stream().map(|c| c.expect("chunk")).concat().await;
    assert_eq!(rest, b"two\nthree\n");
}

/// Runs "in-container" commands on the host with `/bin/sh -c`, recording who asked.
#[derive(Default)]
struct LocalContainer {
    calls: Mutex<Vec<(String, Option<String>)>>,
}

impl RunInContainer for LocalContainer {
    fn run<'a>(
        &'a self,
        command: String,
        user: Option<String>,
        timeout: Duration,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ExecResult> + Send + 'a>> {
        self.calls.lock().unwrap().push((command.clone(), user));
        Box::pin(async move {
            let out = tokio::time::timeout(
                timeout,
                tokio::process::Command::new("/bin/sh").arg("-c").arg(command).output(),
            )
            .await;
            match out {
                Ok(Ok(out)) => ExecResult {
                    stdout: out.stdout,
                    stderr: out.stderr,
                    return_code: out.status.code().unwrap_or(125),
                    error_type: None,
                    usage: None,
                    failure_kind: None,
                },
                _ => ExecResult::failed(sandboxd::core::spec::ExecErrorType::Timeout, "timeout"),
            }
        })
    }
}

#[tokio::test]
async fn container_path_reads_the_record_as_the_user_and_never_signals_a_host_process() {
    // The launcher runs on the host with this session's marker; its parent is this test, not
    // "outside the container" (PPid 0), so the check must refuse it: no kill is ever issued.
    let dir = tempfile::tempdir().unwrap();
    let id = "itest-1";
    let f = dir.path().join(format!(".sandboxd-pty-{id}"));
    let g = dir.path().join("shm").join(fallback_pid_file_for(id).rsplit('/').next().unwrap());
    let mut args = argv(&["env", &session_marker(id)]);
    args.extend(launcher_argv(
        "/bin/sh",
        f.to_str().unwrap(),
        g.to_str().unwrap(),
        Some("sleep 30"),
        24,
        80,
        true,
    ));
    let container = Arc::new(LocalContainer::default());
    let s = spawn(SpawnOptions {
        argv: args,
        use_pty: true,
        session_id: id.into(),
        container: Some(container.clone()),
        user: Some("agent".into()),
        pid_file: Some(f.to_str().unwrap().into()),
        fallback_pid_file: Some(g.to_str().unwrap().into()),
        ..Default::default()
    })
    .await
    .unwrap();
    let err = s.send_signal("SIGTERM").await.unwrap_err();
    assert!(err.to_string().contains("not started by docker exec"), "{err}");
    // The record is read once: a second signal reuses the verdict.
    assert!(s.send_signal("SIGINT").await.is_err());
    {
        let calls = container.calls.lock().unwrap();
        assert_eq!(calls.len(), 1, "{calls:?}");
        assert_eq!(calls[0].1.as_deref(), Some("agent"), "the record is read as the session's user");
        assert!(!calls.iter().any(|(c, _)| c.contains("kill")), "{calls:?}");
    }
    assert!(f.exists());
    s.close().await.unwrap();
    {
        let calls = container.calls.lock().unwrap();
        let (cleanup, user) = calls.last().unwrap();
        assert_eq!(user.as_deref(), Some("0"), "cleanup runs as root");
        assert!(!cleanup.contains("kill"), "an untrusted pid gets no signal: {cleanup}");
    }
    assert!(!f.exists(), "the pid record is removed");
    // The local client was stopped.
    assert!(s.wait_exit(Some(T)).await.is_ok());
}
