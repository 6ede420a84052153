//! Background processes (issue 19) through the gRPC API, the service in-process, against the real
//! daemon: `StartProcess` returns at once and the process outlives every client, `AttachProcess`
//! replays retained output from an offset and follows it, a second attach takes over, signals
//! reach the whole process group, terminals are sized, and every bad input or unknown id gets
//! its status. The docker exec engine answers FAILED_PRECONDITION naming why.

use std::time::Duration;

use sandboxd::config::ExecEngineKind;
use sandboxd_client::proto;
use testkit::raw::{busybox, create_id, RawClient};
use testkit::service::TestService;
use testkit::TestLabel;
use tonic::Code;

fn start_req(id: &str, command: &str) -> proto::StartProcessRequest {
    proto::StartProcessRequest { sandbox_id: id.into(), command: command.into(), ..Default::default() }
}

async fn start(raw: &mut RawClient, id: &str, command: &str) -> String {
    raw.start_process(start_req(id, command)).await.expect("start").into_inner().process_id
}

async fn list(raw: &mut RawClient, id: &str) -> Vec<proto::ProcessInfo> {
    raw.list_processes(proto::ListProcessesRequest { sandbox_id: id.into() })
        .await
        .expect("list")
        .into_inner()
        .processes
}

async fn find(raw: &mut RawClient, id: &str, process_id: &str) -> proto::ProcessInfo {
    list(raw, id).await.into_iter().find(|p| p.process_id == process_id).expect("the process is listed")
}

async fn exec(raw: &mut RawClient, id: &str, command: &str) -> String {
    let out = testkit::raw::exec(raw, id, command).await;
    String::from_utf8_lossy(&out.stdout).into_owned()
}

type Events = tonic::Streaming<proto::AttachProcessResponse>;

async fn attach(
    raw: &mut RawClient,
    id: &str,
    process_id: &str,
    since: Option<u64>,
) -> Result<Events, tonic::Status> {
    let req = proto::AttachProcessRequest { sandbox_id: id.into(), process_id: process_id.into(), since };
    raw.attach_process(req).await.map(|r| r.into_inner())
}

