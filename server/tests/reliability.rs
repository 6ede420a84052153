//! Nothing leaks, nothing freezes: the `sandboxd` binary against the real daemon under
//! cancelled and crashed creates, leases, restarts, TLS and shutdown; the service in-process
//! ([`Service`]) for bad durations, lease policy, pools, limits and blocked PTY input.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sandboxd_client::proto;
use sandboxd_client::proto::sandbox_service_client::SandboxServiceClient;
use testkit::images::BUSYBOX;
use testkit::private_docker::PrivateDocker;
use testkit::service::TestService;
use testkit::TestLabel;
use tonic::Code;

/// The server binary Cargo built for these tests.
const SANDBOXD: &str = env!("CARGO_BIN_EXE_sandboxd");

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
        Self::start_env(label, config, flags, &[])
    }

    /// As `start`, with environment variables (`DOCKER_HOST` of a private daemon).
    fn start_env(
        label: &TestLabel,
        config: serde_json::Value,
        flags: &[&str],
        env: &[(&str, &str)],
    ) -> Server {
        Self::start_wrapped(label, config, flags, env, None)
    }

    /// As `start_env`, the server exec'd by `sh -c "<prelude>; exec sandboxd …"` when a
    /// prelude is given (`trap '' INT QUIT`: started as by a shell's `&`).
    fn start_wrapped(
        label: &TestLabel,
        config: serde_json::Value,
        flags: &[&str],
        env: &[(&str, &str)],
        prelude: Option<&str>,
    ) -> Server {
        testkit::require_docker();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, config_body(label, config).to_string()).unwrap();
        let log = dir.path().join("server.log");
        let mut cmd = match prelude {
            Some(prelude) => {
                let mut cmd = Command::new("sh");
                cmd.arg("-c").arg(format!("{prelude}; exec \"$0\" \"$@\"")).arg(SANDBOXD);
                cmd
            }
            None => Command::new(SANDBOXD),
        };
        cmd.args(["--listen", "127.0.0.1:0", "--config"])
            .arg(&path)
            .args(flags)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
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

/// The service in-process, with the config `Server::start` would give the binary: for the tests
/// that only talk gRPC (no signal, restart, flag, log or environment of a process).
struct Service(TestService);

impl Service {
    fn start(label: &TestLabel, config: serde_json::Value) -> Service {
        let config =
            sandboxd::config::FileConfig::from_json_value(&config_body(label, config)).expect("config");
        Service(TestService::start_config(config, None))
    }

    async fn raw(&self) -> RawClient {
        let channel =
            tonic::transport::Endpoint::from_shared(self.0.url.clone()).unwrap().connect().await.unwrap();
        SandboxServiceClient::new(channel)
    }
}

