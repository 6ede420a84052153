//! Client mode: one process the driver spawns, kills and freezes. It runs `workers` loops, each
//! owning one sandbox at a time, and prints every call it makes as one line on stdout.
//!
//! Every call carries a deadline (`grpc-timeout`) and is judged against it: a call answered
//! later than deadline + grace is an overrun. A call that spans a SIGSTOP of this process is
//! not judged (the freeze is ours, not the server's): a SIGCONT handler counts the thaws.

use std::future::Future;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandboxd_proto::v1 as pb;
use sandboxd_proto::v1::sandbox_service_client::SandboxServiceClient;
use tokio_stream::StreamExt;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Status};

use super::stats::Event;

type Rpc = SandboxServiceClient<Channel>;

/// What the driver tells a client process (its command line after `client`).
#[derive(Debug, Clone, clap::Args)]
pub struct ClientArgs {
    /// The server's URL (`http://127.0.0.1:PORT`).
    #[arg(long)]
    pub url: String,
    /// Worker loops in this process, each holding one sandbox at a time.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Lease of every sandbox (`ttl_s`), renewed by `SetTimeout` while in use.
    #[arg(long, default_value_t = 20.0)]
    pub ttl_s: f64,
    /// While this file exists, workers stop calling and hold their sandbox; it holds the
    /// hold's number, and each new number is reported again.
    #[arg(long)]
    pub hold_file: PathBuf,
    /// Once this file exists, workers close their sandbox and the process exits.
    #[arg(long)]
    pub stop_file: PathBuf,
    /// Image of every sandbox.
    #[arg(long)]
    pub image: String,
    /// Slack past a call's deadline before it counts as an overrun.
    #[arg(long, default_value_t = 3.0)]
    pub grace_s: f64,
    /// Seed of this process's random choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Shared by the workers of one process.
struct Ctx {
    args: ClientArgs,
    /// SIGCONTs received so far: a call that spans one is not judged.
    thaws: AtomicU64,
    out: std::sync::Mutex<std::io::Stdout>,
}

impl Ctx {
    fn emit(&self, event: Event) {
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(out, "{}", event.to_line());
        let _ = out.flush();
    }

    /// The number of the hold in force, if any.
    fn hold(&self) -> Option<u64> {
        std::fs::read_to_string(&self.args.hold_file).ok()?.trim().parse().ok()
    }

    fn stopping(&self) -> bool {
        self.args.stop_file.exists()
    }
}

pub fn run(args: ClientArgs) -> std::process::ExitCode {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async move {
        let ctx =
            Arc::new(Ctx { args, thaws: AtomicU64::new(0), out: std::sync::Mutex::new(std::io::stdout()) });
        let thaw_ctx = ctx.clone();
        let mut conts = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::from_raw(libc::SIGCONT))
            .expect("SIGCONT handler");
        tokio::spawn(async move {
            while conts.recv().await.is_some() {
                thaw_ctx.thaws.fetch_add(1, Ordering::SeqCst);
            }
        });
        let channel = Endpoint::from_shared(ctx.args.url.clone())
            .expect("url")
            .connect_timeout(Duration::from_secs(2))
            .connect_lazy();
        let workers: Vec<_> = (0..ctx.args.workers)
            .map(|i| {
                let rng = fastrand::Rng::with_seed(ctx.args.seed.wrapping_mul(1000).wrapping_add(i as u64));
                let worker = Worker {
                    rpc: SandboxServiceClient::new(channel.clone()),
                    ctx: ctx.clone(),
                    rng,
                    sandbox: None,
                    n: 0,
                };
                tokio::spawn(worker.run())
            })
            .collect();
        for w in workers {
            let _ = w.await;
        }
    });
    std::process::ExitCode::SUCCESS
}

/// The sandbox a worker holds and when its lease was last moved.
struct Held {
    id: String,
    renewed: Instant,
}

struct Worker {
    rpc: Rpc,
    ctx: Arc<Ctx>,
    rng: fastrand::Rng,
    sandbox: Option<Held>,
    n: u64,
}

fn req<T>(msg: T, deadline: Duration) -> Request<T> {
    let mut r = Request::new(msg);
    r.set_timeout(deadline);
    r
}

fn code_name(code: Code) -> String {
    format!("{code:?}")
}

/// An error that says the sandbox is gone or unusable (killed from outside, swept): drop it.
fn sandbox_lost(status: &Status) -> bool {
    matches!(status.code(), Code::NotFound | Code::FailedPrecondition)
}

const SHORT: Duration = Duration::from_secs(10);
const LONG: Duration = Duration::from_secs(30);
const CREATE: Duration = Duration::from_secs(60);

