//! Soak and fault driver (`scripts/soak.sh` runs it against the release server).
//!
//! N clients for M minutes mix creates, execs (some timing out), uploads and downloads, PTY
//! sessions and cancels at random points; meanwhile client processes are SIGKILLed and
//! SIGSTOPped, containers are killed from outside, and the server is SIGKILLed and restarted.
//! At the end it checks: no container left that is not a live sandbox of a client, no stray
//! process inside live sandboxes, no host docker client left, the server's RSS and fd count back
//! within 10% of their start, every call answered within its deadline. One summary line.
//!
//! `soak --minutes M --clients N --server PATH`; `soak --child URL` is one killable client.

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandboxd_client::proto;
use sandboxd_client::proto::sandbox_service_client::SandboxServiceClient;

type Raw = SandboxServiceClient<tonic::transport::Channel>;

/// Calls may take this long past their own deadline before they count as late.
const GRACE: Duration = Duration::from_secs(5);

#[derive(Default)]
struct Counts {
    calls: AtomicU64,
    late: AtomicU64,
    failed: AtomicU64,
    creates: AtomicU64,
    execs: AtomicU64,
    timeouts: AtomicU64,
    transfers: AtomicU64,
    ptys: AtomicU64,
    cancels: AtomicU64,
    container_kills: AtomicU64,
    client_kills: AtomicU64,
    client_stops: AtomicU64,
    server_kills: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

struct Soak {
    url: Mutex<String>,
    counts: Counts,
    /// Sandboxes clients hold now, and every id seen (for the docker-client check).
    live: Mutex<BTreeSet<String>>,
    seen: Mutex<BTreeSet<String>>,
    errors: Mutex<Vec<String>>,
}

impl Soak {
    fn url(&self) -> String {
        self.url.lock().unwrap().clone()
    }

    async fn raw(&self) -> Option<Raw> {
        let endpoint =
            tonic::transport::Endpoint::from_shared(self.url()).ok()?.connect_timeout(Duration::from_secs(2));
        endpoint.connect().await.ok().map(SandboxServiceClient::new)
    }

    /// One call under a deadline: late if no answer arrives within deadline + GRACE.
    async fn call<T, F>(&self, deadline: Duration, f: F) -> Option<Result<T, tonic::Status>>
    where
        F: std::future::Future<Output = Result<T, tonic::Status>>,
    {
        bump(&self.counts.calls);
        match tokio::time::timeout(deadline + GRACE, f).await {
            Ok(r) => {
                if r.is_err() {
                    bump(&self.counts.failed);
                }
                Some(r)
            }
            Err(_) => {
                bump(&self.counts.late);
                self.errors
                    .lock()
                    .unwrap()
                    .push(format!("a call was not answered within {deadline:?} + grace"));
                None
            }
        }
    }
}

fn with_deadline<T>(msg: T, d: Duration) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.set_timeout(d);
    r
}

fn rand(n: u64) -> u64 {
    (uuid::Uuid::new_v4().as_u128() % u128::from(n.max(1))) as u64
}

fn spec(ttl_s: Option<f64>) -> proto::SandboxSpec {
    proto::SandboxSpec { image: support::images::BUSYBOX.into(), ttl_s, ..Default::default() }
}

