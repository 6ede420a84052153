//! The warm-pool row of the comparison: a `Create` naming a pool with ready sandboxes (a claim,
//! with a per-call env) beside a bare `docker run -d` (issue 21's target: ≤ 0.05×).
//! `SANDBOXD_BENCH_ONLY=claim` runs only this.

use std::time::{Duration, Instant};

use super::{close, docker, median, timed_docker, Client, Row, IMAGE, LABEL};
use sandboxd_proto::v1 as pb;

const POOL: &str = "bench";

async fn ready(client: &mut Client) -> u32 {
    let pools = client.list_pools(pb::ListPoolsRequest {}).await.unwrap().into_inner().pools;
    pools.iter().find(|p| p.name == POOL).map_or(0, |p| p.ready)
}

/// `runs` claims from a pool holding `runs` ready sandboxes (each claim times the whole
/// `Create` round trip), then `runs` raw `docker run -d` of the same keep-alive.
pub async fn claim(client: &mut Client, runs: usize) -> Row {
    let target = runs as u32;
    let spec = pb::PoolSpec {
        name: POOL.into(),
        image: IMAGE.into(),
        target,
        max: target * 2,
        ..Default::default()
    };
    client.create_pool(pb::CreatePoolRequest { pool: Some(spec) }).await.unwrap();
    let start = Instant::now();
    while ready(client).await < target {
        assert!(start.elapsed() < Duration::from_secs(300), "the bench pool never filled");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (mut ours, mut claimed) = (Vec::new(), Vec::new());
    for i in 0..runs {
        let spec = pb::SandboxSpec {
            pool: Some(POOL.into()),
            env: [("RUN".to_string(), i.to_string())].into(),
            ..Default::default()
        };
        let t = Instant::now();
        let r = client.create(pb::CreateRequest { spec: Some(spec) }).await.unwrap().into_inner();
        ours.push(t.elapsed());
        claimed.push(r.sandbox.unwrap().sandbox_id);
    }
    let info = client.list_pools(pb::ListPoolsRequest {}).await.unwrap().into_inner().pools;
    let served = info.iter().find(|p| p.name == POOL).map_or(0, |p| p.claimed);
    assert_eq!(served, runs as u64, "every timed create was a claim of a ready sandbox");
    client.delete_pool(pb::DeletePoolRequest { name: POOL.into() }).await.unwrap();
    for id in &claimed {
        close(client, id).await;
    }
    let mut raw = Vec::new();
    for _ in 0..runs {
        let name = format!("sandboxd-bench-{}", uuid::Uuid::new_v4().simple());
        raw.push(timed_docker(&[
            "run",
            "-d",
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
        docker(&["rm", "-f", &name]);
    }
    Row { op: "claim from a ready pool (vs docker run -d)".into(), ours: median(ours), raw: median(raw) }
}
