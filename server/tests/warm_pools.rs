//! Warm pools against the real daemon, through the gRPC API (issue 21): a config pool filled at
//! start, a claim from a ready pool (fast, with the call's env, files, metadata and ttl), the
//! refill back to target, an empty pool creating on demand, DeletePool, no leak across a
//! restart, unclaimed sandboxes hidden from List, tenant scoping, and the errors.
//! (`pools.rs` in this directory is about the docker subprocess pools, not these.)

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sandboxd_client::proto;
use sandboxd_client::proto::sandbox_service_client::SandboxServiceClient;
use testkit::images::BUSYBOX;
use testkit::raw::RawClient;
use testkit::service::TestService;
use testkit::TestLabel;
use tonic::Code;

/// A config with one pool `py` of busybox (`target`, `max`) whose sandboxes carry the
/// metadata `case=<the test's label>` (List is daemon-wide, tests run side by side), a state
/// directory of the test's own.
fn pool_config(state: &std::path::Path, target: u32, max: u32, label: &TestLabel) -> serde_json::Value {
    serde_json::json!({
        "server": {"state_dir": state},
        "pools": [{
            "name": "py", "image": BUSYBOX, "target": target, "max": max,
            "template": {"workdir": "/tmp", "env": {"FROM_TEMPLATE": "t"}, "metadata": {"case": label.value}},
        }],
    })
}

async fn pools(raw: &mut RawClient) -> Vec<proto::PoolInfo> {
    raw.list_pools(proto::ListPoolsRequest {}).await.expect("ListPools").into_inner().pools
}

async fn pool(raw: &mut RawClient, name: &str) -> proto::PoolInfo {
    pools(raw).await.into_iter().find(|p| p.name == name).unwrap_or_else(|| panic!("no pool {name}"))
}

