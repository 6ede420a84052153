//! The backend conformance suite (issue 36): the same checks, through the gRPC API, on every
//! backend — the in-memory fake (`fake.rs`), Docker, and Swarm where the cluster suites run —
//! so what the layers above the seam rely on is what each backend answers. A check takes a
//! client of a server over the backend under test and the image its sandboxes use; its
//! commands stay within the fake's shell (`echo`, `exit N`, `cat FILE`).
//!
//! `server/tests/conformance.rs` runs [`run_all`] on the fake and on Docker;
//! `server/tests/cluster.rs` on a 3-node Swarm, through a node that does not own the sandbox.

use std::collections::HashMap;

use sandboxd_client::{proto, Client, ListOptions, Sandbox, SandboxStatus};
use tonic::Code;

/// A valid id no backend has.
const UNKNOWN_ID: &str = "sandboxd-00000000000000000000000000000000";

/// Every check, in order, each named in its failure.
pub async fn run_all(client: &Client, image: &str) {
    create_exec_close(client, image).await;
    spec_files_are_in_the_sandbox(client, image).await;
    uploads_download_back(client, image).await;
    unknown_and_malformed_ids(client).await;
    a_paused_sandbox_refuses_exec_until_resumed(client, image).await;
    reset_restores_the_spec_files(client, image).await;
    list_finds_a_sandbox_by_its_labels(client, image).await;
    usage_is_reported_and_the_close_answers_once(client, image).await;
    capabilities_are_answered_or_refused_by_the_table(client, image).await;
}

fn spec(image: &str) -> proto::SandboxSpec {
    proto::SandboxSpec { image: image.into(), ..Default::default() }
}

fn code_of(result: sandboxd_client::Result<impl std::fmt::Debug>) -> Code {
    match result {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.code(),
    }
}

/// Create answers a running sandbox; exec returns output and exit codes byte for byte; after
/// the close it is gone (Status reads stopped, Exec is NOT_FOUND).
pub async fn create_exec_close(client: &Client, image: &str) {
    let sandbox = Sandbox::start(client, spec(image)).await.expect("create_exec_close: create");
    assert_eq!(sandbox.status().await.expect("status"), SandboxStatus::Running, "create_exec_close");
    let hello = sandbox.exec("echo hello conformance").await.expect("create_exec_close: exec");
    assert_eq!((hello.return_code, hello.stdout.as_slice()), (0, &b"hello conformance\n"[..]));
    let three = sandbox.exec("exit 3").await.expect("create_exec_close: exec exit 3");
    assert_eq!(three.return_code, 3, "create_exec_close: exit 3 is the command's own code");
    let id = sandbox.id().to_string();
    sandbox.stop().await.expect("create_exec_close: close");
    // Gone reads stopped (NeMo Gym's status of a removed sandbox).
    let stopped = Ok(proto::SandboxStatus::Stopped as i32);
    assert_eq!(status_of(client, &id).await, stopped, "create_exec_close: Status after Close");
    assert_eq!(exec_in(client, &id).await, Err(Code::NotFound), "create_exec_close: Exec after Close");
}

/// `Status` of `id` through the stub: the status, or the call's code.
async fn status_of(client: &Client, id: &str) -> Result<i32, Code> {
    let answer = client.raw().status(proto::StatusRequest { sandbox_id: id.into() }).await;
    answer.map(|s| s.into_inner().status).map_err(|s| s.code())
}

/// `echo x` through the stub's `Exec` in `id`: `Ok` when the call was answered, else its code.
async fn exec_in(client: &Client, id: &str) -> Result<(), Code> {
    let request =
        proto::ExecRequest { sandbox_id: id.into(), command: "echo x".into(), ..Default::default() };
    client.raw().exec(request).await.map(|_| ()).map_err(|s| s.code())
}

/// `spec.files` are in the sandbox when its create answers.
pub async fn spec_files_are_in_the_sandbox(client: &Client, image: &str) {
    let spec = proto::SandboxSpec {
        files: [("/tmp/conformance/a.txt".to_string(), b"alpha".to_vec())].into(),
        ..spec(image)
    };
    let sandbox = Sandbox::start(client, spec).await.expect("spec_files: create");
    let cat = sandbox.exec("cat /tmp/conformance/a.txt").await.expect("spec_files: cat");
    assert_eq!((cat.return_code, cat.stdout.as_slice()), (0, &b"alpha"[..]), "spec_files: {cat:?}");
    sandbox.stop().await.expect("spec_files: close");
}

