//! End to end: `sandboxctl events`, `sandboxctl ls -w` and `sandboxctl stats` (the real
//! binary) against the service (in-process) and Docker.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use testkit::ctl::text;
use testkit::service::TestService;
use testkit::TestLabel;

/// The sandboxctl binary Cargo built for these tests.
const SANDBOXCTL: &str = env!("CARGO_BIN_EXE_sandboxctl");

fn ctl(addr: &str, args: &[&str]) -> String {
    testkit::ctl::ok(SANDBOXCTL, addr, args)
}

/// A long-running sandboxctl whose stdout lines arrive on a channel; killed on drop.
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Running {
    fn start(addr: &str, args: &[&str]) -> Running {
        let mut child = testkit::ctl::command(SANDBOXCTL, addr)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn sandboxctl");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Running { child, lines }
    }

    /// Lines until one contains every one of `words` (within 60 s); that line.
    fn until(&self, words: &[&str]) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if words.iter().all(|w| line.contains(w)) => return line,
                Ok(line) => seen.push(line),
                Err(_) => panic!("no line with {words:?} within 60 s; saw:\n{}", seen.join("\n")),
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn events_and_ls_watch_show_changes_as_they_happen() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let addr = server.addr();
    let run = format!("run=e{}", uuid::Uuid::new_v4().simple());
    let old = ctl(&addr, &["create", testkit::images::BUSYBOX, "--label", &run]).trim().to_string();

    let events = Running::start(&addr, &["events", "--label", &run]);
    let json = Running::start(&addr, &["events", "--label", &run, "--existing", "-o", "json"]);
    let watch = Running::start(&addr, &["ls", "-w", "--label", &run]);
    // ls -w prints the table ls prints first.
    let header = watch.until(&["SANDBOX ID", "STATUS"]);
    assert!(header.contains("LABELS"), "{header}");
    watch.until(&[&old, "running"]);
    let existing: serde_json::Value = serde_json::from_str(&json.until(&["existing"])).expect("a JSON line");
    assert_eq!(existing["sandbox_id"], old.as_str());
    assert_eq!(existing["sandbox"]["status"], "running");
    // Give both watches time to be under way before the changes.
    std::thread::sleep(Duration::from_millis(500));

    let id = ctl(&addr, &["create", testkit::images::BUSYBOX, "--label", &run]).trim().to_string();
    events.until(&["created", &id]);
    events.until(&["ready", &id]);
    watch.until(&[&id, "running"]);
    ctl(&addr, &["pause", &id]);
    events.until(&["paused", &id]);
    watch.until(&[&id, "paused"]);
    ctl(&addr, &["resume", &id]);
    events.until(&["resumed", &id]);
    let out = Command::new("docker").args(["kill", &id]).output().expect("docker kill");
    assert!(out.status.success(), "docker kill: {}", text(&out.stderr));
    let stopped = events.until(&["stopped", &id]);
    assert!(stopped.contains("exit_code=137"), "{stopped}");
    watch.until(&[&id, "stopped"]);
    ctl(&addr, &["rm", &id]);
    let removed = events.until(&["removed", &id]);
    assert!(removed.contains("reason=\"closed by Close (operator)\""), "{removed}");
    watch.until(&[&id, "removed"]);
    let removed: serde_json::Value =
        serde_json::from_str(&json.until(&["\"removed\"", &id])).expect("a JSON line");
    assert_eq!(removed["reason"], "closed by Close (operator)");
    ctl(&addr, &["rm", &old]);
    label.remove_all();
}

#[test]
fn stats_prints_docker_stats_columns_and_json() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let addr = server.addr();
    let id = ctl(&addr, &["create", testkit::images::BUSYBOX, "--memory", "128m"]).trim().to_string();
    let table = ctl(&addr, &["stats", &id]);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("SANDBOX ID") && lines[0].contains("MEM USAGE / LIMIT"), "{table}");
    assert!(lines[1].starts_with(&id) && lines[1].contains("/ 128MiB"), "{table}");

    // A busy loop shows in CPU %; the JSON has the raw numbers.
    let busy = Running::start(&addr, &["exec", &id, "--", "while :; do :; done"]);
    std::thread::sleep(Duration::from_millis(500));
    let json: serde_json::Value = serde_json::from_str(&ctl(&addr, &["stats", &id, "-o", "json"])).unwrap();
    let row = &json[0];
    assert_eq!(row["sandbox_id"], id.as_str());
    assert_eq!(row["memory_limit_bytes"], 128u64 << 20);
    // The machine is shared: a busy loop gets what the other work leaves it, but some.
    assert!(row["cpu_percent"].as_f64().unwrap() > 5.0, "{row}");
    assert!(row["memory_usage_bytes"].as_u64().unwrap() > 0, "{row}");
    drop(busy);

    let out =
        testkit::ctl::ctl(SANDBOXCTL, &addr, &["stats", "sandboxd-00000000000000000000000000000000"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("NOT_FOUND"), "{}", text(&out.stderr));
    ctl(&addr, &["rm", &id]);
    label.remove_all();
}

#[test]
fn usage_and_tenant_usage_print_the_receipts_close_kept() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let addr = server.addr();
    let before: serde_json::Value = serde_json::from_str(&ctl(&addr, &["tenant-usage"])).unwrap();
    let id = ctl(&addr, &["create", testkit::images::BUSYBOX]).trim().to_string();
    ctl(&addr, &["exec", &id, "--", "true"]);
    let live: serde_json::Value = serde_json::from_str(&ctl(&addr, &["usage", &id])).unwrap();
    assert!(live["processes_started"].as_u64().unwrap() >= 1, "{live}");
    ctl(&addr, &["rm", &id]);

    // The operator (no tenants file) reads the tenant-less receipts: the closed sandbox's is
    // there, and the sums grew by exactly its wall and CPU time.
    let after: serde_json::Value = serde_json::from_str(&ctl(&addr, &["tenant-usage"])).unwrap();
    assert_eq!(after["tenant"], "");
    assert!(after["period_start_unix_ms"].as_i64() < after["period_end_unix_ms"].as_i64(), "{after}");
    let receipt = after["receipts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["sandbox_id"] == id.as_str())
        .unwrap_or_else(|| panic!("no receipt of {id}: {after}"))
        .clone();
    let wall = receipt["usage"]["wall_time_s"].as_f64().unwrap();
    assert!(wall > 0.0, "{receipt}");
    let grew = after["sandbox_seconds"].as_f64().unwrap() - before["sandbox_seconds"].as_f64().unwrap();
    // Other tests of this binary close tenant-less sandboxes of this server too: none here
    // (one server per test), so the growth is this receipt's alone.
    assert!((grew - wall).abs() < 1e-6, "sums grew by {grew}, the receipt says {wall}: {after}");

    // A tenant the operator names that closed nothing reads as empty sums.
    let other: serde_json::Value =
        serde_json::from_str(&ctl(&addr, &["tenant-usage", "--tenant", "nobody"])).unwrap();
    assert_eq!(other["tenant"], "nobody");
    assert_eq!(other["receipts"].as_array().unwrap().len(), 0, "{other}");
    assert_eq!(other["sandbox_seconds"].as_f64(), Some(0.0));
    label.remove_all();
}