/// Wait until pool `name` has `ready` ready sandboxes and none starting (its containers are all
/// renamed to their ids).
async fn wait_ready(raw: &mut RawClient, label: &TestLabel, name: &str, ready: u32, within: Duration) {
    let start = Instant::now();
    loop {
        let p = pool(raw, name).await;
        let creating = label.names().iter().filter(|n| n.starts_with("sandboxd-creating-")).count();
        if p.ready == ready && creating == 0 {
            return;
        }
        assert!(start.elapsed() < within, "pool {name} never had {ready} ready: {p:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn create(raw: &mut RawClient, spec: proto::SandboxSpec) -> Result<proto::SandboxRef, tonic::Status> {
    Ok(raw.create(proto::CreateRequest { spec: Some(spec) }).await?.into_inner().sandbox.expect("a sandbox"))
}

async fn exec(raw: &mut RawClient, id: &str, command: &str) -> String {
    let out = testkit::raw::exec(raw, id, command).await;
    assert_eq!(out.return_code, 0, "{command}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn list(raw: &mut RawClient, labels: &[(&str, &str)]) -> Vec<proto::SandboxInfo> {
    let labels = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    raw.list(proto::ListRequest { labels, ..Default::default() }).await.expect("List").into_inner().sandboxes
}

/// A claim from `pool` with env, a file, metadata `run=<the test's label>` and a ttl.
fn claim_spec(pool: &str, label: &TestLabel) -> proto::SandboxSpec {
    proto::SandboxSpec {
        pool: Some(pool.into()),
        env: HashMap::from([("GREETING".to_string(), "hello".to_string())]),
        files: HashMap::from([("/tmp/seed.txt".to_string(), b"seeded".to_vec())]),
        metadata: HashMap::from([("run".to_string(), label.value.clone())]),
        ttl_s: Some(600.0),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_from_a_ready_pool_is_fast_gets_the_calls_env_files_metadata_and_ttl_and_refills() {
    let label = TestLabel::new();
    let state = tempfile::tempdir().unwrap();
    let service = TestService::start_json(&label, pool_config(state.path(), 2, 4, &label));
    let mut raw = service.raw().await;
    // The config pool is filled at start.
    wait_ready(&mut raw, &label, "py", 2, Duration::from_secs(60)).await;
    let before = pool(&mut raw, "py").await;
    assert!(before.from_config && before.created == 2 && before.claimed == 0, "{before:?}");
    let case = label.value.clone();
    assert!(list(&mut raw, &[("case", &case)]).await.is_empty(), "unclaimed pool sandboxes are not listed");

    // A plain create for comparison, on the same daemon now.
    let started = Instant::now();
    let plain_spec = proto::SandboxSpec {
        image: BUSYBOX.into(),
        metadata: HashMap::from([("case".to_string(), case.clone())]),
        ..Default::default()
    };
    let plain = create(&mut raw, plain_spec).await.unwrap();
    let plain_took = started.elapsed();

    let started = Instant::now();
    let claimed = create(&mut raw, claim_spec("py", &label)).await.expect("claim");
    let claim_took = started.elapsed();
    assert!(
        claim_took * 2 < plain_took,
        "a claim ({claim_took:?}) should be far faster than a create ({plain_took:?})"
    );
    assert_eq!(claimed.metadata.get("run"), Some(&case));
    assert_eq!(claimed.metadata.get("case"), Some(&case), "the template's metadata stay");
    assert_eq!(claimed.workdir.as_deref(), Some("/tmp"));
    let id = claimed.sandbox_id.clone();
    assert_eq!(
        exec(&mut raw, &id, r#"echo "$GREETING $FROM_TEMPLATE"; cat /tmp/seed.txt; pwd"#).await,
        "hello t\nseeded/tmp\n"
    );

    // List shows it as claimed: its metadata, its lease from the claim; filters see the claim's labels.
    let listed = list(&mut raw, &[("run", &case)]).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let info = &listed[0];
    assert_eq!(info.sandbox.as_ref().unwrap().sandbox_id, id);
    let expires = info.expires_at_unix_ms.expect("the claim's ttl is its lease");
    let now_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    assert!(
        (expires - now_ms - 600_000).abs() < 30_000,
        "lease ends ~600 s after the claim: {expires} vs {now_ms}"
    );
    let all = list(&mut raw, &[("case", &case)]).await;
    assert_eq!(all.len(), 2, "the plain sandbox and the claimed one, never the ready ones: {all:?}");
    // Connect and a later exec see the claim too.
    let connected = raw
        .connect(proto::ConnectRequest {
            sandbox: Some(proto::SandboxRef { sandbox_id: id.clone(), ..Default::default() }),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(connected.sandbox.unwrap().metadata.get("run"), Some(&case));

    // The pool refills back to its target in the background.
    wait_ready(&mut raw, &label, "py", 2, Duration::from_secs(60)).await;
    let after = pool(&mut raw, "py").await;
    assert_eq!((after.claimed, after.created, after.in_use), (1, 3, 1), "{after:?}");

    // A spec naming no pool but equal to the template (env, files, metadata, ttl may differ) claims too.
    let matching = proto::SandboxSpec {
        image: BUSYBOX.into(),
        workdir: Some("/tmp".into()),
        env: HashMap::from([("X".to_string(), "1".to_string())]),
        ..Default::default()
    };
    let second = create(&mut raw, matching).await.unwrap();
    assert_eq!(pool(&mut raw, "py").await.claimed, 2, "a matching spec is served by the pool");
    assert_eq!(exec(&mut raw, &second.sandbox_id, "echo $X").await, "1\n");

    // Closing a claimed sandbox removes it like any other.
    raw.close(proto::CloseRequest { sandbox_id: id.clone() }).await.unwrap();
    assert!(!label.names().contains(&id));
    assert_eq!(pool(&mut raw, "py").await.in_use, 1);
    let _ = raw.close(proto::CloseRequest { sandbox_id: plain.sandbox_id }).await;
}

/// `DeletePool` while the pool's first members are still starting: the call answers once each
/// start under way has finished and removed what it made, so nothing of the pool is left (a
/// snapshot it was made from could be deleted next) and nothing appears later.
#[tokio::test(flavor = "multi_thread")]
async fn delete_pool_answers_once_its_starts_under_way_are_undone() {
    let label = TestLabel::new();
    let state = tempfile::tempdir().unwrap();
    let service = TestService::start_json(&label, serde_json::json!({"server": {"state_dir": state.path()}}));
    let mut raw = service.raw().await;
    // The names of this test's containers now, as Docker lists them (no wait for removals).
    let listed = || label.listed_now().into_iter().map(|(_, _, name)| name).collect::<Vec<_>>().join("\n");
    // A pool whose members are caught starting (a start lasts from `docker create` to the
    // rename after the agent's hello; a pool whose members all got ready first is deleted and
    // another tried).
    let mut caught = false;
    for attempt in 0..5 {
        let name = format!("going-{attempt}");
        let spec = proto::PoolSpec {
            name: name.clone(),
            image: BUSYBOX.into(),
            target: 3,
            max: 3,
            ..Default::default()
        };
        raw.create_pool(proto::CreatePoolRequest { pool: Some(spec) }).await.unwrap();
        let start = Instant::now();
        let starting = loop {
            if listed().contains("sandboxd-creating-") {
                break true;
            }
            if pool(&mut raw, &name).await.ready == 3 || start.elapsed() > Duration::from_secs(60) {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        raw.delete_pool(proto::DeletePoolRequest { name: name.clone() }).await.expect("DeletePool");
        // Looked at at once: no member is still being made.
        let names = listed();
        assert!(
            !names.contains("sandboxd-creating-"),
            "a member was still starting after DeletePool: {names}"
        );
        assert_eq!(label.names(), Vec::<String>::new(), "the pool's members outlived DeletePool");
        if starting {
            caught = true;
            break;
        }
    }
    assert!(caught, "no pool of five was caught with a member starting");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(label.names(), Vec::<String>::new(), "a start under way made a member after DeletePool");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_empty_pool_creates_on_demand_and_delete_pool_removes_the_unclaimed_ones() {
    let label = TestLabel::new();
    let state = tempfile::tempdir().unwrap();
    let service = TestService::start_json(&label, serde_json::json!({"server": {"state_dir": state.path()}}));
    let mut raw = service.raw().await;
    let empty = proto::PoolSpec {
        name: "empty".into(),
        image: BUSYBOX.into(),
        target: 0,
        max: 1,
        ..Default::default()
    };
    let created = raw.create_pool(proto::CreatePoolRequest { pool: Some(empty) }).await.unwrap().into_inner();
    assert_eq!(created.pool.unwrap().ready, 0);
    // Never fails for emptiness: made on demand, with the call's env, files and metadata.
    let on_demand = create(&mut raw, claim_spec("empty", &label)).await.expect("on demand");
    assert_eq!(
        exec(&mut raw, &on_demand.sandbox_id, r#"echo "$GREETING"; cat /tmp/seed.txt"#).await,
        "hello\nseeded"
    );
    assert_eq!(on_demand.metadata.get("run"), Some(&label.value));
    assert_eq!(pool(&mut raw, "empty").await.claimed, 0);

    let warm = proto::PoolSpec {
        name: "warm".into(),
        image: BUSYBOX.into(),
        target: 2,
        max: 3,
        ..Default::default()
    };
    raw.create_pool(proto::CreatePoolRequest { pool: Some(warm) }).await.unwrap();
    wait_ready(&mut raw, &label, "warm", 2, Duration::from_secs(60)).await;
    let kept = create(&mut raw, claim_spec("warm", &label)).await.unwrap();
    // max 3: two ready plus the claimed one is the cap, so the refill stops at one more.
    wait_ready(&mut raw, &label, "warm", 2, Duration::from_secs(60)).await;
    assert_eq!(label.names().len(), 4, "on-demand + claimed + 2 ready: {:?}", label.names());
    // At the cap a claim still succeeds: one ready sandbox is handed out, none refills.
    let at_cap = create(&mut raw, claim_spec("warm", &label)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(pool(&mut raw, "warm").await.ready, 1, "no refill past max");

    let removed =
        raw.delete_pool(proto::DeletePoolRequest { name: "warm".into() }).await.unwrap().into_inner();
    assert_eq!(removed.removed, 1);
    let names = label.names();
    assert_eq!(names.len(), 3, "only the claimed and on-demand sandboxes remain: {names:?}");
    assert!(names.contains(&kept.sandbox_id) && names.contains(&at_cap.sandbox_id));
    assert_eq!(
        exec(&mut raw, &kept.sandbox_id, "echo $GREETING").await,
        "hello\n",
        "claimed ones stay usable"
    );
    let err = create(&mut raw, claim_spec("warm", &label)).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_removes_the_unclaimed_sandboxes_and_keeps_the_claimed_ones() {
    let label = TestLabel::new();
    let state = tempfile::tempdir().unwrap();
    let claimed = {
        let service = TestService::start_json(&label, pool_config(state.path(), 2, 4, &label));
        let mut raw = service.raw().await;
        wait_ready(&mut raw, &label, "py", 2, Duration::from_secs(60)).await;
        let claimed = create(&mut raw, claim_spec("py", &label)).await.unwrap();
        wait_ready(&mut raw, &label, "py", 2, Duration::from_secs(60)).await;
        claimed
    };
    assert_eq!(label.names().len(), 3, "the server stopped without removing: {:?}", label.names());
    // Same state directory, a smaller pool: the two unclaimed ones go, the claim survives.
    let service = TestService::start_json(&label, pool_config(state.path(), 1, 4, &label));
    let mut raw = service.raw().await;
    wait_ready(&mut raw, &label, "py", 1, Duration::from_secs(60)).await;
    let start = Instant::now();
    while label.names().len() != 2 {
        assert!(start.elapsed() < Duration::from_secs(30), "leftovers not removed: {:?}", label.names());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(label.names().contains(&claimed.sandbox_id));
    let listed = list(&mut raw, &[("run", &label.value)]).await;
    assert_eq!(listed.len(), 1, "the claim (its metadata) survives the restart: {listed:?}");
    assert_eq!(exec(&mut raw, &claimed.sandbox_id, "echo $GREETING").await, "hello\n", "so does its env");
    assert_eq!(list(&mut raw, &[("case", &label.value)]).await.len(), 1, "the new ready one is not listed");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_pools_and_claims_are_refused_naming_the_field() {
    let label = TestLabel::new();
    let state = tempfile::tempdir().unwrap();
    let service = TestService::start_json(&label, pool_config(state.path(), 0, 1, &label));
    let mut raw = service.raw().await;
    let base =
        proto::PoolSpec { name: "p".into(), image: BUSYBOX.into(), target: 1, max: 2, ..Default::default() };
    for (spec, field) in [
        (proto::PoolSpec { target: 3, ..base.clone() }, "pool.target"),
        (proto::PoolSpec { max: 0, target: 0, ..base.clone() }, "pool.max"),
        (proto::PoolSpec { max: 100_000, ..base.clone() }, "pool.max"),
        (proto::PoolSpec { name: "No Spaces".into(), ..base.clone() }, "pool.name"),
        (proto::PoolSpec { image: String::new(), ..base.clone() }, "pool.image"),
        (
            proto::PoolSpec {
                template: Some(proto::SandboxSpec { ttl_s: Some(5.0), ..Default::default() }),
                ..base.clone()
            },
            "pool.template.ttl_s",
        ),
        (
            proto::PoolSpec {
                template: Some(proto::SandboxSpec { workdir: Some("relative".into()), ..Default::default() }),
                ..base.clone()
            },
            "pool.template.workdir",
        ),
    ] {
        let err = raw.create_pool(proto::CreatePoolRequest { pool: Some(spec) }).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains(field), "{field}: {}", err.message());
    }
    assert_eq!(pools(&mut raw).await.len(), 1, "nothing was added");
    let dup = proto::PoolSpec { name: "py".into(), ..base.clone() };
    let err = raw.create_pool(proto::CreatePoolRequest { pool: Some(dup) }).await.unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists);
    let err = create(&mut raw, claim_spec("nope", &label)).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    assert!(err.message().contains("nope"));
    let err = raw.delete_pool(proto::DeletePoolRequest { name: "nope".into() }).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = raw.delete_pool(proto::DeletePoolRequest { name: "py".into() }).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "a config pool: {err:?}");
    let differs = proto::SandboxSpec { workdir: Some("/elsewhere".into()), ..claim_spec("py", &label) };
    let err = create(&mut raw, differs).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("spec.workdir"), "{}", err.message());
    assert!(label.names().is_empty(), "no refused call made a sandbox: {:?}", label.names());

    // The config file names the field too.
    let bad = serde_json::json!({"pools": [{"name": "x", "image": BUSYBOX, "target": 5, "max": 2}]});
    let err = sandboxd::config::FileConfig::from_json_value(&bad).unwrap_err();
    assert_eq!(err.field, "pools[0].target", "{err}");
    let bad = serde_json::json!({"pools": [{"name": "x", "image": BUSYBOX, "max": 2, "bogus": 1}]});
    assert!(sandboxd::config::FileConfig::from_json_value(&bad).unwrap_err().to_string().contains("bogus"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenants_pool_is_its_own_and_config_pools_serve_every_tenant() {
    let label = TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    // Tenant names are the daemon's labels: unique per test.
    let tag = &label.value[..12];
    let (name_a, name_b) = (format!("a-{tag}"), format!("b-{tag}"));
    let tenants = dir.path().join("tenants.json");
    let key = sandboxd::auth::tenants::key_sha256;
    let body = serde_json::json!({"tenants": [
        {"name": name_a, "key_sha256": key("key-a")},
        {"name": name_b, "key_sha256": key("key-b")},
    ]});
    std::fs::write(&tenants, body.to_string()).unwrap();
    let mut config = pool_config(&dir.path().join("state"), 0, 2, &label);
    config["server"]["auth"] = serde_json::json!({"tenants_file": tenants});
    let service = TestService::start_json(&label, config);
    let as_tenant = |key: &'static str| {
        let url = service.url.clone();
        async move {
            let channel = tonic::transport::Endpoint::from_shared(url).unwrap().connect().await.unwrap();
            let token: tonic::metadata::MetadataValue<_> = format!("Bearer {key}").parse().unwrap();
            SandboxServiceClient::with_interceptor(channel, move |mut req: tonic::Request<()>| {
                req.metadata_mut().insert("authorization", token.clone());
                Ok(req)
            })
        }
    };
    let mut a = as_tenant("key-a").await;
    let mut b = as_tenant("key-b").await;
    let mine = proto::PoolSpec {
        name: "mine".into(),
        image: BUSYBOX.into(),
        target: 0,
        max: 2,
        ..Default::default()
    };
    a.create_pool(proto::CreatePoolRequest { pool: Some(mine) }).await.unwrap();
    let seen_by_a: Vec<String> = a
        .list_pools(proto::ListPoolsRequest {})
        .await
        .unwrap()
        .into_inner()
        .pools
        .into_iter()
        .map(|p| p.name)
        .collect();
    let seen_by_b: Vec<String> = b
        .list_pools(proto::ListPoolsRequest {})
        .await
        .unwrap()
        .into_inner()
        .pools
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(seen_by_a, vec!["mine".to_string(), "py".to_string()]);
    assert_eq!(seen_by_b, vec!["py".to_string()], "b never sees a's pool");
    let err = b.create(proto::CreateRequest { spec: Some(claim_spec("mine", &label)) }).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    let err = b.delete_pool(proto::DeletePoolRequest { name: "mine".into() }).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    // A claim from the config pool belongs to the tenant that made it.
    let got =
        b.create(proto::CreateRequest { spec: Some(claim_spec("py", &label)) }).await.unwrap().into_inner();
    let id = got.sandbox.unwrap().sandbox_id;
    let listed_b = b.list(proto::ListRequest::default()).await.unwrap().into_inner().sandboxes;
    // A tenant's List shows only its own sandboxes (no filter needed: tenants are per test).
    assert_eq!(listed_b.len(), 1);
    let listed_a = a.list(proto::ListRequest::default()).await.unwrap().into_inner().sandboxes;
    assert!(listed_a.is_empty(), "{listed_a:?}");
    let err = a.status(proto::StatusRequest { sandbox_id: id.clone() }).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "a never reaches b's sandbox");
    b.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}
