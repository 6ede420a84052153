//! `sandboxd-agent connect [--run-dir DIR]`: a byte relay between this process's stdio and the
//! agent socket `DIR/agent.sock` of the sandbox's `init` agent, for a sandbox whose socket the
//! host cannot reach. The server starts it with `docker exec -i -u 0 NAME … connect` (as it
//! would `serve`), and the protocol runs end to end with the `init` agent: the sessions and
//! background processes live in `init`, which is no `docker exec` process.
//!
//! What it is for: gVisor cannot checkpoint a process that holds host descriptors (a `docker
//! exec`'s stdio) nor a socket bound on the host (`--host-uds`). A sandbox made to be
//! checkpointed keeps its socket inside gVisor (a tmpfs at `/.sandboxd/run`), every relay ends
//! before a checkpoint, and the `init` agent, with its terminal sessions and their retained
//! output, is part of what the checkpoint saves: after a restore (the same sandbox, or each of
//! its forks) a new relay reaches it again and the sessions re-attach by id.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long the relay waits for the socket to be bound (the `init` agent binds it first thing,
/// but the relay may be started right after `docker run`).
const BIND_WAIT: Duration = Duration::from_secs(15);

/// Connect to `dir/agent.sock`, waiting while it is not bound yet.
fn connect(dir: &Path) -> Result<UnixStream, String> {
    let path = dir.join(crate::socket::SOCKET_NAME);
    let give_up = Instant::now() + BIND_WAIT;
    let mut pause = Duration::from_millis(2);
    loop {
        match UnixStream::connect(&path) {
            Ok(stream) => return Ok(stream),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
                ) && Instant::now() < give_up =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(e) => {
                return Err(format!("cannot connect to the sandbox's agent socket {}: {e}", path.display()))
            }
        }
    }
}

/// Relay stdin to the socket and the socket to stdout until the agent closes the connection
/// (it does once the server's end of stdin closed). Never returns.
pub fn run(dir: &Path) -> ! {
    let stream = match connect(dir) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sandboxd-agent: {e}");
            std::process::exit(1);
        }
    };
    let Ok(mut to_agent) = stream.try_clone() else {
        eprintln!("sandboxd-agent: cannot clone the agent connection");
        std::process::exit(1);
    };
    // The server's frames to the agent; at their end, the agent sees the connection's end.
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to_agent.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to_agent.shutdown(std::net::Shutdown::Write);
    });
    // The agent's frames to the server, until the agent ends the connection.
    let mut from_agent = stream;
    let mut stdout = std::io::stdout().lock();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from_agent.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if stdout.write_all(&buf[..n]).and_then(|_| stdout.flush()).is_err() {
                    break;
                }
            }
        }
    }
    std::process::exit(0)
}
