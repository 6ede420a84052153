//! Creates that fail, time out or lose their caller or their server leave nothing behind: bad
//! durations and empty ids are refused before anything starts (in-process); a create whose
//! deadline passes or whose caller leaves, and one whose server is SIGKILLed mid-create (the
//! binary), end with no container once a server runs.

use std::time::Duration;

use sandboxd_client::proto;
use testkit::config::{merge, slow_probe};
use testkit::raw::{busybox, create_id};
use testkit::server::TestServer;
use testkit::service::TestService;
use testkit::wait::eventually;
use testkit::TestLabel;
use tonic::Code;

/// The server binary Cargo built for these tests.
const SANDBOXD: &str = env!("CARGO_BIN_EXE_sandboxd");

#[tokio::test(flavor = "multi_thread")]
async fn absurd_durations_and_empty_ids_are_invalid_and_start_nothing() {
    let label = TestLabel::new();
    let server = TestService::start_json(&label, serde_json::json!({}));
    let mut raw = server.raw().await;
    for spec in [
        proto::SandboxSpec { ready_timeout_s: Some(1e20), ..busybox() },
        proto::SandboxSpec { ttl_s: Some(1e20), ..busybox() },
        proto::SandboxSpec { ttl_s: Some(f64::NAN), ..busybox() },
    ] {
        let err = raw.create(proto::CreateRequest { spec: Some(spec) }).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains("spec."), "names the field: {}", err.message());
    }
    assert!(label.names().is_empty(), "a refused create started a container: {:?}", label.names());

    let id = create_id(&mut raw, busybox()).await;
    let exec = proto::ExecRequest {
        sandbox_id: id.clone(),
        command: "true".into(),
        timeout_s: Some(1e20),
        ..Default::default()
    };
    let err = raw.exec(exec).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("timeout_s"), "{}", err.message());
    for ttl_s in [0.0, -1.0, 1e20, f64::INFINITY] {
        let err =
            raw.set_timeout(proto::SetTimeoutRequest { sandbox_id: id.clone(), ttl_s }).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "ttl_s {ttl_s}");
        assert!(err.message().contains("ttl_s"), "{}", err.message());
    }

    // An empty sandbox_id is INVALID_ARGUMENT on every RPC that takes one.
    let empty = String::new;
    let codes = vec![
        (
            "Exec",
            raw.exec(proto::ExecRequest {
                sandbox_id: empty(),
                command: "true".into(),
                ..Default::default()
            })
            .await
            .err(),
        ),
        ("Status", raw.status(proto::StatusRequest { sandbox_id: empty() }).await.err()),
        ("Close", raw.close(proto::CloseRequest { sandbox_id: empty() }).await.err()),
        ("Endpoint", raw.endpoint(proto::EndpointRequest { sandbox_id: empty(), port: 80 }).await.err()),
        (
            "SetTimeout",
            raw.set_timeout(proto::SetTimeoutRequest { sandbox_id: empty(), ttl_s: 5.0 }).await.err(),
        ),
        (
            "Connect",
            raw.connect(proto::ConnectRequest {
                sandbox: Some(proto::SandboxRef { sandbox_id: empty(), ..Default::default() }),
            })
            .await
            .err(),
        ),
        (
            "Download",
            match raw
                .download(proto::DownloadRequest { sandbox_id: empty(), path: "/etc/passwd".into() })
                .await
            {
                Ok(stream) => stream.into_inner().message().await.err(),
                Err(e) => Some(e),
            },
        ),
        (
            "Upload",
            raw.upload(tokio_stream::iter(vec![proto::UploadRequest {
                request: Some(proto::upload_request::Request::Header(proto::UploadHeader {
                    sandbox_id: empty(),
                    path: "/tmp/x".into(),
                    ..Default::default()
                })),
            }]))
            .await
            .err(),
        ),
        (
            "Pty",
            raw.pty(tokio_stream::iter(vec![proto::PtyRequest {
                request: Some(proto::pty_request::Request::Open(proto::PtyOpen {
                    sandbox_id: empty(),
                    ..Default::default()
                })),
            }]))
            .await
            .err(),
        ),
    ];
    for (rpc, err) in codes {
        let err = err.unwrap_or_else(|| panic!("{rpc} with an empty sandbox_id succeeded"));
        assert_eq!(err.code(), Code::InvalidArgument, "{rpc}: {err:?}");
        assert!(err.message().contains("sandbox_id"), "{rpc}: {}", err.message());
    }
    raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_create_whose_deadline_passes_or_whose_caller_leaves_removes_its_container() {
    let label = TestLabel::new();
    let server = TestServer::launch(SANDBOXD, &label).config(slow_probe(4)).start();
    let mut raw = server.raw().await;

    // The deadline passes during the probe: DEADLINE_EXCEEDED, and the container goes.
    let mut request = tonic::Request::new(proto::CreateRequest { spec: Some(busybox()) });
    request.set_timeout(Duration::from_millis(1500));
    let err = raw.create(request).await.unwrap_err();
    // The server answers DEADLINE_EXCEEDED; the client's own timer may report it first.
    assert!(matches!(err.code(), Code::DeadlineExceeded | Code::Cancelled), "{err:?}");
    eventually(Duration::from_secs(30), "the timed-out create left its container", || {
        label.names().is_empty()
    })
    .await;

    // The caller goes away (its call dropped) after docker run: the create still finishes,
    // then removes what nobody will ever know the id of.
    let mut caller = server.raw().await;
    let call =
        tokio::spawn(async move { caller.create(proto::CreateRequest { spec: Some(busybox()) }).await });
    eventually(Duration::from_secs(30), "the create never started its container", || {
        !label.names().is_empty()
    })
    .await;
    call.abort();
    eventually(Duration::from_secs(30), "the abandoned create left its container", || {
        label.names().is_empty()
    })
    .await;
    assert!(server.logs().contains("the caller went away"), "{}", server.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_killed_mid_create_leaves_nothing_once_a_server_runs_again() {
    let label = TestLabel::new();
    let mut config = slow_probe(60);
    merge(&mut config, serde_json::json!({"server": {"create_timeout_s": 3, "sweep_interval_s": 1}}));
    let mut first = TestServer::launch(SANDBOXD, &label).config(config.clone()).start();
    let mut caller = first.raw().await;
    let call =
        tokio::spawn(async move { caller.create(proto::CreateRequest { spec: Some(busybox()) }).await });
    eventually(Duration::from_secs(30), "the create never started its container", || {
        !label.names().is_empty()
    })
    .await;
    first.signal(nix::sys::signal::Signal::SIGKILL);
    first.wait_exit(Duration::from_secs(10));
    let _ = call.await;
    let leaked = label.names();
    assert_eq!(leaked.len(), 1, "{leaked:?}");
    assert!(leaked[0].starts_with("sandboxd-creating-"), "an unfinished create is named as such: {leaked:?}");

    // Any server on this daemon removes it once its create deadline (plus a grace) passed.
    let second = TestServer::launch(SANDBOXD, &label)
        .config(serde_json::json!({"server": {"sweep_interval_s": 1}}))
        .start();
    eventually(Duration::from_secs(60), "the abandoned create was never swept", || label.names().is_empty())
        .await;
    let logs = second.logs();
    assert!(
        logs.lines().any(|l| l.contains(&leaked[0]) && l.contains("create never completed")),
        "the removal is logged with its reason:\n{logs}"
    );
}
