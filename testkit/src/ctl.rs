//! The `sandboxctl` binary as a test fixture (the caller names it:
//! `env!("CARGO_BIN_EXE_sandboxctl")` in the `sandboxctl` crate's suites), and a real terminal
//! (tmux) to drive it in.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// `BINARY --addr ADDR` (`BINARY` is sandboxctl) with none of the environment that would point
/// it elsewhere, its SIGINT as a terminal gives it: add the arguments and the stdio.
pub fn command(binary: impl AsRef<Path>, addr: &str) -> Command {
    let mut cmd = Command::new(binary.as_ref());
    // A test run started with `&` inherits SIGINT ignored; sandboxctl must not (issue 9).
    sandboxd::backends::docker::cli::reset_signal_dispositions(&mut cmd);
    cmd.arg("--addr")
        .arg(addr)
        .env_remove("SANDBOXD_ADDR")
        .env_remove("SANDBOXD_TOKEN_FILE")
        .env_remove("SANDBOXD_TOKEN");
    cmd
}

/// Runs `BINARY --addr ADDR ARGS…` with `stdin` as its input (none: an empty pipe).
pub fn ctl(binary: impl AsRef<Path>, addr: &str, args: &[&str], stdin: Option<&[u8]>) -> Output {
    use std::io::Write;
    let mut child = command(binary, addr)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn sandboxctl");
    let mut pipe = child.stdin.take().expect("stdin");
    if let Some(data) = stdin {
        pipe.write_all(data).expect("write stdin");
    }
    drop(pipe);
    child.wait_with_output().expect("sandboxctl output")
}

/// A command's output as text (lossy UTF-8).
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `BINARY --addr ADDR ARGS…` with no input; it must succeed. Its stdout.
pub fn ok(binary: impl AsRef<Path>, addr: &str, args: &[&str]) -> String {
    let out = ctl(binary, addr, args, None);
    assert!(out.status.success(), "sandboxctl {args:?}: {}", text(&out.stderr));
    text(&out.stdout)
}

/// The interactive shells a terminal test can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

impl Shell {
    /// The shell's command line: no rc files, the prompt `local$ ` (bash and zsh take it from
    /// `PS1`; fish's prompt is a function).
    fn command(self) -> &'static str {
        match self {
            Shell::Bash => "bash --norc --noprofile",
            Shell::Zsh => "zsh -f",
            Shell::Fish => r#"fish --no-config -C 'function fish_prompt; echo -n "local\$ "; end'"#,
        }
    }

    /// The program's name, for the message when it is not installed.
    pub fn program(self) -> &'static str {
        match self {
            Shell::Bash => "bash",
            Shell::Zsh => "zsh",
            Shell::Fish => "fish",
        }
    }
}

/// A tmux server of its own (a socket in a temp dir, removed with it) with one window running a
/// local shell whose HOME is in that dir too.
pub struct Tmux {
    socket: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmux {
    /// A `rows`x`cols` window running `bash --norc` with the prompt `local$ `.
    pub fn start(rows: u16, cols: u16) -> Tmux {
        Self::start_shell(rows, cols, Shell::Bash)
    }

    /// A `rows`x`cols` window running `shell` without its user's config, with the prompt
    /// `local$ `.
    pub fn start_shell(rows: u16, cols: u16, shell: Shell) -> Tmux {
        let have = Command::new("tmux").arg("-V").output();
        assert!(
            have.is_ok_and(|o| o.status.success()),
            "tmux is required for the terminal tests (scripts/install-deps.sh installs it)"
        );
        // The socket and the shell's HOME (its history, zsh's compdump, fish's config) in one
        // temp dir, removed with it.
        let dir = tempfile::tempdir().expect("tempdir for the tmux socket");
        let home = dir.path().join("home");
        std::fs::create_dir(&home).expect("the shell's HOME");
        let tmux = Tmux { socket: dir.path().join("tmux.sock"), _dir: dir };
        let out = tmux.run(&[
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            &cols.to_string(),
            "-y",
            &rows.to_string(),
            &format!(
                "env -i PATH=/usr/bin:/bin TERM=xterm HOME={} PS1='local$ ' {}",
                home.display(),
                shell.command()
            ),
        ]);
        assert!(out.status.success(), "tmux new-session: {}", String::from_utf8_lossy(&out.stderr));
        tmux.wait_for("the local prompt", |s| s.contains("local$"));
        tmux
    }

    pub fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux").arg("-S").arg(&self.socket).args(args).output().expect("tmux")
    }

    /// Types `text` literally, then Enter.
    pub fn line(&self, text: &str) {
        assert!(self.run(&["send-keys", "-t", "t", "-l", text]).status.success());
        assert!(self.run(&["send-keys", "-t", "t", "Enter"]).status.success());
    }

    /// Sends a key by tmux name (`C-c`, `C-d`).
    pub fn key(&self, key: &str) {
        assert!(self.run(&["send-keys", "-t", "t", key]).status.success());
    }

    /// The pane's text, history included, wrapped lines joined.
    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-J", "-t", "t", "-S", "-1000"]).stdout)
            .into_owned()
    }

    /// Clears the pane and its history so the next `wait_for` sees only new output.
    pub fn clear(&self) {
        self.run(&["send-keys", "-t", "t", "-R"]);
        self.run(&["clear-history", "-t", "t"]);
    }

    /// Waits (30 s at most) until the screen satisfies `done`; panics with the screen otherwise.
    pub fn wait_for(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let screen = self.screen();
            if done(&screen) {
                return screen;
            }
            if Instant::now() > deadline {
                panic!("waited 30 s for {what}; the terminal shows:\n{screen}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The pid of the shell running in the pane.
    pub fn pane_pid(&self) -> i32 {
        let out = self.run(&["display-message", "-p", "-t", "t", "#{pane_pid}"]);
        String::from_utf8_lossy(&out.stdout).trim().parse().expect("pane pid")
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}
