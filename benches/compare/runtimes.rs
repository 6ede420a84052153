//! The runtime table (issue 27): `SANDBOXD_BENCH_RUNTIMES=runc,runsc cargo bench --bench compare`
//! measures each row on each OCI runtime in one run, sandboxd beside the raw CLI on the same
//! runtime (`docker run -d --runtime=R`, `docker exec`, `docker cp`, `docker exec -t`), against
//! the daemon `DOCKER_HOST` names (`scripts/runsc-daemon.sh up` starts one with runc and runsc).
//! The server offers each runtime twice: `R` (the agent on its socket, `docker.exec.transport`'s
//! default) and `R-channel` (the same daemon runtime, the agent on its `docker exec -i` channel),
//! so the exec row is taken on both transports. The rows of one operation are taken one runtime
//! after the other, so both see the same load. The last column is the gVisor cost: each
//! runtime's figure over the first runtime's.

use std::time::{Duration, Instant};

use sandboxd::config::{ExecTransport, RuntimeOffer, Runtimes};
use sandboxd_proto::v1 as pb;

use super::{
    close, docker, download, exec, median, proc_field, pty_output, timed_docker, upload, write_file,
};
use super::{Client, IMAGE, LABEL};

/// The runtimes `SANDBOXD_BENCH_RUNTIMES` (or `SANDBOXD_BENCH_RUNTIME`) names, in order.
pub fn requested() -> Option<Vec<String>> {
    let list =
        std::env::var("SANDBOXD_BENCH_RUNTIMES").or_else(|_| std::env::var("SANDBOXD_BENCH_RUNTIME")).ok()?;
    let list: Vec<String> = list.split(',').map(|r| r.trim().to_string()).filter(|r| !r.is_empty()).collect();
    (!list.is_empty()).then_some(list)
}

/// One figure on one runtime: sandboxd's and the raw CLI's.
#[derive(Clone, Copy)]
struct Pair {
    ours: f64,
    raw: f64,
}

/// One operation on every runtime (`None`: not measured there).
struct Row {
    op: String,
    unit: &'static str,
    pairs: Vec<Option<Pair>>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn pair(ours: Vec<Duration>, raw: Vec<Duration>) -> Option<Pair> {
    Some(Pair { ours: ms(median(ours)), raw: ms(median(raw)) })
}

async fn create_on(client: &mut Client, runtime: &str) -> String {
    let spec = pb::SandboxSpec { image: IMAGE.into(), runtime: runtime.into(), ..Default::default() };
    let r = client.create(pb::CreateRequest { spec: Some(spec) }).await.unwrap().into_inner();
    r.sandbox.unwrap().sandbox_id
}

/// `docker run -d --runtime=R` of an idle container like a sandbox's (`--init`, a shell loop).
fn raw_run(runtime: &str) -> (String, Duration) {
    let name = format!("sandboxd-bench-{}", uuid::Uuid::new_v4().simple());
    let network =
        format!("--network={}", std::env::var("SANDBOXD_BENCH_NETWORK").unwrap_or("default".into()));
    let runtime_arg = format!("--runtime={runtime}");
    let took = timed_docker(&[
        "run",
        "-d",
        &runtime_arg,
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
    ]);
    (name, took)
}

/// Host memory of one container, KiB of PSS: everything under (and including) its
/// containerd shim (runc: the container's own processes; runsc: the sentry, the gofer and the
/// ptrace stubs that run the sandbox's tasks), and of that the runtime's own part (the shim, and
/// on runsc the `runsc-*` processes).
fn container_pss(container: &str) -> (u64, u64) {
    let out = docker(&["inspect", "-f", "{{.State.Pid}}", container]);
    let Some(shim) =
        String::from_utf8_lossy(&out.stdout).trim().parse().ok().and_then(testkit::procs::parent_of)
    else {
        return (0, 0);
    };
    let shim_pss = proc_field(shim, "smaps_rollup", "Pss:");
    let (mut all, mut runtime) = (shim_pss, shim_pss);
    for pid in testkit::procs::descendants(shim) {
        let pss = proc_field(pid, "smaps_rollup", "Pss:");
        all += pss;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if cmdline.starts_with(b"runsc") {
            runtime += pss;
        }
    }
    (all, runtime)
}

/// The server's own cost (this process and its descendants), KiB of PSS.
fn server_pss() -> u64 {
    let mut pids = testkit::procs::descendants(std::process::id());
    pids.push(std::process::id());
    pids.iter().map(|p| proc_field(*p, "smaps_rollup", "Pss:")).sum()
}

pub async fn run(runtimes: &[String], runs: usize, quick: bool) {
    let offers: Vec<RuntimeOffer> = runtimes
        .iter()
        .flat_map(|r| {
            let channel = RuntimeOffer {
                name: format!("{r}-channel"),
                daemon_name: Some(r.clone()),
                transport: Some(ExecTransport::Channel),
                checkpoint: false,
            };
            [RuntimeOffer::new(r), channel]
        })
        .collect();
    let (mut client, _addr, _state) =
        super::start_server_with(|c| c.docker.runtimes = Runtimes(offers)).await;
    let dir = tempfile::tempdir().unwrap();
    let mut rows: Vec<Row> = Vec::new();
    let mut push = |op: &str, unit: &'static str, pairs: Vec<Option<Pair>>| {
        rows.push(Row { op: op.into(), unit, pairs })
    };