/// One client: holds a sandbox and drives it until `end` (and leaves it live).
async fn client(soak: Arc<Soak>, end: Instant) {
    let d = Duration::from_secs(30);
    let mut sandbox: Option<String> = None;
    while Instant::now() < end {
        let Some(mut raw) = soak.raw().await else {
            tokio::time::sleep(Duration::from_millis(500)).await; // the server is restarting
            continue;
        };
        let id = match &sandbox {
            Some(id) => id.clone(),
            None => {
                // Some creates are cancelled at a random point (their deadline passes).
                let cancel = rand(5) == 0;
                let deadline = if cancel { Duration::from_millis(200 + rand(1200)) } else { d };
                bump(&soak.counts.creates);
                if cancel {
                    bump(&soak.counts.cancels);
                }
                match soak
                    .call(
                        deadline,
                        raw.create(with_deadline(
                            proto::CreateRequest { spec: Some(spec(Some(600.0))) },
                            deadline,
                        )),
                    )
                    .await
                {
                    Some(Ok(r)) => {
                        let id = r.into_inner().sandbox.unwrap().sandbox_id;
                        soak.live.lock().unwrap().insert(id.clone());
                        soak.seen.lock().unwrap().insert(id.clone());
                        sandbox = Some(id.clone());
                        id
                    }
                    Some(Err(e)) => {
                        if !cancel && !matches!(e.code(), tonic::Code::Unavailable) {
                            soak.errors.lock().unwrap().push(format!("create failed: {e:?}"));
                        }
                        continue;
                    }
                    None => continue,
                }
            }
        };
        match rand(10) {
            0..=2 => {
                bump(&soak.counts.execs);
                let req = proto::ExecRequest {
                    sandbox_id: id.clone(),
                    command: "echo soak".into(),
                    ..Default::default()
                };
                if let Some(Ok(r)) = soak.call(d, raw.exec(with_deadline(req, d))).await {
                    let r = r.into_inner();
                    if r.error_type.is_empty() && r.stdout != b"soak\n" {
                        soak.errors.lock().unwrap().push(format!("exec answered {r:?}"));
                    }
                    if r.error_type == "sandbox" {
                        sandbox = None; // killed from outside: start over
                    }
                }
            }
            3 => {
                bump(&soak.counts.timeouts);
                let req = proto::ExecRequest {
                    sandbox_id: id.clone(),
                    command: "sleep 3".into(),
                    timeout_s: Some(0.5),
                    ..Default::default()
                };
                if let Some(Ok(r)) = soak.call(d, raw.exec(with_deadline(req, d))).await {
                    let r = r.into_inner();
                    if r.error_type != "timeout" && r.error_type != "sandbox" {
                        soak.errors.lock().unwrap().push(format!("a timed-out exec answered {r:?}"));
                    }
                }
            }
            4 => {
                // An exec the caller abandons halfway (its future dropped).
                bump(&soak.counts.cancels);
                let req = proto::ExecRequest {
                    sandbox_id: id.clone(),
                    command: "sleep 2".into(),
                    ..Default::default()
                };
                let _ = tokio::time::timeout(Duration::from_millis(rand(1500)), raw.exec(req)).await;
            }
            5 | 6 => {
                bump(&soak.counts.transfers);
                let size = 1024 + rand(1 << 20) as usize;
                let data: Vec<u8> = (0..size).map(|i| (i * 7 + 3) as u8).collect();
                let header = proto::UploadHeader {
                    sandbox_id: id.clone(),
                    path: "/tmp/soak.bin".into(),
                    mode: None,
                    size: Some(size as u64),
                };
                let msgs = vec![
                    proto::UploadRequest { request: Some(proto::upload_request::Request::Header(header)) },
                    proto::UploadRequest {
                        request: Some(proto::upload_request::Request::Chunk(data.clone())),
                    },
                ];
                if let Some(Ok(_)) =
                    soak.call(d, raw.upload(with_deadline(tokio_stream::iter(msgs), d))).await
                {
                    let req = proto::DownloadRequest { sandbox_id: id.clone(), path: "/tmp/soak.bin".into() };
                    let got = soak
                        .call(d, async {
                            let mut s = raw.download(with_deadline(req, d)).await?.into_inner();
                            let mut got = Vec::new();
                            while let Some(m) = s.message().await? {
                                got.extend(m.chunk);
                            }
                            Ok(got)
                        })
                        .await;
                    if let Some(Ok(got)) = got {
                        if got != data {
                            soak.errors.lock().unwrap().push("a download differed from its upload".into());
                        }
                    }
                }
            }
            7 => {
                bump(&soak.counts.ptys);
                let (tx, rx) = tokio::sync::mpsc::channel(8);
                let open = proto::PtyOpen {
                    sandbox_id: id.clone(),
                    command: Some("cat".into()),
                    pipe: true,
                    ..Default::default()
                };
                let _ = tx
                    .send(proto::PtyRequest { request: Some(proto::pty_request::Request::Open(open)) })
                    .await;
                let _ = tx
                    .send(proto::PtyRequest {
                        request: Some(proto::pty_request::Request::Input(b"ping\n".to_vec())),
                    })
                    .await;
                let cancel_early = rand(3) == 0;
                let _ = soak
                    .call(d, async {
                        let mut s = raw
                            .pty(with_deadline(tokio_stream::wrappers::ReceiverStream::new(rx), d))
                            .await?
                            .into_inner();
                        let mut out = Vec::new();
                        while let Some(m) = s.message().await? {
                            if let Some(proto::pty_response::Response::Output(b)) = m.response {
                                out.extend(b);
                            }
                            if out.ends_with(b"ping\n") {
                                if cancel_early {
                                    return Ok(()); // dropped mid-session: a cancel
                                }
                                let close = proto::PtyRequest {
                                    request: Some(proto::pty_request::Request::Close(proto::PtyClose {})),
                                };
                                let _ = tx.send(close).await;
                            }
                        }
                        Ok(())
                    })
                    .await;
            }
            8 => {
                if rand(4) == 0 {
                    // Killed from outside: the next exec reports it, the client starts over.
                    bump(&soak.counts.container_kills);
                    let _ = Command::new("docker").args(["kill", &id]).output();
                }
            }
            _ => {
                let req = proto::CloseRequest { sandbox_id: id.clone() };
                if let Some(Ok(_)) = soak.call(d, raw.close(with_deadline(req, d))).await {
                    soak.live.lock().unwrap().remove(&id);
                    sandbox = None;
                }
            }
        }
        if sandbox.is_none() {
            // Whatever state it was left in, it is not held any more: close it (gone is success).
            let _ = soak
                .call(d, raw.close(with_deadline(proto::CloseRequest { sandbox_id: id.clone() }, d)))
                .await;
            soak.live.lock().unwrap().remove(&id);
        }
    }
    // The sandbox still held stays live: the end checks it has no stray process, then closes it.
}

