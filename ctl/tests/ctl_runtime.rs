//! `sandboxctl create --network --cap-add --shm-size --volume`, `address` and `volume ls|rm`
//! (the real binary) against the service in-process and Docker, as a person would type them.

use std::process::Output;

use testkit::ctl::text;
use testkit::images::BUSYBOX;
use testkit::service::TestService;
use testkit::TestLabel;

const SANDBOXCTL: &str = env!("CARGO_BIN_EXE_sandboxctl");

fn ctl(addr: &str, args: &[&str]) -> Output {
    testkit::ctl::ctl(SANDBOXCTL, addr, args, None)
}

fn ok(addr: &str, args: &[&str]) -> String {
    testkit::ctl::ok(SANDBOXCTL, addr, args)
}

#[test]
fn create_with_a_network_a_volume_shm_and_a_capability_then_address_and_volumes() {
    let label = TestLabel::new();
    let server = TestService::start_with(&label, None, |c| {
        c.docker.create.allowed_cap_add = vec!["SYS_PTRACE".into()];
    });
    let addr = server.addr();
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let (net, vol) = (format!("lab-{suffix}"), format!("data-{suffix}"));
    let mount = format!("{vol}:/data");
    let id = ok(
        &addr,
        &["create", BUSYBOX, "--network", &net, "-v", &mount, "--shm-size", "96m", "--cap-add", "SYS_PTRACE"],
    )
    .trim()
    .to_string();
    let shm = ok(&addr, &["exec", &id, "--", "df -k /dev/shm | tail -1"]);
    assert_eq!(shm.split_whitespace().nth(1), Some("98304"), "{shm}");
    ok(&addr, &["exec", &id, "--", "echo kept > /data/f"]);

    let found = ok(&addr, &["address", &id]);
    let (ip, network) = found.trim().split_once('\t').expect("ADDRESS\\tNETWORK");
    assert!(ip.parse::<std::net::Ipv4Addr>().is_ok() && network == net, "{found}");

    let ro = format!("{vol}:/ro:ro");
    let reader = ok(&addr, &["create", BUSYBOX, "--network", &net, "--volume", &ro]).trim().to_string();
    assert_eq!(ok(&addr, &["exec", &reader, "--", "cat /ro/f"]).trim(), "kept");
    assert!(ok(&addr, &["volume", "ls"]).lines().any(|l| l == vol));
    let busy = ctl(&addr, &["volume", "rm", &vol]);
    assert!(!busy.status.success() && text(&busy.stderr).contains("mounted"), "{}", text(&busy.stderr));

    ok(&addr, &["rm", &id, &reader]);
    assert_eq!(ok(&addr, &["volume", "rm", &vol]).trim(), vol);
    assert!(!ok(&addr, &["volume", "ls"]).lines().any(|l| l == vol));

    // Host paths and capabilities the operator did not allow are refused, naming them.
    let host = ctl(&addr, &["create", BUSYBOX, "-v", "/etc:/host"]);
    assert!(!host.status.success() && text(&host.stderr).contains("host paths are never mounted"));
    let admin = ctl(&addr, &["create", BUSYBOX, "--cap-add", "NET_ADMIN"]);
    assert!(!admin.status.success() && text(&admin.stderr).contains("NET_ADMIN"), "{}", text(&admin.stderr));
    assert!(label.containers().is_empty(), "containers left behind");
}
