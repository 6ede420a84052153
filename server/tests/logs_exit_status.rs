//! The server behaviour behind `sandboxctl logs`, `exec` and `status` (issue 22), against the
//! real daemon with the service in-process: the `Logs` RPC (its output, `tail_lines`, a followed
//! stream that sees new output and whose `docker logs` ends when the caller drops it),
//! `ExecExit.message` on the engine under test (`SANDBOXD_TEST_ENGINE=docker` for the other),
//! and the status of a closed sandbox from this process and from a fresh one.

use std::time::{Duration, Instant};

use sandboxd_client::{proto, spec, LogChunk, LogsOptions, Sandbox, SandboxStatus};
use testkit::images::BUSYBOX;
use testkit::service::TestService;
use testkit::TestLabel;

/// Pids of `docker logs` clients following `id` (their argv ends with `-- ID`).
fn docker_logs_clients(id: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        let argv: Vec<String> =
            cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        if argv.iter().any(|a| a == "logs") && argv.iter().any(|a| a == id) {
            found.push(pid);
        }
    }
    found
}

/// Reads `stream` until both texts were seen (or 20 s passed).
async fn read_until(
    stream: &mut sandboxd_client::LogStream,
    stdout_has: &str,
    stderr_has: &str,
) -> (String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(String::from_utf8_lossy(&out).contains(stdout_has)
        && String::from_utf8_lossy(&err).contains(stderr_has))
    {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.next()).await {
            Ok(Ok(Some(LogChunk::Stdout(d)))) => out.extend(d),
            Ok(Ok(Some(LogChunk::Stderr(d)))) => err.extend(d),
            Ok(Ok(None)) | Err(_) => break,
            Ok(Err(e)) => panic!("logs stream failed: {e}"),
        }
    }
    (String::from_utf8_lossy(&out).into_owned(), String::from_utf8_lossy(&err).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_streams_the_main_process_output_and_follows_it() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let client = server.client().await;
    let mut s = spec(BUSYBOX);
    s.entrypoint = ["/bin/sh", "-c", "echo boot-1; echo boot-2; sleep 1; echo warn-1 >&2; exec sleep 600"]
        .map(String::from)
        .to_vec();
    let sandbox = Sandbox::start(&client, s).await.expect("create");

    // warn-1 is written a second after the boot lines, so the daemon's order is fixed; wait for it.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = std::process::Command::new("docker").args(["logs", sandbox.id()]).output().unwrap();
        if String::from_utf8_lossy(&out.stderr).contains("warn-1") || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Everything so far, stdout and stderr kept apart; then only the last line of each.
    let mut all = client.logs(sandbox.id(), LogsOptions::default()).await.expect("logs");
    let (out, err) = read_until(&mut all, "boot-2", "warn-1").await;
    assert_eq!((out.as_str(), err.as_str()), ("boot-1\nboot-2\n", "warn-1\n"));
    assert!(all.next().await.expect("end").is_none(), "without follow the stream ends");
    // `tail_lines` counts the lines of both streams together, as the daemon keeps them.
    let mut tail =
        client.logs(sandbox.id(), LogsOptions { tail_lines: Some(2), ..Default::default() }).await.unwrap();
    let (out, err) = read_until(&mut tail, "boot-2", "warn-1").await;
    assert_eq!((out.as_str(), err.as_str()), ("boot-2\n", "warn-1\n"));

    // Followed: a line the main process writes after the call began arrives on the stream.
    let mut followed =
        client.logs(sandbox.id(), LogsOptions { follow: true, tail_lines: Some(0) }).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while docker_logs_clients(sandbox.id()).is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(docker_logs_clients(sandbox.id()).len(), 1, "one docker logs --follow per call");
    // The docker client may not have attached to the daemon's stream yet when it is seen running
    // (lines before that are not followed with `--tail 0`), so the main process keeps writing
    // until the stream shows them; nothing older than the call (`boot-*`) may appear.
    let r = sandbox
        .exec(
            "(for i in $(seq 100); do echo later-line > /proc/1/fd/1; echo later-err > /proc/1/fd/2; \
             sleep 0.2; done) >/dev/null 2>&1 &",
        )
        .await
        .unwrap();
    assert!(r.success(), "{r:?}");
    let (out, err) = read_until(&mut followed, "later-line", "later-err").await;
    assert!(!out.is_empty() && out.lines().all(|l| l == "later-line"), "followed stdout: {out:?}");
    assert!(!err.is_empty() && err.lines().all(|l| l == "later-err"), "followed stderr: {err:?}");
    // Dropping the stream ends the docker client.
    drop(followed);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !docker_logs_clients(sandbox.id()).is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(docker_logs_clients(sandbox.id()).is_empty(), "docker logs outlived its stream");

    // A followed stream ends when the sandbox goes.
    let mut until_gone =
        client.logs(sandbox.id(), LogsOptions { follow: true, tail_lines: Some(0) }).await.unwrap();
    sandbox.stop().await.expect("stop");
    let end = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match until_gone.next().await {
                Ok(Some(_)) => continue,
                other => return other.map(|_| ()),
            }
        }
    })
    .await
    .expect("the followed stream ends with the sandbox");
    // Removed under it: a clean end, or docker's failure as an error; never a hang.
    let _ = end;

    // Unknown and foreign ids are NOT_FOUND, an empty one INVALID_ARGUMENT.
    let err = client.logs("sandboxd-00000000000000000000000000000000", LogsOptions::default()).await.err();
    assert_eq!(err.map(|e| e.code()), Some(tonic::Code::NotFound));
    let err = client.logs("", LogsOptions::default()).await.err();
    assert_eq!(err.map(|e| e.code()), Some(tonic::Code::InvalidArgument));
    assert!(label.containers().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_exec_that_could_not_run_says_why_in_its_exit() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let client = server.client().await;
    let sandbox = Sandbox::start(&client, spec(BUSYBOX)).await.expect("create");
    let mut raw = client.raw();
    let run = |cwd: Option<&str>, user: Option<&str>| proto::ExecRequest {
        sandbox_id: sandbox.id().to_string(),
        command: "echo ran".into(),
        cwd: cwd.map(String::from),
        user: user.map(String::from),
        ..Default::default()
    };
    for (request, words) in [(run(Some("/nope"), None), "/nope"), (run(None, Some("nosuch")), "nosuch")] {
        let unary = raw.exec(request.clone()).await.expect("exec").into_inner();
        let mut stream = raw.exec_stream(request).await.expect("exec_stream").into_inner();
        let (mut output, mut exit) = (Vec::new(), None);
        while let Some(message) = stream.message().await.expect("message") {
            use proto::exec_stream_response::Response;
            match message.response {
                Some(Response::Exit(e)) => exit = Some(e),
                Some(Response::Stdout(d) | Response::Stderr(d)) => output.extend(d),
                None => {}
            }
        }
        let exit = exit.expect("an exit");
        assert_eq!(
            (exit.return_code, exit.error_type.as_str()),
            (unary.return_code, unary.error_type.as_str())
        );
        if unary.error_type.is_empty() {
            // The docker engine runs an unknown user's command as Gym's provider does: the
            // runtime's own exit (126) and text, which the stream carried as output.
            assert_eq!((exit.return_code, words), (126, "nosuch"), "only an unknown user on docker exec");
            assert!(exit.message.is_empty() && String::from_utf8_lossy(&output).contains(words));
        } else {
            assert_eq!((exit.return_code, exit.error_type.as_str()), (125, "sandbox"));
            assert!(exit.message.contains(words), "ExecExit.message {:?} names {words}", exit.message);
            // The same reason unary Exec gives in stderr.
            assert_eq!(exit.message, String::from_utf8_lossy(&unary.stderr).trim());
        }
    }
    // A command that ran to its exit has no message, whatever its code.
    let mut stream = raw
        .exec_stream(proto::ExecRequest { command: "exit 3".into(), ..run(None, None) })
        .await
        .unwrap()
        .into_inner();
    let mut last = None;
    while let Some(message) = stream.message().await.unwrap() {
        last = message.response;
    }
    match last {
        Some(proto::exec_stream_response::Response::Exit(e)) => {
            assert_eq!((e.return_code, e.error_type.as_str(), e.message.as_str()), (3, "", ""))
        }
        other => panic!("the last message is not an exit: {other:?}"),
    }
    sandbox.stop().await.unwrap();
    assert!(label.containers().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_sandbox_is_stopped_for_this_process_and_a_fresh_one() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let client = server.client().await;
    let sandbox = Sandbox::start(&client, spec(BUSYBOX)).await.expect("create");
    let id = sandbox.id().to_string();
    let status = |raw: &mut sandboxd_client::RawClient, id: &str| {
        let (mut raw, id) = (raw.clone(), id.to_string());
        async move { raw.status(proto::StatusRequest { sandbox_id: id }).await.map(|r| r.into_inner().status) }
    };
    let mut raw = client.raw();
    assert_eq!(status(&mut raw, &id).await.unwrap(), proto::SandboxStatus::Running as i32);
    raw.close(proto::CloseRequest { sandbox_id: id.clone() }).await.expect("close");
    assert_eq!(status(&mut raw, &id).await.unwrap(), proto::SandboxStatus::Stopped as i32);

    // A server that never saw the sandbox (as after a restart) gives the same answer.
    let fresh = TestService::start(&label, None);
    let mut other = fresh.client().await.raw();
    assert_eq!(status(&mut other, &id).await.unwrap(), proto::SandboxStatus::Stopped as i32);
    assert_eq!(SandboxStatus::from_wire(status(&mut other, &id).await.unwrap()), SandboxStatus::Stopped);
    // An id of another shape is still NOT_FOUND.
    assert_eq!(status(&mut other, "nosuch").await.unwrap_err().code(), tonic::Code::NotFound);
    assert!(label.containers().is_empty());
}
