//! ListDir, Stat, MakeDir, Remove, Rename and WatchDir on the Docker backend: each one request
//! to the sandbox's agent (`agent/src/fs.rs` does the work as the call's user). The docker
//! engine has no agent in the sandbox, and `docker exec` of shell tools would lose exactly what
//! these calls are for (odd names, types, one syscall's error), so there they are
//! FAILED_PRECONDITION naming why.

use sandboxd_agent::protocol::{Event, FailureKind, Request};
use tokio::sync::mpsc;

use super::provider::DockerProvider;
use crate::agent_client::channel::{AgentChannel, Call};
use crate::core::fs::{shown, EntryStream, FileEntry, FileEvent, FileOp, ListDirQuery, WatchStream};
use crate::core::spec::{SandboxHandle, User};
use crate::error::{ProviderError, Result};

/// Changes a watch may hold for a watcher that is not reading (beyond what HTTP/2 flow control
/// already holds); one more ends the watch with RESOURCE_EXHAUSTED.
pub const WATCH_BUFFER: usize = 1024;

/// What an older agent answers to a request it does not know.
const UNKNOWN_REQUEST: &str = "this agent does not know the request";

/// The provider error for a failure the agent reported in sandbox `name`.
fn fs_error(name: &str, kind: FailureKind, message: String) -> ProviderError {
    match kind {
        FailureKind::NotFound => ProviderError::FileNotFound(format!("{message} (in sandbox {name})")),
        FailureKind::AlreadyExists => ProviderError::AlreadyExists(message),
        FailureKind::Permission => ProviderError::PermissionDenied(message),
        FailureKind::NotDirectory
        | FailureKind::IsDirectory
        | FailureKind::NotEmpty
        | FailureKind::CrossDevice
        | FailureKind::ReadOnly
        | FailureKind::Unsupported
        | FailureKind::NotRegular => ProviderError::FailedPrecondition(message),
        FailureKind::Invalid if message.starts_with(UNKNOWN_REQUEST) => ProviderError::FailedPrecondition(
            format!("the agent of sandbox {name} is older than this server and has no file calls; recreate the sandbox"),
        ),
        FailureKind::Invalid => ProviderError::invalid("path", message),
        FailureKind::User => ProviderError::invalid("user", message),
        FailureKind::Overflow => ProviderError::ResourceExhausted(message),
        _ => ProviderError::Docker(message),
    }
}

fn lost(name: &str) -> ProviderError {
    ProviderError::Unavailable(format!("the agent of sandbox {name} went away during the call"))
}

/// The protocol's credit for one batch (what the agent spent on it).
fn batch_bytes(entries: &[FileEntry]) -> u64 {
    entries.iter().map(|e| (41 + e.name.len() + e.path.len() + e.link_target.len()) as u64).sum()
}

impl DockerProvider {
    /// The sandbox's agent channel and the user a call acts as (its own, else the image's).
    async fn fs_channel(
        &self,
        handle: &SandboxHandle,
        user: Option<&User>,
    ) -> Result<(std::sync::Arc<AgentChannel>, Option<String>)> {
        let name = handle.sandbox_id.as_str();
        self.refuse_known_paused(name)?;
        let Some(agent) = self.agent.as_ref() else {
            return Err(ProviderError::FailedPrecondition(format!(
                "file calls need the sandbox's agent, and this server runs the docker engine \
                 (exec.engine: docker); use exec.engine: agent, or Exec for sandbox {name}"
            )));
        };
        let Some(channel) = agent.channel(name).await else {
            return Err(ProviderError::FailedPrecondition(format!(
                "sandbox {name} has no usable agent (made on the docker engine or by an older server, \
                 or the agent cannot start there); file calls need it"
            )));
        };
        let user = user.map(|u| u.to_string()).or_else(|| channel.default_user.clone());
        Ok((channel, user))
    }

    async fn fs_call(
        &self,
        handle: &SandboxHandle,
        user: Option<&User>,
        request: impl FnOnce(Option<String>) -> Request,
    ) -> Result<Call> {
        let (channel, user) = self.fs_channel(handle, user).await?;
        channel.call(request(user)).await.ok_or_else(|| lost(&handle.sandbox_id))
    }