/// The child mode: a client process that creates a leased sandbox, opens a session and an
/// upload, and waits to be killed or frozen.
async fn child(url: String) {
    let Ok(channel) = tonic::transport::Endpoint::from_shared(url).unwrap().connect().await else { return };
    let mut raw = SandboxServiceClient::new(channel);
    let Ok(r) = raw.create(proto::CreateRequest { spec: Some(spec(Some(20.0))) }).await else { return };
    let id = r.into_inner().sandbox.unwrap().sandbox_id;
    println!("{id}");
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let open = proto::PtyOpen {
        sandbox_id: id.clone(),
        command: Some("cat".into()),
        pipe: true,
        ..Default::default()
    };
    let _ = tx.send(proto::PtyRequest { request: Some(proto::pty_request::Request::Open(open)) }).await;
    let _pty = raw.pty(tokio_stream::wrappers::ReceiverStream::new(rx)).await;
    let header =
        proto::UploadHeader { sandbox_id: id, path: "/tmp/child".into(), mode: None, size: Some(1 << 20) };
    let (utx, urx) = tokio::sync::mpsc::channel(1);
    let _ = utx
        .send(proto::UploadRequest { request: Some(proto::upload_request::Request::Header(header)) })
        .await;
    let mut raw2 = raw.clone();
    tokio::spawn(async move { raw2.upload(tokio_stream::wrappers::ReceiverStream::new(urx)).await });
    tokio::time::sleep(Duration::from_secs(3600)).await;
    drop((tx, utx));
}

struct Server {
    child: Child,
    url: String,
}

fn start_server(bin: &str, config: &std::path::Path) -> Server {
    let mut child = Command::new(bin)
        .args(["--listen", "127.0.0.1:0", "--config"])
        .arg(config)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the server");
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let addr = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("sandboxd listening on ").map(str::to_string))
        .expect("listening line");
    std::thread::spawn(move || for _ in lines {});
    Server { child, url: format!("http://{addr}") }
}

/// RSS in KiB and open fds of `pid`.
fn usage(pid: u32) -> (u64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0);
    (rss, fds)
}

