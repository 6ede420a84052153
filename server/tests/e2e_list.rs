//! End to end: labels (`spec.metadata`) and `List` against the service (in-process) and Docker.

use std::collections::HashMap;

use sandboxd_client::{proto, spec, Client, ListOptions, Sandbox, SandboxStatus};
use testkit::images::BUSYBOX;
use testkit::service::TestService;
use testkit::{docker, labels, TestLabel};

async fn start(client: &Client, metadata: HashMap<String, String>) -> Sandbox {
    let mut s = spec(BUSYBOX);
    s.metadata = metadata;
    Sandbox::start(client, s).await.expect("create")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_filters_by_label_and_status_pages_and_sees_only_owned_sandboxes() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let client = server.client().await;
    let run = format!("r{}", uuid::Uuid::new_v4().simple());

    let a = start(&client, labels(&[("run", &run), ("role", "a")])).await;
    let b = start(&client, labels(&[("run", &run), ("role", "a")])).await;
    let c = start(&client, labels(&[("run", &run), ("role", "b")])).await;
    // Create and Connect return the labels as stored.
    assert_eq!(a.metadata(), &labels(&[("run", &run), ("role", "a")]));
    let again = Sandbox::connect(&client, a.id()).await.expect("connect by bare id");
    assert_eq!(again.metadata(), a.metadata());
    // A missing local file names its path.
    let err = a.upload("/nonexistent/sandboxd-upload", "/tmp/x").await.expect_err("no such file");
    assert!(err.to_string().contains("/nonexistent/sandboxd-upload"), "{err}");

    // A container with the ownership label but not this service's name shape is never listed.
    let foreign = format!("foreign-{}", uuid::Uuid::new_v4().simple());
    let mut run_args = vec!["run", "-d", "--name", &foreign, "--label", "sandboxd.sandbox=1"];
    let meta = format!("sandboxd.meta.run={run}");
    run_args.extend(["--label", &meta]);
    let test_labels = label.run_args();
    run_args.extend(test_labels.iter().map(String::as_str));
    run_args.extend([BUSYBOX, "sleep", "600"]);
    assert!(docker(&run_args).status.success(), "docker run of the foreign container");

    let by_run = ListOptions { labels: labels(&[("run", &run)]), ..Default::default() };
    let all = client.list_all(by_run.clone()).await.expect("list");
    let ids: Vec<&str> = all.iter().map(|s| s.sandbox_id.as_str()).collect();
    assert_eq!(ids, vec![a.id(), b.id(), c.id()], "oldest first, the foreign container left out");
    assert!(all
        .iter()
        .all(|s| s.image == BUSYBOX && s.status == SandboxStatus::Running && s.created_at_unix_ms > 0));
    assert_eq!(all[2].metadata, labels(&[("run", &run), ("role", "b")]));

    // Every label must match.
    let role_a = ListOptions { labels: labels(&[("run", &run), ("role", "a")]), ..Default::default() };
    let found: Vec<String> =
        client.list_all(role_a).await.unwrap().into_iter().map(|s| s.sandbox_id).collect();
    assert_eq!(found, vec![a.id().to_string(), b.id().to_string()]);

    // Pages: two, then one, no overlap, then nothing more.
    let first = client.list(ListOptions { page_size: 2, ..by_run.clone() }).await.unwrap();
    assert_eq!(first.sandboxes.len(), 2);
    assert!(!first.next_page_token.is_empty());
    let second = client
        .list(ListOptions { page_size: 2, page_token: first.next_page_token, ..by_run.clone() })
        .await
        .unwrap();
    assert_eq!(second.sandboxes.iter().map(|s| s.sandbox_id.as_str()).collect::<Vec<_>>(), vec![c.id()]);
    assert!(second.next_page_token.is_empty());

    // Status filter: a stopped sandbox shows only under STOPPED.
    assert!(docker(&["kill", c.id()]).status.success());
    let stopped = ListOptions { statuses: vec![SandboxStatus::Stopped], ..by_run.clone() };
    let found: Vec<String> =
        client.list_all(stopped).await.unwrap().into_iter().map(|s| s.sandbox_id).collect();
    assert_eq!(found, vec![c.id().to_string()]);
    let running = ListOptions { statuses: vec![SandboxStatus::Running], ..by_run.clone() };
    assert_eq!(client.list_all(running).await.unwrap().len(), 2);

    for s in [&a, &b, &c] {
        s.stop().await.expect("stop");
    }
    let left = client.list_all(by_run).await.unwrap();
    assert!(left.is_empty(), "listed after every close: {left:?}");
    label.remove_all();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_labels_and_list_arguments_are_invalid_argument_and_create_nothing() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let client = server.client().await;
    let mut raw = client.raw();

    for metadata in [
        labels(&[("Run_ID", "x")]),
        labels(&[("run", "line\nbreak")]),
        labels(&[("run", &"v".repeat(2000))]),
        (0..65).map(|i| (format!("k{i}"), String::new())).collect(),
    ] {
        let mut s = spec(BUSYBOX);
        s.metadata = metadata;
        let err = raw.create(proto::CreateRequest { spec: Some(s) }).await.expect_err("refused");
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.message().contains("spec.metadata"), "{}", err.message());
    }
    assert!(label.containers().is_empty(), "a refused create leaves no container");

    let bad = [
        proto::ListRequest { page_size: 1001, ..Default::default() },
        proto::ListRequest { page_token: "not-a-token".into(), ..Default::default() },
        proto::ListRequest { labels: labels(&[("Bad Key", "x")]), ..Default::default() },
        proto::ListRequest { statuses: vec![0], ..Default::default() },
    ];
    for (request, field) in bad.into_iter().zip(["page_size", "page_token", "labels", "statuses"]) {
        let err = raw.list(request).await.expect_err("refused");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{field}");
        assert!(err.message().contains(field), "{field}: {}", err.message());
    }
}
