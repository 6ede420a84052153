//! The sandbox handle, mirroring NeMo Gym's `AsyncSandbox`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex as StdMutex};

use futures_util::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::client::{Client, RawClient};
use crate::error::{ClientError, Result};
use crate::proto;
use crate::pty::{Pty, PtyExecState, PtyHost};
use sandboxd_proto::contract::{ExecResult, SandboxDescriptor};

/// Size of the chunks an upload sends.
pub const UPLOAD_CHUNK_BYTES: usize = 256 * 1024;
pub use crate::defaults::DEFAULT_EXEC_TIMEOUT_S;

/// A spec for `image` with every other field unset (the server's defaults).
pub fn spec(image: impl Into<String>) -> proto::SandboxSpec {
    proto::SandboxSpec { image: image.into(), ..Default::default() }
}

/// A spec for `image` on the OCI runtime the server offers as `runtime` (`"runsc"`: gVisor),
/// every other field unset. The same as `SandboxSpec { runtime: …, ..spec(image) }`.
pub fn spec_on(image: impl Into<String>, runtime: impl Into<String>) -> proto::SandboxSpec {
    proto::SandboxSpec { runtime: runtime.into(), ..spec(image) }
}

/// Builder-style setters on a wire spec.
pub trait SandboxSpecExt {
    /// Run on the OCI runtime the server offers under this name (`"runsc"`: gVisor; empty: the
    /// server's default, or the one the caller's tenant is bound to).
    fn with_runtime(self, runtime: impl Into<String>) -> Self;
}

impl SandboxSpecExt for proto::SandboxSpec {
    fn with_runtime(mut self, runtime: impl Into<String>) -> Self {
        self.runtime = runtime.into();
        self
    }
}

/// Lifecycle state of a sandbox: the shared contract's.
pub use sandboxd_proto::contract::SandboxStatus;

/// The host URL of a published port and the headers to send to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// Absolute URL, for example `http://127.0.0.1:49153`.
    pub url: String,
    /// Headers a client must send (none for Docker).
    pub headers: HashMap<String, String>,
}

/// Options of [`Sandbox::exec_with`].
#[derive(Clone, Debug, PartialEq)]
pub struct ExecOptions {
    /// Working directory; `None` uses the sandbox's workdir.
    pub cwd: Option<String>,
    /// Extra environment (wins over the spec's env).
    pub env: HashMap<String, String>,
    /// Timeout in seconds; default 180. `None` uses the server's default.
    pub timeout_s: Option<f64>,
    /// User name or uid.
    pub user: Option<String>,
    /// Bytes fed to standard input.
    pub stdin: Option<Vec<u8>>,
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions {
            cwd: None,
            env: HashMap::new(),
            timeout_s: Some(DEFAULT_EXEC_TIMEOUT_S),
            user: None,
            stdin: None,
        }
    }
}

pub(crate) struct Inner {
    pub(crate) client: Client,
    pub(crate) reference: proto::SandboxRef,
    image: Option<String>,
    shell: Option<String>,
    /// Set once `stop()` succeeded; guards against a second Close.
    stopped: tokio::sync::Mutex<bool>,
    /// Mirrors `stopped` for synchronous checks.
    stopped_flag: StdMutex<bool>,
    /// Default sessions of `pty().exec`; the lock serialises its calls.
    pub(crate) pty_exec: tokio::sync::Mutex<PtyExecState>,
}

/// A live sandbox. Cheap to clone; clones share state (stop, default terminal sessions).
#[derive(Clone)]
pub struct Sandbox {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("sandbox_id", &self.inner.reference.sandbox_id)
            .field("ports", &self.inner.reference.ports)
            .field("workdir", &self.inner.reference.workdir)
            .finish()
    }
}

impl Sandbox {
    pub(crate) fn from_ref(
        client: &Client,
        reference: proto::SandboxRef,
        image: Option<String>,
        shell: Option<String>,
    ) -> Sandbox {
        Sandbox {
            inner: Arc::new(Inner {
                client: client.clone(),
                reference,
                image,
                shell,
                stopped: tokio::sync::Mutex::new(false),
                stopped_flag: StdMutex::new(false),
                pty_exec: tokio::sync::Mutex::new(PtyExecState::default()),
            }),
        }
    }

