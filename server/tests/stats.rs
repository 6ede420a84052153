//! `Stats` end to end against the in-process service and the real daemon: the numbers agree
//! with `docker stats --no-stream`, move when the sandbox uses memory and CPU, and a stopped or
//! unknown sandbox is refused with the right code; the opt-in per-sandbox gauges
//! (`server.metrics.per_sandbox`) appear and go with their sandbox.

use std::time::Duration;

use sandboxd_client::{spec, Client, Sandbox};
use testkit::images::BUSYBOX;
use testkit::service::TestService;
use testkit::{docker, TestLabel};
use tonic::Code;

/// `600KiB`, `23.54GiB`, `486B`, `1.2kB`, `3MB` (docker's units, binary and decimal) in bytes.
fn bytes(text: &str) -> f64 {
    let text = text.trim();
    let split = text.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().unwrap_or_else(|_| panic!("a size: {text:?}"));
    let scale = match unit {
        "B" | "" => 1.0,
        "kB" | "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        other => panic!("unit {other:?} in {text:?}"),
    };
    number * scale
}

/// `docker stats --no-stream` of one container: (memory used, memory limit, net rx, net tx, pids).
fn docker_stats(id: &str) -> (f64, f64, f64, f64, u64) {
    let out = docker(&["stats", "--no-stream", "--format", "{{.MemUsage}}|{{.NetIO}}|{{.PIDs}}", id]);
    assert!(out.status.success(), "docker stats: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let parts: Vec<&str> = text.split('|').collect();
    let (mem, net, pids) = (parts[0], parts[1], parts[2]);
    let (used, limit) = mem.split_once('/').expect("used / limit");
    let (rx, tx) = net.split_once('/').expect("rx / tx");
    (bytes(used), bytes(limit), bytes(rx), bytes(tx), pids.trim().parse().expect("pids"))
}

fn near(ours: f64, theirs: f64, relative: f64, absolute: f64) -> bool {
    (ours - theirs).abs() <= (theirs.abs() * relative).max(absolute)
}

async fn start(client: &Client) -> Sandbox {
    Sandbox::start(client, spec(BUSYBOX)).await.expect("create")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_agree_with_docker_stats_and_move_with_use() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let client = server.client().await;
    let mut s = spec(BUSYBOX);
    s.resources = Some(sandboxd_client::proto::SandboxResources {
        memory_mib: Some(256),
        cpu: Some(1.5),
        ..Default::default()
    });
    let sandbox = Sandbox::start(&client, s).await.expect("create");

    // docker stats takes a second or two: the sandbox's numbers are read before and after it,
    // and docker's must fall between them (within a margin).
    // A new sandbox's processes (the exec agent's threads) take a moment to settle.
    let mut last = sandbox.stats().await.expect("stats").pids;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = sandbox.stats().await.expect("stats").pids;
        if now == last {
            break;
        }
        last = now;
    }
    let ours = sandbox.stats().await.expect("stats");
    let (used, limit, rx, tx, pids) = docker_stats(sandbox.id());
    let later = sandbox.stats().await.expect("stats");
    let between = |a: u64, b: u64, theirs: f64, relative: f64, absolute: f64| {
        let (lo, hi) = (a.min(b) as f64, a.max(b) as f64);
        theirs >= lo * (1.0 - relative) - absolute && theirs <= hi * (1.0 + relative) + absolute
    };
    assert!(ours.cgroup_version == "v1" || ours.cgroup_version == "v2", "{ours:?}");
    let mib = 1024.0 * 1024.0;
    assert!(
        between(ours.memory_usage_bytes, later.memory_usage_bytes, used, 0.1, mib),
        "memory {ours:?} / {later:?} vs docker {used}"
    );
    assert_eq!(ours.memory_limit_bytes, 256 << 20, "{ours:?}");
    assert!(near(ours.memory_limit_bytes as f64, limit, 0.01, 0.0), "limit {ours:?} vs docker {limit}");
    assert!(
        between(ours.network_rx_bytes, later.network_rx_bytes, rx, 0.1, 1024.0),
        "rx {ours:?} vs docker {rx}"
    );
    assert!(
        between(ours.network_tx_bytes, later.network_tx_bytes, tx, 0.1, 1024.0),
        "tx {ours:?} vs docker {tx}"
    );
    // The exec agent's threads come and go: a few either way.
    assert!(
        between(ours.pids, later.pids, pids as f64, 0.0, 4.0),
        "pids {ours:?} / {later:?} vs docker {pids}"
    );
    assert!(ours.pids >= 1, "{ours:?}");
    assert!((ours.cpu_limit - 1.5).abs() < 1e-9, "{ours:?}");
    assert!(ours.read_at_unix_ns > 1_700_000_000_000_000_000, "{ours:?}");

    // 40 MiB in tmpfs (/dev/shm is charged to the sandbox's memory) and a CPU-bound loop.
    let out = sandbox
        .exec("dd if=/dev/zero of=/dev/shm/fill bs=1048576 count=40 2>/dev/null; i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; echo done")
        .await
        .expect("exec");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "done", "{out:?}");
    let after = sandbox.stats().await.expect("stats");
    assert!(
        after.memory_usage_bytes >= ours.memory_usage_bytes + (35 << 20),
        "memory did not grow by the 40 MiB: {ours:?} -> {after:?}"
    );
    assert!(after.memory_peak_bytes >= after.memory_usage_bytes || after.memory_peak_bytes == 0, "{after:?}");
    assert!(after.cpu_usage_ns >= ours.cpu_usage_ns + 100_000_000, "cpu did not move: {ours:?} -> {after:?}");
    assert!(after.read_at_unix_ns > ours.read_at_unix_ns);
    let (used, ..) = docker_stats(sandbox.id());
    let again = sandbox.stats().await.expect("stats");
    assert!(
        between(after.memory_usage_bytes, again.memory_usage_bytes, used, 0.1, mib),
        "{after:?} / {again:?} vs docker {used}"
    );

    // A paused sandbox still has usage; a stopped one has none.
    sandbox.pause().await.expect("pause");
    assert!(sandbox.stats().await.expect("stats of a paused sandbox").memory_usage_bytes > 0);
    sandbox.resume().await.expect("resume");
    assert!(docker(&["kill", sandbox.id()]).status.success());
    let err = client.stats(sandbox.id()).await.expect_err("a stopped sandbox has no usage");
    assert_eq!(err.code(), Code::FailedPrecondition, "{err}");

    let mut raw = server.raw().await;
    let unknown = raw
        .stats(sandboxd_client::proto::StatsRequest {
            sandbox_id: "sandboxd-00000000000000000000000000000000".into(),
        })
        .await
        .expect_err("unknown");
    assert_eq!(unknown.code(), Code::NotFound, "{unknown:?}");
    let bad =
        raw.stats(sandboxd_client::proto::StatsRequest { sandbox_id: String::new() }).await.unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument, "{bad:?}");
    assert!(bad.message().contains("sandbox_id"), "{bad:?}");
    sandbox.stop().await.expect("close");
    label.remove_all();
}

