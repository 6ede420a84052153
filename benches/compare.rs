//! Each operation through sandboxd (the real gRPC server over loopback TCP) beside the same
//! operation done with the raw `docker` CLI, against the same daemon and image, as a table.
//!
//! `cargo bench --bench compare` (set `SANDBOXD_BENCH_QUICK=1` for smaller sizes and fewer runs,
//! `SANDBOXD_BENCH_ENGINE=docker` to measure the `docker exec` engine instead of the agent,
//! `SANDBOXD_BENCH_NETWORK=none` to create every container, ours and raw, without a network,
//! `SANDBOXD_BENCH_DENSITY=N` for the density row's number of idle sandboxes, default 20,
//! `SANDBOXD_BENCH_RUNTIMES=runc,runsc` for the runtime table instead: each row on each OCI
//! runtime beside the raw CLI on the same runtime, against the daemon `DOCKER_HOST` names, which
//! must have them registered; see `compare/runtimes.rs`; `RUST_LOG=…` for the in-process
//! server's log on stderr, e.g. `RUST_LOG=sandboxd::backends::docker::create=debug` for where
//! each create's time went).

#[path = "compare/branching.rs"]
mod branching;
#[path = "compare/files.rs"]
mod files;
#[path = "compare/forward.rs"]
mod forward;
#[path = "compare/pools.rs"]
mod pools;
#[path = "compare/runtimes.rs"]
mod runtimes;

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sandboxd::config::FileConfig;
use sandboxd::service::{ServeSettings, Services};
use sandboxd_proto::v1 as pb;
use sandboxd_proto::v1::sandbox_service_client::SandboxServiceClient;
use tokio::io::AsyncReadExt;
use tonic::transport::Channel;

const IMAGE: &str = testkit::images::BUSYBOX;
const LABEL: &str = "sandboxd.test=1";

type Client = SandboxServiceClient<Channel>;