    /// Starts a sandbox (`Create`). The server writes `spec.files` and removes the container
    /// if anything fails, so a failed start leaves nothing to clean up.
    pub async fn start(client: &Client, spec: proto::SandboxSpec) -> Result<Sandbox> {
        let image = Some(spec.image.clone()).filter(|s| !s.is_empty()).or_else(|| spec.snapshot_id.clone());
        let mut rpc = client.raw();
        let resp = rpc.create(proto::CreateRequest { spec: Some(spec) }).await?.into_inner();
        let reference = resp
            .sandbox
            .ok_or_else(|| ClientError::Protocol("CreateResponse without a sandbox".to_string()))?;
        if reference.sandbox_id.is_empty() {
            return Err(ClientError::Protocol("CreateResponse with an empty sandbox_id".to_string()));
        }
        Ok(Sandbox::from_ref(client, reference, image, None))
    }

    /// Starts `count` sandboxes of one spec (or one pool) in one call (`CreateBatch`), each
    /// item as it became ready: a sandbox, or why that one was not made (its error carries its
    /// failure kind). A quota too small for the batch fails the call at once
    /// (RESOURCE_EXHAUSTED, QUOTA) with nothing made.
    pub async fn start_batch(
        client: &Client,
        spec: proto::SandboxSpec,
        count: u32,
    ) -> Result<Vec<Result<Sandbox>>> {
        let mut items = Vec::new();
        Self::start_batch_each(client, spec, count, |item| items.push(item)).await?;
        Ok(items)
    }

    /// As [`Sandbox::start_batch`], handing each item to `each` the moment the server streams it
    /// (a progress display, a trainer that starts work on the first ready sandbox).
    pub async fn start_batch_each(
        client: &Client,
        spec: proto::SandboxSpec,
        count: u32,
        mut each: impl FnMut(Result<Sandbox>),
    ) -> Result<()> {
        let image = Some(spec.image.clone()).filter(|s| !s.is_empty()).or_else(|| spec.snapshot_id.clone());
        let mut rpc = client.raw();
        let mut stream =
            rpc.create_batch(proto::CreateBatchRequest { spec: Some(spec), count }).await?.into_inner();
        while let Some(item) = stream.message().await? {
            use proto::create_batch_response::Result as Item;
            each(match item.result {
                Some(Item::Sandbox(reference)) if !reference.sandbox_id.is_empty() => {
                    Ok(Sandbox::from_ref(client, reference, image.clone(), None))
                }
                Some(Item::Error(e)) => Err(ClientError::Status {
                    code: tonic::Code::from(e.code),
                    message: e.message,
                    failure_kind: crate::FailureKind::from_wire(e.failure_kind),
                }),
                _ => Err(ClientError::Protocol("a CreateBatchResponse without a sandbox or an error".into())),
            });
        }
        Ok(())
    }

    /// Re-attaches to a sandbox (`Connect`) from a descriptor made by [`Sandbox::serialize`]: the
    /// JSON value, its text, a bare sandbox id, or a [`proto::SandboxRef`].
    pub async fn connect(
        client: &Client,
        descriptor: impl crate::descriptor::IntoSandboxRef,
    ) -> Result<Sandbox> {
        let reference = descriptor.into_sandbox_ref()?;
        let mut rpc = client.raw();
        let resp =
            rpc.connect(proto::ConnectRequest { sandbox: Some(reference.clone()) }).await?.into_inner();
        let mut known = resp.sandbox.unwrap_or_else(|| reference.clone());
        if known.sandbox_id.is_empty() {
            known.sandbox_id = reference.sandbox_id;
        }
        let image = Some(resp.image).filter(|s| !s.is_empty());
        let shell = Some(resp.shell).filter(|s| !s.is_empty());
        Ok(Sandbox::from_ref(client, known, image, shell))
    }

    /// The sandbox id (the container name).
    pub fn id(&self) -> &str {
        &self.inner.reference.sandbox_id
    }

    /// The declared ports.
    pub fn ports(&self) -> &[u32] {
        &self.inner.reference.ports
    }

    /// The sandbox's labels (`spec.metadata`), as the server stored them.
    pub fn metadata(&self) -> &HashMap<String, String> {
        &self.inner.reference.metadata
    }

    /// The default working directory, if any.
    pub fn workdir(&self) -> Option<&str> {
        self.inner.reference.workdir.as_deref()
    }