/// The test defaults (the per-test label on every container, a 60 s exec timeout) with the
/// `docker` and `server` sections of `config` merged in.
fn config_body(label: &TestLabel, config: serde_json::Value) -> serde_json::Value {
    let mut body = serde_json::json!({
        "docker": {
            "create": {"extra_run_args": label.run_args()},
            "exec": {"default_timeout_s": 60.0},
        }
    });
    merge(&mut body, config);
    body
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
    testkit::docker(&["inspect", "--type", "container", name]).status.success()
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
    let out = testkit::docker(&[
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
    let server = Service::start(&label, serde_json::json!({}));
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
    let server = Service::start(&label, policy);
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

/// A lease runs from the moment the create completes: a create slower than its own `ttl_s`
/// (a 4 s readiness probe for a 3 s lease) hands out a sandbox with its whole lease ahead. The
/// lease used to count from before `docker run`, so under load sandboxes were swept seconds
/// after their create answered.
#[tokio::test(flavor = "multi_thread")]
async fn a_lease_runs_from_the_end_of_its_create() {
    let label = TestLabel::new();
    let mut config = slow_probe(4);
    merge(&mut config, serde_json::json!({"server": {"sweep_interval_s": 1}}));
    let server = Service::start(&label, config);
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, proto::SandboxSpec { ttl_s: Some(3.0), ..busybox() }).await;
    let handed_out = Instant::now();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let status = raw
        .status(proto::StatusRequest { sandbox_id: id.clone() })
        .await
        .expect("the sandbox is still there 1.5 s after its create answered")
        .into_inner();
    assert_eq!(status.status, proto::SandboxStatus::Running as i32, "{status:?}");
    eventually(Duration::from_secs(30), "the lease never ended the sandbox", || !exists(&id)).await;
    assert!(
        handed_out.elapsed() >= Duration::from_millis(2500),
        "the 3 s lease ended {:?} after the create answered",
        handed_out.elapsed()
    );
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
    let mut cmd = Command::new(SANDBOXD);
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
    let _ = testkit::docker(&["rm", "-f", &id]);
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

/// An idle server (no call in flight) ends its drain at once; its removal must still have the
/// drain timeout, not only the 2 s floor (it had only the floor: the drain timer that learnt
/// when the signal came was never polled). `docker rm` is made slower than the floor by a
/// `docker` on PATH that sleeps before it.
#[tokio::test(flavor = "multi_thread")]
async fn remove_on_shutdown_of_an_idle_server_gets_the_drain_timeout() {
    let label = TestLabel::new();
    let real = Command::new("sh").args(["-c", "command -v docker"]).output().unwrap();
    let real = String::from_utf8(real.stdout).unwrap().trim().to_string();
    assert!(!real.is_empty(), "no docker on PATH");
    let bin = tempfile::tempdir().unwrap();
    let wrapper = bin.path().join("docker");
    std::fs::write(&wrapper, format!("#!/bin/sh\ncase \"$1\" in rm) sleep 4;; esac\nexec {real} \"$@\"\n"))
        .unwrap();
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.path().display(), std::env::var("PATH").unwrap_or_default());
    let mut server = Server::start_env(
        &label,
        serde_json::json!({}),
        &["--remove-on-shutdown", "--drain-timeout-s", "20"],
        &[("PATH", &path)],
    );
    // The creates come from a runtime of their own, dropped before the signal: with its
    // connection gone the server has nothing to drain, as after clients that went home.
    std::thread::scope(|scope| {
        scope.spawn(|| {
            tokio::runtime::Runtime::new().unwrap().block_on(async {
                let mut raw = server.raw().await;
                for _ in 0..2 {
                    create_id(&mut raw, busybox()).await;
                }
            })
        });
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.signal(nix::sys::signal::Signal::SIGTERM);
    let status = server.wait_exit(Duration::from_secs(40));
    assert!(status.success(), "{status:?}");
    let left = names(&label);
    if !left.is_empty() {
        let _ = testkit::docker(
            &[&["rm", "-f"][..], &left.iter().map(String::as_str).collect::<Vec<_>>()].concat(),
        );
    }
    assert!(left.is_empty(), "left behind: {left:?}\n{}", server.logs());
}

/// Several callers removing one sandbox at once (a client's `Close` beside the sweep's, or two
/// `Close`s): docker answers the later `rm`s "removal of container … is already in progress".
/// Those wait for the removal and succeed (they were INTERNAL).
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_closes_of_one_sandbox_all_succeed() {
    let label = TestLabel::new();
    let server = Service::start(&label, serde_json::json!({}));
    let mut raw = server.raw().await;
    for _ in 0..3 {
        let id = create_id(&mut raw, busybox()).await;
        let closes: Vec<_> = (0..8)
            .map(|_| {
                let (mut client, id) = (raw.clone(), id.clone());
                tokio::spawn(async move { client.close(proto::CloseRequest { sandbox_id: id }).await })
            })
            .collect();
        for close in closes {
            let answer = close.await.unwrap();
            assert!(answer.is_ok(), "a Close beside another failed: {answer:?}");
        }
        assert!(names(&label).is_empty(), "left behind: {:?}", names(&label));
    }
}

/// A sandbox `docker kill`ed from outside while an upload streams into it (through its agent,
/// whose channel then ends) is the sandbox's state: NOT_FOUND or FAILED_PRECONDITION, never
/// INTERNAL (the soak saw "the exec agent … went away during the transfer" as INTERNAL).
#[tokio::test(flavor = "multi_thread")]
async fn an_upload_into_a_sandbox_killed_from_outside_names_its_state() {
    let label = TestLabel::new();
    let server = Service::start(&label, serde_json::json!({}));
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;
    // Open the agent channel first, so the upload goes through it.
    let warm = raw
        .exec(proto::ExecRequest { sandbox_id: id.clone(), command: "true".into(), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(warm.return_code, 0, "{warm:?}");
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(upload_header(&id, "/tmp/big", Some(64 << 20))).await.unwrap();
    tx.send(chunk(vec![7; 1 << 20])).await.unwrap();
    let mut client = raw.clone();
    let call =
        tokio::spawn(async move { client.upload(tokio_stream::wrappers::ReceiverStream::new(rx)).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    testkit::docker(&["kill", &id]);
    // Keep sending until the server gives up on the stream.
    for _ in 0..63 {
        if tx.send(chunk(vec![7; 1 << 20])).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(tx);
    let answer = tokio::time::timeout(Duration::from_secs(60), call).await.expect("the upload hung").unwrap();
    let status = answer.expect_err("an upload into a killed sandbox cannot succeed");
    assert!(
        matches!(status.code(), Code::NotFound | Code::FailedPrecondition),
        "a killed sandbox is NOT_FOUND or FAILED_PRECONDITION: {status:?}"
    );
    let _ = testkit::docker(&["rm", "-f", &id]);
}

// ----- pools and limits ---------------------------------------------------------------------

fn upload_header(sandbox_id: &str, path: &str, size: Option<u64>) -> proto::UploadRequest {
    proto::UploadRequest {
        request: Some(proto::upload_request::Request::Header(proto::UploadHeader {
            sandbox_id: sandbox_id.into(),
            path: path.into(),
            mode: None,
            size,
        })),
    }
}

fn chunk(bytes: Vec<u8>) -> proto::UploadRequest {
    proto::UploadRequest { request: Some(proto::upload_request::Request::Chunk(bytes)) }
}

#[tokio::test(flavor = "multi_thread")]
async fn stalled_transfers_never_freeze_control_calls_creates_or_other_transfers() {
    // The docker subprocess pools: the `docker exec` engine uses them for every exec and
    // transfer.
    stalled_transfers_on("docker").await;
}

/// The default engine (the agent: uploads go through its channel, large downloads through
/// `docker cp`): a stalled upload must end as DEADLINE_EXCEEDED there too (it was INTERNAL).
#[tokio::test(flavor = "multi_thread")]
async fn stalled_transfers_never_freeze_anything_on_the_default_engine() {
    stalled_transfers_on("agent").await;
}

async fn stalled_transfers_on(engine: &str) {
    let label = TestLabel::new();
    let config = serde_json::json!({
        "docker": {"exec": {"engine": engine, "concurrency": 2, "transfer_concurrency": 2}},
        "server": {"limits": {"transfer_idle_timeout_s": 3}},
    });
    let server = Service::start(&label, config);
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;
    let big = raw
        .exec(proto::ExecRequest {
            sandbox_id: id.clone(),
            command: "head -c 67108864 /dev/zero > /tmp/big".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(big.return_code, 0);

    // The abusive client has a connection of its own (unread streams on a shared connection
    // use up that connection's HTTP/2 window: a client-side matter).
    let abuser = server.raw().await;
    // Two uploads announce a size, then send nothing (their streams stay open).
    let mut stalled = Vec::new();
    for i in 0..2 {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        tx.send(upload_header(&id, &format!("/tmp/stalled{i}"), Some(10))).await.unwrap();
        let mut client = abuser.clone();
        let call =
            tokio::spawn(async move { client.upload(tokio_stream::wrappers::ReceiverStream::new(rx)).await });
        stalled.push((tx, call));
    }
    // Four downloads nobody reads.
    let mut unread = Vec::new();
    for _ in 0..4 {
        let mut client = abuser.clone();
        let request = proto::DownloadRequest { sandbox_id: id.clone(), path: "/tmp/big".into() };
        unread.push(tokio::spawn(async move {
            let stream = client.download(request).await;
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(stream);
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // Control calls, a create, an exec and a moving upload all still answer.
    let status = raw.status(proto::StatusRequest { sandbox_id: id.clone() }).await.expect("status answers");
    assert_eq!(status.into_inner().status, proto::SandboxStatus::Running as i32);
    let other = create_id(&mut raw, busybox()).await;
    let moving = raw
        .upload(tokio_stream::iter(vec![upload_header(&other, "/tmp/ok", Some(2)), chunk(b"ok".to_vec())]))
        .await
        .expect("an upload with data flowing gets a transfer permit");
    assert_eq!(moving.into_inner().bytes_written, 2);
    raw.close(proto::CloseRequest { sandbox_id: other }).await.expect("close answers");

    // The stalled uploads fail after the idle timeout instead of holding on forever.
    for (tx, call) in stalled {
        let answer =
            tokio::time::timeout(Duration::from_secs(30), call).await.expect("a stalled upload never ended");
        let err = answer.unwrap().unwrap_err();
        assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
        drop(tx);
    }
    for task in unread {
        task.abort();
    }
    raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}

/// The `docker exec` engine with one exec slot (the agent engine takes no permit for an exec).
static ONE_EXEC_SLOT: std::sync::LazyLock<serde_json::Value> = std::sync::LazyLock::new(
    || serde_json::json!({"docker": {"exec": {"engine": "docker", "concurrency": 1}}}),
);

type ExecCall = tokio::task::JoinHandle<Result<tonic::Response<proto::ExecResponse>, tonic::Status>>;

/// A `sleep` exec in `sandbox_id` that holds the only exec slot of an [`ONE_EXEC_SLOT`] server
/// for `seconds`, running once this returns.
async fn hold_the_exec_slot(raw: &RawClient, sandbox_id: &str, seconds: u32) -> ExecCall {
    let mut busy = raw.clone();
    let request = proto::ExecRequest {
        sandbox_id: sandbox_id.into(),
        command: format!("sleep {seconds}"),
        ..Default::default()
    };
    let hog = tokio::spawn(async move { busy.exec(request).await });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!hog.is_finished(), "the sleep holds the only exec slot");
    hog
}

#[tokio::test(flavor = "multi_thread")]
async fn waiting_for_a_permit_counts_against_the_exec_timeout() {
    let label = TestLabel::new();
    let server = Service::start(&label, ONE_EXEC_SLOT.clone());
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;
    let hog = hold_the_exec_slot(&raw, &id, 8).await;
    let waited = raw
        .exec(proto::ExecRequest {
            sandbox_id: id.clone(),
            command: "echo ran".into(),
            timeout_s: Some(1.0),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        waited.error_type, "timeout",
        "a 1 s exec that waited for the only permit timed out: {waited:?}"
    );
    assert!(!hog.is_finished(), "the timeout came from the permit wait, not after the first exec");
    assert_eq!(hog.await.unwrap().unwrap().into_inner().return_code, 0);
    raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}

/// Creates have their own pool (`exec.create_concurrency`): with every exec slot held by a long
/// command, a create (its `docker run` and, on this engine, its probe) still goes through.
#[tokio::test(flavor = "multi_thread")]
async fn creates_do_not_wait_behind_execs() {
    let label = TestLabel::new();
    let server = Service::start(&label, ONE_EXEC_SLOT.clone());
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;
    let hog = hold_the_exec_slot(&raw, &id, 60).await;
    let other = create_id(&mut raw, busybox()).await;
    assert!(!hog.is_finished(), "the create answered while the only exec slot was still held");
    hog.abort();
    for sandbox_id in [other, id] {
        raw.close(proto::CloseRequest { sandbox_id }).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn client_limits_answer_resource_exhausted_or_deadline_exceeded() {
    let label = TestLabel::new();
    let config = serde_json::json!({"server": {"limits": {
        "max_pty_sessions_per_sandbox": 1,
        "max_upload_spool_bytes": 1000,
        "first_message_timeout_s": 1,
    }}});
    let server = Service::start(&label, config);
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;

    let open = |id: &str| proto::PtyRequest {
        request: Some(proto::pty_request::Request::Open(proto::PtyOpen {
            sandbox_id: id.into(),
            command: Some("cat".into()),
            pipe: true,
            ..Default::default()
        })),
    };
    let (first_tx, first_rx) = tokio::sync::mpsc::channel(4);
    first_tx.send(open(&id)).await.unwrap();
    let mut first =
        raw.pty(tokio_stream::wrappers::ReceiverStream::new(first_rx)).await.unwrap().into_inner();
    assert!(matches!(
        first.message().await.unwrap().unwrap().response,
        Some(proto::pty_response::Response::Opened(_))
    ));
    let err = raw.pty(tokio_stream::iter(vec![open(&id)])).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("max_pty_sessions_per_sandbox"), "{}", err.message());
    // Ending the first session gives its slot back.
    first_tx
        .send(proto::PtyRequest { request: Some(proto::pty_request::Request::Close(proto::PtyClose {})) })
        .await
        .unwrap();
    while let Ok(Some(_)) = first.message().await {}
    let mut reopened = None;
    for _ in 0..50 {
        match raw.pty(tokio_stream::iter(vec![open(&id)])).await {
            Ok(stream) => {
                reopened = Some(stream);
                break;
            }
            Err(e) if e.code() == Code::ResourceExhausted => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    assert!(reopened.is_some(), "the slot of a closed session was never given back");
    drop(reopened);

    // A sizeless upload past the spool limit.
    let err = raw
        .upload(tokio_stream::iter(vec![upload_header(&id, "/tmp/big", None), chunk(vec![7; 2000])]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("max_upload_spool_bytes"), "{}", err.message());

    // Streams that never send their first message.
    let (_silent_upload, rx) = tokio::sync::mpsc::channel::<proto::UploadRequest>(1);
    let err = raw.upload(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    let (_silent_pty, rx) = tokio::sync::mpsc::channel::<proto::PtyRequest>(1);
    let err = raw.pty(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelling_a_pty_whose_input_write_is_blocked_ends_its_program() {
    pty_with_a_blocked_write_ends(false).await;
}

/// The caller half-closes its request stream (and keeps reading) while the server's input
/// write is blocked: the session ends, its program too, and the response stream ends.
#[tokio::test(flavor = "multi_thread")]
async fn half_closing_a_pty_whose_input_write_is_blocked_ends_its_program() {
    pty_with_a_blocked_write_ends(true).await;
}

async fn pty_with_a_blocked_write_ends(half_close: bool) {
    let label = TestLabel::new();
    let server = Service::start(&label, serde_json::json!({}));
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tx.send(proto::PtyRequest {
        request: Some(proto::pty_request::Request::Open(proto::PtyOpen {
            sandbox_id: id.clone(),
            command: Some("exec sleep 1234".into()),
            pipe: true,
            ..Default::default()
        })),
    })
    .await
    .unwrap();
    let mut stream = raw.pty(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
    assert!(matches!(
        stream.message().await.unwrap().unwrap().response,
        Some(proto::pty_response::Response::Opened(_))
    ));
    // The program never reads: 8 MiB of input fills every pipe on the way, and the server's
    // write blocks.
    for _ in 0..8 {
        tx.send(proto::PtyRequest { request: Some(proto::pty_request::Request::Input(vec![b'x'; 1 << 20])) })
            .await
            .unwrap();
    }
    let running = |id: &str| {
        let out = testkit::docker(&["exec", id, "ps", "-o", "args"]);
        String::from_utf8_lossy(&out.stdout).lines().any(|l| l.contains("sleep 1234"))
    };
    eventually(Duration::from_secs(20), "the session's program never started", || running(&id)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    if half_close {
        drop(tx);
        let drained = tokio::time::timeout(Duration::from_secs(60), async {
            while let Ok(Some(_)) = stream.message().await {}
        })
        .await;
        assert!(drained.is_ok(), "the response stream never ended after the half-close");
    } else {
        drop(stream); // the caller cancels
        drop(tx);
    }
    eventually(Duration::from_secs(30), "the ended session's program still runs", || !running(&id)).await;
    raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}

// ----- faults of the Docker daemon itself (a private dockerd, never the machine's) -----------

#[tokio::test(flavor = "multi_thread")]
async fn a_docker_daemon_that_dies_mid_exec_or_mid_create_gets_clear_answers_and_recovery() {
    let label = TestLabel::new();
    let mut daemon = PrivateDocker::start(&[BUSYBOX]);
    let config = serde_json::json!({
        "docker": {"create": {"network": "none"}, "probe": {
            "command": "sleep 3; printf docker-sandbox-ready", "timeout_s": 60}},
        "server": {"create_timeout_s": 5, "sweep_interval_s": 1},
    });
    let host = daemon.host();
    let server = Server::start_env(&label, config, &[], &[("DOCKER_HOST", &host)]);
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;

    // The daemon restarts while an exec runs: the exec answers (no hang) as the sandbox's
    // failure, and once the daemon is back the sandbox reads stopped and closes.
    let mut exec_raw = raw.clone();
    let sandbox_id = id.clone();
    let exec = tokio::spawn(async move {
        exec_raw
            .exec(proto::ExecRequest { sandbox_id, command: "sleep 60".into(), ..Default::default() })
            .await
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    daemon.stop_dockerd();
    let answer = tokio::time::timeout(Duration::from_secs(60), exec)
        .await
        .expect("the exec hung when the daemon went away");
    match answer.unwrap() {
        Ok(r) => {
            let r = r.into_inner();
            assert_eq!((r.return_code, r.error_type.as_str()), (125, "sandbox"), "{r:?}");
        }
        Err(e) => assert_eq!(e.code(), Code::Unavailable, "{e:?}"),
    }
    // With the daemon gone: a create is UNAVAILABLE, promptly.
    let gone = tokio::time::timeout(
        Duration::from_secs(60),
        raw.create(proto::CreateRequest { spec: Some(busybox()) }),
    )
    .await
    .expect("a create hung while the daemon was gone");
    assert_eq!(gone.unwrap_err().code(), Code::Unavailable);
    daemon.start_dockerd();
    let status = raw.status(proto::StatusRequest { sandbox_id: id.clone() }).await.unwrap().into_inner();
    assert_eq!(status.status, proto::SandboxStatus::Stopped as i32, "the daemon's restart stopped it");
    raw.close(proto::CloseRequest { sandbox_id: id.clone() }).await.expect("close after the daemon is back");

    // The daemon goes away during a create (in its readiness probe): a clear failure, no hang;
    // once it is back, what the create left is swept and creates work again.
    let mut create_raw = raw.clone();
    let create =
        tokio::spawn(async move { create_raw.create(proto::CreateRequest { spec: Some(busybox()) }).await });
    let deadline = Instant::now() + Duration::from_secs(30);
    while !daemon.containers(None).iter().any(|n| n.starts_with("sandboxd-creating-")) {
        assert!(Instant::now() < deadline, "the create never started its container");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    daemon.stop_dockerd();
    let answer = tokio::time::timeout(Duration::from_secs(60), create)
        .await
        .expect("the create hung when the daemon went away");
    let err = answer.unwrap().expect_err("a create whose daemon died cannot succeed");
    assert!(matches!(err.code(), Code::Unavailable | Code::FailedPrecondition), "{err:?}");
    daemon.start_dockerd();
    eventually(
        Duration::from_secs(60),
        "the unfinished create was never swept after the daemon came back",
        || daemon.containers(None).is_empty(),
    )
    .await;
    let again = create_id(&mut raw, busybox()).await;
    let out = raw
        .exec(proto::ExecRequest {
            sandbox_id: again.clone(),
            command: "echo back".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(out.into_inner().stdout, b"back\n");
    raw.close(proto::CloseRequest { sandbox_id: again }).await.unwrap();
}

// ----- env values off host command lines (docker engine) -------------------------------------

/// Every process command line on the host holding `needle` (any host user can read them).
fn command_lines_holding(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if let Ok(raw) = std::fs::read(entry.path().join("cmdline")) {
            let line = String::from_utf8_lossy(&raw).replace('\0', " ");
            if line.contains(needle) {
                found.push(line);
            }
        }
    }
    found
}

/// Issue 9: on the `docker` engine, env values never appear on a docker client's command line
/// (`/proc/<pid>/cmdline`), while they still reach the container and the command; a key that
/// would configure the docker client itself (`DOCKER_HOST`, `PATH`) reaches the container but
/// never redirects the client (a client pointed at `tcp://127.0.0.1:1` could not run at all).
#[tokio::test(flavor = "multi_thread")]
async fn env_values_stay_off_docker_command_lines_and_still_reach_the_command() {
    let label = TestLabel::new();
    let config = serde_json::json!({"docker": {"exec": {"engine": "docker"}}});
    let server = Server::start(&label, config, &[]);
    let mut raw = server.raw().await;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let secret = format!("sekrit{}x{nanos}", std::process::id());
    // A watcher reads every command line on the host while the calls run.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (stop, secret) = (stop.clone(), secret.clone());
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                seen.extend(command_lines_holding(&secret));
                std::thread::sleep(Duration::from_millis(5));
            }
            seen
        })
    };
    let spec = proto::SandboxSpec {
        env: [
            ("TOKEN".to_string(), format!("{secret}-create")),
            ("DOCKER_HOST".to_string(), "tcp://127.0.0.1:1".to_string()),
        ]
        .into(),
        ..busybox()
    };
    let id = create_id(&mut raw, spec).await;
    let result = raw
        .exec(proto::ExecRequest {
            sandbox_id: id.clone(),
            // Slow enough for the watcher to see the docker client's command line.
            command: r#"sleep 2; echo "$TOKEN|$EXEC_TOKEN|$DOCKER_HOST|$PATH|${SANDBOXD_ENV_PATH-unset}""#
                .into(),
            env: [
                ("EXEC_TOKEN".to_string(), format!("{secret}-exec")),
                ("PATH".to_string(), "/bin:/sbin:/usr/bin:/opt/sekrit-path".to_string()),
            ]
            .into(),
            ..Default::default()
        })
        .await
        .expect("exec")
        .into_inner();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let seen = watcher.join().unwrap();
    assert_eq!(result.return_code, 0, "{result:?}");
    assert_eq!(
        String::from_utf8_lossy(&result.stdout).trim(),
        format!("{secret}-create|{secret}-exec|tcp://127.0.0.1:1|/bin:/sbin:/usr/bin:/opt/sekrit-path|unset"),
    );
    assert!(seen.is_empty(), "env values on host command lines: {seen:?}");
    assert!(!server.logs().contains(&secret), "an env value in the server's log");
    raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}

// ----- bounded caches -------------------------------------------------------------------------

/// Issue 9: the provider's per-sandbox caches (handles, agent channels, terminal sessions) and
/// the set of sandboxes this process created come back down when sandboxes end, whether they
/// were closed through this process or removed from outside (`docker rm -f`), and terminal
/// sessions that ended leave no entry behind.
#[tokio::test(flavor = "multi_thread")]
async fn per_sandbox_caches_shrink_when_sandboxes_end_however_they_end() {
    use sandboxd::backend::SandboxBackend;
    use sandboxd::lifecycle::{LeaseOptions, Lifecycle};
    let label = TestLabel::new();
    let provider = std::sync::Arc::new(testkit::provider(&label));
    let state = tempfile::tempdir().unwrap();
    let lifecycle = std::sync::Arc::new(Lifecycle::new(
        provider.clone(),
        LeaseOptions {
            policy: sandboxd::lease::LeasePolicy::default(),
            store: sandboxd::lease::LeaseStore::open(state.path()).unwrap(),
            create_timeout: Duration::from_secs(300),
        },
    ));
    let mut handles = Vec::new();
    for _ in 0..6 {
        let spec = sandboxd::spec::SandboxSpec::new(BUSYBOX);
        let handle = lifecycle.create(spec, None).await.expect("create");
        let ran = provider.exec(&handle, "echo hi", &Default::default()).await.unwrap();
        assert_eq!(ran.return_code, 0);
        handles.push(handle);
    }
    // A terminal session that ends by itself.
    let pty = sandboxd::spec::PtySpec {
        command: Some("true".into()),
        mode: sandboxd::docker::pty::TerminalMode::Pipe,
        ..Default::default()
    };
    let session = provider.open_terminal(&handles[0], &pty).await.unwrap();
    session.wait_exit(Some(Duration::from_secs(30))).await.unwrap();
    session.close().await.unwrap();
    drop(session);
    let full = provider.cache_sizes();
    assert_eq!(full.handles, 6, "{full:?}");
    assert_eq!(lifecycle.created_count(), 6);

    // Half closed through this process, half removed from outside.
    for handle in &handles[..3] {
        lifecycle.close(&handle.id()).await.unwrap();
    }
    for handle in &handles[3..] {
        assert!(testkit::docker(&["rm", "-f", &handle.sandbox_id]).status.success());
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        lifecycle.sweep().await.expect("sweep");
        let sizes = provider.cache_sizes();
        let settled = sizes.handles == 0
            && sizes.agent_channels == 0
            && sizes.without_agent == 0
            && sizes.pty_sandboxes == 0
            && sizes.pty_sessions == 0
            && lifecycle.created_count() == 0;
        if settled {
            assert!(sizes.closed <= 3, "only what this process closed is remembered: {sizes:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "caches never came back down: {sizes:?}, created {}",
            lifecycle.created_count()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

// ----- calls in flight per connection ---------------------------------------------------------

/// Issue 9, item 4: past `server.limits.max_streams_per_connection` calls in flight on one
/// connection, a call is RESOURCE_EXHAUSTED naming the limit (it neither waits nor hangs);
/// other connections are unaffected, and a call that ends gives its place back.
#[tokio::test(flavor = "multi_thread")]
async fn calls_past_the_per_connection_limit_are_resource_exhausted() {
    let label = TestLabel::new();
    let config = serde_json::json!({"server": {"limits": {"max_streams_per_connection": 2}}});
    let server = Server::start(&label, config, &[]);
    let mut setup = server.raw().await;
    let id = create_id(&mut setup, busybox()).await;

    let mut raw = server.raw().await; // one connection
    let open = || proto::PtyRequest {
        request: Some(proto::pty_request::Request::Open(proto::PtyOpen {
            sandbox_id: id.clone(),
            command: Some("cat".into()),
            pipe: true,
            ..Default::default()
        })),
    };
    let mut held = Vec::new();
    for _ in 0..2 {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tx.send(open()).await.unwrap();
        let mut stream = raw.pty(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
        assert!(matches!(
            stream.message().await.unwrap().unwrap().response,
            Some(proto::pty_response::Response::Opened(_))
        ));
        held.push((tx, stream));
    }
    let third = tokio::time::timeout(
        Duration::from_secs(30),
        raw.status(proto::StatusRequest { sandbox_id: id.clone() }),
    )
    .await
    .expect("a call past the limit must be answered, not queued");
    let err = third.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("server.limits.max_streams_per_connection"), "{}", err.message());
    // Another connection is not limited by this one's calls.
    setup.status(proto::StatusRequest { sandbox_id: id.clone() }).await.expect("another connection");

    // One session ends: its place is given back.
    let (tx, mut stream) = held.pop().unwrap();
    tx.send(proto::PtyRequest { request: Some(proto::pty_request::Request::Close(proto::PtyClose {})) })
        .await
        .unwrap();
    while let Ok(Some(_)) = stream.message().await {}
    drop((tx, stream));
    let mut answered = false;
    for _ in 0..50 {
        match raw.status(proto::StatusRequest { sandbox_id: id.clone() }).await {
            Ok(_) => {
                answered = true;
                break;
            }
            Err(e) if e.code() == Code::ResourceExhausted => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    assert!(answered, "the place of an ended call was never given back");
    drop(held);
    setup.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}

// ----- first messages and vanished clients -----------------------------------------------------

/// Issue 9, item 4: an `Upload` or `Pty` whose caller opens the stream and sends nothing is
/// answered DEADLINE_EXCEEDED, naming the limit, within `server.limits.first_message_timeout_s`
/// (a generous bound proves "no hang"), and gives back what it held: with one connection allowed
/// two calls in flight, both silent calls end and two new calls run on that connection.
#[tokio::test(flavor = "multi_thread")]
async fn silent_upload_and_pty_streams_end_at_the_first_message_timeout_and_free_their_places() {
    let label = TestLabel::new();
    let config = serde_json::json!({"server": {"limits": {
        "first_message_timeout_s": 2,
        "max_streams_per_connection": 2,
    }}});
    let server = Server::start(&label, config, &[]);
    let mut setup = server.raw().await;
    let id = create_id(&mut setup, busybox()).await;
    let raw = server.raw().await;
    let (upload_tx, upload_rx) = tokio::sync::mpsc::channel::<proto::UploadRequest>(1);
    let (pty_tx, pty_rx) = tokio::sync::mpsc::channel::<proto::PtyRequest>(1);
    let (mut a, mut b) = (raw.clone(), raw.clone());
    let started = Instant::now();
    let upload =
        tokio::spawn(async move { a.upload(tokio_stream::wrappers::ReceiverStream::new(upload_rx)).await });
    let pty = tokio::spawn(async move { b.pty(tokio_stream::wrappers::ReceiverStream::new(pty_rx)).await });
    let upload = tokio::time::timeout(Duration::from_secs(60), upload).await.expect("a silent upload hung");
    let err = upload.unwrap().unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert!(err.message().contains("first_message_timeout_s"), "{}", err.message());
    let pty = tokio::time::timeout(Duration::from_secs(60), pty).await.expect("a silent pty hung");
    let err = pty.unwrap().expect_err("a silent pty must fail");
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert!(err.message().contains("first_message_timeout_s"), "{}", err.message());
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "answered before the timeout: {:?}",
        started.elapsed()
    );
    // The senders are still open: only the server's timeout ended the calls. Their places on
    // the connection are free again.
    let (mut c, mut d) = (raw.clone(), raw.clone());
    let req = || proto::StatusRequest { sandbox_id: id.clone() };
    let (first, second) = tokio::join!(c.status(req()), d.status(req()));
    first.expect("a place freed by the silent upload");
    second.expect("a place freed by the silent pty");
    drop((upload_tx, pty_tx));
    setup.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}

// ----- inherited signal dispositions ----------------------------------------------------------

/// The signals a process ignores (`SigIgn` of `/proc/PID/status`), as a mask (bit n-1: signal n).
fn ignored_signals(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0)
}

/// Direct children of `pid` named `comm`.
fn children_named(pid: i32, comm: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
        let Some((name, rest)) = stat.split_once(" (").and_then(|(_, r)| r.rsplit_once(") ")) else {
            continue;
        };
        let ppid = rest.split_whitespace().nth(1).and_then(|p| p.parse::<i32>().ok());
        if name == comm && ppid == Some(pid) {
            found.push(child);
        }
    }
    found
}

/// Issue 9: a server started in the background by a shell (`sandboxd &`) inherits SIGINT and
/// SIGQUIT ignored; the processes it spawns (docker clients, the PTY session's client) start
/// with default dispositions, so a signal meant for them still works.
#[tokio::test(flavor = "multi_thread")]
async fn processes_the_server_spawns_do_not_inherit_ignored_signals() {
    const INT_AND_QUIT: u64 = (1 << 1) | (1 << 2);
    let label = TestLabel::new();
    let server = Server::start_wrapped(&label, serde_json::json!({}), &[], &[], Some("trap '' INT QUIT"));
    let server_pid = server.child.id() as i32;
    assert_ne!(
        ignored_signals(server_pid) & (1 << 2),
        0,
        "the server itself was started with SIGQUIT ignored"
    );
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, busybox()).await;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(proto::PtyRequest {
        request: Some(proto::pty_request::Request::Open(proto::PtyOpen {
            sandbox_id: id.clone(),
            command: Some("sleep 1234".into()),
            ..Default::default()
        })),
    })
    .await
    .unwrap();
    let mut stream = raw.pty(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
    assert!(matches!(
        stream.message().await.unwrap().unwrap().response,
        Some(proto::pty_response::Response::Opened(_))
    ));
    // The PTY session's client and the agent's channel are docker clients of the server.
    let clients = children_named(server_pid, "docker");
    assert!(!clients.is_empty(), "no docker client of the server to look at");
    let tty_client = clients.iter().any(|pid| {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        cmdline.split(|b| *b == 0).any(|a| a == b"-t")
    });
    assert!(tty_client, "the PTY session's client is among them");
    for pid in clients {
        let ignored = ignored_signals(pid);
        assert_eq!(
            ignored & INT_AND_QUIT,
            0,
            "docker client {pid} ignores SIGINT/SIGQUIT (SigIgn {ignored:x})"
        );
    }
    tx.send(proto::PtyRequest { request: Some(proto::pty_request::Request::Close(proto::PtyClose {})) })
        .await
        .unwrap();
    while let Ok(Some(_)) = stream.message().await {}
    raw.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}