    // create: Create on R vs `docker run -d --runtime=R` (then both removed).
    let mut pairs = Vec::new();
    for rt in runtimes {
        let (mut ours, mut raw) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            let t = Instant::now();
            let id = create_on(&mut client, rt).await;
            ours.push(t.elapsed());
            close(&mut client, &id).await;
            let (name, took) = raw_run(rt);
            raw.push(took);
            docker(&["rm", "-f", &name]);
        }
        pairs.push(pair(ours, raw));
    }
    push("create (vs `docker run -d --runtime=R`)", "ms", pairs);

    // One sandbox per runtime and transport for the rest.
    let mut ids = Vec::new();
    let mut channel_ids = Vec::new();
    for rt in runtimes {
        ids.push(create_on(&mut client, rt).await);
        channel_ids.push(create_on(&mut client, &format!("{rt}-channel")).await);
    }

    // exec `printf x` on the agent's socket and on its channel, each beside a `docker exec`.
    for (label, set) in [
        ("exec `printf x`, agent socket (vs `docker exec`)", &ids),
        ("exec `printf x`, agent channel (vs `docker exec`)", &channel_ids),
    ] {
        let mut pairs = Vec::new();
        for id in set {
            let (mut ours, mut raw) = (Vec::new(), Vec::new());
            for _ in 0..runs * 3 {
                let t = Instant::now();
                assert_eq!(exec(&mut client, id, "printf x").await.stdout, b"x");
                ours.push(t.elapsed());
                raw.push(timed_docker(&["exec", id, "sh", "-c", "printf x"]));
            }
            pairs.push(pair(ours, raw));
        }
        push(label, "ms", pairs);
    }

    // 32 execs in flight (wall time for all of them).
    let mut pairs = Vec::new();
    for id in &ids {
        let (mut ours, mut raw) = (Vec::new(), Vec::new());
        for _ in 0..runs.min(3) {
            let (o, r) = super::execs_in_flight(&client, id).await;
            ours.push(o);
            raw.push(r);
        }
        pairs.push(pair(ours, raw));
    }
    push("32 execs in flight (wall)", "ms", pairs);

    // Transfers: Upload / Download vs `docker cp` in and out.
    for (label, size) in [("1 MiB", 1usize << 20), ("64 MiB", 64 << 20)] {
        let local = dir.path().join(format!("f{size}"));
        write_file(&local, size);
        let back = dir.path().join(format!("b{size}"));
        let n = if size > 1 << 20 { runs.min(5) } else { runs * 2 };
        let (mut ups, mut downs) = (Vec::new(), Vec::new());
        for id in &ids {
            let (mut up, mut up_raw, mut down, mut down_raw) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for _ in 0..n {
                let t = Instant::now();
                upload(&mut client, id, &local, "/tmp/up.bin").await;
                up.push(t.elapsed());
                up_raw.push(timed_docker(&["cp", local.to_str().unwrap(), &format!("{id}:/tmp/raw.bin")]));
                let t = Instant::now();
                assert_eq!(download(&mut client, id, "/tmp/up.bin", &back).await, size as u64);
                down.push(t.elapsed());
                down_raw.push(timed_docker(&["cp", &format!("{id}:/tmp/raw.bin"), back.to_str().unwrap()]));
            }
            ups.push(pair(up, up_raw));
            downs.push(pair(down, down_raw));
            // The next runtime's sandbox starts from the same free memory (runsc keeps /tmp's
            // files in the sentry).
            exec(&mut client, id, "rm -f /tmp/up.bin /tmp/raw.bin").await;
        }
        push(&format!("upload {label} (vs `docker cp`)"), "ms", ups);
        push(&format!("download {label} (vs `docker cp`)"), "ms", downs);
    }

    // PTY output: the same bytes through a PTY session and through `docker exec -t`.
    let bytes: usize = if quick { 4 << 20 } else { 16 << 20 };
    let command = format!("head -c {bytes} /dev/zero");
    let mut pairs = Vec::new();
    for id in &ids {
        let (mut ours, mut raw) = (Vec::new(), Vec::new());
        for _ in 0..runs.min(3) {
            let (n, d) = pty_output(&mut client, id, &command).await;
            assert!(n >= bytes as u64, "pty delivered {n} of {bytes}");
            ours.push(d);
            let t = Instant::now();
            let out = std::process::Command::new("docker")
                .args(["exec", "-t", id, "sh", "-c", &command])
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap();
            raw.push(t.elapsed());
            assert!(out.stdout.len() >= bytes, "raw docker exec -t gave {}", out.stdout.len());
        }
        pairs.push(pair(ours, raw));
    }
    push(&format!("PTY output {} MiB (vs `docker exec -t`)", bytes >> 20), "ms", pairs);

    for id in ids.iter().chain(&channel_ids) {
        close(&mut client, id).await;
    }

    // Host memory per idle sandbox: N sandboxes (each answered one exec) beside N raw
    // containers, PSS under each one's shim; sandboxd's side adds the server's own growth.
    let n = std::env::var("SANDBOXD_BENCH_DENSITY").ok().and_then(|v| v.parse().ok()).unwrap_or(if quick {
        2
    } else {
        5
    });
    let (mut whole, mut own) = (Vec::new(), Vec::new());
    for rt in runtimes {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = server_pss();
        let mut made = Vec::new();
        let mut raws = Vec::new();
        for _ in 0..n {
            let id = create_on(&mut client, rt).await;
            assert_eq!(exec(&mut client, &id, "printf x").await.stdout, b"x");
            made.push(id);
            raws.push(raw_run(rt).0);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let server = (server_pss() as f64 - before as f64).max(0.0) / n as f64;
        let per = |names: &[String]| {
            let all: Vec<(u64, u64)> = names.iter().map(|c| container_pss(c)).collect();
            let sum = |f: fn(&(u64, u64)) -> u64| all.iter().map(f).sum::<u64>() as f64 / n as f64 / 1024.0;
            (sum(|p| p.0), sum(|p| p.1))
        };
        let (ours_all, ours_own) = per(&made);
        let (raw_all, raw_own) = per(&raws);
        println!(
            "{rt}: per idle sandbox {ours_all:.2} MiB PSS under its shim (runtime's own {ours_own:.2}) + {:.3} MiB of the server; per raw container {raw_all:.2} MiB (runtime's own {raw_own:.2})",
            server / 1024.0
        );
        whole.push(Some(Pair { ours: ours_all + server / 1024.0, raw: raw_all }));
        own.push(Some(Pair { ours: ours_own, raw: raw_own }));
        for id in made {
            close(&mut client, &id).await;
        }
        for name in raws {
            docker(&["rm", "-f", &name]);
        }
    }
    push(&format!("host memory per idle sandbox, all under its shim + server ({n} each, PSS)"), "MiB", whole);
    push("host memory per idle sandbox, the runtime's own (shim; runsc-sandbox + runsc-gofer)", "MiB", own);

    print_table(runtimes, &rows);
}