    /// The image (from the spec for `start`, as reported by `Connect` otherwise).
    pub fn image(&self) -> Option<&str> {
        self.inner.image.as_deref()
    }

    /// The exec shell, as reported by `Connect` (`None` for a handle made by `start`).
    pub fn shell(&self) -> Option<&str> {
        self.inner.shell.as_deref()
    }

    /// The client this handle calls through.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The descriptor `{"sandbox_id", "ports", "workdir"}` that [`Sandbox::connect`] takes, with
    /// `"token"` when the handle carries one (the owner token `Create` returned).
    pub fn serialize(&self) -> serde_json::Value {
        let reference = &self.inner.reference;
        let mut value = SandboxDescriptor {
            sandbox_id: reference.sandbox_id.clone(),
            ports: Some(reference.ports.iter().filter_map(|p| u16::try_from(*p).ok()).collect()),
            workdir: reference.workdir.clone(),
        }
        .to_json_value();
        if let (Some(object), false) = (value.as_object_mut(), reference.token.is_empty()) {
            object.insert("token".into(), reference.token.clone().into());
        }
        value
    }

    /// True once `stop()` succeeded on this handle (or a clone).
    pub fn is_stopped(&self) -> bool {
        self.inner.stopped_flag.lock().map(|g| *g).unwrap_or(true)
    }

    pub(crate) fn ensure_live(&self) -> Result<()> {
        if self.is_stopped() {
            return Err(ClientError::InvalidArgument(format!("sandbox {} has been stopped", self.id())));
        }
        Ok(())
    }

    pub(crate) fn rpc(&self) -> RawClient {
        self.inner.client.raw()
    }

    /// Runs `<shell> -c command` with the default options (180 s timeout).
    pub async fn exec(&self, command: impl Into<String>) -> Result<ExecResult> {
        self.exec_with(command, ExecOptions::default()).await
    }

    /// Runs `<shell> -c command`.
    pub async fn exec_with(&self, command: impl Into<String>, options: ExecOptions) -> Result<ExecResult> {
        self.ensure_live()?;
        let req = self.exec_request(command.into(), options);
        Ok(self.rpc().exec(req).await?.into_inner().into())
    }

    /// The wire request of one command, shared by `exec_with` and `exec_stream`.
    pub(crate) fn exec_request(&self, command: String, options: ExecOptions) -> proto::ExecRequest {
        proto::ExecRequest {
            sandbox_id: self.id().to_string(),
            command,
            cwd: options.cwd,
            env: options.env,
            timeout_s: options.timeout_s,
            user: options.user,
            stdin: options.stdin,
        }
    }

    /// Copies the local file `local` to `remote` (absolute) keeping its permission bits;
    /// returns the bytes written.
    pub async fn upload(&self, local: impl AsRef<Path>, remote: &str) -> Result<u64> {
        self.upload_with_mode(local, remote, None).await
    }

    /// Copies `local` to `remote` with permission bits `mode` (`None`: the local file's).
    pub async fn upload_with_mode(
        &self,
        local: impl AsRef<Path>,
        remote: &str,
        mode: Option<u32>,
    ) -> Result<u64> {
        self.ensure_live()?;
        let local = local.as_ref();
        let file = tokio::fs::File::open(local).await.map_err(|e| crate::error::local_file(local, e))?;
        let meta = file.metadata().await?;
        if !meta.is_file() {
            return Err(ClientError::InvalidArgument(format!("{} is not a regular file", local.display())));
        }
        let size = meta.len();
        let mode = mode.or_else(|| local_mode(&meta));
        let header = proto::UploadRequest {
            request: Some(proto::upload_request::Request::Header(proto::UploadHeader {
                sandbox_id: self.id().to_string(),
                path: remote.to_string(),
                mode,
                size: Some(size),
                xattrs: Default::default(),
            })),
        };
        let read_error: Arc<StdMutex<Option<std::io::Error>>> = Arc::new(StdMutex::new(None));
        let chunks = file_chunks(file, size, read_error.clone());
        let requests = futures_util::stream::iter([header]).chain(chunks);
        let result = self.rpc().upload(requests).await;
        // A local read failure explains a server-side size mismatch better than the server can.
        if let Some(err) = read_error.lock().ok().and_then(|mut slot| slot.take()) {
            return Err(ClientError::Io(err));
        }
        Ok(result?.into_inner().bytes_written)
    }

