//! `sandboxctl pool create|ls|rm` and `create --pool` (issue 21), the real binary against the
//! service (in-process) and Docker.

use std::process::Output;
use std::time::{Duration, Instant};

use testkit::ctl::text;
use testkit::images::BUSYBOX;
use testkit::service::TestService;
use testkit::TestLabel;

/// The sandboxctl binary Cargo built for these tests.
const SANDBOXCTL: &str = env!("CARGO_BIN_EXE_sandboxctl");

fn ctl(addr: &str, args: &[&str]) -> Output {
    testkit::ctl::ctl(SANDBOXCTL, addr, args, None)
}

fn ok(addr: &str, args: &[&str]) -> String {
    testkit::ctl::ok(SANDBOXCTL, addr, args)
}

/// `pool ls -o json`'s entry for `name`.
fn pool(addr: &str, name: &str) -> serde_json::Value {
    let all: serde_json::Value = serde_json::from_str(&ok(addr, &["pool", "ls", "-o", "json"])).unwrap();
    all.as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no pool {name}"))
}

#[test]
fn pool_create_ls_claim_and_rm() {
    let label = TestLabel::new();
    let state = tempfile::tempdir().unwrap();
    let server = TestService::start_json(&label, serde_json::json!({"server": {"state_dir": state.path()}}));
    let addr = server.addr();
    let tag = &label.value[..12];
    let name = format!("ctl-{tag}");
    assert_eq!(
        ok(&addr, &["pool", "create", &name, BUSYBOX, "--target", "1", "--workdir", "/tmp"]).trim(),
        name
    );
    let start = Instant::now();
    while pool(&addr, &name)["ready"] != 1 {
        assert!(start.elapsed() < Duration::from_secs(60), "the pool never filled: {}", pool(&addr, &name));
        std::thread::sleep(Duration::from_millis(100));
    }
    let table = ok(&addr, &["pool", "ls"]);
    let row = table.lines().find(|l| l.starts_with(&name)).unwrap_or_else(|| panic!("{table}"));
    assert!(row.contains("1/1") && row.contains(BUSYBOX), "{table}");
    assert_eq!(pool(&addr, &name)["max"], 2, "--max defaults to twice the target");

    // A claim: no image needed, --env and --label apply.
    let id =
        ok(&addr, &["create", "--pool", &name, "--env", "GREETING=hi", "--label", &format!("case={tag}")]);
    let id = id.trim();
    assert_eq!(ok(&addr, &["exec", id, "--", "echo $GREETING; pwd"]), "hi\n/tmp\n");
    assert!(ok(&addr, &["ls", "--label", &format!("case={tag}")]).contains(id));
    assert_eq!(pool(&addr, &name)["claimed"], 1);

    // Bad input is one line naming the field; an unknown pool is NOT_FOUND.
    let out = ctl(&addr, &["pool", "create", "bad", BUSYBOX, "--target", "5", "--max", "2"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("INVALID_ARGUMENT") && text(&out.stderr).contains("pool.target"),
        "{}",
        text(&out.stderr)
    );
    let out = ctl(&addr, &["create", "--pool", "nope"]);
    assert!(text(&out.stderr).contains("NOT_FOUND"), "{}", text(&out.stderr));

    let start = Instant::now();
    while pool(&addr, &name)["ready"] != 1 {
        assert!(start.elapsed() < Duration::from_secs(60), "the pool never refilled");
        std::thread::sleep(Duration::from_millis(100));
    }
    let removed = ok(&addr, &["pool", "rm", &name]);
    assert!(removed.contains("1 unclaimed"), "{removed}");
    assert_eq!(label.names(), vec![id.to_string()], "only the claimed sandbox is left");
}