/// StatsStream: readings at the interval asked for, the stream ends when the sandbox stops,
/// and a bad interval is refused naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_stream_reads_at_its_interval_until_the_sandbox_stops() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let client = server.client().await;
    let sandbox = start(&client).await;
    let mut stream = client.stats_stream(sandbox.id(), Duration::from_millis(200)).await.expect("stream");
    let mut readings = Vec::new();
    for _ in 0..4 {
        let reading = tokio::time::timeout(Duration::from_secs(10), stream.next()).await.unwrap().unwrap();
        readings.push(reading.expect("a reading while running"));
    }
    let spans: Vec<i64> = readings.windows(2).map(|w| w[1].read_at_unix_ns - w[0].read_at_unix_ns).collect();
    assert!(spans.iter().all(|ns| *ns >= 150_000_000), "readings closer than the interval: {spans:?}");
    assert!(readings.windows(2).all(|w| w[1].cpu_usage_ns >= w[0].cpu_usage_ns));
    assert!(docker(&["kill", sandbox.id()]).status.success());
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(_reading) = stream.next().await.expect("no error") {}
    })
    .await;
    assert!(ended.is_ok(), "the stream went on after the sandbox stopped");

    let mut raw = server.raw().await;
    let request =
        sandboxd_client::proto::StatsStreamRequest { sandbox_id: sandbox.id().into(), interval_s: 0.01 };
    let bad = raw.stats_stream(request).await.expect_err("a too-short interval");
    assert_eq!(bad.code(), Code::InvalidArgument);
    assert!(bad.message().contains("interval_s"), "{bad:?}");
    sandbox.stop().await.expect("close");
    label.remove_all();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_sandbox_gauges_come_and_go_with_their_sandbox() {
    let label = TestLabel::new();
    let config =
        serde_json::json!({"server": {"metrics": {"per_sandbox": true, "per_sandbox_interval_s": 1}}});
    let server = TestService::start_json(&label, config);
    let client = server.client().await;
    let sandbox = start(&client).await;
    let series = format!("sandboxd_sandbox_memory_usage_bytes{{sandbox_id=\"{}\"}}", sandbox.id());
    let render = || sandboxd::metrics::global().render();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !render().contains(&series) {
        assert!(std::time::Instant::now() < deadline, "no {series} in\n{}", render());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let text = render();
    let cpu = format!("sandboxd_sandbox_cpu_usage_seconds{{sandbox_id=\"{}\"}}", sandbox.id());
    let pids = format!("sandboxd_sandbox_pids{{sandbox_id=\"{}\"}}", sandbox.id());
    assert!(text.contains(&cpu) && text.contains(&pids), "{text}");
    let runtime = format!(
        "sandboxd_sandbox_runtime_info{{sandbox_id=\"{}\",runtime=\"{}\"}} 1",
        sandbox.id(),
        testkit::runtime_name()
    );
    assert!(text.contains(&runtime), "no {runtime} in\n{text}");
    sandbox.stop().await.expect("close");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while render().contains(&series) || render().contains(&runtime) {
        assert!(std::time::Instant::now() < deadline, "{series} outlived its sandbox");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    label.remove_all();
}