    pub async fn list_dir(
        &self,
        handle: &SandboxHandle,
        query: &ListDirQuery,
        user: Option<&User>,
    ) -> Result<EntryStream> {
        let name = handle.sandbox_id.clone();
        let mut call = self
            .fs_call(handle, user, |user| Request::ListDir {
                path: query.path.clone(),
                depth: query.depth,
                include_hidden: query.include_hidden,
                user,
            })
            .await?;
        // The first answer decides between an error of the call and a stream.
        let first = match call.events.recv().await {
            Some(Event::Entries(list)) => Some(list),
            Some(Event::Done) => None,
            Some(Event::Failed { kind, message }) => {
                call.finish();
                return Err(fs_error(&name, kind, message));
            }
            _ => {
                call.finish();
                return Err(lost(&name));
            }
        };
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(async move {
            let Some(first) = first else {
                call.finish();
                return;
            };
            let mut next = Some(first);
            loop {
                let item = match next.take() {
                    Some(list) => list,
                    None => match call.events.recv().await {
                        Some(Event::Entries(list)) => list,
                        Some(Event::Done) => {
                            call.finish();
                            return;
                        }
                        Some(Event::Failed { kind, message }) => {
                            call.finish();
                            let _ = tx.send(Err(fs_error(&name, kind, message))).await;
                            return;
                        }
                        Some(_) => continue,
                        None => {
                            call.finish();
                            let _ = tx.send(Err(lost(&name))).await;
                            return;
                        }
                    },
                };
                let n = batch_bytes(&item);
                // A caller that went away drops `call`: the agent stops listing.
                if tx.send(Ok(item)).await.is_err() {
                    return;
                }
                call.send(Request::Credit(n)).await;
            }
        });
        Ok(rx)
    }

    pub async fn stat(
        &self,
        handle: &SandboxHandle,
        path: &[u8],
        follow_links: bool,
        user: Option<&User>,
    ) -> Result<FileEntry> {
        let mut call = self
            .fs_call(handle, user, |user| Request::Stat { path: path.to_vec(), follow_links, user })
            .await?;
        let result = match call.events.recv().await {
            Some(Event::Entries(mut list)) if list.len() == 1 => Ok(list.remove(0)),
            Some(Event::Failed { kind, message }) => Err(fs_error(&handle.sandbox_id, kind, message)),
            Some(other) => Err(ProviderError::Docker(format!("the agent answered Stat with {other:?}"))),
            None => Err(lost(&handle.sandbox_id)),
        };
        call.finish();
        result
    }

    pub async fn file_op(&self, handle: &SandboxHandle, op: &FileOp, user: Option<&User>) -> Result<()> {
        let mut call = self
            .fs_call(handle, user, |user| match op.clone() {
                FileOp::MakeDir { path, parents, mode } => Request::MakeDir { path, parents, mode, user },
                FileOp::Remove { path, recursive } => Request::Remove { path, recursive, user },
                FileOp::Rename { source, destination, overwrite } => {
                    Request::Rename { source, destination, overwrite, user }
                }
            })
            .await?;
        let result = match call.events.recv().await {
            Some(Event::Done) => Ok(()),
            Some(Event::Failed { kind, message }) => Err(fs_error(&handle.sandbox_id, kind, message)),
            Some(other) => {
                Err(ProviderError::Docker(format!("the agent answered a file call with {other:?}")))
            }
            None => Err(lost(&handle.sandbox_id)),
        };
        call.finish();
        result
    }

    pub async fn watch_dir(
        &self,
        handle: &SandboxHandle,
        path: &[u8],
        recursive: bool,
        user: Option<&User>,
    ) -> Result<WatchStream> {
        let name = handle.sandbox_id.clone();
        let mut call = self
            .fs_call(handle, user, |user| Request::WatchDir { path: path.to_vec(), recursive, user })
            .await?;
        match call.events.recv().await {
            Some(Event::Watching) => {}
            Some(Event::Failed { kind, message }) => {
                call.finish();
                return Err(fs_error(&name, kind, message));
            }
            _ => {
                call.finish();
                return Err(lost(&name));
            }
        }
        let (tx, rx) = mpsc::channel(WATCH_BUFFER + 1);
        let shown_path = shown(path);
        tokio::spawn(async move {
            loop {
                let event = tokio::select! {
                    event = call.events.recv() => event,
                    _ = tx.closed() => return, // the watcher left: dropping `call` ends the watch
                };
                let item = match event {
                    Some(Event::Change(change)) => Ok::<FileEvent, ProviderError>(change),
                    Some(Event::Done) => {
                        call.finish();
                        return;
                    }
                    Some(Event::Failed { kind, message }) => {
                        call.finish();
                        let _ = tx.try_send(Err(fs_error(&name, kind, message)));
                        return;
                    }
                    Some(_) => continue,
                    None => {
                        call.finish();
                        let _ = tx.try_send(Err(lost(&name)));
                        return;
                    }
                };
                // Never wait for a slow watcher: the last slot is kept for the status that ends it.
                if tx.capacity() <= 1 {
                    let _ = tx.try_send(Err(ProviderError::ResourceExhausted(format!(
                        "the watch of {shown_path} in sandbox {name} was ended: its reader fell more than \
                         {WATCH_BUFFER} events behind"
                    ))));
                    return; // dropping `call` stops the agent's watch
                }
                let _ = tx.try_send(item);
            }
        });
        Ok(rx)
    }
}
