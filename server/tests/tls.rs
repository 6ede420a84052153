//! The binary's listeners with TLS and mutual TLS end to end (a CA and certificates made per
//! test), and the warning for a bearer token on a public listener without TLS.

use sandboxd_client::proto;
use sandboxd_client::proto::sandbox_service_client::SandboxServiceClient;
use testkit::raw::{busybox, create_id};
use testkit::server::TestServer;
use testkit::TestLabel;
use tonic::Code;

/// The server binary Cargo built for these tests.
const SANDBOXD: &str = env!("CARGO_BIN_EXE_sandboxd");

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
    let server =
        TestServer::launch(SANDBOXD, &label).flags(&["--tls-cert", &cert, "--tls-key", &key]).start();
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
    let plain = tonic::transport::Endpoint::from_shared(server.url.clone()).unwrap().connect().await;
    if let Ok(channel) = plain {
        let answer =
            SandboxServiceClient::new(channel).status(proto::StatusRequest { sandbox_id: "x".into() }).await;
        assert!(answer.is_err(), "{answer:?}");
    }

    let mutual = TestServer::launch(SANDBOXD, &label)
        .flags(&["--tls-cert", &cert, "--tls-key", &key, "--tls-client-ca", &ca])
        .start();
    // Without a client certificate the handshake (or the first call) fails: the service, which
    // answers NOT_FOUND for an id it never issues, is never reached.
    let unknown = || proto::StatusRequest { sandbox_id: "sandboxd-not-an-id".into() };
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
    let mut server =
        TestServer::launch(SANDBOXD, &label).listen("0.0.0.0:0").token(Some("secret-token")).start();
    let _ = server.child.kill();
    let _ = server.child.wait();
    let text = server.logs();
    assert!(text.contains("clear text") && text.contains("--tls-cert"), "{text}");
}
