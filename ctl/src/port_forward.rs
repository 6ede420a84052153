//! `sandboxctl port-forward ID [LOCAL_ADDR:]LOCAL_PORT:REMOTE_PORT…`: like `kubectl
//! port-forward`, a local listener per mapping and one `PortForward` call per accepted
//! connection (made from inside the sandbox, to its 127.0.0.1:REMOTE_PORT), until Ctrl-C.

use std::net::SocketAddr;

use clap::Args;
use sandboxd_client::Client;
use tokio::net::TcpListener;

use crate::error::CtlError;

#[derive(Debug, Args)]
pub struct PortForwardArgs {
    /// The sandbox.
    sandbox_id: String,
    /// `[LOCAL_ADDR:]LOCAL_PORT:REMOTE_PORT` (LOCAL_ADDR defaults to 127.0.0.1; LOCAL_PORT 0
    /// picks a free one); repeatable.
    #[arg(required = true, value_parser = mapping)]
    mappings: Vec<Mapping>,
    /// The host the sandbox connects to, as it sees it.
    #[arg(long, default_value = "127.0.0.1")]
    remote_host: String,
}

/// One listener and where its connections go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    local: SocketAddr,
    remote_port: u16,
}

fn port(s: &str, what: &str) -> Result<u16, String> {
    s.parse().map_err(|_| format!("{what} {s:?} is not a port (0..=65535)"))
}

/// `8080:80`, `0:80`, `127.0.0.1:8080:80`, `[::1]:8080:80`.
pub fn mapping(s: &str) -> Result<Mapping, String> {
    let (front, remote) =
        s.rsplit_once(':').ok_or_else(|| format!("{s:?}: expected [LOCAL_ADDR:]LOCAL_PORT:REMOTE_PORT"))?;
    let remote_port = port(remote, "REMOTE_PORT")?;
    if remote_port == 0 {
        return Err(format!("{s:?}: REMOTE_PORT must be 1..=65535"));
    }
    let (addr, local) = match front.rsplit_once(':') {
        Some((addr, local)) => (addr.trim_start_matches('[').trim_end_matches(']'), local),
        None => ("127.0.0.1", front),
    };
    let ip = addr.parse().map_err(|_| format!("{s:?}: LOCAL_ADDR {addr:?} is not an IP address"))?;
    Ok(Mapping { local: SocketAddr::new(ip, port(local, "LOCAL_PORT")?), remote_port })
}

pub async fn run(client: &Client, args: PortForwardArgs) -> Result<i32, CtlError> {
    // Every listener first: a port in use fails the command before anything is forwarded.
    let mut listeners = Vec::new();
    for m in &args.mappings {
        let listener = TcpListener::bind(m.local)
            .await
            .map_err(|e| CtlError::local(format!("listen on {}: {e}", m.local)))?;
        let bound = listener.local_addr().map_err(|e| CtlError::local(e.to_string()))?;
        println!("Forwarding from {bound} -> {}", m.remote_port);
        listeners.push((listener, m.remote_port));
    }
    for (listener, remote_port) in listeners {
        let (client, sandbox_id, host) = (client.clone(), args.sandbox_id.clone(), args.remote_host.clone());
        tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else { continue };
                let (client, sandbox_id, host) = (client.clone(), sandbox_id.clone(), host.clone());
                tokio::spawn(async move {
                    let _ = socket.set_nodelay(true);
                    let forwarded = async {
                        client.port_forward(&sandbox_id, &host, remote_port).await?.splice(socket).await
                    }
                    .await;
                    if let Err(e) = forwarded {
                        eprintln!("sandboxctl: port {remote_port}: {}", CtlError::from(e));
                    }
                });
            }
        });
    }
    let _ = tokio::signal::ctrl_c().await;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mappings_parse_like_kubectl() {
        assert_eq!(mapping("8080:80").unwrap().local, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(mapping("0.0.0.0:8080:80").unwrap().local, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(mapping("[::1]:0:22").unwrap().local, "[::1]:0".parse().unwrap());
        assert_eq!(mapping("0:80").unwrap().remote_port, 80);
        assert!(mapping("80").is_err());
        assert!(mapping("8080:0").unwrap_err().contains("REMOTE_PORT"));
        assert!(mapping("host:1:2").unwrap_err().contains("LOCAL_ADDR"));
        assert!(mapping("1:x").is_err());
    }
}
