//! Issue 9, item 4: a client that stops answering without closing its connection (SIGSTOP
//! here, like a host that vanished) is dropped by the server's HTTP/2 keepalive, and what its
//! call held is released. The frozen client is a `sandboxctl` process (so it lives here, where
//! Cargo names that binary); the service runs in-process with short keepalive values from the
//! config (`server.limits.keepalive_interval_s` / `keepalive_timeout_s`).

use std::process::{Command, Stdio};
use std::time::Duration;

use sandboxd_client::{spec, Sandbox};
use testkit::images::BUSYBOX;
use testkit::service::TestService;
use testkit::wait::eventually;
use testkit::TestLabel;

/// The sandboxctl binary Cargo built for these tests.
const SANDBOXCTL: &str = env!("CARGO_BIN_EXE_sandboxctl");

/// The server's keepalive ends a frozen client's `ExecStream`, and so its command.
#[tokio::test(flavor = "multi_thread")]
async fn http2_keepalive_releases_a_frozen_client() {
    let label = TestLabel::new();
    let server = TestService::start_with(&label, None, |c| {
        c.server.limits.keepalive_interval = Duration::from_secs(1);
        c.server.limits.keepalive_timeout = Duration::from_secs(1);
    });
    let sandbox = Sandbox::start(&server.client().await, spec(BUSYBOX)).await.expect("start");
    let id = sandbox.id().to_string();
    let mut client = Command::new(SANDBOXCTL)
        // No timeout of its own within the test: only the keepalive can end it.
        .args(["--addr", &server.addr(), "exec", &id, "--timeout", "10m", "--", "sleep 4321"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let running = |id: &str| {
        let out = testkit::docker(&["exec", id, "ps", "-o", "args"]);
        String::from_utf8_lossy(&out.stdout).lines().any(|l| l.contains("sleep 4321"))
    };
    eventually(Duration::from_secs(60), "the client's command never started", || running(&id)).await;
    let pid = nix::unistd::Pid::from_raw(client.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    eventually(Duration::from_secs(45), "a frozen client's call still holds its command", || !running(&id))
        .await;
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    let _ = client.wait();
    sandbox.stop().await.expect("close");
}
