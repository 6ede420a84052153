//! `sandboxd-agent relay [--ready-file PATH] TARGET PORT…`: loopback listeners inside the sandbox,
//! each connection spliced to `TARGET:PORT` (the same port). This is NeMo Gym's
//! `forward_ports` (a Compose service sharing another's network): the server starts it as a
//! process (`StartProcess`), so it needs nothing from the image, and ends it by signal. The ready
//! file is written once every listener is bound.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// Parse and run; returns only on a setup error (the message for stderr).
pub fn run(args: &[String]) -> Result<(), String> {
    let mut ready_file = None;
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--ready-file" => ready_file = Some(it.next().ok_or("--ready-file needs a path")?.clone()),
            _ => rest.push(a.clone()),
        }
    }
    let (target, ports) = rest.split_first().ok_or("relay needs TARGET and at least one PORT")?;
    if ports.is_empty() {
        return Err("relay needs at least one PORT".into());
    }
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    let mut listeners = Vec::new();
    for p in ports {
        let port: u16 =
            p.parse().ok().filter(|p| *p > 0).ok_or_else(|| format!("bad port {p:?} (1..=65535)"))?;
        let to = crate::forward::resolve(target, port, &hosts)?;
        let listener =
            TcpListener::bind(("127.0.0.1", port)).map_err(|e| format!("listen on 127.0.0.1:{port}: {e}"))?;
        listeners.push((listener, to));
    }
    if let Some(path) = ready_file {
        std::fs::write(&path, b"ready\n").map_err(|e| format!("write the ready file {path}: {e}"))?;
    }
    let threads: Vec<_> = listeners
        .into_iter()
        .map(|(listener, to)| std::thread::spawn(move || accept(listener, to)))
        .collect();
    for t in threads {
        let _ = t.join();
    }
    Ok(())
}

fn accept(listener: TcpListener, to: SocketAddr) {
    for client in listener.incoming() {
        let Ok(client) = client else { continue };
        std::thread::spawn(move || {
            let Ok(upstream) = TcpStream::connect_timeout(&to, Duration::from_secs(10)) else {
                let _ = client.shutdown(Shutdown::Both);
                return;
            };
            let _ = (client.set_nodelay(true), upstream.set_nodelay(true));
            let (Ok(c2), Ok(u2)) = (client.try_clone(), upstream.try_clone()) else { return };
            let back = std::thread::spawn(move || splice(u2, c2));
            splice(client, upstream);
            let _ = back.join();
        });
    }
}

/// Copy until EOF, then pass the half-close on.
fn splice(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
