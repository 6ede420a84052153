//! Branching rows of the comparison: fork ×8 of a sandbox holding 100 MiB of new files, a diff
//! of 10 000 changed files, and pause + resume, each beside the raw docker commands.
//! `SANDBOXD_BENCH_ONLY=fork,diff,pause` runs only these.

use std::process::{Command, Stdio};
use std::time::Instant;

use super::{close, create, docker, exec, median, selected, timed_docker, Client, Row, LABEL};
use sandboxd_proto::v1 as pb;

const CHILDREN: u32 = 8;
const KEEPALIVE: &str = "while :; do sleep 2147483647; done";
/// 100 MiB of new files (ten of 10 MiB), and the checksum every child must see.
const MAKE_FILES: &str = "mkdir -p /data && i=0; while [ $i -lt 10 ]; do \
    head -c 10485760 /dev/urandom > /data/f$i; i=$((i+1)); done";
const CHECKSUM: &str = "cat /data/* | md5sum";

async fn checksum(client: &mut Client, id: &str) -> Vec<u8> {
    let out = exec(client, id, CHECKSUM).await;
    assert_eq!(out.return_code, 0, "{}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

fn raw_checksum(name: &str) -> Vec<u8> {
    docker(&["exec", name, "sh", "-c", CHECKSUM]).stdout
}

/// `--network NAME` when the bench runs its sandboxes on another network than the default.
fn network_args() -> Vec<String> {
    std::env::var("SANDBOXD_BENCH_NETWORK").map(|n| vec!["--network".to_string(), n]).unwrap_or_default()
}

pub async fn rows(client: &mut Client, runs: usize) -> Vec<Row> {
    let mut rows = Vec::new();
    if selected("fork") {
        rows.push(fork(client, runs.min(3)).await);
    }
    if selected("diff") {
        rows.push(diff(client, runs * 4).await);
    }
    if selected("pause") {
        rows.push(pause(client, runs * 3).await);
    }
    rows
}

async fn fork(client: &mut Client, runs: usize) -> Row {
    let source = create(client).await;
    assert_eq!(exec(client, &source, MAKE_FILES).await.return_code, 0);
    let want = checksum(client, &source).await;
    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let t = Instant::now();
        let req = pb::ForkRequest { sandbox_id: source.clone(), count: CHILDREN, ..Default::default() };
        let forked = client.fork(req).await.unwrap().into_inner();
        ours.push(t.elapsed());
        assert_eq!(forked.sandboxes.len(), CHILDREN as usize);
        for child in &forked.sandboxes {
            assert_eq!(
                checksum(client, &child.sandbox_id).await,
                want,
                "a child sees the files byte for byte"
            );
            close(client, &child.sandbox_id).await;
        }
        let delete = pb::DeleteSnapshotRequest { snapshot_id: forked.snapshot_id };
        client.delete_snapshot(delete).await.unwrap();

        let image = format!("sandboxd-bench-snapshot:{}", uuid::Uuid::new_v4().simple());
        let names: Vec<String> =
            (0..CHILDREN).map(|_| format!("sandboxd-bench-{}", uuid::Uuid::new_v4().simple())).collect();
        let t = Instant::now();
        docker(&["commit", &source, &image]);
        let runs: Vec<_> = names
            .iter()
            .map(|name| {
                Command::new("docker")
                    .args(["run", "-d", "--init", "--name", name, "--label", LABEL])
                    .args(network_args())
                    .args(["--entrypoint", "/bin/sh", &image, "-c", KEEPALIVE])
                    .stdout(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for mut run in runs {
            assert!(run.wait().unwrap().success());
        }
        raw.push(t.elapsed());
        for name in &names {
            assert_eq!(raw_checksum(name), want);
        }
        let mut rm = vec!["rm", "-f"];
        rm.extend(names.iter().map(String::as_str));
        docker(&rm);
        docker(&["rmi", &image]);
    }
    close(client, &source).await;
    Row {
        op: format!("fork ×{CHILDREN}, 100 MiB of new files (vs commit + {CHILDREN} × run -d)"),
        ours: median(ours),
        raw: median(raw),
    }
}

async fn diff(client: &mut Client, runs: usize) -> Row {
    let id = create(client).await;
    let make = "mkdir /many && cd /many && i=0; while [ $i -lt 10000 ]; do : > f$i; i=$((i+1)); done";
    assert_eq!(exec(client, &id, make).await.return_code, 0);
    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    // `docker diff` itself varies by ±50% on a busy 2-core machine: many samples, and the two
    // sides take turns going first.
    for run in 0..runs {
        if run % 2 == 1 {
            raw.push(timed_docker(&["diff", &id]));
        }
        let t = Instant::now();
        let mut stream = client
            .diff(pb::DiffRequest { sandbox_id: id.clone(), path_prefix: None })
            .await
            .unwrap()
            .into_inner();
        let mut n = 0;
        while let Some(batch) = stream.message().await.unwrap() {
            n += batch.entries.len();
        }
        ours.push(t.elapsed());
        assert!(n > 10_000, "{n} paths");
        if run % 2 == 0 {
            raw.push(timed_docker(&["diff", &id]));
        }
    }
    close(client, &id).await;
    Row { op: "diff of 10 000 changed files (vs docker diff)".into(), ours: median(ours), raw: median(raw) }
}

async fn pause(client: &mut Client, runs: usize) -> Row {
    let id = create(client).await;
    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let t = Instant::now();
        client.pause(pb::PauseRequest { sandbox_id: id.clone() }).await.unwrap();
        client.resume(pb::ResumeRequest { sandbox_id: id.clone() }).await.unwrap();
        ours.push(t.elapsed());
        let t = Instant::now();
        docker(&["pause", &id]);
        docker(&["unpause", &id]);
        raw.push(t.elapsed());
    }
    close(client, &id).await;
    Row { op: "pause + resume (vs docker pause + unpause)".into(), ours: median(ours), raw: median(raw) }
}