    /// Copies the sandbox file `remote` to `local`, chunk by chunk. The local file appears
    /// (atomically, by rename) only when the whole file arrived; returns the bytes written.
    pub async fn download(&self, remote: &str, local: impl AsRef<Path>) -> Result<u64> {
        self.ensure_live()?;
        let local = local.as_ref();
        let req = proto::DownloadRequest { sandbox_id: self.id().to_string(), path: remote.to_string() };
        let mut stream = self.rpc().download(req).await?.into_inner();
        if let Some(parent) = local.parent().filter(|p| !p.as_os_str().is_empty()) {
            tokio::fs::create_dir_all(parent).await.map_err(|e| crate::error::local_file(parent, e))?;
        }
        let part = part_path(local);
        let outcome = async {
            let mut file =
                tokio::fs::File::create(&part).await.map_err(|e| crate::error::local_file(&part, e))?;
            let mut total = 0u64;
            while let Some(msg) = stream.message().await? {
                file.write_all(&msg.chunk).await?;
                total += msg.chunk.len() as u64;
            }
            file.flush().await?;
            file.sync_all().await?;
            drop(file);
            tokio::fs::rename(&part, local).await?;
            Ok::<u64, ClientError>(total)
        }
        .await;
        if outcome.is_err() {
            let _ = tokio::fs::remove_file(&part).await;
        }
        outcome
    }

    /// The OCI runtime it runs on (`runc`, `runsc`), as `Status` says.
    pub async fn runtime(&self) -> Result<String> {
        let resp = self.rpc().status(proto::StatusRequest { sandbox_id: self.id().to_string() }).await?;
        Ok(resp.into_inner().runtime)
    }

    /// The sandbox's state; `Stopped` without a call once this handle stopped it, and `Stopped`
    /// when the server no longer finds it (`NOT_FOUND`).
    pub async fn status(&self) -> Result<SandboxStatus> {
        if self.is_stopped() {
            return Ok(SandboxStatus::Stopped);
        }
        match self.rpc().status(proto::StatusRequest { sandbox_id: self.id().to_string() }).await {
            Ok(resp) => Ok(SandboxStatus::from_wire(resp.into_inner().status)),
            // The handle came from Create or Connect, so a sandbox the server cannot find is
            // gone (removed elsewhere, or its ttl elapsed): NeMo Gym reports that as stopped.
            Err(status) if status.code() == tonic::Code::NotFound => Ok(SandboxStatus::Stopped),
            Err(status) => Err(status.into()),
        }
    }

    /// The host URL of declared port `port`.
    pub async fn endpoint(&self, port: u16) -> Result<Endpoint> {
        self.ensure_live()?;
        check_declared_port(self.id(), &self.inner.reference.ports, port)?;
        let resp = self
            .rpc()
            .endpoint(proto::EndpointRequest { sandbox_id: self.id().to_string(), port: u32::from(port) })
            .await?
            .into_inner();
        Ok(Endpoint { url: resp.endpoint, headers: resp.headers })
    }

    /// Removes the sandbox and ends this handle's terminal sessions. Idempotent: a second call
    /// makes no call, and a sandbox already gone (`NOT_FOUND`) counts as stopped.
    pub async fn stop(&self) -> Result<()> {
        self.stop_with_usage().await.map(|_| ())
    }

    /// As [`Self::stop`], returning what the sandbox used over its life (`None` when this
    /// handle had stopped it already, it was gone, or the server could not read it).
    pub async fn stop_with_usage(&self) -> Result<Option<proto::SandboxUsage>> {
        let mut stopped = self.inner.stopped.lock().await;
        if *stopped {
            return Ok(None);
        }
        let usage = match self.rpc().close(proto::CloseRequest { sandbox_id: self.id().to_string() }).await {
            Ok(response) => response.into_inner().usage,
            Err(status) if status.code() == tonic::Code::NotFound => None,
            Err(status) => return Err(status.into()),
        };
        *stopped = true;
        if let Ok(mut flag) = self.inner.stopped_flag.lock() {
            *flag = true;
        }
        // The server's Close ended the sessions; let go of ours. A `pty().exec` still running
        // holds the lock and retires its session itself when it sees the end.
        if let Ok(mut state) = self.inner.pty_exec.try_lock() {
            for session in std::mem::take(&mut state.sessions) {
                session.abandon();
            }
        }
        Ok(usage)
    }

