//! A client of the agent's socket for the suites: frames in and out, events per request.
#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use sandboxd_agent::protocol::{self, Event, ExecStart, ReadyState, Request, SessionStart, WindowSize};

pub struct Conn {
    stream: UnixStream,
    /// Events read while waiting for another request's.
    pending: HashMap<u64, VecDeque<Event>>,
    pub pid: u32,
    pub readiness: (ReadyState, String, String),
}

impl Conn {
    /// Connect, read `Hello` and the first `Readiness`.
    pub fn connect(socket: &Path) -> std::io::Result<Self> {
        let stream = UnixStream::connect(socket)?;
        stream.set_read_timeout(Some(Duration::from_secs(20)))?;
        let mut c = Self {
            stream,
            pending: HashMap::new(),
            pid: 0,
            readiness: (ReadyState::Pending, String::new(), String::new()),
        };
        match c.read_frame()? {
            Some((0, Event::Hello { version, pid })) => {
                assert_eq!(version, protocol::PROTOCOL_VERSION);
                c.pid = pid;
            }
            other => return Err(std::io::Error::other(format!("expected Hello, got {other:?}"))),
        }
        c.readiness = c.next_readiness();
        Ok(c)
    }

    /// Wait until the agent's readiness is no longer pending.
    pub fn settled_readiness(&mut self) -> (ReadyState, String, String) {
        while self.readiness.0 == ReadyState::Pending {
            self.readiness = self.next_readiness();
        }
        self.readiness.clone()
    }

    fn next_readiness(&mut self) -> (ReadyState, String, String) {
        match self.next(0) {
            Event::Readiness { state, shell, detail } => (state, shell, detail),
            other => panic!("expected Readiness, got {other:?}"),
        }
    }

    /// One frame, `None` at the end of the stream.
    pub fn read_frame(&mut self) -> std::io::Result<Option<(u64, Event)>> {
        match protocol::read_body(&mut self.stream, protocol::MAX_FRAME)? {
            Some(body) => {
                let f = protocol::decode_event(&body)?;
                Ok(Some((f.id, f.message)))
            }
            None => Ok(None),
        }
    }

    pub fn send(&mut self, id: u64, r: Request) {
        self.stream.write_all(&r.encode(id)).unwrap();
    }

    /// The next event of request `id`.
    pub fn next(&mut self, id: u64) -> Event {
        if let Some(e) = self.pending.get_mut(&id).and_then(|q| q.pop_front()) {
            return e;
        }
        loop {
            let (got, event) = self.read_frame().unwrap().expect("the agent closed the connection");
            if got == id {
                return event;
            }
            self.pending.entry(got).or_default().push_back(event);
        }
    }

    /// Exec `sh -c command`: (stdout, exit code).
    pub fn exec(&mut self, id: u64, command: &str) -> (String, i32) {
        self.send(
            id,
            Request::Exec(ExecStart {
                shell: "sh".into(),
                command: command.into(),
                output_limit: 1 << 20,
                ..Default::default()
            }),
        );
        let mut out = Vec::new();
        loop {
            match self.next(id) {
                Event::Stdout(d) | Event::Stderr(d) => out.extend(d),
                Event::Exit(x) => return (String::from_utf8_lossy(&out).into_owned(), x.code),
                other => panic!("exec: unexpected {other:?}"),
            }
        }
    }

    /// Collect a held session's output until `done` holds for it (or panic after 15 s).
    pub fn output_until(&mut self, id: u64, what: &str, done: impl Fn(&str) -> bool) -> (String, Vec<Event>) {
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut text = String::new();
        let mut others = Vec::new();
        while !done(&text) {
            assert!(Instant::now() < deadline, "waiting for {what}; output so far: {text:?}");
            match self.next(id) {
                Event::Output { data, .. } => text.push_str(&String::from_utf8_lossy(&data)),
                other => {
                    let end = matches!(
                        other,
                        Event::SessionExit { .. } | Event::Detached { .. } | Event::Failed { .. }
                    );
                    others.push(other);
                    if end && !done(&text) {
                        panic!("waiting for {what}: the stream ended ({others:?}); output: {text:?}");
                    }
                }
            }
        }
        (text, others)
    }
}

pub fn pty(argv: &[&str], rows: u16, cols: u16) -> SessionStart {
    SessionStart {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        pty: Some(WindowSize { rows, cols }),
        attach: true,
        ..Default::default()
    }
}

/// Wait until `path` exists (the agent bound its socket).
pub fn wait_for_socket(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::symlink_metadata(path)
        .map(|m| !std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()))
        .unwrap_or(true)
    {
        assert!(Instant::now() < deadline, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
    // The file appears at bind(2), a moment before listen(2): until then a connect is refused.
    while let Err(e) = UnixStream::connect(path) {
        assert!(Instant::now() < deadline, "{} never took a connection: {e}", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}
