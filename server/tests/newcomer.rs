//! What a newcomer meets first, checked as they would meet it: the systemd unit in `deploy/`
//! and the config file's errors. (The starter image script of the README's quick start is
//! `ctl/tests/newcomer.rs`: it drives `sandboxctl`.)

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

/// The server binary Cargo built for these tests.
const SANDBOXD: &str = env!("CARGO_BIN_EXE_sandboxd");

/// The repository's root (this crate is `server/`).
const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// `deploy/sandboxd.service` passes `systemd-analyze verify` without a single warning (with
/// ExecStart pointed at the built binary), and its command line starts the server.
#[test]
fn the_systemd_unit_verifies_and_its_command_line_starts_the_server() {
    let unit =
        std::fs::read_to_string(format!("{REPO}/deploy/sandboxd.service")).expect("deploy/sandboxd.service");
    let exec_start =
        unit.lines().find_map(|l| l.strip_prefix("ExecStart=")).expect("an ExecStart line").to_string();
    let binary = SANDBOXD;
    let dir = tempfile::tempdir().unwrap();
    let local = unit.replace("/usr/local/bin/sandboxd", binary);
    let path = dir.path().join("sandboxd.service");
    std::fs::write(&path, local).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze (scripts/install-deps.sh installs systemd)");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.trim().is_empty(), "systemd-analyze verify: {said}");

    // The unit's own flags, with a port of our own and an empty YAML config.
    testkit::require_docker();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, "").unwrap();
    let args: Vec<String> = exec_start
        .split_whitespace()
        .skip(1)
        .map(|a| match a {
            "127.0.0.1:50051" => "127.0.0.1:0".to_string(),
            "/etc/sandboxd/config.yaml" => config.to_str().unwrap().to_string(),
            other => other.to_string(),
        })
        .collect();
    let mut child = Command::new(binary)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let started = lines.any(|l| l.is_ok_and(|l| l.starts_with("sandboxd listening on ")));
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let status = child.wait().unwrap();
    assert!(started, "the unit's command line did not start the server ({status})");
    assert!(status.success(), "SIGTERM drains and exits 0: {status}");
}

/// NeMo Gym's `docker.yaml` shape is accepted as YAML; a value of the wrong type names its field.
#[test]
fn yaml_config_and_mistyped_values_name_their_field() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, body: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, body).unwrap();
        Command::new(SANDBOXD)
            .args(["--listen", "127.0.0.1:0", "--config"])
            .arg(&path)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = run("docker.yaml", "docker:\n  create:\n    pids_limit: lots\n");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("docker.create.pids_limit") && stderr.contains("invalid type"), "{stderr}");
    let out = run("config.json", r#"{"server": {"allow_client_volumes": "no"}}"#);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("server.allow_client_volumes"), "{stderr}");
    let out = run("bad.yaml", "docker: [unclosed\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("bad.yaml") && stderr.contains("YAML"), "{stderr}");
}
