//! The file rows of the comparison: `ListDir` of a directory of 10 000 entries (every entry
//! typed, with mode, owner, size, mtime) beside `docker exec … ls -la` of the same directory
//! (text to parse). `SANDBOXD_BENCH_ONLY=listdir` runs only this; skipped on the docker engine,
//! which has no file calls.

use std::time::Instant;

use super::{exec, median, selected, timed_docker, Client, Row};
use sandboxd_proto::v1 as pb;

const ENTRIES: usize = 10_000;

pub async fn rows(client: &mut Client, id: &str, runs: usize) -> Vec<Row> {
    if !selected("listdir") || std::env::var("SANDBOXD_BENCH_ENGINE").as_deref() == Ok("docker") {
        return Vec::new();
    }
    let make = format!(
        "mkdir -p /tmp/ld && cd /tmp/ld && i=0; while [ $i -lt {ENTRIES} ]; do : > f$i; i=$((i+1)); done"
    );
    assert_eq!(exec(client, id, &make).await.return_code, 0);
    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    for _ in 0..runs.max(3) {
        let t = Instant::now();
        let req =
            pb::ListDirRequest { sandbox_id: id.into(), path: b"/tmp/ld".to_vec(), ..Default::default() };
        let mut stream = client.list_dir(req).await.unwrap().into_inner();
        let mut n = 0;
        while let Some(batch) = stream.message().await.unwrap() {
            n += batch.entries.len();
        }
        assert_eq!(n, ENTRIES);
        ours.push(t.elapsed());
        raw.push(timed_docker(&["exec", id, "ls", "-la", "/tmp/ld"]));
    }
    vec![Row {
        op: format!("ListDir {ENTRIES} entries (vs docker exec ls -la)"),
        ours: median(ours),
        raw: median(raw),
    }]
}
