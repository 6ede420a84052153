//! A network the service owns against the real daemon (issue 22, NeMo Gym's
//! `SupportsSandboxNetwork`): sandboxes on it reach each other by `NetworkAddress`, others do
//! not, and the sweep removes the network once unused.
//!
//! Alone in its binary on purpose: Docker 20.10 deletes and re-inserts the `FORWARD` jumps to
//! `DOCKER-USER` and `DOCKER-ISOLATION-STAGE-1` at every network create (moby/moby#43585), so a
//! test beside it making a network opens a moment in which a connection between two bridges
//! passes and conntrack keeps it. Every network this test makes exists before it checks that an
//! outsider is kept out.

mod requirements;

use sandboxd_client::proto;
use testkit::raw::{busybox, create_id};
use testkit::service::TestService;
use testkit::TestLabel;

use requirements::{close, docker_lines, exec, unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxes_on_one_network_reach_each_other_and_the_sweep_removes_it_once_unused() {
    let label = TestLabel::new();
    // An empty network goes by the sweep after `network_idle_s`, never at a close (another
    // server may be about to use it: `replicas.rs`).
    let server = TestService::start_with(&label, None, |c| {
        c.server.sweep_interval = std::time::Duration::from_secs(1);
        c.docker.create.network_idle = std::time::Duration::from_secs(1);
    });
    let mut raw = server.raw().await;
    let net = unique("lab");
    let on_net = || proto::SandboxSpec { network: Some(net.clone()), ..busybox() };
    let server_id = create_id(&mut raw, on_net()).await;
    let client_id = create_id(&mut raw, on_net()).await;
    let outsider = create_id(&mut raw, busybox()).await;

    let found = raw
        .network_address(proto::NetworkAddressRequest { sandbox_id: server_id.clone() })
        .await
        .expect("network address")
        .into_inner();
    assert_eq!(found.network, net);
    assert!(found.address.parse::<std::net::Ipv4Addr>().is_ok(), "{found:?}");
    let docker_net = format!("sandboxd-net-{net}");
    assert_eq!(docker_lines(&["network", "ls", "-q", "--filter", &format!("name=^{docker_net}$")]).len(), 1);

    let (rc, _, err) = exec(
        &mut raw,
        &server_id,
        "mkdir -p /www && echo hello-from-the-lab > /www/index.html && httpd -p 8080 -h /www",
    )
    .await;
    assert_eq!(rc, 0, "{err}");
    // busybox-static's `wget -T` crashes: the outer `timeout` bounds it instead.
    let fetch = format!("timeout 5 wget -q -O- http://{}:8080/", found.address);
    let (rc, out, err) = exec(&mut raw, &client_id, &fetch).await;
    assert_eq!((rc, out.trim()), (0, "hello-from-the-lab"), "{err}");
    let (rc, out, _) = exec(&mut raw, &outsider, &fetch).await;
    assert_ne!(rc, 0, "a sandbox off the network reached it: {out}");

    close(&mut raw, &server_id).await;
    assert_eq!(
        docker_lines(&["network", "ls", "-q", "--filter", &format!("name=^{docker_net}$")]).len(),
        1,
        "the network stays while a sandbox is on it"
    );
    close(&mut raw, &client_id).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !docker_lines(&["network", "ls", "-q", "--filter", &format!("name=^{docker_net}$")]).is_empty() {
        assert!(std::time::Instant::now() < deadline, "the sweep left the unused network {docker_net}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    close(&mut raw, &outsider).await;
}
