//! Port forwarding through the sandbox's agent: the agent connects from inside the sandbox and
//! splices; here one task per connection moves bytes between the request's frames and the
//! service's channels. Bounded both ways: the agent's data is paced by `Credit` (granted as the
//! consumer takes it), ours by `FORWARD_WINDOW` (the agent's `ForwardAck` gives it back).

use std::time::Duration;

use sandboxd_agent::protocol::{self, Event, FailureKind, Request};
use tokio::sync::mpsc;

use super::channel::Call;
use super::procs::lost;
use super::AgentEngine;
use crate::core::processes::{ForwardConnection, ForwardInput, ForwardOutput, ForwardTarget};
use crate::error::{ProviderError, Result};

/// How long the agent's connect may take (it gives up after 10 s itself).
const OPEN_TIMEOUT: Duration = Duration::from_secs(15);

impl AgentEngine {
    /// `PortForward`: one connection to `target` from inside sandbox `name`.
    pub async fn port_forward(&self, name: &str, target: &ForwardTarget) -> Result<ForwardConnection> {
        let channel = self.agent_of(name).await?;
        let request = Request::ForwardOpen { host: target.host.clone(), port: target.port };
        let mut call = channel.call(request).await.ok_or_else(|| lost(name))?;
        let shown = target.display();
        let address = match tokio::time::timeout(OPEN_TIMEOUT, call.events.recv()).await {
            Ok(Some(Event::ForwardOpened { address })) => address,
            Ok(Some(Event::Failed { kind: FailureKind::Invalid, message })) => {
                call.finish();
                return Err(ProviderError::invalid("open.host", message));
            }
            Ok(Some(Event::Failed { message, .. })) => {
                call.finish();
                return Err(ProviderError::Unavailable(format!(
                    "cannot reach {shown} in sandbox {name}: {message}"
                )));
            }
            Ok(Some(other)) => {
                call.finish();
                return Err(ProviderError::Docker(format!("the agent answered a forward with {other:?}")));
            }
            Ok(None) => {
                call.finish();
                return Err(lost(name));
            }
            // Dropping the call sends `Kill`: the agent gives the connect up.
            Err(_) => {
                return Err(ProviderError::Unavailable(format!(
                    "connecting to {shown} in sandbox {name} took over {}s",
                    OPEN_TIMEOUT.as_secs()
                )))
            }
        };
        let (input, input_rx) = mpsc::channel(8);
        let (output_tx, output) = mpsc::channel(8);
        tokio::spawn(splice(name.to_string(), address.clone(), call, input_rx, output_tx));
        Ok(ForwardConnection { address, input, output })
    }
}

/// Move bytes until both halves closed, a failure, or the service dropped its ends (then the
/// call's drop sends `Kill`).
async fn splice(
    name: String,
    address: String,
    mut call: Call,
    mut input: mpsc::Receiver<ForwardInput>,
    output: mpsc::Sender<Result<ForwardOutput>>,
) {
    let mut window = protocol::FORWARD_WINDOW as i64;
    let mut input_open = true;
    loop {
        tokio::select! {
            event = call.events.recv() => match event {
                Some(Event::ForwardData(data)) => {
                    let n = data.len() as u64;
                    if output.send(Ok(ForwardOutput::Data(data))).await.is_err() {
                        return;
                    }
                    call.send(Request::Credit(n)).await;
                }
                Some(Event::ForwardEof) => {
                    if output.send(Ok(ForwardOutput::Eof)).await.is_err() {
                        return;
                    }
                }
                Some(Event::ForwardAck(n)) => window = window.saturating_add(n.min(i64::MAX as u64) as i64),
                Some(Event::Done) => {
                    call.finish();
                    return;
                }
                Some(Event::Failed { message, .. }) => {
                    call.finish();
                    let _ = output.send(Err(ProviderError::Unavailable(format!("{message} (sandbox {name})")))).await;
                    return;
                }
                Some(_) => {}
                None => {
                    call.finish();
                    let _ = output.send(Err(lost(&name))).await;
                    return;
                }
            },
            item = input.recv(), if input_open && window > 0 => match item {
                Some(ForwardInput::Data(data)) => {
                    for chunk in data.chunks(protocol::MAX_CHUNK) {
                        window -= chunk.len() as i64;
                        if !call.send(Request::ForwardData(chunk.to_vec())).await {
                            break;
                        }
                    }
                }
                Some(ForwardInput::End) | None => {
                    input_open = false;
                    call.send(Request::ForwardEnd).await;
                }
            },
            _ = output.closed() => {
                tracing::debug!(sandbox_id = %name, %address, "forward dropped by its caller");
                return;
            }
        }
    }
}
