//! `Reset` end to end (in-process service, the real daemon): after an episode that added,
//! changed and deleted files (the image's and the spec's), left processes behind (a background
//! one, a started process, one in a terminal session, listening ports) and set env vars, a
//! reset leaves nothing of it: the files are the image's and the spec's again, no process of
//! the episode runs, no port listens, the env is the spec's; and it is the same container (no
//! container created or removed), its id and token still good.

use std::collections::HashMap;

use sandboxd_client::{proto, spec, Sandbox};
use testkit::images::BASH;
use testkit::service::TestService;
use testkit::TestLabel;
use tonic::Code;

fn container_id(name: &str) -> String {
    let out = std::process::Command::new("docker")
        .args(["inspect", "--format", "{{.Id}}", name])
        .output()
        .expect("docker inspect");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

async fn sh(sandbox: &Sandbox, command: &str) -> String {
    let result = sandbox.exec(command).await.expect("exec");
    result.stdout_str().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_of_an_episode_survives_a_reset() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let client = server.client().await;
    let mut spec = spec(BASH);
    spec.files = HashMap::from([("/work/seed.txt".to_string(), b"seed\n".to_vec())]);
    spec.env = HashMap::from([("EPISODE_BASE".to_string(), "base".to_string())]);
    let sandbox = Sandbox::start(&client, spec).await.expect("create");
    let before = container_id(sandbox.id());
    let passwd = sh(&sandbox, "cat /etc/passwd").await;
    let group = sh(&sandbox, "cat /etc/group").await;
    assert!(!passwd.is_empty() && !group.is_empty());

    // The episode.
    let episode = "echo added > /added.txt && mkdir -p /newdir/sub && echo x > /newdir/sub/f \
        && echo intruder:x:0:0::/:/bin/sh >> /etc/passwd && rm /etc/group && rm /bin/arch \
        && echo changed > /work/seed.txt && echo 'export LEFTOVER=1' >> /root/.profile \
        && export LEFTOVER=1 \
        && (setsid sleep 1000 </dev/null >/dev/null 2>&1 &) \
        && (setsid httpd -p 8081 </dev/null >/dev/null 2>&1 &) \
        && echo ok";
    assert_eq!(sh(&sandbox, episode).await, "ok\n");
    let started = client
        .start_process(
            sandbox.id(),
            &sandboxd_client::StartProcess { command: "sleep 1001".into(), ..Default::default() },
        )
        .await
        .expect("start process");
    assert!(started.pid > 0);
    let in_terminal = sandboxd_client::StartProcess {
        command: "export SESSION_VAR=1; httpd -f -p 8082".into(),
        env: HashMap::from([("SESSION_ENV".to_string(), "1".to_string())]),
        pty: Some((24, 80)),
        ..Default::default()
    };
    client.start_process(sandbox.id(), &in_terminal).await.expect("terminal process");
    // Both servers listen (0x1F91 = 8081, 0x1F92 = 8082) before the reset.
    let mut listening = String::new();
    for _ in 0..50 {
        listening = sh(&sandbox, "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null").await;
        if listening.contains(":1F91") && listening.contains(":1F92") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(listening.contains(":1F91") && listening.contains(":1F92"), "{listening}");
    assert!(sh(&sandbox, "ps").await.contains("sleep 1000"));

    let report = sandbox.reset().await.expect("reset");
    assert!(report.processes_killed >= 3, "{report:?}");
    assert!(report.paths_restored >= 5, "{report:?}");

    // Same container, same id, the token still good.
    assert_eq!(container_id(sandbox.id()), before, "no container created or removed");
    assert_eq!(label.containers().len(), 1, "{:?}", label.containers());
    // Files: the image's and the spec's again.
    let files = sh(
        &sandbox,
        "for p in /added.txt /newdir /bin/arch /etc/group /root/.profile; do \
           if [ -e $p ] || [ -L $p ]; then echo present $p; else echo absent $p; fi; done",
    )
    .await;
    assert_eq!(
        files,
        "absent /added.txt\nabsent /newdir\npresent /bin/arch\npresent /etc/group\nabsent /root/.profile\n"
    );
    assert_eq!(sh(&sandbox, "cat /etc/passwd").await, passwd);
    assert_eq!(sh(&sandbox, "cat /etc/group").await, group);
    assert_eq!(sh(&sandbox, "readlink /bin/arch").await, "busybox\n");
    assert_eq!(sh(&sandbox, "cat /work/seed.txt").await, "seed\n");
    // Processes, ports and sessions: none of the episode's.
    let ps = sh(&sandbox, "ps -o pid,args").await;
    for gone in ["sleep 1000", "sleep 1001", "httpd"] {
        assert!(!ps.contains(gone), "{gone} survived the reset:\n{ps}");
    }
    let tcp = sh(&sandbox, "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null").await;
    assert!(!tcp.contains(":1F91") && !tcp.contains(":1F92"), "a port still listens:\n{tcp}");
    let processes = client.list_processes(sandbox.id()).await.expect("list processes");
    assert!(processes.is_empty(), "sessions survived: {processes:?}");
    // Env: the spec's, nothing the episode set.
    let env = sh(&sandbox, "env").await;
    assert!(env.contains("EPISODE_BASE=base"), "{env}");
    assert!(!env.contains("LEFTOVER") && !env.contains("SESSION_"), "{env}");

    // A second episode on the same sandbox works, and resets again.
    assert_eq!(sh(&sandbox, "echo again > /added.txt && cat /added.txt").await, "again\n");
    sandbox.reset().await.expect("second reset");
    assert_eq!(sh(&sandbox, "cat /added.txt 2>/dev/null || echo gone").await, "gone\n");

    // A reset needs the owner scope: a read token is refused.
    let granted = client
        .raw()
        .grant(proto::GrantRequest {
            sandbox_id: sandbox.id().to_string(),
            scope: proto::TokenScope::Read as i32,
            ttl_s: None,
        })
        .await
        .expect("grant")
        .into_inner();
    let mut request = tonic::Request::new(proto::ResetRequest { sandbox_id: sandbox.id().to_string() });
    request.metadata_mut().insert("authorization", format!("Bearer {}", granted.token).parse().unwrap());
    let status = client.raw().reset(request).await.expect_err("read scope");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    sandbox.stop().await.expect("close");
}

/// A recycling pool: a claimed sandbox that is closed is reset and handed back to the pool
/// instead of removed (the same container serves the next claim): the old claim's tokens are
/// refused, its files and metadata are gone, the next claim gets a fresh owner token and its
/// own lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recycling_pool_hands_a_closed_sandbox_back_reset() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let client = server.client().await;
    let mut raw = client.raw();
    let pool = proto::PoolSpec {
        name: "recycler".into(),
        image: BASH.into(),
        target: 1,
        max: 1,
        recycle: true,
        ..Default::default()
    };
    raw.create_pool(proto::CreatePoolRequest { pool: Some(pool) }).await.expect("pool");
    let ready = |want_ready: u32, want_recycled: u64| {
        let mut raw = client.raw();
        async move {
            for _ in 0..300 {
                let pools =
                    raw.list_pools(proto::ListPoolsRequest {}).await.expect("list").into_inner().pools;
                let p = pools.iter().find(|p| p.name == "recycler").expect("the pool");
                if p.ready == want_ready && p.recycled == want_recycled {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            panic!("the pool never had {want_ready} ready, {want_recycled} recycled");
        }
    };
    ready(1, 0).await;
    let claim = |meta: &str| {
        let mut spec = sandboxd_client::from_pool("recycler");
        spec.metadata = HashMap::from([("episode".to_string(), meta.to_string())]);
        spec.files = HashMap::from([("/claim.txt".to_string(), meta.as_bytes().to_vec())]);
        spec.ttl_s = Some(600.0);
        proto::CreateRequest { spec: Some(spec) }
    };
    let first = raw.create(claim("one")).await.expect("claim").into_inner().sandbox.expect("sandbox");
    let container = container_id(&first.sandbox_id);
    let exec = |token: &str, id: &str, command: &str| {
        let mut r = tonic::Request::new(proto::ExecRequest {
            sandbox_id: id.to_string(),
            command: command.to_string(),
            ..Default::default()
        });
        r.metadata_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
        r
    };
    let out = raw.exec(exec(&first.token, &first.sandbox_id, "cat /claim.txt; echo x > /left.txt")).await;
    assert_eq!(String::from_utf8_lossy(&out.expect("exec").into_inner().stdout), "one");
    // A token granted from the claim's owner token, and one a key granted: both end with it.
    let mut grant = tonic::Request::new(proto::GrantRequest {
        sandbox_id: first.sandbox_id.clone(),
        scope: proto::TokenScope::Operate as i32,
        ttl_s: None,
    });
    grant.metadata_mut().insert("authorization", format!("Bearer {}", first.token).parse().unwrap());
    let granted = raw.grant(grant).await.expect("grant").into_inner().token;
    let keyed = raw
        .grant(proto::GrantRequest {
            sandbox_id: first.sandbox_id.clone(),
            scope: proto::TokenScope::Operate as i32,
            ttl_s: None,
        })
        .await
        .expect("grant by the operator")
        .into_inner()
        .token;

    let mut close = tonic::Request::new(proto::CloseRequest { sandbox_id: first.sandbox_id.clone() });
    close.metadata_mut().insert("authorization", format!("Bearer {}", first.token).parse().unwrap());
    raw.close(close).await.expect("close");
    // Unreachable by the claim's tokens once Close returned.
    for token in [&first.token, &granted, &keyed] {
        let status = raw.exec(exec(token, &first.sandbox_id, "true")).await.expect_err("revoked");
        assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    }
    ready(1, 1).await;
    assert_eq!(container_id(&first.sandbox_id), container, "the same container, not removed");

    let second = raw.create(claim("two")).await.expect("claim").into_inner().sandbox.expect("sandbox");
    assert_eq!(second.sandbox_id, first.sandbox_id, "the recycled sandbox serves the next claim");
    assert_ne!(second.token, first.token);
    assert_eq!(second.metadata.get("episode").map(String::as_str), Some("two"), "{:?}", second.metadata);
    let out = raw
        .exec(exec(&second.token, &second.sandbox_id, "cat /claim.txt; ls /left.txt 2>&1 >/dev/null | wc -l"))
        .await;
    let stdout = String::from_utf8_lossy(&out.expect("exec").into_inner().stdout).to_string();
    assert_eq!(
        stdout.split_whitespace().collect::<Vec<_>>(),
        ["two1"],
        "the first claim's file is gone: {stdout:?}"
    );
    let status =
        raw.status(proto::StatusRequest { sandbox_id: second.sandbox_id.clone() }).await.expect("status");
    assert_eq!(status.into_inner().status, proto::SandboxStatus::Running as i32);
    let listed =
        raw.list(proto::ListRequest { ..Default::default() }).await.expect("list").into_inner().sandboxes;
    let mine = listed
        .iter()
        .find(|s| s.sandbox.as_ref().is_some_and(|r| r.sandbox_id == second.sandbox_id))
        .expect("listed");
    assert!(mine.expires_at_unix_ms.is_some(), "the lease runs from the claim: {mine:?}");
    let meta = &mine.sandbox.as_ref().unwrap().metadata;
    assert_eq!(meta.get("episode").map(String::as_str), Some("two"), "{meta:?}");
    raw.delete_pool(proto::DeletePoolRequest { name: "recycler".into() }).await.expect("delete pool");
    raw.close(proto::CloseRequest { sandbox_id: second.sandbox_id.clone() }).await.expect("close");
}

fn docker(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new("docker").args(args).output().expect("docker");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The container name a close leaves while Docker removes it (`closing.rs`).
fn closing_name(id: &str) -> String {
    format!("sandboxd-closing-{}", id.strip_prefix("sandboxd-").unwrap())
}

async fn gone_within(name: &str, secs: u64) -> bool {
    for _ in 0..secs * 10 {
        if !docker(&["inspect", "--format", "{{.Id}}", name]).0 {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    false
}

/// `Close` returns once the sandbox is unreachable and nothing in it runs; Docker's removal
/// finishes after it (the container is gone shortly). A container renamed for removal (an older
/// server's close that died mid-removal) is removed by the sweep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_leaves_the_removal_to_the_background_and_the_sweep() {
    let label = TestLabel::new();
    let server = TestService::start_json(&label, serde_json::json!({"server": {"sweep_interval_s": 0.5}}));
    let client = server.client().await;
    let mut with_lease = spec(BASH);
    with_lease.ttl_s = Some(600.0);
    let sandbox = Sandbox::start(&client, with_lease.clone()).await.expect("create");
    let id = sandbox.id().to_string();
    sandbox.exec("(setsid sleep 1000 </dev/null >/dev/null 2>&1 &)").await.expect("exec");
    client.raw().close(proto::CloseRequest { sandbox_id: id.clone() }).await.expect("close");
    // Unreachable at once: nothing in it runs, and calls on it are NOT_FOUND.
    let (exists, running) = docker(&["inspect", "--format", "{{.State.Running}}", &id]);
    assert!(!exists || running == "false", "the closed container still runs");
    let status = client
        .raw()
        .exec(proto::ExecRequest { sandbox_id: id.clone(), command: "true".into(), ..Default::default() })
        .await
        .expect_err("closed");
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    assert!(gone_within(&id, 60).await, "the background removal never finished");

    // A close cut short after its rename (the server died): the sweep removes what is left.
    let other = Sandbox::start(&client, with_lease).await.expect("create");
    let name = closing_name(other.id());
    assert!(docker(&["kill", other.id()]).0 && docker(&["rename", other.id(), &name]).0);
    assert!(gone_within(&name, 60).await, "the sweep did not remove the left-behind container");
    assert!(label.containers().is_empty(), "{:?}", label.containers());
}