fn print_table(runtimes: &[String], rows: &[Row]) {
    let mut head = String::from("| operation |");
    let mut rule = String::from("|---|");
    for rt in runtimes {
        head.push_str(&format!(" {rt}: sandboxd | {rt}: raw CLI | {rt}: ratio |"));
        rule.push_str("---:|---:|---:|");
    }
    for rt in runtimes.iter().skip(1) {
        head.push_str(&format!(" {rt}/{}: sandboxd | {rt}/{}: raw |", runtimes[0], runtimes[0]));
        rule.push_str("---:|---:|");
    }
    println!("\n{head}\n{rule}");
    for row in rows {
        let mut line = format!("| {} |", row.op);
        for p in &row.pairs {
            match p {
                Some(p) => line.push_str(&format!(
                    " {:.1} {u} | {:.1} {u} | {:.2} |",
                    p.ours,
                    p.raw,
                    p.ours / p.raw,
                    u = row.unit
                )),
                None => line.push_str(" — | — | — |"),
            }
        }
        for p in row.pairs.iter().skip(1) {
            match (row.pairs[0], p) {
                (Some(base), Some(p)) => {
                    line.push_str(&format!(" {:.2}× | {:.2}× |", p.ours / base.ours, p.raw / base.raw))
                }
                _ => line.push_str(" — | — |"),
            }
        }
        println!("{line}");
    }
}