fn docker_lines(args: &[&str]) -> Vec<String> {
    let out = Command::new("docker").args(args).output().expect("docker");
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).filter(|l| !l.is_empty()).collect()
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(url) = arg(&args, "--child") {
        return child(url).await;
    }
    let minutes: f64 = arg(&args, "--minutes").and_then(|m| m.parse().ok()).unwrap_or(2.0);
    let clients: usize = arg(&args, "--clients").and_then(|m| m.parse().ok()).unwrap_or(8);
    let bin = arg(&args, "--server").unwrap_or_else(|| "target/release/sandboxd".into());
    support::images::ensure_images().expect("test images");

    let tag = uuid::Uuid::new_v4().simple().to_string();
    let label = format!("sandboxd.soak={tag}");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.json");
    let body = serde_json::json!({
        "docker": {"create": {"extra_run_args": ["--label", "sandboxd.test=1", "--label", label]},
                   "exec": {"default_timeout_s": 30}},
        "server": {"sweep_interval_s": 2, "create_timeout_s": 20, "state_dir": dir.path().join("state")},
    });
    std::fs::write(&config, body.to_string()).unwrap();
    let mut server = start_server(&bin, &config);
    let soak = Arc::new(Soak {
        url: Mutex::new(server.url.clone()),
        counts: Counts::default(),
        live: Mutex::default(),
        seen: Mutex::default(),
        errors: Mutex::default(),
    });
    let total = Duration::from_secs_f64(minutes * 60.0);
    let started = Instant::now();
    let end = started + total;
    let tasks: Vec<_> = (0..clients).map(|_| tokio::spawn(client(soak.clone(), end))).collect();

    // Faults, on a schedule spread over the run.
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<Child> = Vec::new();
    let mut restarted = false;
    let mut baseline: Option<(u64, usize)> = None;
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let elapsed = started.elapsed();
        if !restarted && elapsed >= total / 4 {
            // The server dies mid-flight and comes back on another port.
            restarted = true;
            bump(&soak.counts.server_kills);
            let _ = server.child.kill();
            let _ = server.child.wait();
            tokio::time::sleep(Duration::from_secs(1)).await;
            server = start_server(&bin, &config);
            *soak.url.lock().unwrap() = server.url.clone();
            continue;
        }
        if restarted && baseline.is_none() && elapsed >= total * 2 / 5 {
            baseline = Some(usage(server.child.id()));
        }
        // A client process that gets SIGKILLed or SIGSTOPped (then killed) mid-session.
        let mut c = Command::new(&exe).args(["--child", &server.url]).stdout(Stdio::piped()).spawn().unwrap();
        if let Some(out) = c.stdout.take() {
            if let Some(Ok(id)) = BufReader::new(out).lines().next() {
                soak.seen.lock().unwrap().insert(id);
            }
        }
        let pid = nix::unistd::Pid::from_raw(c.id() as i32);
        if rand(2) == 0 {
            bump(&soak.counts.client_kills);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        } else {
            bump(&soak.counts.client_stops);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP);
        }
        children.push(c);
    }
    for task in tasks {
        let _ = task.await;
    }
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }

    // Quiet: leased sandboxes of killed clients end (20 s lease), abandoned creates are swept
    // (20 s create timeout + grace), the server lets go of what dead connections held.
    let owned =
        |l: &str| docker_lines(&["ps", "-a", "--filter", &format!("label={l}"), "--format", "{{.Names}}"]);
    let quiet_deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let left: Vec<String> =
            owned(&label).into_iter().filter(|n| !soak.live.lock().unwrap().contains(n)).collect();
        if left.is_empty() || Instant::now() > quiet_deadline {
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let leaked: Vec<String> =
        owned(&label).into_iter().filter(|n| !soak.live.lock().unwrap().contains(n)).collect();
    let live: Vec<String> = soak.live.lock().unwrap().iter().cloned().collect();
    let mut stray = 0;
    for id in &live {
        // A live sandbox holds docker-init and the keep-alive only.
        let procs = docker_lines(&["top", id, "-o", "pid,args"]);
        let extra: Vec<&String> = procs
            .iter()
            .skip(1)
            .filter(|l| {
                !l.contains("docker-init") && !l.contains("sleep 2147483647") && !l.contains("while :")
            })
            .collect();
        stray += extra.len();
    }
    let seen = soak.seen.lock().unwrap().clone();
    let ps = Command::new("ps").args(["-eo", "args"]).output().unwrap();
    let clients_left = String::from_utf8_lossy(&ps.stdout)
        .lines()
        .filter(|l| l.starts_with("docker ") || l.contains("/docker "))
        .filter(|l| seen.iter().any(|id| l.contains(id.as_str())))
        .count();
    let start = baseline.unwrap_or((0, 0));
    let end_usage = usage(server.child.id());
    let within = |a: u64, b: u64| b <= a + a / 10 + 1;
    let rss_ok = within(start.0, end_usage.0);
    let fds_ok = within(start.1 as u64, end_usage.1 as u64);
    let c = &soak.counts;
    let errors = soak.errors.lock().unwrap().clone();
    let pass = leaked.is_empty()
        && stray == 0
        && clients_left == 0
        && rss_ok
        && fds_ok
        && c.late.load(Ordering::Relaxed) == 0
        && errors.is_empty();
    if let Some(mut raw) = soak.raw().await {
        for id in &live {
            let _ = raw.close(proto::CloseRequest { sandbox_id: id.clone() }).await;
        }
    }
    let _ = server.child.kill();
    let _ = server.child.wait();
    let _ = Command::new("docker").args(["rm", "-f"]).args(owned(&label)).output();
    let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
    for e in errors.iter().take(10) {
        eprintln!("soak: {e}");
    }
    if !leaked.is_empty() {
        eprintln!("soak: leaked containers: {leaked:?}");
    }
    println!(
        "soak: clients={clients} minutes={minutes} calls={} late={} failed={} creates={} execs={} timeouts={} transfers={} ptys={} cancels={} container_kills={} client_kills={} client_stops={} server_kills={} leaked_containers={} stray_processes={stray} docker_clients_left={clients_left} rss_kib={}->{} fds={}->{} errors={} result={}",
        g(&c.calls), g(&c.late), g(&c.failed), g(&c.creates), g(&c.execs), g(&c.timeouts), g(&c.transfers), g(&c.ptys), g(&c.cancels),
        g(&c.container_kills), g(&c.client_kills), g(&c.client_stops), g(&c.server_kills), leaked.len(),
        start.0, end_usage.0, start.1, end_usage.1, errors.len(),
        if pass { "PASS" } else { "FAIL" }
    );
    std::process::exit(if pass { 0 } else { 1 });
}
