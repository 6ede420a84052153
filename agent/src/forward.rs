//! Port forwarding: one TCP connection made from inside the sandbox (its network namespace, so
//! `network: none` and unpublished ports work) per `ForwardOpen` request, spliced with that
//! request's frames. Both directions are bounded: what the peer sends is paced by the request's
//! `Credit`, what the server sends by `FORWARD_WINDOW` (the agent acknowledges each write with
//! `ForwardAck`), so a slow side stalls only its own connection. Each half closes on its own
//! (`ForwardEnd` shuts down the write side; the peer's EOF is `ForwardEof`); `Done` follows once
//! both are closed.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::channel::{Channel, Credit};
use crate::protocol::{self, Event, FailureKind};

/// How long a connect inside the sandbox may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

enum Input {
    Data(Vec<u8>),
    End,
}

struct Forward {
    credit: Arc<Credit>,
    input: Mutex<Option<mpsc::Sender<Input>>>,
    stream: Mutex<Option<TcpStream>>,
    /// Dropped by the server (`Kill`, its connection ended): send nothing more.
    killed: AtomicBool,
    /// A last event (`Done` or `Failed`) was sent.
    finished: AtomicBool,
    /// Halves still open (2, then 1, then 0 sends `Done`).
    open_halves: AtomicU8,
}

type Key = (u64, u64);

static TABLE: Mutex<Option<HashMap<Key, Arc<Forward>>>> = Mutex::new(None);

fn table() -> MutexGuard<'static, Option<HashMap<Key, Arc<Forward>>>> {
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

fn get(key: Key) -> Option<Arc<Forward>> {
    table().as_ref().and_then(|t| t.get(&key).cloned())
}

fn remove(key: Key) {
    if let Some(t) = table().as_mut() {
        t.remove(&key);
    }
}

