//! End to end: `sandboxctl` (the real binary) against the service (in-process) and Docker, as a
//! script would use it. The interactive `shell` is in `ctl_shell.rs` (a real terminal).

use std::process::Output;

use testkit::ctl::text;
use testkit::images::BASH;
use testkit::service::TestService;
use testkit::TestLabel;

/// The sandboxctl binary Cargo built for these tests.
const SANDBOXCTL: &str = env!("CARGO_BIN_EXE_sandboxctl");

/// `sandboxctl --addr ADDR ARGS…` with `stdin` as its input.
fn ctl(addr: &str, args: &[&str], stdin: Option<&[u8]>) -> Output {
    testkit::ctl::ctl(SANDBOXCTL, addr, args, stdin)
}

#[test]
fn create_exec_cp_ls_status_rm() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let addr = server.addr();
    let run = format!("r{}", uuid::Uuid::new_v4().simple());
    let run_label = format!("run={run}");

    let out =
        ctl(&addr, &["create", BASH, "--label", &run_label, "--env", "GREETING=hi", "--ttl", "30m"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_string();
    assert!(id.starts_with("sandboxd-"), "{id}");
    let out = ctl(&addr, &["create", BASH, "-o", "json", "--label", &run_label, "--workdir", "/tmp"], None);
    let second: serde_json::Value = serde_json::from_slice(&out.stdout).expect("create -o json");
    assert_eq!(second["metadata"]["run"], run.as_str());
    assert_eq!(second["workdir"], "/tmp");

    // Several arguments are an argv; its exit code is sandboxctl's; both streams are kept apart.
    let out = ctl(&addr, &["exec", &id, "--", "sh", "-c", "echo hi; echo oops >&2; exit 3"], None);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(text(&out.stdout), "hi\n");
    assert_eq!(text(&out.stderr), "oops\n");
    // One argument is a shell command line as is; the spec's env is there.
    let out = ctl(&addr, &["exec", &id, "--", "echo \"$GREETING\" | tr a-z A-Z"], None);
    assert_eq!((out.status.code(), text(&out.stdout)), (Some(0), "HI\n".to_string()));
    // Input that is not a terminal is forwarded.
    let out = ctl(&addr, &["exec", &id, "--", "wc", "-c"], Some(b"12345"));
    assert_eq!(text(&out.stdout).trim(), "5");

    // cp both ways, through files and through stdin/stdout.
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("data.bin");
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&local, &data).unwrap();
    let remote = format!("{id}:/tmp/in/");
    let out = ctl(&addr, &["cp", local.to_str().unwrap(), &remote], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let back = dir.path().join("back.bin");
    let out = ctl(&addr, &["cp", &format!("{id}:/tmp/in/data.bin"), back.to_str().unwrap()], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(std::fs::read(&back).unwrap() == data, "the file came back as it went");
    let out = ctl(&addr, &["cp", "-", &format!("{id}:/tmp/piped")], Some(b"through a pipe"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = ctl(&addr, &["cp", &format!("{id}:/tmp/piped"), "-"], None);
    assert_eq!(text(&out.stdout), "through a pipe");

    let out = ctl(&addr, &["status", &id], None);
    assert_eq!(text(&out.stdout).trim(), "running");
    let out = ctl(&addr, &["ls", "--label", &run_label, "-o", "json"], None);
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ls -o json");
    let ids: Vec<&str> =
        listed.as_array().unwrap().iter().map(|s| s["sandbox_id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec![id.as_str(), second["sandbox_id"].as_str().unwrap()]);
    // `--ttl 30m` is a lease that ends 30 minutes after the create completed (`created_at` is
    // when it began: the create itself, here well under a minute, comes on top).
    let first = &listed[0];
    let lease = first["expires_at_unix_ms"].as_i64().expect("a lease end")
        - first["created_at_unix_ms"].as_i64().unwrap();
    assert!((1_800_000..=1_860_000).contains(&lease), "lease of {lease} ms for --ttl 30m");
    let out = ctl(&addr, &["ls", "--label", &run_label], None);
    let table = text(&out.stdout);
    assert!(table.starts_with("SANDBOX ID") && table.contains(&id) && table.contains(&run_label), "{table}");

    // Bulk removal prints what it removed.
    let out = ctl(&addr, &["rm", "--label", &run_label], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut removed: Vec<String> = text(&out.stdout).lines().map(String::from).collect();
    removed.sort();
    let mut expected = vec![id.clone(), second["sandbox_id"].as_str().unwrap().to_string()];
    expected.sort();
    assert_eq!(removed, expected);
    let out = ctl(&addr, &["ls", "--label", &run_label, "-o", "json"], None);
    assert_eq!(text(&out.stdout).trim(), "[]");
    assert!(label.containers().is_empty());
}

#[test]
fn failures_are_one_line_with_the_grpc_code_and_exit_1() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let addr = server.addr();
    let cases: [(&[&str], &str, &str); 3] = [
        (&["status", "sandboxd-not-an-id"], "NOT_FOUND", "not found"),
        (&["create", BASH, "--label", "Bad_Key=x"], "INVALID_ARGUMENT", "spec.metadata"),
        (&["exec", "sandboxd-00000000000000000000000000000000", "--", "true"], "NOT_FOUND", "not found"),
    ];
    for (args, code, words) in cases {
        let out = ctl(&addr, args, None);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let stderr = text(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(stderr.starts_with(&format!("sandboxctl: {code}: ")) && stderr.contains(words), "{stderr}");
    }
    let out = ctl("127.0.0.1:1", &["ls"], None);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.starts_with("sandboxctl: UNAVAILABLE: ") && stderr.to_lowercase().contains("refused"),
        "{stderr}"
    );
    assert!(label.containers().is_empty());
}

#[test]
fn the_token_comes_from_token_file_or_its_environment_variable() {
    let label = TestLabel::new();
    let server = TestService::start(&label, Some("s3cret-token"));
    let addr = server.addr();
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret-token\n").unwrap();

    let out = ctl(&addr, &["ls"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).starts_with("sandboxctl: UNAUTHENTICATED: "), "{}", text(&out.stderr));
    let out = ctl(&addr, &["ls", "--token-file", token.to_str().unwrap()], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = std::process::Command::new(SANDBOXCTL)
        .args(["ls", "-o", "json"])
        .env("SANDBOXD_ADDR", &addr)
        .env("SANDBOXD_TOKEN_FILE", &token)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).trim_start().starts_with('['));
    let out = ctl(&addr, &["ls", "--token-file", "/nonexistent/token"], None);
    assert!(text(&out.stderr).contains("/nonexistent/token"), "{}", text(&out.stderr));
}
