//! Egress policy against the real daemon and the real binary: test hosts of our own (busybox
//! httpd containers on the default bridge, a DNS responder on the host's bridge address) that a
//! sandbox may or may not reach; a live `SetNetworkPolicy`; root in the sandbox unable to undo
//! the rules; allowed domains resolved by the server (its `/etc/hosts`, in a mount namespace of
//! its own) into the rules; `network.default_policy` and forks inheriting it.

use std::net::UdpSocket;
use std::process::Command;
use std::time::Duration;

use sandboxd_client::proto;
use sandboxd_client::proto::sandbox_service_client::SandboxServiceClient;
use testkit::images::BUSYBOX;
use testkit::server::TestServer;
use testkit::TestLabel;
use tonic::Code;

const SANDBOXD: &str = env!("CARGO_BIN_EXE_sandboxd");

type Raw = SandboxServiceClient<tonic::transport::Channel>;

/// A test host: a busybox httpd container on the default bridge, carrying the test's label
/// (removed with it), answering `GET /` with its own name.
struct TestHost {
    ip: String,
    /// The bridge's gateway: the host's own address as containers reach it.
    gateway: String,
    name: String,
}

impl TestHost {
    fn start(label: &TestLabel, name: &str) -> Self {
        let mut args: Vec<String> = vec!["run".into(), "-d".into()];
        args.extend(label.run_args());
        args.extend(
            [
                "--entrypoint",
                "/bin/sh",
                BUSYBOX,
                "-c",
                &format!("mkdir -p /www && echo {name} > /www/index.html && exec httpd -f -p 80 -h /www"),
            ]
            .map(String::from),
        );
        let out = Command::new("docker").args(&args).output().expect("docker run");
        assert!(out.status.success(), "test host: {}", String::from_utf8_lossy(&out.stderr));
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let out = testkit::docker(&[
            "inspect",
            "-f",
            "{{.NetworkSettings.IPAddress}} {{.NetworkSettings.Gateway}}",
            &id,
        ]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let (ip, gateway) = text.trim().split_once(' ').expect("address and gateway");
        assert!(ip.parse::<std::net::Ipv4Addr>().is_ok(), "test host address {ip:?}");
        TestHost { ip: ip.into(), gateway: gateway.into(), name: name.into() }
    }
}

/// A DNS responder on the host's bridge address (what containers on the default bridge reach
/// the host by): every A question is answered with `answer`.
fn dns_responder(gateway: &str, answer: std::net::Ipv4Addr) -> std::net::SocketAddr {
    let socket = UdpSocket::bind((gateway, 0)).expect("bind the DNS responder");
    let addr = socket.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while let Ok((n, peer)) = socket.recv_from(&mut buf) {
            if n < 12 {
                continue;
            }
            // Header: same id, a response with recursion available, one question, one answer.
            let mut reply = buf[..n].to_vec();
            reply[2] = 0x81;
            reply[3] = 0x80;
            reply[6..8].copy_from_slice(&1u16.to_be_bytes());
            reply[8..12].fill(0);
            // The answer: a pointer to the question's name, A, IN, ttl 5, four bytes.
            reply.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4]);
            reply.extend_from_slice(&answer.octets());
            let _ = socket.send_to(&reply, peer);
        }
    });
    addr
}

/// The server under test as root, in a mount namespace of its own whose `/etc/hosts` is
/// `hosts` (what its resolver answers for allowed domains); `extra` is merged into the config.
fn start_server(
    label: &TestLabel,
    dir: &std::path::Path,
    hosts: &str,
    extra: serde_json::Value,
) -> TestServer {
    let hosts_file = dir.join("hosts");
    std::fs::write(&hosts_file, format!("127.0.0.1 localhost\n{hosts}")).unwrap();
    // The test hosts are containers on Docker's default bridge, which a sandbox on its tenant's
    // own network never reaches whatever its policy (`walls.rs` tests that, and egress on the
    // tenant's network): these sandboxes sit on the default bridge with them.
    let mut config = serde_json::json!({
        "server": {"state_dir": dir.join("state"), "allow_client_run_args": true},
        "docker": {"create": {"tenant_network": false}},
    });
    testkit::config::merge(&mut config, extra);
    TestServer::launch(SANDBOXD, label)
        .config(config)
        .prelude(&format!(
            "exec unshare --mount --propagation private sh -c 'mount --bind {} /etc/hosts && exec \"$0\" \"$@\"' \"$0\" \"$@\"",
            hosts_file.display()
        ))
        .start()
}

async fn client(server: &TestServer) -> Raw {
    let channel =
        tonic::transport::Endpoint::from_shared(server.url.clone()).unwrap().connect().await.unwrap();
    SandboxServiceClient::new(channel)
}