/// An upload is read back by exec and by a download; a missing file is NOT_FOUND.
pub async fn uploads_download_back(client: &Client, image: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (local, back) = (dir.path().join("up.bin"), dir.path().join("down.bin"));
    let bytes: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&local, &bytes).unwrap();
    let sandbox = Sandbox::start(client, spec(image)).await.expect("uploads: create");
    let sent = sandbox.upload(&local, "/tmp/up.bin").await.expect("uploads: upload");
    assert_eq!(sent, bytes.len() as u64, "uploads: bytes sent");
    let got = sandbox.download("/tmp/up.bin", &back).await.expect("uploads: download");
    assert_eq!(got, bytes.len() as u64, "uploads: bytes received");
    assert!(std::fs::read(&back).unwrap() == bytes, "uploads: the download differs from the upload");
    let missing = sandbox.download("/tmp/no-such-file", dir.path().join("none")).await;
    assert_eq!(code_of(missing), Code::NotFound, "uploads: a missing file");
    sandbox.stop().await.expect("uploads: close");
}

/// Exec on an id no sandbox has, or of a shape no sandbox id has, is NOT_FOUND (Status reads
/// it stopped); an empty id is INVALID_ARGUMENT.
pub async fn unknown_and_malformed_ids(client: &Client) {
    assert_eq!(exec_in(client, UNKNOWN_ID).await, Err(Code::NotFound), "unknown_ids: Exec of an unknown id");
    // Status answers for an id that names nothing, as for one closed: stopped (NeMo Gym's).
    let stopped = Ok(proto::SandboxStatus::Stopped as i32);
    assert_eq!(status_of(client, UNKNOWN_ID).await, stopped, "unknown_ids: Status");
    let bad = exec_in(client, "not an id; rm -rf /").await;
    assert_eq!(bad, Err(Code::NotFound), "unknown_ids: a malformed id");
    assert_eq!(exec_in(client, "").await, Err(Code::InvalidArgument), "unknown_ids: an empty id");
}

/// A paused sandbox refuses exec with FAILED_PRECONDITION and reads `paused`; resumed, it runs.
pub async fn a_paused_sandbox_refuses_exec_until_resumed(client: &Client, image: &str) {
    let sandbox = Sandbox::start(client, spec(image)).await.expect("pause: create");
    sandbox.pause().await.expect("pause: pause");
    assert_eq!(sandbox.status().await.expect("pause: status"), SandboxStatus::Paused, "pause: status");
    let refused = sandbox.exec("echo x").await;
    assert_eq!(code_of(refused), Code::FailedPrecondition, "pause: exec in a paused sandbox");
    sandbox.resume().await.expect("pause: resume");
    let ran = sandbox.exec("echo back").await.expect("pause: exec after resume");
    assert_eq!(ran.stdout, b"back\n", "pause: {ran:?}");
    sandbox.stop().await.expect("pause: close");
}

/// Reset puts the spec's files back and removes what was added since.
pub async fn reset_restores_the_spec_files(client: &Client, image: &str) {
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("added.txt");
    std::fs::write(&local, b"added").unwrap();
    let spec = proto::SandboxSpec {
        files: [("/tmp/r/spec.txt".to_string(), b"original".to_vec())].into(),
        ..spec(image)
    };
    let sandbox = Sandbox::start(client, spec).await.expect("reset: create");
    sandbox.upload(&local, "/tmp/r/spec.txt").await.expect("reset: overwrite");
    sandbox.upload(&local, "/tmp/r/added.txt").await.expect("reset: add");
    sandbox.reset().await.expect("reset: reset");
    let spec_file = sandbox.exec("cat /tmp/r/spec.txt").await.expect("reset: cat");
    assert_eq!(spec_file.stdout, b"original", "reset: the spec's file is back: {spec_file:?}");
    let added = sandbox.exec("cat /tmp/r/added.txt").await.expect("reset: cat added");
    assert_ne!(added.return_code, 0, "reset: the added file is gone: {added:?}");
    sandbox.stop().await.expect("reset: close");
}

