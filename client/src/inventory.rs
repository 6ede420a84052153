//! `List`: the sandboxes a server owns, by label and state, a page at a time.

use std::collections::HashMap;

use crate::client::Client;
use crate::error::{ClientError, Result};
use crate::proto;
use crate::sandbox::SandboxStatus;

/// What [`Client::list`] asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// Only sandboxes carrying every one of these labels.
    pub labels: HashMap<String, String>,
    /// Only sandboxes in one of these states; empty means any.
    pub statuses: Vec<SandboxStatus>,
    /// At most this many per page (0: the server's default, 100; at most 1000).
    pub page_size: u32,
    /// `next_page_token` of the previous page; empty for the first.
    pub page_token: String,
}

/// One sandbox as `List` sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxInfo {
    /// Its id.
    pub sandbox_id: String,
    /// Its image.
    pub image: String,
    /// Its state.
    pub status: SandboxStatus,
    /// Its labels (`spec.metadata`).
    pub metadata: HashMap<String, String>,
    /// Its declared ports.
    pub ports: Vec<u32>,
    /// Its default working directory.
    pub workdir: Option<String>,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_at_unix_ms: i64,
    /// End of its lease, milliseconds since the Unix epoch, if it has one.
    pub expires_at_unix_ms: Option<i64>,
    /// The OCI runtime it runs on (`runc`, `runsc` for gVisor); empty when the server does not say.
    pub runtime: String,
}

/// One page of [`Client::list`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListPage {
    /// Oldest first.
    pub sandboxes: Vec<SandboxInfo>,
    /// Pass as `page_token` for the next page; empty on the last.
    pub next_page_token: String,
}

pub(crate) fn status_to_proto(status: SandboxStatus) -> proto::SandboxStatus {
    match status {
        SandboxStatus::Starting => proto::SandboxStatus::Starting,
        SandboxStatus::Running => proto::SandboxStatus::Running,
        SandboxStatus::Stopped => proto::SandboxStatus::Stopped,
        SandboxStatus::Error => proto::SandboxStatus::Error,
        SandboxStatus::Unknown => proto::SandboxStatus::Unknown,
        SandboxStatus::Paused => proto::SandboxStatus::Paused,
        SandboxStatus::Hibernated => proto::SandboxStatus::Hibernated,
    }
}

impl SandboxInfo {
    pub(crate) fn from_proto(info: proto::SandboxInfo) -> Result<SandboxInfo> {
        let reference =
            info.sandbox.ok_or_else(|| ClientError::Protocol("SandboxInfo without a sandbox".into()))?;
        Ok(SandboxInfo {
            sandbox_id: reference.sandbox_id,
            image: info.image,
            status: SandboxStatus::from_wire(info.status),
            metadata: reference.metadata,
            ports: reference.ports,
            workdir: reference.workdir,
            created_at_unix_ms: info.created_at_unix_ms,
            expires_at_unix_ms: info.expires_at_unix_ms,
            runtime: info.runtime,
        })
    }
}

impl Client {
    /// One page of the sandboxes the server owns (`List`).
    pub async fn list(&self, options: ListOptions) -> Result<ListPage> {
        let request = proto::ListRequest {
            labels: options.labels,
            statuses: options.statuses.into_iter().map(|s| status_to_proto(s) as i32).collect(),
            page_size: options.page_size,
            page_token: options.page_token,
        };
        let response = self.raw().list(request).await?.into_inner();
        Ok(ListPage {
            sandboxes: response
                .sandboxes
                .into_iter()
                .map(SandboxInfo::from_proto)
                .collect::<Result<Vec<_>>>()?,
            next_page_token: response.next_page_token,
        })
    }

    /// Every page of [`Client::list`], oldest first.
    pub async fn list_all(&self, mut options: ListOptions) -> Result<Vec<SandboxInfo>> {
        let mut all = Vec::new();
        loop {
            let page = self.list(options.clone()).await?;
            all.extend(page.sandboxes);
            if page.next_page_token.is_empty() {
                return Ok(all);
            }
            options.page_token = page.next_page_token;
        }
    }
}
