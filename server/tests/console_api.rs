//! The web console's JSON API and assets (`server.console`) over the in-memory
//! `testkit::fake::FakeBackend`: the real `Services` (gate, handlers, audit) with two tenants,
//! the console's router driven in-process. No Docker, no browser (the browser tests are
//! `tests/console/`, `scripts/test-console.sh`): who may see what, and what the page loads.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use sandboxd::config::FileConfig;
use sandboxd::service::{ServeSettings, Services};
use sandboxd_client::proto;
use serde_json::Value;
use testkit::fake::FakeBackend;
use tower::ServiceExt;

const OPERATOR: &str = "operator-key";

async fn get(
    app: &axum::Router,
    path: &str,
    key: Option<&str>,
) -> (StatusCode, Vec<u8>, axum::http::HeaderMap) {
    let mut request = Request::get(path);
    if let Some(key) = key {
        request = request.header("authorization", format!("Bearer {key}"));
    }
    let response = app.clone().oneshot(request.body(Body::empty()).unwrap()).await.unwrap();
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, 8 << 20).await.unwrap();
    (parts.status, bytes.to_vec(), parts.headers)
}

async fn json(app: &axum::Router, path: &str, key: Option<&str>) -> (StatusCode, Value) {
    let (status, body, _) = get(app, path, key).await;
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

fn ids(listing: &Value) -> Vec<String> {
    listing["sandboxes"].as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap().to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_sees_its_own_sandboxes_and_the_operator_all() {
    let dir = tempfile::tempdir().unwrap();
    let tenants = serde_json::json!({"tenants": [
        {"name": "red", "key_sha256": sandboxd::auth::tenants::key_sha256("red-key")},
        {"name": "blue", "key_sha256": sandboxd::auth::tenants::key_sha256("blue-key")},
    ]});
    std::fs::write(dir.path().join("tenants.json"), tenants.to_string()).unwrap();
    let mut config = FileConfig::default();
    config.server.state_dir = Some(dir.path().join("state"));
    config.server.auth.tenants_file = Some(dir.path().join("tenants.json"));
    let services =
        Services::build(Arc::new(FakeBackend::new()), &config, Some(OPERATOR.into())).await.unwrap();
    let app = services.console().router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let settings =
        ServeSettings { tls: None, remove_on_shutdown: false, drain_timeout: Duration::from_secs(1) };
    let served = tokio::spawn(services.serve_until(listener, settings, async move {
        let _ = stopped.await;
    }));

    let mut made = std::collections::BTreeMap::new();
    for tenant in ["red", "blue"] {
        let key: tonic::metadata::MetadataValue<_> = format!("Bearer {tenant}-key").parse().unwrap();
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut raw = proto::sandbox_service_client::SandboxServiceClient::with_interceptor(
            channel,
            move |mut r: tonic::Request<()>| {
                r.metadata_mut().insert("authorization", key.clone());
                Ok(r)
            },
        );
        let mut spec = proto::SandboxSpec { image: "fake:1".into(), ..Default::default() };
        spec.metadata.insert("team".into(), tenant.into());
        let created = raw.create(proto::CreateRequest { spec: Some(spec) }).await.unwrap().into_inner();
        made.insert(tenant, created.sandbox.unwrap().sandbox_id);
    }

    // No credential on a server with keys, or a wrong one: refused as the gRPC API refuses.
    assert_eq!(json(&app, "/api/sandboxes", None).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(json(&app, "/api/sandboxes", Some("nobody")).await.0, StatusCode::UNAUTHORIZED);

    let (status, who) = json(&app, "/api/whoami", Some("red-key")).await;
    assert_eq!(
        (status, who["kind"].as_str(), who["name"].as_str()),
        (StatusCode::OK, Some("tenant"), Some("red"))
    );
    let (status, red) = json(&app, "/api/sandboxes", Some("red-key")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ids(&red), vec![made["red"].clone()], "red sees only its own: {red}");
    let one = &red["sandboxes"][0];
    assert_eq!(one["labels"]["team"], "red", "{one}");
    assert_eq!(one["image"], "fake:1", "{one}");
    assert!(one["node"].as_str().is_some_and(|n| !n.is_empty()), "a node: {one}");
    assert!(one["expires_at_unix_ms"].as_i64().is_some(), "a lease: {one}");

    let (status, all) = json(&app, "/api/sandboxes", Some(OPERATOR)).await;
    assert_eq!(status, StatusCode::OK);
    let mut everything = ids(&all);
    everything.sort();
    let mut both: Vec<String> = made.values().cloned().collect();
    both.sort();
    assert_eq!(everything, both, "the operator sees every tenant's");

    let (status, detail) = json(&app, &format!("/api/sandboxes/{}", made["red"]), Some("red-key")).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    assert_eq!(detail["status"], "running", "{detail}");
    let (status, refused) = json(&app, &format!("/api/sandboxes/{}", made["blue"]), Some("red-key")).await;
    assert!(matches!(status, StatusCode::NOT_FOUND | StatusCode::FORBIDDEN), "{status} {refused}");
    assert!(refused["error"].as_str().is_some_and(|e| !e.is_empty()), "{refused}");

    // Closing another tenant's sandbox is refused, and it stays.
    let close = Request::post(format!("/api/sandboxes/{}/close", made["blue"]))
        .header("authorization", "Bearer red-key")
        .body(Body::empty())
        .unwrap();
    let status = app.clone().oneshot(close).await.unwrap().status();
    assert!(matches!(status, StatusCode::NOT_FOUND | StatusCode::FORBIDDEN), "{status}");
    assert_eq!(ids(&json(&app, "/api/sandboxes", Some("blue-key")).await.1), vec![made["blue"].clone()]);

    let _ = stop.send(());
    served.await.unwrap().unwrap();
}

#[tokio::test]
async fn the_page_and_its_assets_are_in_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = FileConfig::default();
    config.server.state_dir = Some(dir.path().to_path_buf());
    let services = Services::build(Arc::new(FakeBackend::new()), &config, None).await.unwrap();
    let app = services.console().router();
    for (path, kind, needle) in [
        ("/", "text/html", "/assets/xterm.js"),
        ("/assets/console.js", "text/javascript", "/ws/terminal"),
        ("/assets/console.css", "text/css", "#terminal"),
        ("/assets/xterm.js", "text/javascript", "window.Terminal = load(\"public/Terminal\").Terminal"),
        ("/assets/xterm.css", "text/css", ".xterm"),
    ] {
        let (status, body, headers) = get(&app, path, None).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(headers["content-type"].to_str().unwrap().starts_with(kind), "{path}: {headers:?}");
        let csp = headers["content-security-policy"].to_str().unwrap();
        assert!(csp.starts_with("default-src 'self'"), "{path}: nothing from elsewhere: {csp}");
        assert!(String::from_utf8_lossy(&body).contains(needle), "{path} lacks {needle}");
    }
    // The page names nothing outside its origin.
    let (_, page, _) = get(&app, "/", None).await;
    let page = String::from_utf8(page).unwrap();
    assert!(!page.contains("http://") && !page.contains("https://"), "{page}");
    // A server without keys: the caller is the operator.
    let (status, who) = json(&app, "/api/whoami", None).await;
    assert_eq!((status, who["kind"].as_str()), (StatusCode::OK, Some("operator")));
}
