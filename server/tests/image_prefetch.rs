//! `PrefetchImages` and `SetPoolTargets` on one host, against the real daemon (issue 29): an
//! image the daemon has is PRESENT, one it lacks (no registry here) FAILED naming it, bad
//! input refused naming the field; a create of an image nowhere is FAILED_PRECONDITION naming
//! it at once; pools keyed by image made, filled and re-targeted in one call. The cluster's
//! copies between nodes are `cluster_images.rs`'s.

use std::time::{Duration, Instant};

use sandboxd_client::{pool_target, proto, spec, Client, FailureKind, ImagePrefetchState, Sandbox};
use testkit::images::{self, BUSYBOX};
use testkit::service::TestService;
use testkit::TestLabel;
use tonic::Code;

/// An image no daemon here has (and no registry can give).
fn absent_image() -> String {
    format!("sandboxd-test/absent-{}:1", &uuid::Uuid::new_v4().simple().to_string()[..8])
}

async fn prefetch(
    client: &Client,
    images: &[&str],
    nodes: &[&str],
) -> Result<Vec<proto::PrefetchImagesResponse>, tonic::Code> {
    let stream =
        client.prefetch_images(images.iter().copied(), nodes.iter().copied()).await.map_err(|e| e.code())?;
    stream.finish().await.map_err(|e| e.code())
}

