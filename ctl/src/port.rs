//! `sandboxctl port ID [PORT]`: where a published port is reachable on the host, as
//! `docker port` prints it: `HOST:PORT` for one port, `PORT/tcp -> HOST:PORT` lines for all.

use clap::Args;
use sandboxd_client::{proto, Client};

use crate::error::CtlError;

#[derive(Debug, Args)]
pub struct PortArgs {
    /// The sandbox.
    sandbox_id: String,
    /// One of the ports it was created with (`create --port`); all of them when omitted.
    port: Option<u16>,
}

pub async fn run(client: &Client, args: PortArgs) -> Result<i32, CtlError> {
    match args.port {
        Some(port) => println!("{}", address(client, &args.sandbox_id, port).await?),
        None => {
            // The ports the sandbox was created with, as the server reads them from it.
            let reference = proto::SandboxRef { sandbox_id: args.sandbox_id.clone(), ..Default::default() };
            let connected = client.raw().connect(proto::ConnectRequest { sandbox: Some(reference) }).await?;
            let ports = connected.into_inner().sandbox.map(|s| s.ports).unwrap_or_default();
            for port in ports {
                let port = u16::try_from(port).map_err(|_| CtlError::local(format!("bad port {port}")))?;
                println!("{port}/tcp -> {}", address(client, &args.sandbox_id, port).await?);
            }
        }
    }
    Ok(0)
}

/// `HOST:PORT` of the endpoint URL the server gives (`http://127.0.0.1:49153`).
async fn address(client: &Client, sandbox_id: &str, port: u16) -> Result<String, CtlError> {
    let request = proto::EndpointRequest { sandbox_id: sandbox_id.to_string(), port: u32::from(port) };
    let endpoint = client.raw().endpoint(request).await?.into_inner().endpoint;
    Ok(host_port(&endpoint).to_string())
}

fn host_port(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split('/').next().unwrap_or(rest)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_url_becomes_host_port() {
        assert_eq!(super::host_port("http://127.0.0.1:49153"), "127.0.0.1:49153");
        assert_eq!(super::host_port("http://[::1]:8080/"), "[::1]:8080");
    }
}