fn rule(action: proto::EgressAction, cidr: &str, ports: &[u32]) -> proto::EgressRule {
    proto::EgressRule { action: action as i32, cidr: cidr.into(), ports: ports.to_vec() }
}

fn policy(
    default: proto::EgressAction,
    rules: Vec<proto::EgressRule>,
    domains: &[&str],
) -> proto::NetworkPolicy {
    proto::NetworkPolicy {
        default_action: default as i32,
        rules,
        allow_domains: domains.iter().map(|d| d.to_string()).collect(),
    }
}

use proto::EgressAction::{Allow, Deny};

async fn create(c: &mut Raw, network_policy: Option<proto::NetworkPolicy>) -> Result<String, tonic::Status> {
    let spec = proto::SandboxSpec { image: BUSYBOX.into(), network_policy, ..Default::default() };
    let r = c.create(proto::CreateRequest { spec: Some(spec) }).await?;
    Ok(r.into_inner().sandbox.unwrap().sandbox_id)
}

/// Run `command` in the sandbox as root: (exit code, stdout + stderr).
async fn sh(c: &mut Raw, id: &str, command: &str) -> (i32, String) {
    let r = c
        .exec(proto::ExecRequest {
            sandbox_id: id.into(),
            command: command.into(),
            user: Some("root".into()),
            timeout_s: Some(30.0),
            ..Default::default()
        })
        .await
        .expect("exec")
        .into_inner();
    (r.return_code, format!("{}{}", String::from_utf8_lossy(&r.stdout), String::from_utf8_lossy(&r.stderr)))
}

/// Whether the sandbox gets the test host's page (a refused connection fails at once).
async fn reaches(c: &mut Raw, id: &str, host: &TestHost) -> bool {
    // busybox's static wget crashes in glibc's resolver; nc speaks HTTP/1.0 well enough.
    let request = format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {} 80", host.ip);
    let (code, out) = sh(c, id, &request).await;
    code == 0 && out.contains(&host.name)
}

async fn set(c: &mut Raw, id: &str, p: proto::NetworkPolicy) -> Result<(), tonic::Status> {
    c.set_network_policy(proto::SetNetworkPolicyRequest { sandbox_id: id.into(), policy: Some(p) })
        .await
        .map(|_| ())
}

fn host_has_no_table_of_ours() {
    let out = Command::new("nft").args(["list", "tables"]).output().expect("nft on the host");
    let tables = String::from_utf8_lossy(&out.stdout);
    assert!(!tables.contains("sandboxd_egress"), "the host's own ruleset was touched: {tables}");
}

