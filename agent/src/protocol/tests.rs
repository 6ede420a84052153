use super::frame::Enc;
use super::*;

fn request_round_trip(r: Request) {
    let bytes = r.encode(42);
    let body = read_body(&mut bytes.as_slice(), MAX_FRAME).unwrap().unwrap();
    assert_eq!(decode_request(&body).unwrap(), Frame { id: 42, message: r });
}

fn event_round_trip(e: Event) {
    let bytes = e.encode(7);
    let body = read_body(&mut bytes.as_slice(), MAX_FRAME).unwrap().unwrap();
    assert_eq!(decode_event(&body).unwrap(), Frame { id: 7, message: e });
}

#[test]
fn every_request_round_trips() {
    request_round_trip(Request::Exec(ExecStart {
        shell: "bash".into(),
        command: b"printf '%s' \"$X\"".to_vec(),
        env: vec![("X".into(), "a=b".into()), ("EMPTY".into(), String::new())],
        cwd: Some("/work".into()),
        user: None,
        stdin: true,
        output_limit: 16 << 20,
    }));
    request_round_trip(Request::Stdin(vec![0, 1, 2, 255]));
    request_round_trip(Request::StdinEnd);
    request_round_trip(Request::Kill);
    request_round_trip(Request::Credit(1 << 40));
    request_round_trip(Request::PutStart { path: "/a/b".into(), mode: 0o4755, xattrs: Vec::new() });
    request_round_trip(Request::PutStart {
        path: "/a/b".into(),
        mode: 0o644,
        xattrs: vec![Xattr { name: b"user.e2b.author".to_vec(), value: b"mish\0\xff".to_vec() }],
    });
    request_round_trip(Request::PutData(vec![9; 1000]));
    request_round_trip(Request::PutEnd { size: 1000 });
    request_round_trip(Request::PutAbort);
    request_round_trip(Request::Get { path: "/etc/passwd".into() });
    request_round_trip(Request::SessionOpen(SessionStart {
        argv: vec!["bash".into(), "-l".into()],
        env: vec![("TERM".into(), "xterm".into())],
        cwd: Some("/w".into()),
        user: Some("1000:1000".into()),
        pty: Some(WindowSize { rows: 40, cols: 132 }),
        retain_bytes: 1 << 20,
        detach_timeout_ms: Some(5000),
        attach: true,
    }));
    request_round_trip(Request::SessionOpen(SessionStart {
        argv: vec!["sleep".into()],
        detach_timeout_ms: Some(DETACH_NEVER),
        ..Default::default()
    }));
    request_round_trip(Request::SessionAttach { session_id: "ab".into(), since: Some(9), takeover: true });
    request_round_trip(Request::SessionAttach { session_id: "ab".into(), since: None, takeover: false });
    request_round_trip(Request::Resize(WindowSize { rows: 1, cols: 65535 }));
    request_round_trip(Request::Signal(libc::SIGINT));
    request_round_trip(Request::Detach);
    request_round_trip(Request::Abandon);
    request_round_trip(Request::SignalSession { session_id: "x".into(), signal: 15 });
    request_round_trip(Request::CloseSession { session_id: "x".into() });
    request_round_trip(Request::ListSessions);
    request_round_trip(Request::ForwardOpen { host: "127.0.0.1".into(), port: 65535 });
    request_round_trip(Request::ForwardData(vec![0, 255, 7]));
    request_round_trip(Request::ForwardEnd);
    let odd = b"/w/a b\n\xff".to_vec();
    request_round_trip(Request::ListDir { path: odd.clone(), depth: 3, include_hidden: true, user: None });
    request_round_trip(Request::Stat { path: odd.clone(), follow_links: true, user: Some("1000".into()) });
    request_round_trip(Request::MakeDir { path: odd.clone(), parents: true, mode: 0o700, user: None });
    request_round_trip(Request::Remove { path: odd.clone(), recursive: true, user: None });
    request_round_trip(Request::Rename {
        source: odd.clone(),
        destination: b"/x".to_vec(),
        overwrite: false,
        user: Some("u:g".into()),
    });
    request_round_trip(Request::WatchDir { path: odd, recursive: true, user: None });
}