struct Row {
    op: String,
    ours: Duration,
    raw: Duration,
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn docker(args: &[&str]) -> std::process::Output {
    let out = Command::new("docker").args(args).output().expect("docker");
    assert!(out.status.success(), "docker {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

fn timed_docker(args: &[&str]) -> Duration {
    let t = Instant::now();
    docker(args);
    t.elapsed()
}

async fn start_server() -> (Client, SocketAddr, tempfile::TempDir) {
    start_server_with(|_| {}).await
}

/// As [`start_server`], `edit` applied to the config last.
async fn start_server_with(edit: impl FnOnce(&mut FileConfig)) -> (Client, SocketAddr, tempfile::TempDir) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut config = FileConfig::default();
    config.docker.create.extra_run_args = vec!["--label".into(), LABEL.into()];
    // A state directory of its own: the bench's pool never meets another server's claims.
    // Removed when the run ends (the caller holds it while the server serves).
    let state = tempfile::Builder::new().prefix("sandboxd-bench-").tempdir().expect("bench state dir");
    config.server.state_dir = Some(state.path().to_path_buf());
    if let Ok(network) = std::env::var("SANDBOXD_BENCH_NETWORK") {
        config.docker.create.network = Some(network);
    }
    if std::env::var("SANDBOXD_BENCH_ENGINE").as_deref() == Ok("docker") {
        config.docker.exec.engine = sandboxd::config::ExecEngineKind::Docker;
    }
    edit(&mut config);
    // The service in-process, as the binary serves it, until the bench exits.
    let services = Services::build_docker(&config, None).await.expect("services");
    let settings =
        ServeSettings { tls: None, remove_on_shutdown: false, drain_timeout: Duration::from_secs(1) };
    tokio::spawn(async move {
        services.serve_until(listener, settings, std::future::pending()).await.expect("serve")
    });
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .initial_stream_window_size(Some(8 << 20))
        .initial_connection_window_size(Some(16 << 20))
        .max_frame_size(Some(1 << 20));
    for _ in 0..100 {
        if let Ok(ch) = endpoint.connect().await {
            return (SandboxServiceClient::new(ch).max_decoding_message_size(64 << 20), addr, state);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("server did not start");
}

async fn create(client: &mut Client) -> String {
    let spec = pb::SandboxSpec { image: IMAGE.into(), ..Default::default() };
    let r = client.create(pb::CreateRequest { spec: Some(spec) }).await.unwrap().into_inner();
    r.sandbox.unwrap().sandbox_id
}

async fn close(client: &mut Client, id: &str) {
    client.close(pb::CloseRequest { sandbox_id: id.into() }).await.unwrap();
}

async fn exec(client: &mut Client, id: &str, command: &str) -> pb::ExecResponse {
    let req = pb::ExecRequest { sandbox_id: id.into(), command: command.into(), ..Default::default() };
    client.exec(req).await.unwrap().into_inner()
}

/// 32 `echo`s in flight at once through sandboxd, then 32 `docker exec`s at once: the wall
/// time of each batch.
async fn execs_in_flight(client: &Client, id: &str) -> (Duration, Duration) {
    let t = Instant::now();
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let (mut c, id) = (client.clone(), id.to_string());
            tokio::spawn(async move { exec(&mut c, &id, &format!("echo {i}")).await })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap().return_code, 0);
    }
    let ours = t.elapsed();
    let t = Instant::now();
    let children: Vec<_> = (0..32)
        .map(|i| {
            Command::new("docker")
                .args(["exec", id, "sh", "-c", &format!("echo {i}")])
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    (ours, t.elapsed())
}

async fn upload(client: &mut Client, id: &str, local: &Path, remote: &str) {
    let size = std::fs::metadata(local).unwrap().len();
    let header = pb::UploadRequest {
        request: Some(pb::upload_request::Request::Header(pb::UploadHeader {
            sandbox_id: id.into(),
            path: remote.into(),
            mode: None,
            size: Some(size),
            xattrs: Default::default(),
        })),
    };
    let mut file = tokio::fs::File::open(local).await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        let _ = tx.send(header).await;
        loop {
            let mut buf = vec![0u8; 256 * 1024];
            let n = file.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            buf.truncate(n);
            let chunk = pb::UploadRequest { request: Some(pb::upload_request::Request::Chunk(buf)) };
            if tx.send(chunk).await.is_err() {
                break;
            }
        }
    });
    let r = client.upload(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
    assert_eq!(r.bytes_written, size);
}

async fn download(client: &mut Client, id: &str, remote: &str, local: &Path) -> u64 {
    use tokio::io::AsyncWriteExt;
    let mut stream = client
        .download(pb::DownloadRequest { sandbox_id: id.into(), path: remote.into() })
        .await
        .unwrap()
        .into_inner();
    let mut file = tokio::fs::File::create(local).await.unwrap();
    let mut n = 0;
    while let Some(m) = stream.message().await.unwrap() {
        n += m.chunk.len() as u64;
        file.write_all(&m.chunk).await.unwrap();
    }
    file.flush().await.unwrap();
    n
}

/// Bytes of output from a PTY session running `command`, and how long it took.
async fn pty_output(client: &mut Client, id: &str, command: &str) -> (u64, Duration) {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let open = pb::PtyOpen { sandbox_id: id.into(), command: Some(command.into()), ..Default::default() };
    tx.send(pb::PtyRequest { request: Some(pb::pty_request::Request::Open(open)) }).await.unwrap();
    let t = Instant::now();
    let mut stream = client.pty(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
    let mut n = 0u64;
    while let Some(m) = stream.message().await.unwrap() {
        match m.response {
            Some(pb::pty_response::Response::Output(b)) => n += b.len() as u64,
            Some(pb::pty_response::Response::Exit(_)) => break,
            _ => {}
        }
    }
    let elapsed = t.elapsed();
    drop(tx);
    (n, elapsed)
}

fn write_file(path: &Path, size: usize) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let block: Vec<u8> = (0..1 << 20).map(|i: u32| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    let mut left = size;
    while left > 0 {
        let n = left.min(block.len());
        f.write_all(&block[..n]).unwrap();
        left -= n;
    }
    f.flush().unwrap();
}

/// A `/proc/<pid>/<file>` field's first number (`Pss:` of `smaps_rollup` in kB, `Threads:` of
/// `status`).
fn proc_field(pid: u32, file: &str, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/{file}"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// This process (the server and the bench's client) and its descendants: PSS in KiB, threads,
/// processes.
fn host_cost() -> (u64, u64, u64) {
    let all = testkit::procs::descendants(std::process::id());
    let pss = all.iter().map(|p| proc_field(*p, "smaps_rollup", "Pss:")).sum();
    let threads = all.iter().map(|p| proc_field(*p, "status", "Threads:")).sum();
    (pss, threads, all.len() as u64)
}

/// Loop devices backed by files under `state` (the walls' disks), and mounts of them.
fn wall_objects(state: &Path) -> (u64, u64) {
    let want = state.display().to_string();
    let out = Command::new("losetup").args(["-l", "-n", "-O", "NAME,BACK-FILE"]).output();
    let devices: Vec<String> = out
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            l.split_once(' ').filter(|(_, f)| f.trim().starts_with(&want)).map(|(d, _)| d.to_string())
        })
        .collect();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mounted = mounts
        .lines()
        .filter(|l| {
            l.split(" - ")
                .nth(1)
                .and_then(|t| t.split(' ').nth(1))
                .is_some_and(|src| devices.iter().any(|d| d == src))
        })
        .count();
    (devices.len() as u64, mounted as u64)
}

/// The kernel's slab memory in KiB (`/proc/meminfo`), where loop devices, mounts and ext4
/// superblocks live (machine-wide: other work moves it too).
fn slab_kib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Slab:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The density row: `n` idle sandboxes (each answered one exec), what the server and its
/// descendants cost per sandbox, beside what containerd's own shim costs per container, and the
/// kernel objects the walls add (loop devices, their mounts, slab memory).
async fn density(client: &mut Client, n: usize, state: &Path) {
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = host_cost();
    let slab_before = slab_kib();
    let started = Instant::now();
    let mut ids = Vec::new();
    for _ in 0..n {
        let id = create(client).await;
        assert_eq!(exec(client, &id, "printf x").await.stdout, b"x");
        ids.push(id);
    }
    let made_in = started.elapsed();
    // Each still answers an exec once all are held.
    for id in &ids {
        assert_eq!(exec(client, id, "printf x").await.stdout, b"x");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = host_cost();
    let slab_after = slab_kib();
    let (devices, mounts) = wall_objects(state);
    // The shim of each container: the parent of its first process.
    let shims: Vec<u64> = ids
        .iter()
        .filter_map(|id| {
            let out = docker(&["inspect", "-f", "{{.State.Pid}}", id]);
            let pid: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().ok()?;
            let shim = testkit::procs::parent_of(pid)?;
            Some(proc_field(shim, "smaps_rollup", "Pss:"))
        })
        .collect();
    let shim = shims.iter().sum::<u64>() as f64 / shims.len().max(1) as f64;
    let per = |a: u64, b: u64| (a as f64 - b as f64) / n as f64;
    println!(
        "density ({n} idle sandboxes): server + descendants per sandbox: {:.3} MiB PSS, {:.2} threads, {:.2} processes; containerd-shim per container: {:.2} MiB PSS",
        per(after.0, before.0) / 1024.0,
        per(after.1, before.1),
        per(after.2, before.2),
        shim / 1024.0
    );
    println!(
        "density ({n} sandboxes held, every wall on, made in {:.1} s, each then answered an exec): loop devices {devices}, their mounts {mounts}, kernel slab {:+.3} MiB per sandbox",
        made_in.as_secs_f64(),
        per(slab_after, slab_before) / 1024.0
    );
    for id in ids {
        close(client, &id).await;
    }
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn main() {
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_default_env() {
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    }
    testkit::images::host_has_docker().expect("docker");
    testkit::images::ensure_images().expect("images");
    // `cargo bench` passes `--bench`; under `cargo test --all-targets` this runs as a quick smoke.
    let quick =
        std::env::var_os("SANDBOXD_BENCH_QUICK").is_some() || !std::env::args().any(|a| a == "--bench");
    let runs = if quick { 3 } else { 7 };
    let big = if quick { 32 << 20 } else { 256 << 20 };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    if let Some(list) = runtimes::requested() {
        rt.block_on(runtimes::run(&list, runs, quick));
        return;
    }
    let rows = rt.block_on(run(runs, big, quick));
    println!("\n| operation | sandboxd | raw docker | ratio |");
    println!("|---|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {:.1} ms | {:.1} ms | {:.2} |",
            r.op,
            r.ours.as_secs_f64() * 1e3,
            r.raw.as_secs_f64() * 1e3,
            r.ours.as_secs_f64() / r.raw.as_secs_f64()
        );
    }
}

/// `SANDBOXD_BENCH_ONLY=upload,pty` runs only the operations whose names start with those words.
fn selected(op: &str) -> bool {
    match std::env::var("SANDBOXD_BENCH_ONLY") {
        Ok(only) => only.split(',').any(|w| op.starts_with(w.trim())),
        Err(_) => true,
    }
}

async fn run(runs: usize, big: usize, quick: bool) -> Vec<Row> {
    let (mut client, _addr, state) = start_server().await;
    let mut rows = Vec::new();
    let dir = tempfile::tempdir().unwrap();

    // create: Create (with every wall of the shipped config) vs a bare `docker run -d`; close:
    // Close (answered once nothing in the sandbox runs) vs `docker rm -f` of the raw one.
    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    let (mut closes, mut raw_closes) = (Vec::new(), Vec::new());
    for _ in 0..if selected("create") { runs } else { 0 } {
        let t = Instant::now();
        let id = create(&mut client).await;
        ours.push(t.elapsed());
        let t = Instant::now();
        close(&mut client, &id).await;
        closes.push(t.elapsed());
        let name = format!("sandboxd-bench-{}", uuid::Uuid::new_v4().simple());
        let network =
            format!("--network={}", std::env::var("SANDBOXD_BENCH_NETWORK").unwrap_or("default".into()));
        raw.push(timed_docker(&[
            "run",
            "-d",
            &network,
            "--init",
            "--name",
            &name,
            "--label",
            LABEL,
            "--entrypoint",
            "/bin/sh",
            IMAGE,
            "-c",
            "while :; do sleep 2147483647; done",
        ]));
        raw_closes.push(timed_docker(&["rm", "-f", &name]));
    }
    if selected("create") {
        rows.push(Row { op: "create (vs docker run -d)".into(), ours: median(ours), raw: median(raw) });
        rows.push(Row {
            op: "close (vs docker rm -f)".into(),
            ours: median(closes),
            raw: median(raw_closes),
        });
    }

    let id = create(&mut client).await;

    // exec
    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    for _ in 0..if selected("exec") { runs * 3 } else { 0 } {
        let t = Instant::now();
        assert_eq!(exec(&mut client, &id, "printf x").await.stdout, b"x");
        ours.push(t.elapsed());
        raw.push(timed_docker(&["exec", &id, "sh", "-c", "printf x"]));
    }
    if selected("exec") {
        rows.push(Row { op: "exec `printf x`".into(), ours: median(ours), raw: median(raw) });
    }

    // exec_stream: the same command through the streaming RPC (to its exit message).
    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    for _ in 0..if selected("exec_stream") { runs * 3 } else { 0 } {
        let t = Instant::now();
        let req =
            pb::ExecRequest { sandbox_id: id.clone(), command: "printf x".into(), ..Default::default() };
        let mut stream = client.exec_stream(req).await.unwrap().into_inner();
        let mut out = Vec::new();
        while let Some(m) = stream.message().await.unwrap() {
            if let Some(pb::exec_stream_response::Response::Stdout(d)) = m.response {
                out.extend(d);
            }
        }
        assert_eq!(out, b"x");
        ours.push(t.elapsed());
        raw.push(timed_docker(&["exec", &id, "sh", "-c", "printf x"]));
    }
    if selected("exec_stream") {
        rows.push(Row { op: "exec_stream `printf x`".into(), ours: median(ours), raw: median(raw) });
    }

    // status: one Status vs one `docker inspect`.
    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    for _ in 0..if selected("status") { runs * 3 } else { 0 } {
        let t = Instant::now();
        client.status(pb::StatusRequest { sandbox_id: id.clone() }).await.unwrap();
        ours.push(t.elapsed());
        raw.push(timed_docker(&["inspect", "-f", "{{.State.Status}}", &id]));
    }
    if selected("status") {
        rows.push(Row { op: "status (vs docker inspect)".into(), ours: median(ours), raw: median(raw) });
    }

    // upload / download
    let mut sizes = vec![("1 MiB", 1usize << 20)];
    if !quick {
        sizes.push(("64 MiB", 64 << 20));
    }
    sizes.push((if big == 256 << 20 { "256 MiB" } else { "32 MiB" }, big));
    for (label, size) in sizes {
        let local = dir.path().join(format!("f{size}"));
        write_file(&local, size);
        let back = dir.path().join(format!("b{size}"));
        let (mut up, mut up_raw, mut down, mut down_raw) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let n = if !selected("upload") && !selected("download") {
            0
        } else if size > 1 << 20 {
            runs.min(5)
        } else {
            runs * 2
        };
        for _ in 0..n {
            let t = Instant::now();
            upload(&mut client, &id, &local, "/tmp/up.bin").await;
            up.push(t.elapsed());
            up_raw.push(timed_docker(&["cp", local.to_str().unwrap(), &format!("{id}:/tmp/raw.bin")]));
            let t = Instant::now();
            assert_eq!(download(&mut client, &id, "/tmp/up.bin", &back).await, size as u64);
            down.push(t.elapsed());
            down_raw.push(timed_docker(&["cp", &format!("{id}:/tmp/raw.bin"), back.to_str().unwrap()]));
        }
        if n > 0 {
            rows.push(Row {
                op: format!("upload {label} (vs docker cp)"),
                ours: median(up),
                raw: median(up_raw),
            });
            rows.push(Row {
                op: format!("download {label} (vs docker cp)"),
                ours: median(down),
                raw: median(down_raw),
            });
        }
    }

    // PTY output throughput: the same bytes through a PTY session and through `docker exec -t`.
    let bytes = big / 4;
    let command = format!("head -c {bytes} /dev/zero");
    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    for _ in 0..if selected("pty") { runs.min(3) } else { 0 } {
        let (n, d) = pty_output(&mut client, &id, &command).await;
        assert!(n >= bytes as u64, "pty delivered {n} of {bytes}");
        ours.push(d);
        let t = Instant::now();
        let out = Command::new("docker")
            .args(["exec", "-t", &id, "sh", "-c", &command])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        raw.push(t.elapsed());
        assert!(out.stdout.len() >= bytes, "raw docker exec -t gave {}", out.stdout.len());
    }
    if selected("pty") {
        let (ours, raw) = (median(ours), median(raw));
        let mib = bytes as f64 / (1 << 20) as f64;
        println!(
            "pty output: {:.1} MiB/s through sandboxd, {:.1} MiB/s raw docker exec -t ({} MiB)",
            mib / ours.as_secs_f64(),
            mib / raw.as_secs_f64(),
            bytes >> 20
        );
        rows.push(Row { op: format!("pty output {} MiB (vs docker exec -t)", bytes >> 20), ours, raw });
    }

    // 32 concurrent execs (wall time for all of them).
    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    for _ in 0..if selected("32") { runs.min(3) } else { 0 } {
        let (o, r) = execs_in_flight(&client, &id).await;
        ours.push(o);
        raw.push(r);
    }
    if selected("32") {
        rows.push(Row { op: "32 concurrent execs (wall)".into(), ours: median(ours), raw: median(raw) });
    }

    // Peak memory of this process (server + client) across a 1 GiB round trip.
    if !quick && selected("rss") {
        let before = peak_rss_kib();
        let local = dir.path().join("gib");
        write_file(&local, 1 << 30);
        let back = dir.path().join("gib-back");
        upload(&mut client, &id, &local, "/tmp/gib").await;
        assert_eq!(download(&mut client, &id, "/tmp/gib", &back).await, 1 << 30);
        println!(
            "peak RSS (server + client in this process): {} MiB before, {} MiB after a 1 GiB upload + download",
            before / 1024,
            peak_rss_kib() / 1024
        );
    }
    rows.extend(files::rows(&mut client, &id, runs).await);
    close(&mut client, &id).await;
    if selected("density") {
        let n = std::env::var("SANDBOXD_BENCH_DENSITY").ok().and_then(|v| v.parse().ok());
        density(&mut client, n.unwrap_or(if quick { 5 } else { 20 }), state.path()).await;
    }
    rows.extend(branching::rows(&mut client, runs).await);
    if selected("claim") {
        rows.push(pools::claim(&mut client, runs * 3).await);
    }
    if selected("port-forward") && std::env::var("SANDBOXD_BENCH_ENGINE").as_deref() != Ok("docker") {
        rows.extend(forward::rows(&mut client, runs).await);
    }
    rows
}
