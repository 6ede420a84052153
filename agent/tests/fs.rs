//! The file requests (issue 19) against the agent binary over its stdio on the host (as the
//! server drives it in a sandbox): odd names as bytes, a uid refused by the kernel where root is
//! not, a watch's events, and an unknown request kind answered without ending the channel.

use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use sandboxd_agent::protocol::{self, Event, FailureKind, FsChangeKind, FsKind, Request};

struct Agent {
    child: Child,
    stdin: ChildStdin,
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
        let mut agent = Self { child, stdin, stdout };
        assert!(matches!(agent.next().1, Event::Hello { .. }));
        agent
    }

    fn send_raw(&mut self, frame: &[u8]) {
        self.stdin.write_all(frame).unwrap();
    }

    fn send(&mut self, id: u64, r: Request) {
        self.send_raw(&r.encode(id));
    }

    fn next(&mut self) -> (u64, Event) {
        let body = protocol::read_body(&mut self.stdout, protocol::MAX_FRAME).unwrap().unwrap();
        let f = protocol::decode_event(&body).unwrap();
        (f.id, f.message)
    }

    fn answer(&mut self, id: u64, r: Request) -> Event {
        self.send(id, r);
        loop {
            // A stopped watch may still have sent a change or two.
            let (got, event) = self.next();
            if got == id {
                return event;
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

fn bytes(p: &std::path::Path) -> Vec<u8> {
    p.as_os_str().as_bytes().to_vec()
}

#[test]
fn file_requests_as_root_and_as_another_uid() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = bytes(dir.path());
    let odd = [root.clone(), b"/a b\n\xff".to_vec()].concat();
    let mut agent = Agent::start();

    // An unknown kind is answered, and the channel goes on.
    let mut frame = Request::ListSessions.encode(9);
    frame[4] = 250;
    agent.send_raw(&frame);
    match agent.next() {
        (9, Event::Failed { kind: FailureKind::Invalid, message }) => {
            assert!(message.contains("250"), "{message}")
        }
        other => panic!("{other:?}"),
    }

    let made =
        agent.answer(1, Request::MakeDir { path: odd.clone(), parents: false, mode: 0o750, user: None });
    assert_eq!(made, Event::Done);
    match agent
        .answer(2, Request::ListDir { path: root.clone(), depth: 1, include_hidden: false, user: None })
    {
        Event::Entries(list) => {
            assert_eq!(list.len(), 1);
            assert_eq!(
                (list[0].name.as_slice(), list[0].kind, list[0].mode),
                (b"a b\n\xff".as_slice(), FsKind::Dir, 0o750)
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(agent.next(), (2, Event::Done));

    // uid 65534 may not make a directory inside a 0750 root-owned one; root may.
    let inner = [odd.clone(), b"/x".to_vec()].concat();
    match agent.answer(
        3,
        Request::MakeDir { path: inner.clone(), parents: false, mode: 0, user: Some("65534".into()) },
    ) {
        Event::Failed { kind: FailureKind::Permission, message } => {
            assert!(message.contains("/x"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        agent.answer(4, Request::MakeDir { path: inner.clone(), parents: false, mode: 0, user: None }),
        Event::Done
    );

    // A watch sees a create and a rename.
    assert_eq!(
        agent.answer(5, Request::WatchDir { path: odd.clone(), recursive: false, user: None }),
        Event::Watching
    );
    std::fs::write(
        std::path::Path::new(std::ffi::OsStr::from_bytes(&[odd.clone(), b"/f".to_vec()].concat())),
        b"x",
    )
    .unwrap();
    let mut kinds = Vec::new();
    while !kinds.contains(&FsChangeKind::Modify) {
        match agent.next() {
            (5, Event::Change(c)) => kinds.push(c.kind),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(kinds[0], FsChangeKind::Create);
    agent.send(5, Request::Kill);
    match agent.answer(6, Request::Remove { path: odd.clone(), recursive: false, user: None }) {
        Event::Failed { kind: FailureKind::NotEmpty, .. } => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(agent.answer(7, Request::Remove { path: odd, recursive: true, user: None }), Event::Done);
}
