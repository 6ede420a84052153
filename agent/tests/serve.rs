//! The agent binary driven over its stdio on the host, as the server drives it in a sandbox.

use std::io::Write;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use sandboxd_agent::protocol::{self, Event, ExecExit, ExecStart, FailureKind, Request};

/// Output, error output, and the exit or the failure of one run.
type Run = (Vec<u8>, Vec<u8>, Result<ExecExit, (FailureKind, String)>);

struct Agent {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: ChildStdout,
}

impl Agent {
    fn start() -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sandboxd-agent"))
            .arg("serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let (stdin, stdout) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
        let mut agent = Self { child, stdin: Some(stdin), stdout };
        match agent.next().1 {
            Event::Hello { version, .. } => assert_eq!(version, protocol::PROTOCOL_VERSION),
            other => panic!("expected Hello, got {other:?}"),
        }
        agent
    }

    fn send(&mut self, id: u64, r: Request) {
        self.stdin.as_mut().unwrap().write_all(&r.encode(id)).unwrap();
    }

    fn next(&mut self) -> (u64, Event) {
        let body = protocol::read_body(&mut self.stdout, protocol::MAX_FRAME).unwrap().unwrap();
        let f = protocol::decode_event(&body).unwrap();
        (f.id, f.message)
    }

    /// Run to the end: stdout, stderr, exit (or the failure).
    fn run(&mut self, id: u64, start: ExecStart, stdin: Option<&[u8]>) -> Run {
        let has_stdin = stdin.is_some();
        self.send(id, Request::Exec(ExecStart { stdin: has_stdin, ..start }));
        if let Some(data) = stdin {
            self.send(id, Request::Stdin(data.to_vec()));
            self.send(id, Request::StdinEnd);
        }
        let (mut out, mut err) = (Vec::new(), Vec::new());
        loop {
            let (got, event) = self.next();
            assert_eq!(got, id);
            match event {
                Event::Stdout(d) => out.extend(d),
                Event::Stderr(d) => err.extend(d),
                Event::Exit(x) => return (out, err, Ok(x)),
                Event::Failed { kind, message } => return (out, err, Err((kind, message))),
                other => panic!("unexpected {other:?}"),
            }
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sh(command: &str) -> ExecStart {
    ExecStart {
        shell: "sh".into(),
        command: command.as_bytes().to_vec(),
        output_limit: 1 << 20,
        ..Default::default()
    }
}

#[test]
fn runs_commands_with_output_exit_codes_stdin_and_env() {
    let mut a = Agent::start();
    let (out, err, exit) = a.run(1, sh("printf out; printf err >&2; exit 3"), None);
    assert_eq!((out.as_slice(), err.as_slice()), (&b"out"[..], &b"err"[..]));
    let exit = exit.unwrap();
    assert_eq!(exit.code, 3);
    assert!(exit.usage.wall_us > 0);
    let (out, _, exit) = a.run(2, sh("cat; printf \"[$X]\""), Some(b"in\0put"));
    assert_eq!(out, b"in\0put[]", "stdin bytes then EOF; X is unset");
    assert_eq!(exit.unwrap().code, 0);
    let with_env = ExecStart { env: vec![("X".into(), "v a l".into())], ..sh("printf \"[$X]\"") };
    assert_eq!(a.run(3, with_env, None).0, b"[v a l]");
    let (_, _, exit) = a.run(4, sh("kill -TERM $$"), None);
    assert_eq!(exit.unwrap().code, 128 + 15);
}

#[test]
fn long_commands_missing_cwd_and_limits() {
    let mut a = Agent::start();
    let long = format!("X={}; printf ${{#X}}", "y".repeat(300 * 1024));
    assert_eq!(a.run(1, sh(&long), None).0, b"307200");
    let (_, _, exit) = a.run(2, ExecStart { cwd: Some("/no/such/dir".into()), ..sh("true") }, None);
    let (kind, msg) = exit.unwrap_err();
    assert_eq!(kind, FailureKind::Cwd);
    assert!(msg.contains("/no/such/dir"), "{msg}");
    let flood = ExecStart { output_limit: 10, ..sh("printf 0123456789abcdef") };
    let (out, _, exit) = a.run(3, flood, None);
    assert_eq!(out, b"0123456789");
    assert_eq!(exit.unwrap().dropped_stdout, 6);
    let (_, _, exit) = a.run(4, ExecStart { user: Some("no-such-user".into()), ..sh("true") }, None);
    assert_eq!(exit.unwrap_err().0, FailureKind::User);
}

#[test]
fn kill_stops_a_setsid_grandchild() {
    let mut a = Agent::start();
    let marker = format!("sandboxd-agent-test-{}", std::process::id());
    // The grandchild leaves the process group and the session, and its parent exits. Its `$0`
    // is the marker, built at run time so only the grandchild's command line holds it (and
    // without `exec -a`, which dash lacks).
    let cmd = format!(
        "m=sandboxd-agent-test; (setsid sh -c 'sleep 300; :' \"$m-{}\" &) ; printf started; sleep 300",
        std::process::id()
    );
    a.send(1, Request::Exec(sh(&cmd)));
    let (_, first) = a.next();
    assert_eq!(first, Event::Stdout(b"started".to_vec()));
    std::thread::sleep(Duration::from_millis(300));
    let alive = || Command::new("pgrep").args(["-f", &marker]).output().unwrap().status.success();
    assert!(alive(), "the grandchild runs before the kill");
    a.send(1, Request::Kill);
    let exit = loop {
        if let (1, Event::Exit(x)) = a.next() {
            break x;
        }
    };
    assert!(exit.killed);
    assert_eq!(exit.code, 128 + 9);
    std::thread::sleep(Duration::from_millis(100));
    assert!(!alive(), "the setsid grandchild was killed too");
}

#[test]
fn end_of_channel_kills_running_commands() {
    let mut a = Agent::start();
    let marker = format!("sandboxd-agent-eof-{}", std::process::id());
    let cmd =
        format!("m=sandboxd-agent-eof; printf go; exec sh -c 'sleep 300; :' \"$m-{}\"", std::process::id());
    a.send(1, Request::Exec(sh(&cmd)));
    assert_eq!(a.next().1, Event::Stdout(b"go".to_vec()));
    let alive = || Command::new("pgrep").args(["-f", &marker]).output().unwrap().status.success();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !alive() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(alive(), "the command runs before the channel ends");
    drop(a.stdin.take());
    a.child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(!alive(), "the agent stopped its command when the channel ended");
}

#[test]
fn files_round_trip_through_the_agent() {
    let mut a = Agent::start();
    let dir = std::env::temp_dir().join(format!("sandboxd-agent-files-{}", std::process::id()));
    let path = dir.join("sub/f.bin");
    let path_s = path.to_str().unwrap().to_string();
    let content: Vec<u8> = (0..600_000u32).map(|i| (i % 251) as u8).collect();
    a.send(1, Request::PutStart { path: path_s.clone(), mode: 0o600, xattrs: Vec::new() });
    for chunk in content.chunks(protocol::MAX_CHUNK) {
        a.send(1, Request::PutData(chunk.to_vec()));
    }
    a.send(1, Request::PutEnd { size: content.len() as u64 });
    assert_eq!(a.next(), (1, Event::PutDone { size: content.len() as u64 }));
    a.send(2, Request::Get { path: path_s });
    assert_eq!(a.next(), (2, Event::GetStart { size: content.len() as u64 }));
    let mut got = Vec::new();
    loop {
        match a.next() {
            (2, Event::GetData(d)) => {
                a.send(2, Request::Credit(d.len() as u64));
                got.extend(d)
            }
            (2, Event::GetEnd) => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(got, content);
    std::fs::remove_dir_all(&dir).unwrap();
}