    /// Puts the sandbox back to the state it was created in, in place (`Reset`: processes
    /// killed, the root filesystem rolled back to the image, the spec's files written again;
    /// its id, lease and tokens kept). Needs the owner scope.
    pub async fn reset(&self) -> Result<proto::ResetResponse> {
        self.ensure_live()?;
        let response = self.rpc().reset(proto::ResetRequest { sandbox_id: self.id().to_string() }).await?;
        Ok(response.into_inner())
    }

    /// What the sandbox used so far: wall time, CPU, peak memory, disk and network bytes,
    /// processes started.
    pub async fn usage(&self) -> Result<proto::SandboxUsage> {
        self.ensure_live()?;
        let response = self.rpc().usage(proto::UsageRequest { sandbox_id: self.id().to_string() }).await?;
        response.into_inner().usage.ok_or_else(|| ClientError::Protocol("UsageResponse without usage".into()))
    }

    /// Terminal sessions of this sandbox.
    pub fn pty(&self) -> Pty<'_> {
        Pty::new(self)
    }
}

/// What the terminal namespace needs of its sandbox, so `pty` never names the handle.
impl PtyHost for Sandbox {
    fn id(&self) -> &str {
        Sandbox::id(self)
    }
    fn rpc(&self) -> RawClient {
        Sandbox::rpc(self)
    }
    fn ensure_live(&self) -> Result<()> {
        Sandbox::ensure_live(self)
    }
    fn pty_exec(&self) -> &tokio::sync::Mutex<PtyExecState> {
        &self.inner.pty_exec
    }
}

/// Refuses a port the sandbox was not created with, naming the declared ones.
pub(crate) fn check_declared_port(sandbox_id: &str, declared: &[u32], port: u16) -> Result<()> {
    if declared.contains(&u32::from(port)) {
        return Ok(());
    }
    let list = if declared.is_empty() {
        "none".to_string()
    } else {
        declared.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", ")
    };
    Err(ClientError::InvalidArgument(format!(
        "port {port} is not declared by sandbox {sandbox_id}; declared ports: {list}"
    )))
}

#[cfg(unix)]
fn local_mode(meta: &std::fs::Metadata) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    Some(meta.permissions().mode() & 0o7777)
}

#[cfg(not(unix))]
fn local_mode(_meta: &std::fs::Metadata) -> Option<u32> {
    None
}

/// `local`'s sibling that a download writes before renaming it into place.
fn part_path(local: &Path) -> PathBuf {
    let name =
        local.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "download".into());
    let tmp = format!(".{name}.{}.part", uuid::Uuid::new_v4().simple());
    local.with_file_name(tmp)
}

