//! `sandboxctl grant`, `revoke` and `--token` as a person uses them: the owner hands a grader
//! an operate token, the grader runs commands with it (by flag and by `SANDBOXD_TOKEN`) but
//! cannot remove the sandbox or widen the token, and a revoked token stops working.

use std::process::Command;

use testkit::images::BUSYBOX;
use testkit::service::TestService;
use testkit::TestLabel;

const SANDBOXCTL: &str = env!("CARGO_BIN_EXE_sandboxctl");

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_string()
}

#[test]
fn an_operate_token_runs_commands_cannot_remove_or_widen_and_dies_when_revoked() {
    let label = TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let server = TestService::start_with(&label, None, |c| c.server.state_dir = Some(state.clone()));
    let addr = server.addr();
    let ctl = |args: &[&str]| testkit::ctl::ctl(SANDBOXCTL, &addr, args, None);

    let created = ctl(&["create", BUSYBOX]);
    assert!(created.status.success(), "{}", text(&created.stderr));
    let id = text(&created.stdout);

    let granted = ctl(&["grant", &id, "--scope", "operate", "--ttl", "10m"]);
    assert!(granted.status.success(), "{}", text(&granted.stderr));
    let token = text(&granted.stdout);
    assert_eq!(token.split('.').count(), 3, "a JWT on stdout alone: {token}");
    let note = text(&granted.stderr);
    let token_id =
        note.strip_prefix("token id ").and_then(|r| r.split_whitespace().next()).expect(&note).to_string();
    assert!(note.contains("expires at"), "{note}");

    let exec = ctl(&["--token", &token, "exec", &id, "--", "echo", "graded"]);
    assert!(exec.status.success(), "{}", text(&exec.stderr));
    assert_eq!(text(&exec.stdout), "graded");
    // The same token from the environment, as a grader's job would carry it.
    let by_env = Command::new(SANDBOXCTL)
        .args(["--addr", &addr, "rm", &id])
        .env("SANDBOXD_TOKEN", &token)
        .env_remove("SANDBOXD_TOKEN_FILE")
        .output()
        .unwrap();
    assert!(!by_env.status.success(), "an operate token removed the sandbox");
    assert!(text(&by_env.stderr).contains("PERMISSION_DENIED"), "{}", text(&by_env.stderr));
    let widen = ctl(&["--token", &token, "grant", &id, "--scope", "owner"]);
    assert!(
        !widen.status.success() && text(&widen.stderr).contains("PERMISSION_DENIED"),
        "{}",
        text(&widen.stderr)
    );
    let bad_scope = ctl(&["grant", &id, "--scope", "admin"]);
    assert!(
        !bad_scope.status.success() && text(&bad_scope.stderr).contains("operate"),
        "{}",
        text(&bad_scope.stderr)
    );

    // A read token, as JSON, granted from the operate token (never wider than it).
    let read = ctl(&["--token", &token, "grant", &id, "--scope", "read", "-o", "json"]);
    assert!(read.status.success(), "{}", text(&read.stderr));
    let read: serde_json::Value = serde_json::from_slice(&read.stdout).unwrap();
    let read_token = read["token"].as_str().unwrap().to_string();
    assert!(
        read["token_id"].as_str().is_some_and(|t| !t.is_empty()) && read["expires_at_s"].as_f64().is_some()
    );
    let status = ctl(&["--token", &read_token, "status", &id]);
    assert_eq!(text(&status.stdout), "running", "{}", text(&status.stderr));
    let denied = ctl(&["--token", &read_token, "exec", &id, "--", "true"]);
    assert!(text(&denied.stderr).contains("PERMISSION_DENIED"), "{}", text(&denied.stderr));

    // Revoking the operate token ends it and the read token granted from it.
    let revoked = ctl(&["revoke", &token_id]);
    assert!(revoked.status.success(), "{}", text(&revoked.stderr));
    assert_eq!(text(&revoked.stdout), format!("revoked {token_id}"));
    for t in [&token, &read_token] {
        let after = ctl(&["--token", t, "status", &id]);
        assert!(
            !after.status.success() && text(&after.stderr).contains("UNAUTHENTICATED"),
            "{}",
            text(&after.stderr)
        );
    }
    assert!(ctl(&["rm", &id]).status.success());
    assert!(label.containers().is_empty(), "left: {:?}", label.containers());
}