impl Worker {
    async fn run(mut self) {
        loop {
            if self.ctx.stopping() {
                break;
            }
            if let Some(hold) = self.ctx.hold() {
                self.hold(hold).await;
                continue;
            }
            if self.sandbox.is_none() {
                self.create().await;
                if self.sandbox.is_none() {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                continue;
            }
            self.renew_if_due().await;
            self.n += 1;
            match self.rng.u32(0..100) {
                0..=29 => self.exec_echo().await,
                30..=37 => self.exec_timeout().await,
                38..=42 => self.exec_deadline().await,
                43..=57 => self.transfer().await,
                58..=69 => self.pty().await,
                70..=81 => self.cancel().await,
                82..=87 => self.status().await,
                88..=91 => self.set_timeout().await,
                _ => self.close().await,
            }
        }
        self.close().await;
    }

    /// Runs one call under its deadline and reports it; `None` when it did not answer in time.
    async fn call<T>(
        &mut self,
        op: &str,
        deadline: Duration,
        fut: impl Future<Output = Result<T, Status>>,
    ) -> Option<Result<T, Status>> {
        let thaws = self.ctx.thaws.load(Ordering::SeqCst);
        let limit = deadline + Duration::from_secs_f64(self.ctx.args.grace_s);
        let started = Instant::now();
        let result = tokio::time::timeout(limit, fut).await;
        let elapsed = started.elapsed();
        let mut judged = self.ctx.thaws.load(Ordering::SeqCst) == thaws;
        if judged && elapsed > limit {
            // The SIGCONT that ended a freeze is counted by a task, which may run after the
            // timers the thaw woke (this one included): look again once it has had time to.
            tokio::time::sleep(Duration::from_millis(500)).await;
            judged = self.ctx.thaws.load(Ordering::SeqCst) == thaws;
        }
        let outcome = match &result {
            Ok(Ok(_)) => "OK".to_string(),
            Ok(Err(s)) => code_name(s.code()),
            Err(_) if judged => "HANG".to_string(),
            Err(_) => "FROZEN".to_string(),
        };
        let overrun_ms = if judged && elapsed > limit { (elapsed - deadline).as_millis() as u64 } else { 0 };
        self.ctx.emit(Event::Call { op: op.to_string(), outcome, overrun_ms });
        if let Ok(Err(status)) = &result {
            eprintln!("soak client {}: {op}: {:?}: {}", self.ctx.args.seed, status.code(), status.message());
            if sandbox_lost(status) {
                self.forget().await;
            } else if matches!(
                status.code(),
                Code::Unavailable | Code::Unknown | Code::Internal | Code::Cancelled
            ) {
                // The server is restarting (or was killed): back off a little.
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        result.ok()
    }

    fn id(&self) -> String {
        self.sandbox.as_ref().map(|h| h.id.clone()).unwrap_or_default()
    }

    /// Drops the held sandbox after it was lost, removing whatever is left of it (best effort).
    async fn forget(&mut self) {
        if let Some(held) = self.sandbox.take() {
            let mut rpc = self.rpc.clone();
            let _ =
                tokio::time::timeout(LONG, rpc.close(req(pb::CloseRequest { sandbox_id: held.id }, LONG)))
                    .await;
        }
    }

    fn spec(&self) -> pb::SandboxSpec {
        pb::SandboxSpec {
            image: self.ctx.args.image.clone(),
            ttl_s: Some(self.ctx.args.ttl_s),
            ..Default::default()
        }
    }

    async fn create(&mut self) {
        let mut rpc = self.rpc.clone();
        let request = pb::CreateRequest { spec: Some(self.spec()) };
        if let Some(Ok(resp)) = self.call("create", CREATE, rpc.create(req(request, CREATE))).await {
            if let Some(sandbox) = resp.into_inner().sandbox {
                self.sandbox = Some(Held { id: sandbox.sandbox_id, renewed: Instant::now() });
            }
        }
    }

    async fn close(&mut self) {
        if let Some(held) = self.sandbox.take() {
            let mut rpc = self.rpc.clone();
            let _ = self
                .call("close", LONG, rpc.close(req(pb::CloseRequest { sandbox_id: held.id }, LONG)))
                .await;
        }
    }

    async fn renew_if_due(&mut self) {
        let due = self
            .sandbox
            .as_ref()
            .is_some_and(|h| h.renewed.elapsed().as_secs_f64() > self.ctx.args.ttl_s / 3.0);
        if due {
            self.set_timeout().await;
        }
    }

    async fn set_timeout(&mut self) {
        let mut rpc = self.rpc.clone();
        let request = pb::SetTimeoutRequest { sandbox_id: self.id(), ttl_s: self.ctx.args.ttl_s };
        if let Some(Ok(_)) = self.call("set_timeout", SHORT, rpc.set_timeout(req(request, SHORT))).await {
            if let Some(h) = self.sandbox.as_mut() {
                h.renewed = Instant::now();
            }
        }
    }

    async fn status(&mut self) {
        let mut rpc = self.rpc.clone();
        let request = pb::StatusRequest { sandbox_id: self.id() };
        let _ = self.call("status", SHORT, rpc.status(req(request, SHORT))).await;
    }

    fn exec_request(&self, command: String, timeout_s: f64) -> pb::ExecRequest {
        pb::ExecRequest { sandbox_id: self.id(), command, timeout_s: Some(timeout_s), ..Default::default() }
    }

    /// A quick command whose output is checked.
    async fn exec_echo(&mut self) {
        let mut rpc = self.rpc.clone();
        let word = format!("soak-{}-{}", self.ctx.args.seed, self.n);
        let request = self.exec_request(format!("echo {word}"), 20.0);
        if let Some(Ok(resp)) = self.call("exec", LONG, rpc.exec(req(request, LONG))).await {
            let resp = resp.into_inner();
            if resp.return_code == 0 && resp.stdout != format!("{word}\n").as_bytes() {
                let got = String::from_utf8_lossy(&resp.stdout).into_owned();
                self.ctx.emit(Event::Corrupt { detail: format!("echo {word} gave {got:?}") });
            } else if resp.error_type == "sandbox" {
                self.forget().await;
            }
        }
    }

    /// A command stopped by its own timeout (125, "timeout"); its process must not survive.
    async fn exec_timeout(&mut self) {
        let mut rpc = self.rpc.clone();
        let request = self.exec_request("sleep 31".into(), 1.0);
        if let Some(Ok(resp)) = self.call("exec_timeout", LONG, rpc.exec(req(request, LONG))).await {
            let resp = resp.into_inner();
            if resp.error_type == "sandbox" {
                self.forget().await;
            } else if (resp.return_code, resp.error_type.as_str()) != (125, "timeout") {
                let detail =
                    format!("sleep 31 with timeout_s 1 gave {} {:?}", resp.return_code, resp.error_type);
                self.ctx.emit(Event::Corrupt { detail });
            }
        }
    }

    /// A command outlived by the call's deadline (DEADLINE_EXCEEDED); its process must not survive.
    async fn exec_deadline(&mut self) {
        let mut rpc = self.rpc.clone();
        let request = self.exec_request("sleep 32".into(), 60.0);
        let deadline = Duration::from_millis(1500);
        let _ = self.call("exec_deadline", deadline, rpc.exec(req(request, deadline))).await;
    }

    fn upload_stream(
        &self,
        path: &str,
        data: Vec<u8>,
    ) -> impl tokio_stream::Stream<Item = pb::UploadRequest> + Send {
        let header = pb::UploadRequest {
            request: Some(pb::upload_request::Request::Header(pb::UploadHeader {
                sandbox_id: self.id(),
                path: path.into(),
                mode: None,
                size: Some(data.len() as u64),
                xattrs: Default::default(),
            })),
        };
        let chunks: Vec<pb::UploadRequest> = data
            .chunks(64 * 1024)
            .map(|c| pb::UploadRequest { request: Some(pb::upload_request::Request::Chunk(c.to_vec())) })
            .collect();
        tokio_stream::iter(std::iter::once(header).chain(chunks))
    }

    async fn download_all(mut rpc: Rpc, request: Request<pb::DownloadRequest>) -> Result<Vec<u8>, Status> {
        let mut stream = rpc.download(request).await?.into_inner();
        let mut data = Vec::new();
        while let Some(msg) = stream.next().await {
            data.extend_from_slice(&msg?.chunk);
        }
        Ok(data)
    }

    /// Upload random bytes, download them back, compare.
    async fn transfer(&mut self) {
        let size = self.rng.usize(0..256 * 1024);
        let data: Vec<u8> = std::iter::repeat_with(|| self.rng.u8(..)).take(size).collect();
        let path = format!("/tmp/soak-{}", self.n);
        let mut rpc = self.rpc.clone();
        let stream = self.upload_stream(&path, data.clone());
        let Some(Ok(_)) = self.call("upload", LONG, rpc.upload(req(stream, LONG))).await else { return };
        if self.sandbox.is_none() {
            return;
        }
        let request = req(pb::DownloadRequest { sandbox_id: self.id(), path: path.clone() }, LONG);
        let download = Self::download_all(self.rpc.clone(), request);
        if let Some(Ok(back)) = self.call("download", LONG, download).await {
            if back != data {
                self.ctx.emit(Event::Corrupt {
                    detail: format!("download of {path}: {} bytes back for {} sent", back.len(), data.len()),
                });
            }
        }
    }

    /// A PTY (or pipe) session: the program reads a line, echoes it, exits 3.
    async fn pty_session(
        mut rpc: Rpc,
        id: String,
        pipe: bool,
        deadline: Duration,
    ) -> Result<(i32, Vec<u8>), Status> {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let open = pb::PtyOpen {
            sandbox_id: id,
            command: Some("read x; echo got-$x; exit 3".into()),
            rows: 24,
            cols: 80,
            pipe,
            ..Default::default()
        };
        let _ = tx.send(pb::PtyRequest { request: Some(pb::pty_request::Request::Open(open)) }).await;
        let mut stream =
            rpc.pty(req(tokio_stream::wrappers::ReceiverStream::new(rx), deadline)).await?.into_inner();
        let mut output = Vec::new();
        let mut sent = false;
        while let Some(msg) = stream.next().await {
            match msg?.response {
                Some(pb::pty_response::Response::Opened(_)) if !sent => {
                    sent = true;
                    let input =
                        pb::PtyRequest { request: Some(pb::pty_request::Request::Input(b"soak\n".to_vec())) };
                    let _ = tx.send(input).await;
                }
                Some(pb::pty_response::Response::Output(b)) => output.extend_from_slice(&b),
                Some(pb::pty_response::Response::Exit(e)) => return Ok((e.exit_code, output)),
                _ => {}
            }
        }
        Err(Status::unknown("pty stream ended without an exit"))
    }

    async fn pty(&mut self) {
        let pipe = self.rng.bool();
        let session = Self::pty_session(self.rpc.clone(), self.id(), pipe, LONG);
        if let Some(Ok((code, output))) = self.call(if pipe { "pipe" } else { "pty" }, LONG, session).await {
            let text = String::from_utf8_lossy(&output);
            if code == 3 && !text.contains("got-soak") {
                self.ctx.emit(Event::Corrupt { detail: format!("pty exit 3 without its echo: {text:?}") });
            }
        }
    }

    /// A call dropped at a random point (the client goes away mid-call).
    async fn cancel(&mut self) {
        let after = Duration::from_millis(self.rng.u64(0..800));
        let rpc = self.rpc.clone();
        let which = self.rng.u32(0..5);
        let id = self.id();
        let (op, outcome) = match which {
            0 => {
                let mut rpc = rpc;
                let request = pb::CreateRequest { spec: Some(self.spec()) };
                (
                    "cancel_create",
                    finish(after, async move { rpc.create(req(request, CREATE)).await.map(|_| ()) }).await,
                )
            }
            1 => {
                let mut rpc = rpc;
                let request = self.exec_request("sleep 5; echo late".into(), 20.0);
                (
                    "cancel_exec",
                    finish(after, async move { rpc.exec(req(request, LONG)).await.map(|_| ()) }).await,
                )
            }
            2 => {
                let mut rpc = rpc;
                let data: Vec<u8> = vec![7u8; 512 * 1024];
                let stream = self.upload_stream("/tmp/soak-cancelled", data);
                (
                    "cancel_upload",
                    finish(after, async move { rpc.upload(req(stream, LONG)).await.map(|_| ()) }).await,
                )
            }
            3 => {
                let session = Self::pty_session(rpc, id, false, LONG);
                ("cancel_pty", finish(after, async move { session.await.map(|_| ()) }).await)
            }
            _ => {
                let request = req(pb::DownloadRequest { sandbox_id: id, path: "/bin/busybox".into() }, LONG);
                (
                    "cancel_download",
                    finish(after, async move { Self::download_all(rpc, request).await.map(|_| ()) }).await,
                )
            }
        };
        self.ctx.emit(Event::Call { op: op.into(), outcome, overrun_ms: 0 });
    }

    /// At the driver's hold: keep (or get) a sandbox, run one command in it, report it, keep
    /// its lease, wait. The command makes every held sandbox alike at every hold (its exec
    /// agent's channel open, as after any exec): the server's fd count then compares.
    async fn hold(&mut self, hold: u64) {
        for _ in 0..3 {
            if self.sandbox.is_none() && !self.ctx.stopping() {
                self.create().await;
            }
            if self.sandbox.is_none() {
                break;
            }
            self.exec_echo().await;
            if self.sandbox.is_some() {
                break;
            }
        }
        self.ctx.emit(Event::Held { hold, sandbox: self.sandbox.as_ref().map(|h| h.id.clone()) });
        // Until this hold ends, or a new one starts (reported anew, even if the driver ended
        // this one and started the next between two looks).
        while self.ctx.hold() == Some(hold) && !self.ctx.stopping() {
            tokio::time::sleep(Duration::from_millis(200)).await;
            self.renew_if_due().await;
        }
    }
}

/// Runs `fut` for at most `after`, dropping it there; the outcome as the summary counts it.
async fn finish(after: Duration, fut: impl Future<Output = Result<(), Status>>) -> String {
    match tokio::time::timeout(after, fut).await {
        Ok(Ok(())) => "OK".into(),
        Ok(Err(s)) => code_name(s.code()),
        Err(_) => "CANCELLED_BY_CLIENT".into(),
    }
}
