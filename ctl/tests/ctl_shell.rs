//! `sandboxctl shell` as a person uses it: in a real terminal (tmux), against the service
//! (in-process) and Docker. A prompt appears, `stty size` follows a window resize, Ctrl-C interrupts the
//! remote program (not sandboxctl), the remote exit status becomes sandboxctl's, and the local
//! terminal is sane afterwards — after a normal exit and after sandboxctl is killed by SIGTERM.

use sandboxd_client::{spec, Sandbox};
use testkit::ctl::Tmux;
use testkit::images::BASH;
use testkit::procs::children_named;
use testkit::service::TestService;
use testkit::TestLabel;

/// The sandboxctl binary Cargo built for these tests.
const SANDBOXCTL: &str = env!("CARGO_BIN_EXE_sandboxctl");

/// The local terminal is back in cooked mode: canonical input and echo on.
fn assert_terminal_sane(tmux: &Tmux) {
    tmux.clear();
    // The marker is split in the typed line so only the output carries it whole.
    tmux.line("echo \"STTY\"\"-FLAGS: $(stty -a | tr ' ;' '\\n\\n' | grep -E '^-?(icanon|echo|isig)$' | tr '\\n' ' ')\"");
    let screen = tmux.wait_for("stty -a", |s| s.lines().any(|l| l.starts_with("STTY-FLAGS:")));
    let line = screen.lines().find(|l| l.starts_with("STTY-FLAGS:")).unwrap_or_default();
    for flag in ["icanon", "echo", "isig"] {
        assert!(line.split_whitespace().any(|w| w == flag), "{flag} is not back on: {line}");
    }
}

/// `local$ sandboxctl … shell ID` in the tmux window, waiting for the remote prompt.
fn open_shell(tmux: &Tmux, server: &TestService, id: &str) {
    let addr = server.addr();
    tmux.line(&format!("{SANDBOXCTL} --addr {addr} shell -e 'PS1=sbx$ ' {id}"));
    tmux.wait_for("the remote prompt", |s| s.contains("sbx$"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_in_a_real_terminal() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let client = server.client().await;
    let sandbox = Sandbox::start(&client, spec(BASH)).await.expect("create");
    let tmux = Tmux::start(30, 100);

    open_shell(&tmux, &server, sandbox.id());

    // The size at open, then after the window is resized (SIGWINCH -> resize).
    tmux.line("stty size");
    tmux.wait_for("the initial size", |s| s.contains("30 100"));
    assert!(tmux.run(&["resize-window", "-t", "t", "-x", "120", "-y", "40"]).status.success());
    tmux.wait_for("the pane to resize", |_| {
        let out = tmux.run(&["display-message", "-p", "-t", "t", "#{pane_height} #{pane_width}"]);
        String::from_utf8_lossy(&out.stdout).trim() == "40 120"
    });
    tmux.clear();
    tmux.line("stty size");
    tmux.wait_for("the new size", |s| s.contains("40 120"));

    // Ctrl-C reaches the program in the sandbox; sandboxctl and the remote shell live on.
    tmux.clear();
    tmux.line("sh -c 'echo sleeping; exec sleep 300'");
    tmux.wait_for("the sleep to start", |s| s.lines().any(|l| l.trim() == "sleeping"));
    tmux.key("C-c");
    tmux.clear();
    tmux.line("echo rc=$?");
    tmux.wait_for("the interrupted sleep's status", |s| s.contains("rc=130"));

    // The remote exit status is sandboxctl's; the local terminal is cooked again.
    tmux.line("exit 3");
    tmux.wait_for("the local prompt", |s| {
        s.lines().rfind(|l| !l.trim().is_empty()).is_some_and(|l| l.starts_with("local$"))
    });
    tmux.clear();
    tmux.line("echo local-rc=$?");
    tmux.wait_for("sandboxctl's exit status", |s| s.contains("local-rc=3"));
    assert_terminal_sane(&tmux);

    // Killed by SIGTERM: the session is closed and the terminal restored all the same.
    tmux.clear();
    open_shell(&tmux, &server, sandbox.id());
    let pids = children_named(tmux.pane_pid(), "sandboxctl");
    assert_eq!(pids.len(), 1, "one sandboxctl under the pane's shell: {pids:?}");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pids[0]), nix::sys::signal::Signal::SIGTERM)
        .expect("kill -TERM sandboxctl");
    tmux.wait_for("sandboxctl to exit", |_| children_named(tmux.pane_pid(), "sandboxctl").is_empty());
    tmux.clear();
    tmux.line("echo term-rc=$?");
    tmux.wait_for("the SIGTERM exit status", |s| s.contains("term-rc=143"));
    assert_terminal_sane(&tmux);

    sandbox.stop().await.expect("stop");
    drop(tmux);
    assert!(label.containers().is_empty(), "containers left behind");
}
