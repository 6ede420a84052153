//! Two teams on one server, with sandboxctl as a person would use it: each team's key lists,
//! touches and removes only its own sandboxes (`rm --label owner=me` included).

use testkit::images::BUSYBOX;
use testkit::service::TestService;
use testkit::TestLabel;

const SANDBOXCTL: &str = env!("CARGO_BIN_EXE_sandboxctl");
/// `printf %s red-key | sha256sum`, as an operator writes the tenants file.
const RED_SHA256: &str = "af6bbab6e4aed4aacdfac7ff89ced445c2613aa1454bdc670a49b2fad78bc0b3";
/// `printf %s blue-key | sha256sum`.
const BLUE_SHA256: &str = "da71e267b3b77b50077da29f7322e9317a1f629a410f782a1a970f97e2548377";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_string()
}

#[test]
fn two_tenants_cannot_list_touch_or_remove_each_others_sandboxes() {
    let label = TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    let tag = &label.value[..12];
    let tenants = dir.path().join("tenants.yaml");
    std::fs::write(
        &tenants,
        format!(
            "tenants:\n- {{name: red-{tag}, key_sha256: {}}}\n- {{name: blue-{tag}, key_sha256: {}}}\n",
            RED_SHA256, BLUE_SHA256
        ),
    )
    .unwrap();
    let (red_key, blue_key) = (dir.path().join("red.key"), dir.path().join("blue.key"));
    std::fs::write(&red_key, "red-key\n").unwrap();
    std::fs::write(&blue_key, "blue-key\n").unwrap();
    let state = dir.path().join("state");
    let server = TestService::start_with(&label, None, |c| {
        c.server.auth.tenants_file = Some(tenants.clone());
        c.server.state_dir = Some(state.clone());
    });
    let addr = server.addr();
    let as_ = |key: &std::path::Path, args: &[&str]| {
        let mut all = vec!["--token-file", key.to_str().unwrap()];
        all.extend_from_slice(args);
        testkit::ctl::ctl(SANDBOXCTL, &addr, &all, None)
    };
    let red = as_(&red_key, &["create", BUSYBOX, "--label", "owner=me"]);
    assert!(red.status.success(), "{}", text(&red.stderr));
    let red_id = text(&red.stdout);
    let blue = as_(&blue_key, &["create", BUSYBOX, "--label", "owner=me"]);
    assert!(blue.status.success(), "{}", text(&blue.stderr));
    let blue_id = text(&blue.stdout);

    let red_ls = text(&as_(&red_key, &["ls"]).stdout);
    assert!(red_ls.contains(&red_id) && !red_ls.contains(&blue_id), "{red_ls}");
    let blue_ls = text(&as_(&blue_key, &["ls"]).stdout);
    assert!(blue_ls.contains(&blue_id) && !blue_ls.contains(&red_id), "{blue_ls}");

    let touch = as_(&blue_key, &["exec", &red_id, "--", "echo", "hi"]);
    assert!(!touch.status.success());
    assert!(text(&touch.stderr).contains("NOT_FOUND"), "{}", text(&touch.stderr));
    let rm_other = as_(&blue_key, &["rm", &red_id]);
    assert!(!rm_other.status.success(), "blue removed red's sandbox");

    // `rm --label owner=me` with blue's key removes blue's only.
    let rm = as_(&blue_key, &["rm", "--label", "owner=me"]);
    assert!(rm.status.success(), "{}", text(&rm.stderr));
    assert_eq!(text(&rm.stdout), blue_id);
    let status = as_(&red_key, &["status", &red_id]);
    assert_eq!(text(&status.stdout), "running", "{}", text(&status.stderr));
    assert!(as_(&red_key, &["rm", &red_id]).status.success());
    assert!(label.containers().is_empty(), "left: {:?}", label.containers());
}