/// The upload's chunk messages: exactly `size` bytes of `file` in chunks of at most
/// [`UPLOAD_CHUNK_BYTES`]. A read error (or a file shorter than `size`) ends the stream early
/// and lands in `error`.
fn file_chunks(
    file: tokio::fs::File,
    size: u64,
    error: Arc<StdMutex<Option<std::io::Error>>>,
) -> impl futures_util::Stream<Item = proto::UploadRequest> + Send + 'static {
    futures_util::stream::unfold((file, size, error), |(mut file, remaining, error)| async move {
        if remaining == 0 {
            return None;
        }
        let want = remaining.min(UPLOAD_CHUNK_BYTES as u64) as usize;
        let mut buf = vec![0u8; want];
        let mut filled = 0;
        while filled < want {
            match file.read(&mut buf[filled..]).await {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) => {
                    if let Ok(mut slot) = error.lock() {
                        *slot = Some(e);
                    }
                    return None;
                }
            }
        }
        if filled == 0 {
            if let Ok(mut slot) = error.lock() {
                *slot = Some(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the local file shrank during the upload",
                ));
            }
            return None;
        }
        buf.truncate(filled);
        let msg = proto::UploadRequest { request: Some(proto::upload_request::Request::Chunk(buf)) };
        Some((msg, (file, remaining - filled as u64, error)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::descriptor::parse_descriptor;

    #[test]
    fn undeclared_port_lists_declared_ones() {
        assert!(check_declared_port("sbx", &[80, 8080], 8080).is_ok());
        let err = check_declared_port("sbx", &[80, 8080], 9000).expect_err("undeclared");
        assert!(
            matches!(&err, ClientError::InvalidArgument(m) if m.contains("80, 8080") && m.contains("9000"))
        );
        let err = check_declared_port("sbx", &[], 80).expect_err("none declared");
        assert!(err.to_string().contains("declared ports: none"));
    }

    #[test]
    fn descriptor_round_trip_and_validation() {
        let value = serde_json::json!({"sandbox_id": "sbx-1", "ports": [80], "workdir": "/w"});
        let r = parse_descriptor(&value).expect("valid");
        assert_eq!(r.sandbox_id, "sbx-1");
        assert_eq!(r.ports, vec![80]);
        assert_eq!(r.workdir.as_deref(), Some("/w"));
        let r = parse_descriptor(&serde_json::json!({"sandbox_id": "x", "workdir": null})).expect("minimal");
        assert!(r.ports.is_empty() && r.workdir.is_none());
        for bad in [
            serde_json::json!("sbx"),
            serde_json::json!({}),
            serde_json::json!({"sandbox_id": ""}),
            serde_json::json!({"sandbox_id": "x", "ports": [0]}),
            serde_json::json!({"sandbox_id": "x", "ports": [true]}),
            serde_json::json!({"sandbox_id": "x", "ports": "80"}),
            serde_json::json!({"sandbox_id": "x", "workdir": 3}),
        ] {
            assert!(matches!(parse_descriptor(&bad), Err(ClientError::InvalidArgument(_))), "{bad}");
        }
    }

    #[test]
    fn status_mapping() {
        assert_eq!(SandboxStatus::from_wire(proto::SandboxStatus::Running as i32), SandboxStatus::Running);
        assert_eq!(SandboxStatus::from_wire(0), SandboxStatus::Unknown);
        assert_eq!(SandboxStatus::from_wire(99), SandboxStatus::Unknown);
        assert_eq!(SandboxStatus::Stopped.to_string(), "stopped");
    }

    #[test]
    fn exec_result_from_response() {
        let r: ExecResult = proto::ExecResponse {
            stdout: b"hi\n".to_vec(),
            stderr: vec![],
            return_code: 125,
            error_type: "timeout".into(),
            usage: None,
            failure_kind: proto::FailureKind::Timeout as i32,
        }
        .into();
        assert_eq!(r.error_type, Some(sandboxd_proto::contract::ExecErrorType::Timeout));
        assert_eq!(r.failure_kind, Some(crate::FailureKind::Timeout));
        assert_eq!(r.stdout_str(), "hi\n");
        assert!(!r.success());
        let ok: ExecResult = proto::ExecResponse::default().into();
        assert!(ok.success() && ok.error_type.is_none());
        assert_eq!(ExecOptions::default().timeout_s, Some(180.0));
    }

    #[tokio::test]
    async fn file_chunks_are_bounded_and_exact() {
        let dir =
            std::env::temp_dir().join(format!("sandboxd-client-test-{}", uuid::Uuid::new_v4().simple()));
        tokio::fs::create_dir_all(&dir).await.expect("dir");
        let path = dir.join("f");
        let data: Vec<u8> = (0..(UPLOAD_CHUNK_BYTES * 2 + 10)).map(|i| (i % 251) as u8).collect();
        tokio::fs::write(&path, &data).await.expect("write");
        let file = tokio::fs::File::open(&path).await.expect("open");
        let err = Arc::new(StdMutex::new(None));
        let chunks: Vec<_> = file_chunks(file, data.len() as u64, err.clone()).collect().await;
        let mut joined = Vec::new();
        for c in &chunks {
            match &c.request {
                Some(proto::upload_request::Request::Chunk(b)) => {
                    assert!(b.len() <= UPLOAD_CHUNK_BYTES);
                    joined.extend_from_slice(b);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(joined, data);
        assert!(err.lock().expect("lock").is_none());
        // A declared size larger than the file reports the short read.
        let file = tokio::fs::File::open(&path).await.expect("open");
        let chunks: Vec<_> = file_chunks(file, data.len() as u64 + 5, err.clone()).collect().await;
        assert_eq!(chunks.len(), 3);
        assert!(err.lock().expect("lock").is_some());
        let _ = tokio::fs::remove_dir_all(&dir).await;
    }

    #[test]
    fn part_path_is_a_hidden_sibling() {
        let p = part_path(Path::new("/tmp/x/out.bin"));
        assert_eq!(p.parent(), Some(Path::new("/tmp/x")));
        assert!(p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(".out.bin.")));
    }
}