#[tokio::test]
async fn images_are_prefetched_or_named_and_pools_follow_a_schedule() {
    images::ensure_images().expect("test images");
    let label = TestLabel::new();
    let state = tempfile::tempdir().unwrap();
    let service = TestService::start_json(&label, serde_json::json!({"server": {"state_dir": state.path()}}));
    let client = service.client().await;

    // Present: one final step, on the host, with the image's size.
    let steps = prefetch(&client, &[BUSYBOX], &[]).await.unwrap();
    assert_eq!(steps.len(), 1, "{steps:?}");
    assert_eq!(steps[0].state(), ImagePrefetchState::Present, "{steps:?}");
    assert_eq!((steps[0].image.as_str(), steps[0].node.as_str()), (BUSYBOX, "local"));
    assert!(steps[0].bytes_total > 0, "{steps:?}");

    // Absent and not pullable (no registry here): FAILED naming the image, a kind given; the
    // other image of the call is still reported.
    let absent = absent_image();
    let steps = prefetch(&client, &[&absent, BUSYBOX], &["local"]).await.unwrap();
    assert_eq!(steps.len(), 2, "{steps:?}");
    let failed = steps.iter().find(|s| s.image == absent).expect("the absent image's step");
    assert_eq!(failed.state(), ImagePrefetchState::Failed, "{failed:?}");
    assert!(failed.error.contains(&absent) && failed.error.contains("could not be pulled"), "{failed:?}");
    assert_ne!(failed.failure_kind, 0, "{failed:?}");
    assert!(steps.iter().any(|s| s.image == BUSYBOX && s.state() == ImagePrefetchState::Present));

    // Bad input: refused, naming the field.
    for (images, nodes, field) in [
        (vec![], vec![], "images"),
        (vec!["-v"], vec![], "images[0]"),
        (vec![BUSYBOX, BUSYBOX], vec![], "images[1]"),
        (vec![BUSYBOX], vec!["node-9"], "nodes"),
        (vec![BUSYBOX], vec!["local", "local"], "nodes[1]"),
    ] {
        let err = match client.prefetch_images(images.clone(), nodes.clone()).await {
            Ok(stream) => stream.finish().await.expect_err("refused"),
            Err(e) => e,
        };
        assert_eq!(err.code(), Code::InvalidArgument, "{images:?} {nodes:?}: {err}");
        assert!(err.to_string().contains(field), "{field}: {err}");
    }

    // A create of an image nowhere: FAILED_PRECONDITION naming it, and nothing left behind.
    let started = Instant::now();
    let err = Sandbox::start(&client, spec(&absent)).await.expect_err("no such image");
    assert_eq!(err.code(), Code::FailedPrecondition, "{err}");
    assert!(err.to_string().contains(&absent), "{err}");
    eprintln!("create of an absent image refused in {:?}", started.elapsed());
    assert!(label.containers().is_empty(), "{:?}", label.containers());

    // A schedule's pools: one call makes the pool of an image and fills it...
    let set = client.set_pool_targets([pool_target(BUSYBOX, 1)]).await.unwrap();
    assert_eq!(set.len(), 1);
    let name = "img-sandboxd-test-busybox-1";
    assert_eq!((set[0].pool.as_str(), set[0].target, set[0].created), (name, 1, true), "{set:?}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pools = client.list_pools().await.unwrap();
        let pool = pools.iter().find(|p| p.name == name).expect("the image's pool");
        if pool.ready == 1 {
            assert_eq!(pool.image, BUSYBOX);
            break;
        }
        assert!(Instant::now() < deadline, "the pool never filled: {pool:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // ... and the next call re-targets it (the pool kept, its max raised), reporting the host's share.
    let set = client.set_pool_targets([pool_target(BUSYBOX, 2)]).await.unwrap();
    assert_eq!((set[0].target, set[0].max, set[0].created), (2, 2, false), "{set:?}");
    assert_eq!(
        set[0].nodes.iter().map(|n| (n.node.as_str(), n.ready)).collect::<Vec<_>>(),
        vec![("local", 1)]
    );
    let pool = client.list_pools().await.unwrap().into_iter().find(|p| p.name == name).unwrap();
    assert_eq!((pool.target, pool.max), (2, 2));
    // A claim by image is one of the pool's.
    let claimed = Sandbox::start(&client, spec(BUSYBOX)).await.unwrap();
    assert_eq!(claimed.exec("echo hi").await.unwrap().stdout_str(), "hi\n");

    // Bad entries: refused whole, naming the entry's field; nothing changed.
    for (targets, field) in [
        (vec![pool_target(BUSYBOX, 1), pool_target(BUSYBOX, 3)], "targets[1].pool"),
        (vec![pool_target(BUSYBOX, 1001)], "targets[0].count"),
        (vec![pool_target("-x", 1)], "targets[0].image"),
        (vec![proto::PoolTarget { pool: "Bad Name".into(), ..pool_target(BUSYBOX, 1) }], "targets[0].pool"),
        (vec![], "targets"),
    ] {
        let err = client.set_pool_targets(targets).await.expect_err("refused");
        assert_eq!(err.code(), Code::InvalidArgument, "{field}: {err}");
        assert!(err.to_string().contains(field), "{field}: {err}");
    }
    let pool = client.list_pools().await.unwrap().into_iter().find(|p| p.name == name).unwrap();
    assert_eq!(pool.target, 2);
    client.delete_pool(name).await.unwrap();
    claimed.stop().await.unwrap();
}

/// With `create.pull_policy: never` nothing is pulled: the step says why.
#[tokio::test]
async fn a_node_that_may_not_pull_says_so() {
    let label = TestLabel::new();
    let state = tempfile::tempdir().unwrap();
    let service = TestService::start_json(
        &label,
        serde_json::json!({"server": {"state_dir": state.path()}, "docker": {"create": {"pull_policy": "never"}}}),
    );
    let client = service.client().await;
    let absent = absent_image();
    let steps = prefetch(&client, &[&absent], &[]).await.unwrap();
    assert_eq!(steps.len(), 1, "{steps:?}");
    assert_eq!(steps[0].state(), ImagePrefetchState::Failed);
    assert!(steps[0].error.contains("pull_policy is \"never\""), "{steps:?}");
    let err = Sandbox::start(&client, spec(&absent)).await.expect_err("no such image");
    assert_eq!(err.code(), Code::FailedPrecondition, "{err}");
    assert!(err.to_string().contains(&absent), "{err}");
    assert_eq!(err.failure_kind(), Some(FailureKind::CreateFailed), "{err}");
}
