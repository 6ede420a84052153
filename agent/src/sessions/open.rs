//! Starting a session: its program on a pty or pipes, the pumps that fill its ring, the
//! thread that records its exit, and its place in the process table.

use std::fs::File;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use super::{new_id, now_ms, Holder, Session, State, OUTPUT_GRACE};
use crate::channel::{Channel, Credit};
use crate::launch::Launch;
use crate::processes;
use crate::protocol::{self, Event, FailureKind, SessionStart};
use crate::reaper::reaper;
use crate::spawn::{self, SpawnError};
use crate::terminal::{self, Ends, Program};

/// Start a session for `request` on `conn` as `launch` says (its user and complete
/// environment).
pub fn open(
    conn: u64,
    channel: &Channel,
    request: u64,
    start: SessionStart,
    launch: Launch,
) -> Result<(), SpawnError> {
    let Launch { user, mut env } = launch;
    if let Some(size) = start.pty {
        if size.rows == 0 || size.cols == 0 {
            return Err((FailureKind::Invalid, "pty rows and cols must be > 0".into()));
        }
        if !env.iter().any(|(k, _)| k == "TERM") {
            env.push(("TERM".into(), "xterm".into()));
        }
    }
    if start.retain_bytes > protocol::MAX_RETAIN_BYTES {
        return Err((
            FailureKind::Invalid,
            format!(
                "retain_bytes {} is over the most a session keeps ({})",
                start.retain_bytes,
                protocol::MAX_RETAIN_BYTES
            ),
        ));
    }
    let retain = if start.retain_bytes == 0 { protocol::DEFAULT_RETAIN_BYTES } else { start.retain_bytes };
    let program = Program::new(&start.argv, &env, start.cwd.as_deref(), user)?;
    let ((pid, ends), exited) =
        reaper().spawn_registered(|register| terminal::start(&program, start.pty, register))?;
    let (master, input_file, readers): (Option<File>, Option<File>, Vec<(bool, File)>) = match ends {
        Ends::Pty(master) => {
            let reader = master.try_clone().map_err(|e| (FailureKind::Other, format!("dup: {e}")))?;
            let writer = master.try_clone().map_err(|e| (FailureKind::Other, format!("dup: {e}")))?;
            (Some(master), Some(writer), vec![(false, reader)])
        }
        Ends::Pipes { stdin, stdout, stderr } => (None, Some(stdin), vec![(false, stdout), (true, stderr)]),
    };
    let (input_tx, input_rx) = mpsc::channel::<Vec<u8>>();
    let queued = Arc::new(AtomicU64::new(0));
    let session = Arc::new(Session {
        id: new_id(),
        argv: start.argv.clone(),
        pid,
        started_ms: now_ms(),
        detach_timeout_ms: start.detach_timeout_ms,
        master,
        input: Mutex::new(Some(input_tx)),
        queued: queued.clone(),
        state: Mutex::new(State {
            ring: crate::ring::Ring::new(retain),
            exit: None,
            holder: None,
            generation: 0,
            size: start.pty,
            held_cursor: None,
            holder_stalled: false,
            retain,
        }),
        changed: Condvar::new(),
    });
    if let Some(mut writer) = input_file {
        std::thread::spawn(move || {
            for chunk in input_rx {
                let written = writer.write_all(&chunk);
                queued.fetch_sub(chunk.len() as u64, Ordering::SeqCst);
                if written.is_err() {
                    break;
                }
            }
        });
    }
    let mut pumps = Vec::new();
    for (stderr, mut file) in readers {
        let (done_tx, done_rx) = mpsc::channel::<()>();
        pumps.push(done_rx);
        let session = session.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match file.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => session.append(stderr, &buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    // EIO on a pty master: every slave closed.
                    Err(_) => break,
                }
            }
            let _ = done_tx.send(());
        });
    }
    {
        let session = session.clone();
        std::thread::spawn(move || {
            let code = exited.recv().map(|(status, _)| spawn::exit_code(status)).unwrap_or(125);
            let deadline = Instant::now() + OUTPUT_GRACE;
            for pump in pumps {
                let _ = pump.recv_timeout(deadline.saturating_duration_since(Instant::now()));
            }
            session.lock().exit = Some(code);
            if let Ok(mut input) = session.input.lock() {
                input.take();
            }
            session.changed.notify_all();
        });
    }
    processes::add_named(session.id.clone(), session.clone());
    if start.attach {
        session.hold(Holder { conn, request, channel: channel.clone(), credit: Credit::new() }, 0);
    } else {
        channel.send(
            request,
            &Event::SessionOpened { session_id: session.id.clone(), pid: pid as u32, offset: 0 },
        );
    }
    Ok(())
}
