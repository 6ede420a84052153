//! `Logs` on Docker: one `docker logs [--follow] [--tail N] NAME` per call, its stdout and
//! stderr (the container's, kept apart by the daemon) forwarded as they arrive. The client is
//! killed when the caller drops the stream.

use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

use super::provider::DockerProvider;
use crate::core::logs::{LogChunk, LogOptions, LogStream};
use crate::error::{ProviderError, Result};

/// `docker logs` argv: the id is validated before it gets here, and `--` ends the flags anyway.
pub fn logs_args(name: &str, options: LogOptions) -> Vec<String> {
    let mut args = vec!["logs".to_string()];
    if options.follow {
        args.push("--follow".into());
    }
    if let Some(n) = options.tail_lines {
        args.push("--tail".into());
        args.push(n.to_string());
    }
    args.push("--".into());
    args.push(name.to_string());
    args
}

impl DockerProvider {
    /// The main process's output of a sandbox this service owns (running or stopped).
    pub async fn container_logs(&self, sandbox_id: &str, options: LogOptions) -> Result<LogStream> {
        if !crate::core::spec::SandboxId::has_valid_shape(sandbox_id) {
            return Err(ProviderError::SandboxNotFound(sandbox_id.into()));
        }
        self.owned(sandbox_id).await?;
        // Not counted against a pool: a followed log may stay open for hours.
        let mut child = self
            .cli
            .spawn(&logs_args(sandbox_id, options), false, false)
            .await
            .map_err(ProviderError::from)?;
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(async move {
            let (stdout, stderr) = (child.child.stdout.take(), child.child.stderr.take());
            let pumped = async {
                tokio::join!(forward(stdout, &tx, LogChunk::Stdout), forward(stderr, &tx, LogChunk::Stderr),)
            };
            // The caller went away while the sandbox is silent: `child` is killed as it drops.
            tokio::select! {
                _ = pumped => {}
                _ = tx.closed() => return,
            }
            match child.wait().await {
                Ok(0) => {}
                Ok(code) => {
                    let _ =
                        tx.send(Err(ProviderError::Docker(format!("docker logs exited with {code}")))).await;
                }
                Err(e) => {
                    let _ = tx.send(Err(ProviderError::from(e))).await;
                }
            }
        });
        Ok(LogStream::new(rx))
    }
}

/// Forward `reader` as chunks until it ends or the receiver goes away.
async fn forward<R: tokio::io::AsyncRead + Unpin>(
    reader: Option<R>,
    tx: &mpsc::Sender<Result<LogChunk>>,
    chunk: fn(Vec<u8>) -> LogChunk,
) {
    let Some(mut reader) = reader else { return };
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n @ 1..) = reader.read(&mut buf).await {
        if tx.send(Ok(chunk(buf[..n].to_vec()))).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv() {
        assert_eq!(logs_args("sbx", LogOptions::default()), ["logs", "--", "sbx"]);
        assert_eq!(
            logs_args("sbx", LogOptions { follow: true, tail_lines: Some(5) }),
            ["logs", "--follow", "--tail", "5", "--", "sbx"]
        );
    }
}
