//! Nothing leaks, nothing freezes: the `sandboxd` binary against the real daemon under
//! cancelled and crashed creates, leases, restarts, bad durations, TLS and shutdown.

mod common;
mod support;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::server::server_binary;
use common::TestLabel;
use sandboxd_client::proto;
use sandboxd_client::proto::sandbox_service_client::SandboxServiceClient;
use support::images::BUSYBOX;
use tonic::Code;

type RawClient = SandboxServiceClient<tonic::transport::Channel>;

/// A `sandboxd` started with a config of the test's own; its stderr goes to `log`.
struct Server {
    child: Child,
    addr: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Server {
    /// `config` holds the `docker` and `server` sections to add to the test defaults (the
    /// per-test label on every container, a 60 s exec timeout).
    fn start(label: &TestLabel, config: serde_json::Value, flags: &[&str]) -> Server {
        common::require_docker();
        let dir = tempfile::tempdir().unwrap();
        let mut body = serde_json::json!({
            "docker": {
                "create": {"extra_run_args": label.run_args()},
                "exec": {"default_timeout_s": 60.0},
            }
        });
        merge(&mut body, config);
        let path = dir.path().join("config.json");
        std::fs::write(&path, body.to_string()).unwrap();
        let log = dir.path().join("server.log");
        let mut cmd = Command::new(server_binary());
        cmd.args(["--listen", "127.0.0.1:0", "--config"])
            .arg(&path)
            .args(flags)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap());
        let (child, addr) = spawn_listening(cmd);
        Server { child, addr, log, _dir: dir }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    async fn raw(&self) -> RawClient {
        let channel = tonic::transport::Endpoint::from_shared(self.url()).unwrap().connect().await.unwrap();
        SandboxServiceClient::new(channel)
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn signal(&self, signal: nix::sys::signal::Signal) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), signal);
    }

    /// Wait for the exit, failing the test past `within` (a hang is the bug being tested).
    fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the server did not exit within {within:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `cmd` (stdout piped) and wait for its `sandboxd listening on ADDR` line.
fn spawn_listening(mut cmd: Command) -> (Child, String) {
    let mut child = cmd.spawn().expect("spawn sandboxd");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(addr) = line.strip_prefix("sandboxd listening on ") {
                let _ = tx.send(addr.trim().to_string());
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(addr) => (child, addr),
        Err(_) => {
            let _ = child.kill();
            panic!("sandboxd did not print its listening line");
        }
    }
}

fn merge(base: &mut serde_json::Value, extra: serde_json::Value) {
    match (base, extra) {
        (serde_json::Value::Object(b), serde_json::Value::Object(e)) => {
            for (k, v) in e {
                merge(b.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (b, e) => *b = e,
    }
}

fn busybox() -> proto::SandboxSpec {
    proto::SandboxSpec { image: BUSYBOX.into(), ..Default::default() }
}

async fn create_id(raw: &mut RawClient, spec: proto::SandboxSpec) -> String {
    raw.create(proto::CreateRequest { spec: Some(spec) })
        .await
        .expect("create")
        .into_inner()
        .sandbox
        .unwrap()
        .sandbox_id
}

fn exists(name: &str) -> bool {
    common::docker(&["inspect", "--type", "container", name]).status.success()
}

/// Poll until `done`, failing past `within` with `what`.
async fn eventually(within: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what} (waited {within:?})");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Container names (running or not) under the test's label.
fn names(label: &TestLabel) -> Vec<String> {
    let out = common::docker(&[
        "ps",
        "-a",
        "--filter",
        &format!("label=sandboxd.test.case={}", label.value),
        "--format",
        "{{.Names}}",
    ]);
    String::from_utf8_lossy(&out.stdout).split_whitespace().map(String::from).collect()
}

/// A probe that holds every create for `seconds` (the window the faults hit).
fn slow_probe(seconds: u32) -> serde_json::Value {
    serde_json::json!({"docker": {"probe": {
        "command": format!("sleep {seconds}; printf docker-sandbox-ready"),
        "timeout_s": 120,
    }}})
}

// ----- create: bounds, cancellation, crash -------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn absurd_durations_and_empty_ids_are_invalid_and_start_nothing() {
    let label = TestLabel::new();
    let server = Server::start(&label, serde_json::json!({}), &[]);
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
    assert!(names(&label).is_empty(), "a refused create started a container: {:?}", names(&label));

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
    let server = Server::start(&label, slow_probe(4), &[]);
    let mut raw = server.raw().await;

    // The deadline passes during the probe: DEADLINE_EXCEEDED, and the container goes.
    let mut request = tonic::Request::new(proto::CreateRequest { spec: Some(busybox()) });
    request.set_timeout(Duration::from_millis(1500));
    let err = raw.create(request).await.unwrap_err();
    // The server answers DEADLINE_EXCEEDED; the client's own timer may report it first.
    assert!(matches!(err.code(), Code::DeadlineExceeded | Code::Cancelled), "{err:?}");
    eventually(Duration::from_secs(30), "the timed-out create left its container", || {
        names(&label).is_empty()
    })
    .await;

    // The caller goes away (its call dropped) after docker run: the create still finishes,
    // then removes what nobody will ever know the id of.
    let mut caller = server.raw().await;
    let call =
        tokio::spawn(async move { caller.create(proto::CreateRequest { spec: Some(busybox()) }).await });
    eventually(Duration::from_secs(30), "the create never started its container", || {
        !names(&label).is_empty()
    })
    .await;
    call.abort();
    eventually(Duration::from_secs(30), "the abandoned create left its container", || {
        names(&label).is_empty()
    })
    .await;
    assert!(server.logs().contains("the caller went away"), "{}", server.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_killed_mid_create_leaves_nothing_once_a_server_runs_again() {
    let label = TestLabel::new();
    let mut config = slow_probe(60);
    merge(&mut config, serde_json::json!({"server": {"create_timeout_s": 3, "sweep_interval_s": 1}}));
    let mut first = Server::start(&label, config.clone(), &[]);
    let mut caller = first.raw().await;
    let call =
        tokio::spawn(async move { caller.create(proto::CreateRequest { spec: Some(busybox()) }).await });
    eventually(Duration::from_secs(30), "the create never started its container", || {
        !names(&label).is_empty()
    })
    .await;
    first.signal(nix::sys::signal::Signal::SIGKILL);
    first.wait_exit(Duration::from_secs(10));
    let _ = call.await;
    let leaked = names(&label);
    assert_eq!(leaked.len(), 1, "{leaked:?}");
    assert!(leaked[0].starts_with("sandboxd-creating-"), "an unfinished create is named as such: {leaked:?}");

    // Any server on this daemon removes it once its create deadline (plus a grace) passed.
    let second = Server::start(&label, serde_json::json!({"server": {"sweep_interval_s": 1}}), &[]);
    eventually(Duration::from_secs(60), "the abandoned create was never swept", || names(&label).is_empty())
        .await;
    let logs = second.logs();
    assert!(
        logs.lines().any(|l| l.contains(&leaked[0]) && l.contains("create never completed")),
        "the removal is logged with its reason:\n{logs}"
    );
}

// ----- leases -------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn set_timeout_moves_the_lease_and_a_restarted_server_keeps_it() {
    let label = TestLabel::new();
    let fast = serde_json::json!({"server": {"sweep_interval_s": 1}});
    let mut first = Server::start(&label, fast.clone(), &[]);
    let mut raw = first.raw().await;

    // Extended: created with a 3 s lease, moved to an hour, outlives both the label and a restart.
    let extended = create_id(&mut raw, proto::SandboxSpec { ttl_s: Some(3.0), ..busybox() }).await;
    let before = sandboxd::lease::now_ms();
    let moved = raw
        .set_timeout(proto::SetTimeoutRequest { sandbox_id: extended.clone(), ttl_s: 3600.0 })
        .await
        .unwrap()
        .into_inner();
    assert!(
        (before + 3_590_000..=sandboxd::lease::now_ms() + 3_600_000).contains(&moved.expires_at_unix_ms),
        "{moved:?}"
    );
    // Shortened: no lease at create, then two seconds.
    let shortened = create_id(&mut raw, busybox()).await;
    raw.set_timeout(proto::SetTimeoutRequest { sandbox_id: shortened.clone(), ttl_s: 2.0 }).await.unwrap();
    let unknown = raw
        .set_timeout(proto::SetTimeoutRequest {
            sandbox_id: "sandboxd-0123456789abcdef0123456789abcdef".into(),
            ttl_s: 5.0,
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);

    first.signal(nix::sys::signal::Signal::SIGKILL);
    first.wait_exit(Duration::from_secs(10));
    let second = Server::start(&label, fast, &[]);
    eventually(Duration::from_secs(30), "the restarted server did not end the shortened lease", || {
        !exists(&shortened)
    })
    .await;
    assert!(
        second.logs().lines().any(|l| l.contains(&shortened) && l.contains("lease expired")),
        "{}",
        second.logs()
    );
    // Well past the 3 s of its label, the extended one is still served.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut raw = second.raw().await;
    let out = raw
        .exec(proto::ExecRequest {
            sandbox_id: extended.clone(),
            command: "echo alive".into(),
            ..Default::default()
        })
        .await
        .expect("the extended sandbox is still there")
        .into_inner();
    assert_eq!(out.stdout, b"alive\n");
    raw.close(proto::CloseRequest { sandbox_id: extended }).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn operator_lease_policy_caps_and_defaults() {
    let label = TestLabel::new();
    let policy = serde_json::json!({"server": {"max_ttl_s": 30, "default_ttl_s": 2, "sweep_interval_s": 1}});
    let server = Server::start(&label, policy, &[]);
    let mut raw = server.raw().await;
    let defaulted = create_id(&mut raw, busybox()).await;
    let capped = create_id(&mut raw, busybox()).await;
    let t = sandboxd::lease::now_ms();
    let moved = raw
        .set_timeout(proto::SetTimeoutRequest { sandbox_id: capped.clone(), ttl_s: 86_400.0 })
        .await
        .unwrap()
        .into_inner();
    assert!(
        moved.expires_at_unix_ms <= sandboxd::lease::now_ms() + 30_000
            && moved.expires_at_unix_ms >= t + 29_000,
        "capped at max_ttl_s: {moved:?}"
    );
    eventually(Duration::from_secs(30), "default_ttl_s did not end a sandbox created without ttl_s", || {
        !exists(&defaulted)
    })
    .await;
    assert!(exists(&capped));
    raw.close(proto::CloseRequest { sandbox_id: capped }).await.unwrap();
}

// ----- TLS ----------------------------------------------------------------------------------

/// A CA, a server certificate for `localhost`/127.0.0.1 and a client certificate, as PEM files.
struct Pki {
    dir: tempfile::TempDir,
    ca_pem: String,
    client_cert: String,
    client_key: String,
}

impl Pki {
    fn new() -> Pki {
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(rcgen::DnType::CommonName, "sandboxd test CA");
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
        let issuer = &*ca;
        let leaf = |names: Vec<String>| {
            let key = KeyPair::generate().unwrap();
            let cert = CertificateParams::new(names).unwrap().signed_by(&key, issuer).unwrap();
            (cert.pem(), key.serialize_pem())
        };
        let (server_cert, server_key) = leaf(vec!["localhost".into(), "127.0.0.1".into()]);
        let (client_cert, client_key) = leaf(vec!["trainer".into()]);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("server.pem"), server_cert).unwrap();
        std::fs::write(dir.path().join("server.key"), server_key).unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        Pki { dir, ca_pem: ca.pem(), client_cert, client_key }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_string_lossy().into_owned()
    }
}

async fn tls_channel(
    addr: &str,
    pki: &Pki,
    identity: bool,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    use tonic::transport::{Certificate, ClientTlsConfig, Identity};
    let mut tls =
        ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&pki.ca_pem)).domain_name("localhost");
    if identity {
        tls = tls.identity(Identity::from_pem(&pki.client_cert, &pki.client_key));
    }
    let port = addr.rsplit(':').next().unwrap();
    tonic::transport::Endpoint::from_shared(format!("https://localhost:{port}"))
        .unwrap()
        .tls_config(tls)?
        .connect()
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_and_mutual_tls_end_to_end() {
    let label = TestLabel::new();
    let pki = Pki::new();
    let (cert, key, ca) = (pki.path("server.pem"), pki.path("server.key"), pki.path("ca.pem"));
    let server = Server::start(&label, serde_json::json!({}), &["--tls-cert", &cert, "--tls-key", &key]);
    let mut raw =
        SandboxServiceClient::new(tls_channel(&server.addr, &pki, false).await.expect("TLS connect"));
    let id = create_id(&mut raw, busybox()).await;
    let out = raw
        .exec(proto::ExecRequest {
            sandbox_id: id.clone(),
            command: "echo over-tls".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(out.into_inner().stdout, b"over-tls\n");
    raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
    // Plain text to a TLS listener gets nowhere.
    let plain = tonic::transport::Endpoint::from_shared(server.url()).unwrap().connect().await;
    if let Ok(channel) = plain {
        let answer =
            SandboxServiceClient::new(channel).status(proto::StatusRequest { sandbox_id: "x".into() }).await;
        assert!(answer.is_err(), "{answer:?}");
    }

    let mutual = Server::start(
        &label,
        serde_json::json!({}),
        &["--tls-cert", &cert, "--tls-key", &key, "--tls-client-ca", &ca],
    );
    // Without a client certificate the handshake (or the first call) fails: the service, which
    // answers NOT_FOUND for an unknown id, is never reached.
    let unknown = || proto::StatusRequest { sandbox_id: "sandboxd-0123456789abcdef0123456789abcdef".into() };
    let reached = match tls_channel(&mutual.addr, &pki, false).await {
        Ok(channel) => SandboxServiceClient::new(channel)
            .status(unknown())
            .await
            .is_err_and(|e| e.code() == Code::NotFound),
        Err(_) => false,
    };
    assert!(!reached, "a client without a certificate reached the service");
    let mut raw =
        SandboxServiceClient::new(tls_channel(&mutual.addr, &pki, true).await.expect("mTLS connect"));
    let err = raw.status(unknown()).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "an authenticated client reaches the service: {err:?}");
}

#[test]
fn a_public_listener_with_a_token_but_no_tls_warns_that_the_token_travels_in_clear() {
    let label = TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "secret-token").unwrap();
    let log = dir.path().join("log");
    let config = dir.path().join("config.json");
    let body = serde_json::json!({"docker": {"create": {"extra_run_args": label.run_args()}}});
    std::fs::write(&config, body.to_string()).unwrap();
    let mut cmd = Command::new(server_binary());
    cmd.args(["--listen", "0.0.0.0:0", "--auth-token-file"])
        .arg(&token)
        .arg("--config")
        .arg(&config)
        .stdin(Stdio::null())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap());
    let (mut child, _) = spawn_listening(cmd);
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("clear text") && text.contains("--tls-cert"), "{text}");
}

// ----- shutdown -----------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_turns_health_not_serving_first_and_a_second_signal_exits_at_once() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    let label = TestLabel::new();
    let mut server = Server::start(&label, serde_json::json!({}), &["--drain-timeout-s", "120"]);
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;
    let channel = tonic::transport::Endpoint::from_shared(server.url()).unwrap().connect().await.unwrap();
    let mut watch = HealthClient::new(channel)
        .watch(tonic_health::pb::HealthCheckRequest { service: String::new() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(watch.message().await.unwrap().unwrap().status, ServingStatus::Serving as i32);

    // A call that would hold the drain for its whole 120 s.
    let mut exec_raw = raw.clone();
    let sandbox_id = id.clone();
    let in_flight = tokio::spawn(async move {
        exec_raw
            .exec(proto::ExecRequest { sandbox_id, command: "sleep 100".into(), ..Default::default() })
            .await
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    server.signal(nix::sys::signal::Signal::SIGTERM);
    let next =
        tokio::time::timeout(Duration::from_secs(10), watch.message()).await.expect("health never changed");
    assert_eq!(next.unwrap().unwrap().status, ServingStatus::NotServing as i32);
    assert!(server.child.try_wait().unwrap().is_none(), "the first signal drains");
    server.signal(nix::sys::signal::Signal::SIGTERM);
    let status = server.wait_exit(Duration::from_secs(10));
    assert!(!status.success(), "{status:?}");
    let _ = in_flight.await;
    // No docker client of this server is left on the host.
    let clients = Command::new("pgrep").args(["-f", &format!("docker exec.*{id}")]).output().unwrap();
    assert!(clients.stdout.is_empty(), "docker clients left: {}", String::from_utf8_lossy(&clients.stdout));
    let _ = common::docker(&["rm", "-f", &id]);
}

#[tokio::test(flavor = "multi_thread")]
async fn remove_on_shutdown_runs_beside_the_drain_and_catches_creates_that_complete_meanwhile() {
    let label = TestLabel::new();
    let mut server =
        Server::start(&label, slow_probe(3), &["--remove-on-shutdown", "--drain-timeout-s", "20"]);
    let mut raw = server.raw().await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(create_id(&mut raw, busybox()).await);
    }
    // One more create is under way when the signal comes; it completes during the drain.
    let mut late = raw.clone();
    let pending =
        tokio::spawn(async move { late.create(proto::CreateRequest { spec: Some(busybox()) }).await });
    eventually(Duration::from_secs(30), "the late create never started", || names(&label).len() == 4).await;
    server.signal(nix::sys::signal::Signal::SIGTERM);
    let status = server.wait_exit(Duration::from_secs(40));
    assert!(status.success(), "{status:?}");
    let answer = pending.await.unwrap();
    assert!(answer.is_err(), "a create completing during a removing shutdown is not handed out: {answer:?}");
    assert!(names(&label).is_empty(), "left behind: {:?}", names(&label));
}