#[test]
fn every_event_round_trips() {
    event_round_trip(Event::Hello { version: PROTOCOL_VERSION, pid: 12 });
    event_round_trip(Event::Stdout(b"out".to_vec()));
    event_round_trip(Event::Stderr(Vec::new()));
    event_round_trip(Event::Exit(ExecExit {
        code: -1i32.wrapping_add(138),
        killed: true,
        dropped_stdout: 5,
        dropped_stderr: 6,
        usage: Usage { wall_us: 1, user_us: 2, system_us: 3, peak_rss_bytes: 4096 },
    }));
    event_round_trip(Event::Failed { kind: FailureKind::Cwd, message: "cwd \"/x\"".into() });
    event_round_trip(Event::PutDone { size: 3 });
    event_round_trip(Event::GetStart { size: 3 });
    event_round_trip(Event::GetData(vec![1, 2, 3]));
    event_round_trip(Event::GetEnd);
    event_round_trip(Event::Readiness {
        state: ReadyState::Failed,
        shell: String::new(),
        detail: "x".into(),
    });
    event_round_trip(Event::SessionOpened { session_id: "s".into(), pid: 9, offset: 1 << 33 });
    event_round_trip(Event::Output { stderr: true, offset: 5, data: b"err".to_vec() });
    event_round_trip(Event::SessionExit { code: 130 });
    event_round_trip(Event::Detached { reason: DetachReason::TakenOver, message: "m".into() });
    event_round_trip(Event::Detached { reason: DetachReason::InputFull, message: "f".into() });
    event_round_trip(Event::Sessions(vec![
        SessionInfo {
            session_id: "a".into(),
            argv: vec!["sh".into(), "-c".into(), "x".into()],
            pty: Some(WindowSize { rows: 2, cols: 3 }),
            pid: 4,
            exit_code: Some(1),
            attached: true,
            oldest_offset: 5,
            end_offset: 6,
            started_ms: 7,
        },
        SessionInfo::default(),
    ]));
    event_round_trip(Event::Done);
    event_round_trip(Event::ForwardOpened { address: "[::1]:80".into() });
    event_round_trip(Event::ForwardData(b"HTTP/1.0 200 OK".to_vec()));
    event_round_trip(Event::ForwardEof);
    event_round_trip(Event::ForwardAck(1 << 20));
    event_round_trip(Event::Entries(vec![
        FsEntry {
            name: b"a\nb\xfe".to_vec(),
            path: b"/a\nb\xfe".to_vec(),
            kind: FsKind::Symlink,
            size: 5,
            mode: 0o4755,
            uid: 1000,
            gid: 1001,
            mtime_ms: -5,
            link_target: b"../t".to_vec(),
            xattrs: Vec::new(),
        },
        FsEntry {
            xattrs: vec![
                Xattr { name: b"user.a".to_vec(), value: Vec::new() },
                Xattr { name: b"user.b".to_vec(), value: b"2".to_vec() },
            ],
            ..FsEntry::default()
        },
        FsEntry::default(),
    ]));
    event_round_trip(Event::Watching);
    event_round_trip(Event::Change(FsChange {
        kind: FsChangeKind::Rename,
        path: b"/n".to_vec(),
        old_path: b"/o".to_vec(),
        is_dir: true,
    }));
}

#[test]
fn an_unknown_request_kind_is_told_apart_from_a_broken_frame() {
    let mut body = Request::Kill.encode(77)[4..].to_vec();
    body[0] = 250;
    let e = decode_request(&body).unwrap_err();
    assert_eq!(unknown_request_id(&body, &e), Some(77));
    let body = Request::Get { path: "/x".into() }.encode(1)[4..].to_vec();
    let e = decode_request(&body[..body.len() - 1]).unwrap_err();
    assert_eq!(unknown_request_id(&body, &e), None, "a truncated known frame is broken");
}

#[test]
fn split_frame_waits_for_a_whole_frame_and_refuses_oversized_ones() {
    let frame = Request::ListSessions.encode(3);
    assert_eq!(split_frame(&frame[..frame.len() - 1], MAX_FRAME).unwrap(), None);
    let (body, used) = split_frame(&frame, MAX_FRAME).unwrap().unwrap();
    assert_eq!(used, frame.len());
    assert_eq!(decode_request(body).unwrap().message, Request::ListSessions);
    assert!(split_frame(&u32::MAX.to_le_bytes(), MAX_FRAME).is_err());
}

#[test]
fn counts_larger_than_the_frame_are_errors_not_allocations() {
    let mut body = Enc::new(115, 1);
    body.u32(u32::MAX);
    let bytes = body.finish();
    assert!(decode_event(&bytes[4..]).is_err());
    let mut body = Enc::new(11, 1);
    body.u32(u32::MAX);
    let bytes = body.finish();
    assert!(decode_request(&bytes[4..]).is_err());
}

#[test]
fn bad_frames_are_errors_not_panics() {
    assert!(body_len([0, 0, 0, 0], MAX_FRAME).is_err(), "a frame shorter than kind + id");
    assert!(body_len(((MAX_FRAME + 1) as u32).to_le_bytes(), MAX_FRAME).is_err(), "an oversized frame");
    let mut body = Request::Kill.encode(1)[4..].to_vec();
    body[0] = 250;
    assert!(decode_request(&body).is_err(), "unknown kind");
    let body = Request::Get { path: "/x".into() }.encode(1)[4..].to_vec();
    assert!(decode_request(&body[..body.len() - 1]).is_err(), "truncated payload");
    let mut body = Request::Kill.encode(1)[4..].to_vec();
    body.push(0);
    assert!(decode_request(&body).is_err(), "trailing bytes");
    assert_eq!(read_body(&mut [].as_slice(), MAX_FRAME).unwrap(), None, "clean end of stream");
}
