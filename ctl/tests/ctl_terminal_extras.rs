//! `sandboxctl logs -f` and shell completion as a person uses them: in a real terminal (tmux),
//! against the service (in-process) and Docker.

use sandboxd_client::{spec, Sandbox};
use testkit::ctl::{Shell, Tmux};
use testkit::images::BUSYBOX;
use testkit::procs::children_named;
use testkit::service::TestService;
use testkit::TestLabel;

/// The sandboxctl binary Cargo built for these tests.
const SANDBOXCTL: &str = env!("CARGO_BIN_EXE_sandboxctl");

/// The last non-empty line of the screen is the local prompt.
fn at_prompt(screen: &str) -> bool {
    screen.lines().rfind(|l| !l.trim().is_empty()).is_some_and(|l| l.starts_with("local$"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_follow_shows_what_the_sandbox_prints_after_it_started() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let client = server.client().await;
    let sandbox = Sandbox::start(&client, spec(BUSYBOX)).await.expect("create");
    sandbox.exec("echo before-follow > /proc/1/fd/1").await.unwrap();
    let tmux = Tmux::start(30, 120);

    tmux.line(&format!("{SANDBOXCTL} --addr {} logs -f {}", server.addr(), sandbox.id()));
    // `ends_with`: when the typed command fills the pane's width exactly, tmux joins the next
    // line onto it (capture-pane -J), so the output may follow the command on one line.
    tmux.wait_for("the earlier output", |s| s.lines().any(|l| l.trim().ends_with("before-follow")));
    // Printed after `logs -f` started: it must arrive while the command keeps following.
    sandbox.exec("echo printed-later > /proc/1/fd/1; echo err-later > /proc/1/fd/2").await.unwrap();
    tmux.wait_for("the later lines", |s| {
        s.lines().any(|l| l.trim().ends_with("printed-later"))
            && s.lines().any(|l| l.trim().ends_with("err-later"))
    });
    assert_eq!(children_named(tmux.pane_pid(), "sandboxctl").len(), 1, "logs -f is still following");
    // Ctrl-C ends it and gives the prompt back.
    tmux.key("C-c");
    tmux.wait_for("the local prompt", at_prompt);
    tmux.wait_for("sandboxctl to exit", |_| children_named(tmux.pane_pid(), "sandboxctl").is_empty());

    sandbox.stop().await.expect("stop");
    drop(tmux);
    assert!(label.containers().is_empty(), "containers left behind");
}

/// Loads `sandboxctl completions SHELL` into a fresh `shell` in tmux, as its README line says,
/// and completes a subcommand and a flag with Tab.
fn completion_completes_subcommands_and_flags(shell: Shell, load: &str) {
    let have = std::process::Command::new(shell.program()).arg("-c").arg("exit 0").status();
    assert!(
        have.is_ok_and(|s| s.success()),
        "{} is required for its completion test (scripts/install-deps.sh installs it)",
        shell.program()
    );
    // `sandboxctl` on PATH, as an installed one would be.
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(SANDBOXCTL, bin.path().join("sandboxctl")).unwrap();
    let tmux = Tmux::start_shell(30, 120, shell);
    let path = bin.path().display();
    tmux.line(&match shell {
        Shell::Fish => format!("set -gx PATH {path} $PATH"),
        Shell::Bash | Shell::Zsh => format!("export PATH={path}:$PATH"),
    });
    tmux.line(load);
    // Three prompts: the first, after the PATH and after the load.
    tmux.wait_for("the completion to load", |s| s.lines().filter(|l| l.starts_with("local$")).count() >= 3);
    tmux.clear();

    tmux.run(&["send-keys", "-t", "t", "-l", "sandboxctl sn"]);
    tmux.key("Tab");
    tmux.wait_for("`sn` completed to `snapshot`", |s| s.contains("sandboxctl snapshot"));
    tmux.key("C-u");
    tmux.clear();
    tmux.run(&["send-keys", "-t", "t", "-l", "sandboxctl cp --rec"]);
    tmux.key("Tab");
    tmux.wait_for("`--rec` completed to `--recursive`", |s| s.contains("sandboxctl cp --recursive"));
    tmux.key("C-u");
}

#[test]
fn bash_completion_completes_subcommands_and_flags() {
    completion_completes_subcommands_and_flags(Shell::Bash, "source <(sandboxctl completions bash)");
}

#[test]
fn zsh_completion_completes_subcommands_and_flags() {
    completion_completes_subcommands_and_flags(
        Shell::Zsh,
        "autoload -U compinit && compinit -u && source <(sandboxctl completions zsh)",
    );
}

#[test]
fn fish_completion_completes_subcommands_and_flags() {
    completion_completes_subcommands_and_flags(Shell::Fish, "sandboxctl completions fish | source");
}

/// `fork -n 2` on a terminal: a progress bar while the children start, its last line
/// (`forked 2/2 in …`) left on stderr, the ids on stdout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_shows_its_progress_on_a_terminal() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let client = server.client().await;
    let sandbox = Sandbox::start(&client, spec(BUSYBOX)).await.expect("create");
    let tmux = Tmux::start(30, 160);

    tmux.line(&format!("{SANDBOXCTL} --addr {} fork {} -n 2", server.addr(), sandbox.id()));
    let screen =
        tmux.wait_for("the fork's last line and the prompt", |s| s.contains("forked 2/2 in") && at_prompt(s));
    let children: Vec<&str> =
        screen.lines().map(str::trim).filter(|l| l.starts_with("sandboxd-") && *l != sandbox.id()).collect();
    assert_eq!(children.len(), 2, "two child ids after the bar: {screen}");
    let done = screen.lines().position(|l| l.contains("forked 2/2 in")).unwrap();
    let first_child = screen.lines().position(|l| l.trim() == children[0]).unwrap();
    assert!(done < first_child, "the bar's last line comes before the ids: {screen}");

    // The children and the fork's snapshot go with the test.
    for child in &children {
        Sandbox::connect(&client, *child).await.expect("a child").stop().await.expect("stop a child");
    }
    for snapshot in client.list_snapshots(Default::default()).await.expect("snapshots") {
        if snapshot.source_sandbox_id == sandbox.id() {
            client.delete_snapshot(snapshot.snapshot_id).await.expect("delete the fork's snapshot");
        }
    }
    sandbox.stop().await.expect("stop");
    drop(tmux);
    assert!(label.containers().is_empty(), "containers left behind");
}
