//! `sandboxctl port-forward` in a real terminal (tmux) with `curl` on the host through it into a
//! `network: none` sandbox, and `start` / `ps` / `attach-process` / `signal` from a script;
//! the service in-process, the real daemon.

use sandboxd_client::{spec, Sandbox, StartProcess};
use testkit::ctl::{ctl, Tmux};
use testkit::images::BUSYBOX;
use testkit::procs::children_named;
use testkit::service::TestService;
use testkit::TestLabel;

/// The sandboxctl binary Cargo built for these tests.
const SANDBOXCTL: &str = env!("CARGO_BIN_EXE_sandboxctl");

fn curl(url: &str) -> std::process::Output {
    std::process::Command::new("curl").args(["-sS", "--max-time", "20", url]).output().expect("curl")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_forward_lets_curl_reach_httpd_in_a_sandbox_without_network() {
    if testkit::engine_name() == "docker" {
        return; // forwarding needs the agent (FAILED_PRECONDITION, server/tests/port_forward.rs)
    }
    let label = TestLabel::new();
    let server = TestService::start_with(&label, None, |c| c.docker.create.network = Some("none".into()));
    let client = server.client().await;
    let sandbox = Sandbox::start(&client, spec(BUSYBOX)).await.expect("create");
    let page = format!("served from {}", sandbox.id());
    let out =
        sandbox.exec(&format!("mkdir -p /tmp/www && echo '{page}' > /tmp/www/index.html")).await.unwrap();
    assert_eq!(out.return_code, 0);
    client
        .start_process(sandbox.id(), &StartProcess::shell("exec httpd -f -p 127.0.0.1:8080 -h /tmp/www"))
        .await
        .expect("httpd");

    let tmux = Tmux::start(30, 160);
    tmux.line(&format!(
        "{SANDBOXCTL} --addr {} port-forward {} 0:8080 127.0.0.1:0:8080",
        server.addr(),
        sandbox.id()
    ));
    let screen = tmux.wait_for("both listeners", |s| s.matches("Forwarding from 127.0.0.1:").count() == 2);
    let ports: Vec<u16> = screen
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Forwarding from 127.0.0.1:"))
        .filter_map(|rest| rest.split(' ').next()?.parse().ok())
        .collect();
    assert_eq!(ports.len(), 2, "{screen}");
    assert!(screen.contains("-> 8080"), "{screen}");

    // httpd starts in its own time: the first answer may take a few tries.
    let url = format!("http://127.0.0.1:{}/index.html", ports[0]);
    let mut body = String::new();
    for _ in 0..50 {
        let out = curl(&url);
        body = String::from_utf8_lossy(&out.stdout).into_owned();
        if body.contains(&page) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert_eq!(body.trim(), page);
    // Many connections at once, through both listeners.
    let handles: Vec<_> = (0..16)
        .map(|i| {
            let url = format!("http://127.0.0.1:{}/index.html", ports[i % 2]);
            std::thread::spawn(move || String::from_utf8_lossy(&curl(&url).stdout).into_owned())
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap().trim(), page);
    }
    // Still forwarding (one stream per connection, none left open); Ctrl-C ends it.
    assert_eq!(children_named(tmux.pane_pid(), "sandboxctl").len(), 1);
    tmux.key("C-c");
    tmux.wait_for("sandboxctl to exit", |_| children_named(tmux.pane_pid(), "sandboxctl").is_empty());
    assert!(!curl(&url).status.success(), "the listener is gone after Ctrl-C");

    sandbox.stop().await.expect("stop");
    drop(tmux);
    assert!(label.containers().is_empty(), "containers left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_ps_attach_and_signal_from_a_script() {
    if testkit::engine_name() == "docker" {
        return;
    }
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let client = server.client().await;
    let sandbox = Sandbox::start(&client, spec(BUSYBOX)).await.expect("create");
    let id = sandbox.id().to_string();
    let addr = server.addr();

    let out = ctl(
        SANDBOXCTL,
        &addr,
        &["start", &id, "--env", "X=42", "--", "echo x=$X; echo oops >&2; exit 3"],
        None,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let short = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(!short.is_empty());
    // attach-process replays it all and exits with the process's code.
    let out = ctl(SANDBOXCTL, &addr, &["attach-process", &id, &short], None);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "x=42\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "oops\n");
    assert_eq!(out.status.code(), Some(3));

    let out = ctl(SANDBOXCTL, &addr, &["start", &id, "--", "sleep", "777"], None);
    let long = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let out = ctl(SANDBOXCTL, &addr, &["ps", &id], None);
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(table.starts_with("PROCESS ID"), "{table}");
    let row = |table: &str, pid: &str| table.lines().find(|l| l.starts_with(pid)).unwrap_or("").to_string();
    assert!(row(&table, &short).contains("exited(3)"), "{table}");
    assert!(row(&table, &long).contains("running") && row(&table, &long).contains("sleep 777"), "{table}");

    let out = ctl(SANDBOXCTL, &addr, &["signal", &id, &long, "KILL"], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut json = serde_json::Value::Null;
    for _ in 0..50 {
        let out = ctl(SANDBOXCTL, &addr, &["ps", &id, "-o", "json"], None);
        json = serde_json::from_slice(&out.stdout).expect("json");
        let row = json.as_array().unwrap().iter().find(|p| p["process_id"] == long.as_str()).cloned();
        if row.is_some_and(|r| r["exit_code"] == 137) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let row = json.as_array().unwrap().iter().find(|p| p["process_id"] == long.as_str()).unwrap();
    assert_eq!(row["running"], false, "{json}");
    assert_eq!(row["exit_code"], 137, "{json}");

    let out = ctl(SANDBOXCTL, &addr, &["signal", &id, &long, "NOPE"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("INVALID_ARGUMENT"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    sandbox.stop().await.expect("stop");
    assert!(label.containers().is_empty(), "containers left behind");
}