/// List by a label finds exactly the sandbox carrying it, running, with its labels.
pub async fn list_finds_a_sandbox_by_its_labels(client: &Client, image: &str) {
    let mark = format!("{:x}", std::process::id() as u128 * 1_000_003 + now_ns() % 1_000_003);
    let labels: HashMap<String, String> = [("conformance".to_string(), mark)].into();
    let labelled = proto::SandboxSpec { metadata: labels.clone(), ..spec(image) };
    let sandbox = Sandbox::start(client, labelled).await.expect("list: create");
    let other = Sandbox::start(client, spec(image)).await.expect("list: create another");
    let found =
        client.list_all(ListOptions { labels: labels.clone(), ..Default::default() }).await.expect("list");
    let ids: Vec<&str> = found.iter().map(|s| s.sandbox_id.as_str()).collect();
    assert_eq!(ids, [sandbox.id()], "list: only the labelled sandbox");
    assert_eq!(found[0].status, SandboxStatus::Running, "list: its state");
    assert_eq!(found[0].metadata.get("conformance"), labels.get("conformance"), "list: its labels");
    other.stop().await.expect("list: close the other");
    sandbox.stop().await.expect("list: close");
}

fn now_ns() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

/// Usage answers with time that has passed; the close answers its usage once, and a second
/// close of the same id is a success that changes nothing.
pub async fn usage_is_reported_and_the_close_answers_once(client: &Client, image: &str) {
    let sandbox = Sandbox::start(client, spec(image)).await.expect("usage: create");
    sandbox.exec("echo one").await.expect("usage: exec");
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let usage = sandbox.usage().await.expect("usage: usage");
    assert!(usage.wall_time_s > 0.0, "usage: wall time passes: {usage:?}");
    let id = sandbox.id().to_string();
    let closed = sandbox.stop_with_usage().await.expect("usage: close");
    assert!(closed.is_some_and(|u| u.wall_time_s >= usage.wall_time_s), "usage: the close's receipt");
    let again = client.raw().close(proto::CloseRequest { sandbox_id: id }).await;
    assert!(again.is_ok(), "usage: a second close succeeds: {again:?}");
}

/// Each probed capability (`sandboxd::core::capabilities`) is either answered (any code but
/// UNIMPLEMENTED: the backend declares it and implements the call) or refused by the
/// backend's declared table (UNIMPLEMENTED naming the capability). A backend that declares a
/// capability and forgets one of its calls answers "a defect: … declares …" and fails here.
/// Not probed: port forwards, egress, templates and image prefetch (no call that changes
/// nothing).
pub async fn capabilities_are_answered_or_refused_by_the_table(client: &Client, image: &str) {
    let sandbox = Sandbox::start(client, spec(image)).await.expect("capabilities: create");
    let id = sandbox.id().to_string();
    let mut raw = client.raw();
    let answered = |r: Result<(), tonic::Status>| r.err();
    let probes: Vec<(&str, Option<tonic::Status>)> = vec![
        ("snapshots", answered(raw.list_snapshots(proto::ListSnapshotsRequest::default()).await.map(drop))),
        (
            "terminal_sessions",
            answered(
                raw.list_pty_sessions(proto::ListPtySessionsRequest { sandbox_id: id.clone() })
                    .await
                    .map(drop),
            ),
        ),
        (
            "processes",
            answered(
                raw.list_processes(proto::ListProcessesRequest { sandbox_id: id.clone() }).await.map(drop),
            ),
        ),
        (
            "file_calls",
            answered(
                raw.stat(proto::StatRequest {
                    sandbox_id: id.clone(),
                    path: b"/".to_vec(),
                    ..Default::default()
                })
                .await
                .map(drop),
            ),
        ),
        ("usage", answered(raw.usage(proto::UsageRequest { sandbox_id: id.clone() }).await.map(drop))),
        ("stats", answered(raw.stats(proto::StatsRequest { sandbox_id: id.clone() }).await.map(drop))),
        (
            "network_address",
            answered(
                raw.network_address(proto::NetworkAddressRequest { sandbox_id: id.clone() }).await.map(drop),
            ),
        ),
        ("volumes", answered(raw.list_volumes(proto::ListVolumesRequest {}).await.map(drop))),
        ("reset", answered(raw.reset(proto::ResetRequest { sandbox_id: id.clone() }).await.map(drop))),
        // Last: where it is offered, the sandbox sleeps (or the runtime refuses it).
        (
            "live_checkpoints",
            answered(raw.hibernate(proto::HibernateRequest { sandbox_id: id.clone() }).await.map(drop)),
        ),
    ];
    for (capability, refusal) in probes {
        if let Some(status) = refusal.filter(|s| s.code() == Code::Unimplemented) {
            let message = status.message();
            assert!(
                message.contains(&format!("does not offer {capability}")),
                "capabilities: {capability} was neither answered nor refused by the backend's table: {message}"
            );
        }
    }
    sandbox.stop().await.expect("capabilities: close");
}
