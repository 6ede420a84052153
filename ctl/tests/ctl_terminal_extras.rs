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

/// Everything the pane's program writes from now on, escape sequences and redrawn frames
/// included (the screen keeps only the last frame of a bar), appended to a file.
fn record(tmux: &Tmux, dir: &std::path::Path) -> std::path::PathBuf {
    let raw = dir.join("pane.raw");
    let out = tmux.run(&["pipe-pane", "-o", "-t", "t", &format!("cat >> {}", raw.display())]);
    assert!(out.status.success(), "tmux pipe-pane: {}", String::from_utf8_lossy(&out.stderr));
    raw
}

fn recorded(raw: &std::path::Path) -> String {
    String::from_utf8_lossy(&std::fs::read(raw).unwrap_or_default()).into_owned()
}

/// `create -n 3` on a terminal: a counted bar while the batch streams in (`creating k/3`), each
/// id printed above it as it comes, then the bar's last line `created 3/3 in …` on stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_n_shows_its_progress_on_a_terminal() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let client = server.client().await;
    let tmux = Tmux::start(30, 160);
    let dir = tempfile::tempdir().expect("tempdir");
    let raw = record(&tmux, dir.path());

    tmux.line(&format!("{SANDBOXCTL} --addr {} create {BUSYBOX} -n 3 --label batch=bar", server.addr()));
    let screen = tmux
        .wait_for("the batch's last line and the prompt", |s| s.contains("created 3/3 in") && at_prompt(s));
    let ids: Vec<&str> = screen.lines().map(str::trim).filter(|l| l.starts_with("sandboxd-")).collect();
    assert_eq!(ids.len(), 3, "three ids: {screen}");
    let frames = recorded(&raw);
    assert!(frames.contains("creating ") && frames.contains("/3 "), "the bar was drawn: {frames:?}");

    for id in ids {
        Sandbox::connect(&client, id).await.expect("a batch sandbox").stop().await.expect("stop");
    }
    drop(tmux);
    assert!(label.containers().is_empty(), "containers left behind");
}

/// `cp` of an 8 MiB file up and down on a terminal: a bar with the total (the download's from
/// `Stat`), then the bytes copied; the file arrives intact both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cp_shows_byte_progress_both_ways_on_a_terminal() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let client = server.client().await;
    let sandbox = Sandbox::start(&client, spec(BUSYBOX)).await.expect("create");
    let dir = tempfile::tempdir().expect("tempdir");
    let local = dir.path().join("big.bin");
    let content: Vec<u8> = (0..8u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    std::fs::write(&local, &content).expect("write the local file");
    let tmux = Tmux::start(30, 160);
    let raw = record(&tmux, dir.path());

    tmux.line(&format!(
        "{SANDBOXCTL} --addr {} cp {} {}:/tmp/big.bin",
        server.addr(),
        local.display(),
        sandbox.id()
    ));
    tmux.wait_for("the upload's line", |s| s.contains("8388608 bytes copied to") && at_prompt(s));
    let up = recorded(&raw);
    assert!(up.contains("/8.00 MiB"), "the upload's bar shows the total: {up:?}");

    std::fs::write(&raw, b"").expect("truncate the recording");
    let back = dir.path().join("back.bin");
    tmux.line(&format!(
        "{SANDBOXCTL} --addr {} cp {}:/tmp/big.bin {}",
        server.addr(),
        sandbox.id(),
        back.display()
    ));
    tmux.wait_for("the download's line", |s| s.contains("8388608 bytes copied from") && at_prompt(s));
    let down = recorded(&raw);
    assert!(down.contains("/8.00 MiB"), "the download's bar shows the total from Stat: {down:?}");
    assert!(std::fs::read(&back).expect("the downloaded file") == content, "the file changed on the way");

    sandbox.stop().await.expect("stop");
    drop(tmux);
    assert!(label.containers().is_empty(), "containers left behind");
}