/// `host` as the sandbox sees it: an IP address, `localhost`, or a name in its `/etc/hosts`.
/// No DNS: the static agent must not call NSS.
pub fn resolve(host: &str, port: u16, hosts_file: &str) -> Result<SocketAddr, String> {
    let host = if host.is_empty() { "127.0.0.1" } else { host };
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    for line in hosts_file.lines() {
        let line = line.split('#').next().unwrap_or("");
        let mut words = line.split_whitespace();
        let Some(ip) = words.next().and_then(|w| w.parse::<IpAddr>().ok()) else { continue };
        if words.any(|name| name.eq_ignore_ascii_case(host)) {
            return Ok(SocketAddr::new(ip, port));
        }
    }
    if host.eq_ignore_ascii_case("localhost") {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    Err(format!(
        "cannot resolve {host:?} inside the sandbox: not an IP address, localhost, or a name in its /etc/hosts"
    ))
}

/// Start connecting for `request` on `conn`; the answer comes from a thread of its own, so the
/// channel's reader never waits for a connect.
pub fn open(conn: u64, channel: &Channel, request: u64, host: String, port: u16) {
    let (tx, rx) = mpsc::channel();
    let forward = Arc::new(Forward {
        credit: Credit::new(),
        input: Mutex::new(Some(tx)),
        stream: Mutex::new(None),
        killed: AtomicBool::new(false),
        finished: AtomicBool::new(false),
        open_halves: AtomicU8::new(2),
    });
    table().get_or_insert_with(HashMap::new).insert((conn, request), forward.clone());
    let channel = channel.clone();
    std::thread::spawn(move || run(conn, request, &channel, &forward, &host, port, rx));
}

fn run(
    conn: u64,
    request: u64,
    channel: &Channel,
    forward: &Arc<Forward>,
    host: &str,
    port: u16,
    input: mpsc::Receiver<Input>,
) {
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    let stream = resolve(host, port, &hosts).map_err(|e| (FailureKind::Invalid, e)).and_then(|addr| {
        TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
            .map_err(|e| (FailureKind::Other, format!("connect to {addr} inside the sandbox: {e}")))
            .map(|s| (addr, s))
    });
    let (addr, stream) = match stream {
        Ok(ok) => ok,
        Err(e) => return forward.fail(conn, request, channel, e),
    };
    let _ = stream.set_nodelay(true);
    let (reader, writer) = match (stream.try_clone(), stream.try_clone()) {
        (Ok(r), Ok(w)) => (r, w),
        _ => {
            return forward.fail(
                conn,
                request,
                channel,
                (FailureKind::Other, "dup of the socket failed".into()),
            )
        }
    };
    if let Ok(mut s) = forward.stream.lock() {
        *s = Some(stream);
    }
    if forward.killed.load(Ordering::SeqCst) {
        forward.shutdown();
        return;
    }
    channel.send(request, &Event::ForwardOpened { address: addr.to_string() });
    {
        let (forward, channel) = (forward.clone(), channel.clone());
        std::thread::spawn(move || forward.write_half(conn, request, &channel, writer, input));
    }
    forward.read_half(conn, request, channel, reader, &addr);
}

impl Forward {
    fn live(&self) -> bool {
        !self.killed.load(Ordering::SeqCst) && !self.finished.load(Ordering::SeqCst)
    }

    fn shutdown(&self) {
        if let Some(s) = self.stream.lock().ok().and_then(|s| s.as_ref().and_then(|s| s.try_clone().ok())) {
            let _ = s.shutdown(Shutdown::Both);
        }
        self.credit.close();
        if let Ok(mut i) = self.input.lock() {
            i.take();
        }
    }

    /// The connection failed: say so once and drop it.
    fn fail(&self, conn: u64, request: u64, channel: &Channel, (kind, message): (FailureKind, String)) {
        if self.live() && !self.finished.swap(true, Ordering::SeqCst) {
            channel.send(request, &Event::Failed { kind, message });
        }
        self.shutdown();
        remove((conn, request));
    }

    /// One half closed; the last one sends `Done`.
    fn half_closed(&self, conn: u64, request: u64, channel: &Channel) {
        if self.open_halves.fetch_sub(1, Ordering::SeqCst) == 1 {
            if self.live() && !self.finished.swap(true, Ordering::SeqCst) {
                channel.send(request, &Event::Done);
            }
            self.shutdown();
            remove((conn, request));
        }
    }

    /// Peer to server, paced by the request's credit.
    fn read_half(
        &self,
        conn: u64,
        request: u64,
        channel: &Channel,
        mut socket: TcpStream,
        addr: &SocketAddr,
    ) {
        let mut buf = vec![0u8; protocol::MAX_CHUNK.min(64 * 1024)];
        loop {
            match socket.read(&mut buf) {
                Ok(0) => {
                    if self.live() {
                        channel.send(request, &Event::ForwardEof);
                    }
                    return self.half_closed(conn, request, channel);
                }
                Ok(n) => {
                    if !self.credit.spend(n) || !self.live() {
                        return;
                    }
                    channel.send(request, &Event::ForwardData(buf[..n].to_vec()));
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return self.fail(
                        conn,
                        request,
                        channel,
                        (FailureKind::Other, format!("connection to {addr} inside the sandbox: {e}")),
                    )
                }
            }
        }
    }

    /// Server to peer: each write acknowledged, `End` shuts the write side down.
    fn write_half(
        &self,
        conn: u64,
        request: u64,
        channel: &Channel,
        mut socket: TcpStream,
        input: mpsc::Receiver<Input>,
    ) {
        for item in input {
            match item {
                Input::Data(data) => {
                    if let Err(e) = socket.write_all(&data) {
                        let addr = socket.peer_addr().map(|a| a.to_string()).unwrap_or_default();
                        return self.fail(
                            conn,
                            request,
                            channel,
                            (FailureKind::Other, format!("writing to {addr} inside the sandbox: {e}")),
                        );
                    }
                    if self.live() {
                        channel.send(request, &Event::ForwardAck(data.len() as u64));
                    }
                }
                Input::End => {
                    let _ = socket.shutdown(Shutdown::Write);
                    return self.half_closed(conn, request, channel);
                }
            }
        }
    }
}

fn push(conn: u64, request: u64, item: Input) -> bool {
    let Some(f) = get((conn, request)) else { return false };
    let sent = f.input.lock().ok().and_then(|i| i.as_ref().map(|tx| tx.send(item).is_ok()));
    sent.unwrap_or(false)
}

/// `ForwardData` for `request`; false when it is not a forward of this connection.
pub fn data(conn: u64, request: u64, data: Vec<u8>) -> bool {
    push(conn, request, Input::Data(data))
}

/// `ForwardEnd` for `request`.
pub fn end(conn: u64, request: u64) -> bool {
    push(conn, request, Input::End)
}

/// The credit of a forward, for `Credit` frames.
pub fn credit_of(conn: u64, request: u64) -> Option<Arc<Credit>> {
    get((conn, request)).map(|f| f.credit.clone())
}

/// `Kill`: drop the connection without another event.
pub fn kill(conn: u64, request: u64) {
    if let Some(f) = get((conn, request)) {
        f.killed.store(true, Ordering::SeqCst);
        f.shutdown();
        remove((conn, request));
    }
}

/// The server's connection ended: drop every forward it had.
pub fn connection_ended(conn: u64) {
    let keys: Vec<Key> =
        table().as_ref().map(|t| t.keys().filter(|k| k.0 == conn).copied().collect()).unwrap_or_default();
    for (c, r) in keys {
        kill(c, r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_resolve_without_dns() {
        let hosts =
            "127.0.0.1 localhost\n# 10.0.0.9 commented\n172.17.0.3\tdb db.local # peer\n::1 ip6-localhost\n";
        assert_eq!(resolve("", 80, hosts).unwrap().to_string(), "127.0.0.1:80");
        assert_eq!(resolve("10.1.2.3", 8080, hosts).unwrap().to_string(), "10.1.2.3:8080");
        assert_eq!(resolve("[::1]", 22, hosts).unwrap().to_string(), "[::1]:22");
        assert_eq!(resolve("DB.local", 5432, hosts).unwrap().to_string(), "172.17.0.3:5432");
        assert_eq!(resolve("localhost", 1, "").unwrap().to_string(), "127.0.0.1:1");
        assert!(resolve("commented", 1, hosts).is_err());
        let e = resolve("example.com", 1, hosts).unwrap_err();
        assert!(e.contains("example.com") && e.contains("/etc/hosts"), "{e}");
    }
}