#[tokio::test(flavor = "multi_thread")]
async fn allowed_answers_denied_does_not_a_live_change_holds_and_root_cannot_undo_it() {
    let label = TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (TestHost::start(&label, "host-a"), TestHost::start(&label, "host-b"));
    let server = start_server(&label, dir.path(), "", serde_json::json!({}));
    let mut c = client(&server).await;

    // No policy, no default: everything is reachable, as before egress policies existed.
    let open = create(&mut c, None).await.unwrap();
    assert!(reaches(&mut c, &open, &a).await && reaches(&mut c, &open, &b).await, "no policy reaches both");

    let id = create(&mut c, Some(policy(Deny, vec![rule(Allow, &format!("{}/32", a.ip), &[80])], &[])))
        .await
        .unwrap();
    assert!(reaches(&mut c, &id, &a).await, "the allowed host answers");
    assert!(!reaches(&mut c, &id, &b).await, "the denied host does not");

    // A live change, same sandbox, no restart.
    set(&mut c, &id, policy(Deny, vec![rule(Allow, &b.ip, &[])], &[])).await.unwrap();
    assert!(!reaches(&mut c, &id, &a).await, "A is denied after the change");
    assert!(reaches(&mut c, &id, &b).await, "B answers after the change");
    // A deny rule before a broader allow wins (first match); the default allow lets the rest out.
    set(&mut c, &id, policy(Allow, vec![rule(Deny, &b.ip, &[80]), rule(Allow, "0.0.0.0/0", &[])], &[]))
        .await
        .unwrap();
    assert!(reaches(&mut c, &id, &a).await && !reaches(&mut c, &id, &b).await, "first match wins");
    set(&mut c, &id, policy(Deny, vec![rule(Allow, &b.ip, &[])], &[])).await.unwrap();

    // Bad input is INVALID_ARGUMENT naming the part, and nothing changes.
    let err = set(&mut c, &id, policy(Deny, vec![rule(Allow, "10.0.0.0/33", &[])], &[])).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("policy.rules[0].cidr"), "{err:?}");
    let err = set(&mut c, &id, policy(Deny, vec![rule(Allow, &a.ip, &[0])], &[])).await.unwrap_err();
    assert!(
        err.code() == Code::InvalidArgument && err.message().contains("policy.rules[0].ports"),
        "{err:?}"
    );
    let err = set(&mut c, &id, policy(proto::EgressAction::Unspecified, vec![], &[])).await.unwrap_err();
    assert!(
        err.code() == Code::InvalidArgument && err.message().contains("policy.default_action"),
        "{err:?}"
    );
    assert!(
        !reaches(&mut c, &id, &a).await && reaches(&mut c, &id, &b).await,
        "a refused change changed nothing"
    );
    let before = label.containers().len();
    let err = create(&mut c, Some(policy(Deny, vec![rule(Allow, "nonsense", &[])], &[]))).await.unwrap_err();
    assert!(
        err.code() == Code::InvalidArgument && err.message().contains("spec.network_policy.rules[0].cidr"),
        "{err:?}"
    );
    assert_eq!(label.containers().len(), before, "a refused create made nothing");

    // Root in the sandbox has no CAP_NET_ADMIN, so it can change neither rules nor routes.
    let (_, status) = sh(&mut c, &id, "grep CapEff /proc/1/status; grep CapEff /proc/self/status").await;
    for line in status.lines() {
        let caps = u64::from_str_radix(line.split_whitespace().last().unwrap(), 16).unwrap();
        assert_eq!(caps & (1 << 12), 0, "CAP_NET_ADMIN in {line}");
    }
    let (code, out) = sh(&mut c, &id, "ip route del default").await;
    assert_ne!(code, 0, "root changed the routing table over netlink: {out}");
    let (code, out) = sh(&mut c, &id, "ip link set eth0 down").await;
    assert_ne!(code, 0, "root took its interface down over netlink: {out}");
    let (code, _) = sh(&mut c, &id, "nft flush ruleset || iptables -F").await;
    assert_ne!(code, 0, "the sandbox has no tool to flush rules with, nor the right");
    assert!(!reaches(&mut c, &id, &a).await && reaches(&mut c, &id, &b).await, "the policy still holds");

    // Flags that would give the sandbox NET_ADMIN are refused even where run_args are allowed.
    for flags in [vec!["--cap-add", "NET_ADMIN"], vec!["--privileged"], vec!["--network=host"]] {
        let spec = proto::SandboxSpec {
            image: BUSYBOX.into(),
            provider_options: Some(proto::ProviderOptions {
                run_args: flags.iter().map(|f| f.to_string()).collect(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let err = c.create(proto::CreateRequest { spec: Some(spec) }).await.unwrap_err();
        assert!(
            err.code() == Code::InvalidArgument && err.message().contains("spec.provider_options.run_args"),
            "{flags:?}: {err:?}"
        );
    }
    assert_eq!(label.containers().len(), before, "refused creates made nothing");

    host_has_no_table_of_ours();
    for sandbox in [&id, &open] {
        c.close(proto::CloseRequest { sandbox_id: sandbox.to_string() }).await.unwrap();
    }
    assert!(
        !dir.path().join("state/network-policies").join(format!("{id}.json")).exists(),
        "the record goes with it"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn allowed_domains_resolve_into_the_rules_and_dns_is_denied_with_the_rest() {
    let label = TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (TestHost::start(&label, "host-a"), TestHost::start(&label, "host-b"));
    let tag = &label.value[..8];
    let (allowed, denied) = (format!("allowed-{tag}.test"), format!("denied-{tag}.test"));
    let hosts = format!("{} {allowed}\n{} {denied}\n", a.ip, b.ip);
    let server = start_server(&label, dir.path(), &hosts, serde_json::json!({}));
    let mut c = client(&server).await;
    let dns = dns_responder(&a.gateway, b.ip.parse().unwrap());
    let lookup = format!("nslookup {denied} {dns}");

    // Without a policy the sandbox's DNS works (so a failure below is the policy's doing).
    let open = create(&mut c, None).await.unwrap();
    let (code, out) = sh(&mut c, &open, &lookup).await;
    assert!(code == 0 && out.contains(&b.ip), "DNS answers without a policy: {out}");

    let id = create(&mut c, Some(policy(Deny, vec![], &[&allowed]))).await.unwrap();
    assert!(reaches(&mut c, &id, &a).await, "the allowed domain's address answers");
    assert!(!reaches(&mut c, &id, &b).await, "the denied domain's address does not");
    let (_, etc_hosts) = sh(&mut c, &id, "cat /etc/hosts").await;
    assert!(
        etc_hosts.contains(&format!("{} {allowed}", a.ip)),
        "the allowed name resolves in the sandbox: {etc_hosts}"
    );
    assert!(!etc_hosts.contains(&denied), "{etc_hosts}");
    let (code, out) = sh(&mut c, &id, &lookup).await;
    assert!(code != 0 && !out.contains(&b.ip), "DNS to a denied name fails: {out}");

    // Opening the resolver by a rule makes the same lookup answer: it was the policy.
    let resolver = rule(Allow, &format!("{}/32", dns.ip()), &[u32::from(dns.port())]);
    set(&mut c, &id, policy(Deny, vec![resolver], &[&allowed])).await.unwrap();
    let (code, out) = sh(&mut c, &id, &lookup).await;
    assert!(code == 0 && out.contains(&b.ip), "an allowed resolver answers: {out}");
    assert!(reaches(&mut c, &id, &a).await && !reaches(&mut c, &id, &b).await, "domains still decide");

    let err = set(&mut c, &id, policy(Deny, vec![], &["*.example.com"])).await.unwrap_err();
    assert!(
        err.code() == Code::InvalidArgument && err.message().contains("policy.allow_domains[0]"),
        "{err:?}"
    );
    for sandbox in [&id, &open] {
        c.close(proto::CloseRequest { sandbox_id: sandbox.to_string() }).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_default_policy_holds_for_sandboxes_that_name_none_and_for_their_forks() {
    let label = TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (TestHost::start(&label, "host-a"), TestHost::start(&label, "host-b"));
    let default = serde_json::json!({"network": {"default_policy": {
        "default_action": "deny",
        "rules": [{"action": "allow", "cidr": format!("{}/32", a.ip), "ports": [80]}],
    }}});
    let server = start_server(&label, dir.path(), "", default);
    let mut c = client(&server).await;

    let id = create(&mut c, None).await.unwrap();
    assert!(reaches(&mut c, &id, &a).await && !reaches(&mut c, &id, &b).await, "the default applies");
    let own = create(&mut c, Some(policy(Deny, vec![rule(Allow, &b.ip, &[80])], &[]))).await.unwrap();
    assert!(!reaches(&mut c, &own, &a).await && reaches(&mut c, &own, &b).await, "a spec's own policy wins");

    // A fork's children keep their source's policy (a live change included).
    set(&mut c, &own, policy(Deny, vec![rule(Allow, &b.ip, &[80]), rule(Allow, &a.ip, &[80])], &[]))
        .await
        .unwrap();
    let forked = c
        .fork(proto::ForkRequest { sandbox_id: own.clone(), count: 1, ..Default::default() })
        .await
        .expect("fork")
        .into_inner();
    let child = forked.sandboxes[0].sandbox_id.clone();
    assert!(
        reaches(&mut c, &child, &a).await && reaches(&mut c, &child, &b).await,
        "the child has the source's policy"
    );
    set(&mut c, &child, policy(Deny, vec![], &[])).await.unwrap();
    assert!(
        !reaches(&mut c, &child, &a).await && !reaches(&mut c, &child, &b).await,
        "the child's own change"
    );
    assert!(reaches(&mut c, &own, &a).await, "the source is untouched by its child's change");

    for sandbox in [&id, &own, &child] {
        c.close(proto::CloseRequest { sandbox_id: sandbox.to_string() }).await.unwrap();
    }
    c.delete_snapshot(proto::DeleteSnapshotRequest { snapshot_id: forked.snapshot_id }).await.unwrap();
}

#[test]
fn a_default_policy_that_does_not_check_stops_the_server_naming_it() {
    let label = TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    let config = serde_json::json!({"network": {"default_policy": {
        "default_action": "deny", "rules": [{"action": "allow", "cidr": "10.0.0.1/8"}],
    }}});
    let launch = TestServer::launch(SANDBOXD, &label).config(config);
    let out = launch.command(dir.path()).stderr(std::process::Stdio::piped()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("network.default_policy.rules[0].cidr"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn rules_outlive_a_server_restart_and_the_next_server_changes_them() {
    let label = TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (TestHost::start(&label, "host-a"), TestHost::start(&label, "host-b"));
    let mut first = start_server(&label, dir.path(), "", serde_json::json!({}));
    let mut c = client(&first).await;
    let id = create(&mut c, Some(policy(Deny, vec![rule(Allow, &a.ip, &[80])], &[]))).await.unwrap();
    assert!(reaches(&mut c, &id, &a).await && !reaches(&mut c, &id, &b).await);
    first.terminate(Duration::from_secs(20)).expect("the first server exits");

    // The rules live in the sandbox's namespace, not in the server.
    let second = start_server(&label, dir.path(), "", serde_json::json!({}));
    let mut c = client(&second).await;
    assert!(reaches(&mut c, &id, &a).await && !reaches(&mut c, &id, &b).await, "still enforced");
    set(&mut c, &id, policy(Deny, vec![rule(Allow, &b.ip, &[80])], &[])).await.unwrap();
    assert!(!reaches(&mut c, &id, &a).await && reaches(&mut c, &id, &b).await, "changed by the new server");
    c.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}
