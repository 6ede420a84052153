//! What a newcomer meets first, checked as they would meet it: the starter image script of the
//! README's quick start, then `sandboxctl` in a sandbox started from its image. (The systemd
//! unit is `server/tests/newcomer.rs`: it starts the server binary.)

use std::process::{Command, Output};

use testkit::service::TestService;
use testkit::{docker, TestLabel};

/// The sandboxctl binary Cargo built for these tests.
const SANDBOXCTL: &str = env!("CARGO_BIN_EXE_sandboxctl");

/// The repository's root (this crate is `ctl/`).
const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// `sandboxctl --addr ADDR ARGS…` with `stdin` as its input.
fn ctl(addr: &str, args: &[&str], stdin: Option<&[u8]>) -> Output {
    testkit::ctl::ctl(SANDBOXCTL, addr, args, stdin)
}

/// `scripts/starter-image.sh TAG` builds an image a sandbox starts from (no registry), twice
/// without complaint; `sandboxctl` runs a command in it.
#[test]
fn the_starter_image_script_builds_an_image_sandboxes_start_from() {
    testkit::require_docker();
    let tag = format!("sandboxd-test/starter:{}", uuid::Uuid::new_v4().simple());
    for _ in 0..2 {
        let out =
            Command::new("bash").arg(format!("{REPO}/scripts/starter-image.sh")).arg(&tag).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), tag);
    }
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let addr = server.addr();
    let out = ctl(&addr, &["create", &tag], None);
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = ctl(&addr, &["exec", &id, "--", "echo hello > /tmp/x && cat /tmp/x && id -un"], None);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\nroot\n");
    assert!(ctl(&addr, &["rm", &id], None).status.success());
    // The image is free once the close's background removal (the server's) took its container.
    assert!(label.containers().is_empty());
    drop(server);
    assert!(docker(&["rmi", &tag]).status.success());
}