/// Reads until `text` was seen in the output (or the stream ended / 20 s passed): the output,
/// the first offset, the exit code if it came.
async fn read_until(events: &mut Events, text: &str) -> (String, Option<u64>, Option<i32>) {
    use proto::attach_process_response::Event;
    let (mut out, mut first, mut code) = (Vec::new(), None, None);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !String::from_utf8_lossy(&out).contains(text) {
        let next = tokio::time::timeout_at(deadline, events.message()).await;
        match next {
            Ok(Ok(Some(m))) => match m.event {
                Some(Event::Attached(a)) => first = first.or(Some(a.offset)),
                Some(Event::Output(o)) => out.extend(o.data),
                Some(Event::Exited(e)) => {
                    code = Some(e.exit_code);
                    break;
                }
                None => {}
            },
            Ok(Ok(None)) | Err(_) => break,
            Ok(Err(status)) => panic!("attach failed: {status:?}"),
        }
    }
    (String::from_utf8_lossy(&out).into_owned(), first, code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_outlives_its_clients_and_replays_from_an_offset() {
    if testkit::engine() == ExecEngineKind::Docker {
        return; // the docker engine's answer is its own test below
    }
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;

    // Returns at once; prints a numbered line every 50 ms, then waits to be told.
    let started = std::time::Instant::now();
    let reply = raw
        .start_process(proto::StartProcessRequest {
            env: [("WHO".to_string(), "proc".to_string())].into(),
            cwd: Some("/tmp".into()),
            ..start_req(&id, r#"i=0; while [ $i -lt 20 ]; do echo "$WHO line $i in $PWD"; i=$((i+1)); sleep 0.05; done; echo err-line >&2; exec sleep 600"#)
        })
        .await
        .expect("start")
        .into_inner();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(reply.pid > 0);
    let pid = reply.process_id;

    // A first client attaches from the start and leaves half-way: the process runs on.
    {
        let mut other = server.raw().await;
        let mut events = attach(&mut other, &id, &pid, Some(0)).await.expect("attach");
        let (out, first, code) = read_until(&mut events, "line 3 in /tmp").await;
        assert_eq!(first, Some(0));
        assert!(out.starts_with("proc line 0 in /tmp\n"), "{out:?}");
        assert_eq!(code, None);
    }
    // The rest was written with no client attached.
    let mut whole = attach(&mut raw, &id, &pid, None).await.expect("attach");
    let (out, first, _) = read_until(&mut whole, "err-line").await;
    assert_eq!(first, Some(0), "no since: from the oldest retained byte");
    assert!(out.contains("proc line 19 in /tmp\n") && out.contains("err-line\n"), "{out:?}");
    drop(whole);

    // `since` in the middle: exactly the rest of the bytes.
    let offset = out.find("proc line 10").unwrap() as u64;
    let mut tail = attach(&mut raw, &id, &pid, Some(offset)).await.expect("attach since");
    let (rest, first, _) = read_until(&mut tail, "err-line").await;
    assert_eq!(first, Some(offset));
    assert!(rest.starts_with("proc line 10 in /tmp\n"), "{rest:?}");
    drop(tail);

    let info = find(&mut raw, &id, &pid).await;
    assert!(info.running && info.exit_code.is_none(), "{info:?}");
    assert!(info.command.contains("while [ $i -lt 20 ]"), "{info:?}");
    assert!(info.started_at_unix_ms > 0 && !info.pty);
    assert_eq!(info.retained_bytes, info.end_offset - info.oldest_offset);
    assert!(info.retained_bytes as usize >= out.len());

    // Past the end is OUT_OF_RANGE naming where it ends.
    let Err(err) = attach(&mut raw, &id, &pid, Some(1 << 40)).await else { panic!("out of range") };
    assert_eq!(err.code(), Code::OutOfRange, "{err:?}");

    // SIGTERM ends it; an attached stream ends with the exit code; the listing keeps it.
    let mut live = attach(&mut raw, &id, &pid, Some(info.end_offset)).await.expect("attach live");
    raw.signal_process(proto::SignalProcessRequest {
        sandbox_id: id.clone(),
        process_id: pid.clone(),
        signal: "SIGTERM".into(),
    })
    .await
    .expect("signal");
    let (_, _, code) = read_until(&mut live, "\u{0}never").await;
    assert_eq!(code, Some(143));
    let info = find(&mut raw, &id, &pid).await;
    assert!(!info.running && info.exit_code == Some(143), "{info:?}");
    // An ended process still replays what it wrote.
    let mut after = attach(&mut raw, &id, &pid, None).await.expect("attach an ended process");
    let (out, _, code) = read_until(&mut after, "\u{0}never").await;
    assert!(out.contains("proc line 0"), "{out:?}");
    assert_eq!(code, Some(143));

    raw.close(proto::CloseRequest { sandbox_id: id }).await.expect("close");
    assert!(label.containers().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_reach_the_whole_group_and_a_second_attach_takes_over() {
    if testkit::engine() == ExecEngineKind::Docker {
        return;
    }
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;
    // A shell with two children in its group, none of which the shell passes a signal on to.
    let pid = start(&mut raw, &id, "sleep 4242 & sleep 4243 & echo started; wait").await;
    let mut first = attach(&mut raw, &id, &pid, None).await.expect("attach");
    let (out, _, _) = read_until(&mut first, "started").await;
    assert!(out.contains("started"));
    let running = exec(&mut raw, &id, "ps -o args | grep -c '^sleep 424[23]'").await;
    assert_eq!(running.trim(), "2", "both children run");

    // Another attach takes the process over: the first stream ends with ABORTED.
    let mut second = attach(&mut raw, &id, &pid, None).await.expect("second attach");
    let ended = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match first.message().await {
                Ok(Some(_)) => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("the first stream ends");
    let Err(status) = ended else { panic!("the first stream ended without a status: {ended:?}") };
    assert_eq!(status.code(), Code::Aborted, "{status:?}");
    assert!(status.message().contains("taken over"), "{status:?}");

    raw.signal_process(proto::SignalProcessRequest {
        sandbox_id: id.clone(),
        process_id: pid.clone(),
        signal: "KILL".into(),
    })
    .await
    .expect("signal");
    let (_, _, code) = read_until(&mut second, "\u{0}never").await;
    assert_eq!(code, Some(137));
    // The shell's own children were in its group: none survives (polled: they die as it does).
    let mut left = String::new();
    for _ in 0..50 {
        left = exec(&mut raw, &id, "ps -o args | grep -c '^sleep 424[23]'").await;
        if left.trim() == "0" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(left.trim(), "0", "the signal reached the whole group");

    // Bad input and unknown ids, each with its status and the field named.
    let bad = |signal: &str| proto::SignalProcessRequest {
        sandbox_id: id.clone(),
        process_id: pid.clone(),
        signal: signal.into(),
    };
    let err = raw.signal_process(bad("SIGFOO")).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("signal"), "{err:?}");
    let err = raw
        .signal_process(proto::SignalProcessRequest { process_id: "0123456789abcdef".into(), ..bad("TERM") })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    let Err(err) = attach(&mut raw, &id, "no/such", None).await else { panic!("a bad process id") };
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("process_id"), "{err:?}");
    for (req, field) in [
        (start_req(&id, "  "), "command"),
        (proto::StartProcessRequest { cwd: Some("tmp".into()), ..start_req(&id, "true") }, "cwd"),
        (proto::StartProcessRequest { user: Some("-x".into()), ..start_req(&id, "true") }, "user"),
        (proto::StartProcessRequest { pty: true, rows: 70000, ..start_req(&id, "true") }, "rows"),
        (proto::StartProcessRequest { argv: vec!["true".into()], ..start_req(&id, "true") }, "argv"),
    ] {
        let err = raw.start_process(req).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{field}: {err:?}");
        assert!(err.message().contains(field), "{field}: {err:?}");
    }
    let err = raw
        .start_process(proto::StartProcessRequest {
            user: Some("nosuchuser".into()),
            ..start_req(&id, "true")
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    let err =
        raw.start_process(start_req("sandboxd-0123456789abcdef0123456789abcdef", "true")).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");

    raw.close(proto::CloseRequest { sandbox_id: id }).await.expect("close");
    assert!(label.containers().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_under_a_terminal_is_sized_and_argv_needs_no_shell() {
    if testkit::engine() == ExecEngineKind::Docker {
        return;
    }
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;
    let pid = raw
        .start_process(proto::StartProcessRequest {
            pty: true,
            rows: 33,
            cols: 111,
            ..start_req(&id, "stty size; tty")
        })
        .await
        .expect("start")
        .into_inner()
        .process_id;
    let mut events = attach(&mut raw, &id, &pid, None).await.expect("attach");
    let (out, _, code) = read_until(&mut events, "\u{0}never").await;
    assert!(out.contains("33 111"), "{out:?}");
    assert!(out.contains("/dev/pts/"), "{out:?}");
    assert_eq!(code, Some(0));
    assert!(find(&mut raw, &id, &pid).await.pty);

    let pid = raw
        .start_process(proto::StartProcessRequest {
            argv: vec!["/bin/echo".into(), "no shell".into(), "$HOME".into()],
            ..start_req(&id, "")
        })
        .await
        .expect("start argv")
        .into_inner()
        .process_id;
    let mut events = attach(&mut raw, &id, &pid, None).await.expect("attach");
    let (out, _, code) = read_until(&mut events, "\u{0}never").await;
    assert_eq!((out.as_str(), code), ("no shell $HOME\n", Some(0)));
    let info = find(&mut raw, &id, &pid).await;
    assert_eq!(info.command, "/bin/echo no shell $HOME");

    raw.close(proto::CloseRequest { sandbox_id: id }).await.expect("close");
    assert!(label.containers().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_docker_exec_engine_says_why_it_cannot() {
    let label = TestLabel::new();
    let server = TestService::start_with(&label, None, |c| c.docker.exec.engine = ExecEngineKind::Docker);
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;
    let err = raw.start_process(start_req(&id, "sleep 1")).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("exec.engine: docker"), "{err:?}");
    let err = raw.list_processes(proto::ListProcessesRequest { sandbox_id: id.clone() }).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    raw.close(proto::CloseRequest { sandbox_id: id }).await.expect("close");
    assert!(label.containers().is_empty());
}
