//! The file calls (issue 19) through the gRPC API against the real daemon, the service
//! in-process: ListDir, Stat, MakeDir, Remove and Rename with names that are not UTF-8, every
//! error code naming its path, a non-root user refused where the kernel refuses it, WatchDir
//! seeing create/modify/remove/rename, and a watcher that stops reading ended with
//! RESOURCE_EXHAUSTED. On the docker engine the calls are FAILED_PRECONDITION naming why.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use sandboxd_client::{spec, Client, FileEventType, FileType, ListDirOptions, MakeDirOptions, Sandbox};
use testkit::images::BUSYBOX;
use testkit::service::TestService;
use testkit::TestLabel;
use tonic::Code;

fn p(bytes: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(bytes))
}

async fn sh(sandbox: &Sandbox, command: &str) {
    let out = sandbox.exec(command).await.expect("exec");
    assert_eq!(out.return_code, 0, "{command}: {}", String::from_utf8_lossy(&out.stderr));
}

async fn start(label: &TestLabel) -> (TestService, Client, Sandbox) {
    let server = TestService::start(label, None);
    let client = server.client().await;
    let sandbox = Sandbox::start(&client, spec(BUSYBOX)).await.expect("create");
    (server, client, sandbox)
}

fn agent_engine() -> bool {
    testkit::engine_name() == "agent"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_names_round_trip_through_every_call() {
    if !agent_engine() {
        return docker_engine_refuses_file_calls().await;
    }
    let label = TestLabel::new();
    let (_server, client, sandbox) = start(&label).await;
    let id = sandbox.id().to_string();
    // A name with a space, a newline and a byte that is not UTF-8, made by the shell.
    sh(&sandbox, "mkdir /w && cd /w && printf hello > \"$(printf 'sp ace\\nnl\\377x')\" && ln -s 'sp ace' link && mkdir .hid sub && : > sub/inner").await;
    let odd: &[u8] = b"/w/sp ace\nnl\xffx";

    let entries =
        client.list_dir(&id, "/w", ListDirOptions::default()).await.unwrap().collect().await.unwrap();
    let names: Vec<&[u8]> = entries.iter().map(|e| e.name.as_slice()).collect();
    assert_eq!(names, vec![b"link".as_slice(), b"sp ace\nnl\xffx", b"sub"], "sorted, hidden left out");
    let file = &entries[1];
    assert_eq!((file.path.as_slice(), file.file_type, file.size), (odd, FileType::File, 5));
    assert_eq!((file.uid, file.gid, file.mode), (0, 0, 0o644));
    let now_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    assert!((now_ms - file.mtime_ms).abs() < 120_000, "mtime {} is about now {now_ms}", file.mtime_ms);
    assert_eq!(
        (entries[0].file_type, entries[0].link_target.as_slice()),
        (FileType::Symlink, b"sp ace".as_slice())
    );
    assert_eq!(entries[2].file_type, FileType::Dir);

    let all = client
        .list_dir(&id, "/w", ListDirOptions { depth: 2, include_hidden: true, user: None })
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let paths: Vec<&[u8]> = all.iter().map(|e| e.path.as_slice()).collect();
    assert_eq!(
        paths,
        vec![b"/w/.hid".as_slice(), b"/w/link", odd, b"/w/sub", b"/w/sub/inner"],
        "depth first"
    );

    // Stat by the odd path; a link itself, or what it points to.
    let st = client.stat(&id, p(odd), false, None).await.unwrap();
    assert_eq!((st.name.as_slice(), st.size), (b"sp ace\nnl\xffx".as_slice(), 5));
    assert_eq!(client.stat(&id, "/w/link", false, None).await.unwrap().file_type, FileType::Symlink);
    assert_eq!(client.stat(&id, "/w/sub", true, None).await.unwrap().file_type, FileType::Dir);

    // MakeDir with an odd name and a mode, Rename the odd file into it, Remove the tree.
    let dir: &[u8] = b"/w/new\n\xfe dir";
    client.make_dir(&id, p(dir), MakeDirOptions { mode: 0o705, ..Default::default() }).await.unwrap();
    let made = client.stat(&id, p(dir), false, None).await.unwrap();
    assert_eq!((made.file_type, made.mode), (FileType::Dir, 0o705), "the exact mode, no umask");
    let moved = [dir, b"/\xff moved"].concat();
    client.rename(&id, p(odd), p(&moved), false, None).await.unwrap();
    let inside =
        client.list_dir(&id, p(dir), ListDirOptions::default()).await.unwrap().collect().await.unwrap();
    assert_eq!(inside.len(), 1);
    assert_eq!(inside[0].path, moved);
    let out = sandbox.exec("cat \"$(printf '/w/new\\n\\376 dir/\\377 moved')\"").await.unwrap();
    assert_eq!(out.stdout_str(), "hello", "the shell sees the same bytes");
    client.make_dir(&id, "/w/a/b/c", MakeDirOptions { parents: true, ..Default::default() }).await.unwrap();
    client.make_dir(&id, "/w/a/b", MakeDirOptions { parents: true, ..Default::default() }).await.unwrap();
    client.remove(&id, p(dir), true, None).await.unwrap();
    client.remove(&id, "/w/a", true, None).await.unwrap();
    client.remove(&id, "/w/link", false, None).await.unwrap();
    let left = client.list_dir(&id, "/w", ListDirOptions::default()).await.unwrap().collect().await.unwrap();
    assert_eq!(left.iter().map(|e| e.name.as_slice()).collect::<Vec<_>>(), vec![b"sub".as_slice()]);
    sandbox.stop().await.unwrap();
}

fn expect_code<T: std::fmt::Debug>(r: sandboxd_client::Result<T>, code: Code, names: &str) {
    let e = r.expect_err("the call must fail");
    assert_eq!(e.code(), code, "{e}");
    assert!(e.message().contains(names), "the message names {names:?}: {}", e.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_has_its_code_and_names_the_path() {
    if !agent_engine() {
        return;
    }
    let label = TestLabel::new();
    let (_server, client, sandbox) = start(&label).await;
    let id = sandbox.id().to_string();
    sh(&sandbox, "mkdir -p /e/full /e/secret && : > /e/full/x && : > /e/file && chmod 700 /e/secret").await;
    let none = MakeDirOptions::default;

    expect_code(client.stat(&id, "/e/missing", false, None).await, Code::NotFound, "/e/missing");
    expect_code(
        client.list_dir(&id, "/e/missing", ListDirOptions::default()).await.map(|_| ()),
        Code::NotFound,
        "/e/missing",
    );
    expect_code(client.remove(&id, "/e/missing", false, None).await, Code::NotFound, "/e/missing");
    expect_code(client.rename(&id, "/e/missing", "/e/y", false, None).await, Code::NotFound, "/e/missing");
    expect_code(client.make_dir(&id, "/e/no/parent", none()).await, Code::NotFound, "/e/no/parent");

    expect_code(client.make_dir(&id, "/e/full", none()).await, Code::AlreadyExists, "/e/full");
    expect_code(
        client.make_dir(&id, "/e/file", MakeDirOptions { parents: true, ..none() }).await,
        Code::AlreadyExists,
        "/e/file",
    );
    expect_code(
        client.rename(&id, "/e/file", "/e/full/x", false, None).await,
        Code::AlreadyExists,
        "/e/full/x",
    );

    expect_code(client.remove(&id, "/e/full", false, None).await, Code::FailedPrecondition, "/e/full");
    expect_code(
        client.list_dir(&id, "/e/file", ListDirOptions::default()).await.map(|_| ()),
        Code::FailedPrecondition,
        "/e/file",
    );
    expect_code(client.make_dir(&id, "/e/file/sub", none()).await, Code::FailedPrecondition, "/e/file/sub");
    expect_code(
        client.rename(&id, "/e/file", "/e/full", true, None).await,
        Code::FailedPrecondition,
        "/e/full",
    );

    expect_code(client.stat(&id, "relative/path", false, None).await, Code::InvalidArgument, "relative/path");
    expect_code(client.make_dir(&id, p(b"/e/nul\0byte"), none()).await, Code::InvalidArgument, "NUL");
    expect_code(
        client.rename(&id, "/e/file", "e/rel", false, None).await,
        Code::InvalidArgument,
        "destination",
    );
    expect_code(client.remove(&id, "/", true, None).await, Code::InvalidArgument, "/");
    expect_code(client.remove(&id, "/e/..", true, None).await, Code::InvalidArgument, "/e/..");
    expect_code(client.stat(&id, "/e", false, Some("ghost")).await, Code::InvalidArgument, "ghost");
    expect_code(
        client.make_dir(&id, "/e/m", MakeDirOptions { mode: 0o17777, ..none() }).await,
        Code::InvalidArgument,
        "mode",
    );

    // A non-root user gets what the kernel gives it: refused in root's 0700 directory and in
    // `/`, allowed in /tmp (and owns what it made there); root is allowed everywhere.
    let nobody = || Some("nobody".to_string());
    expect_code(
        client
            .list_dir(&id, "/e/secret", ListDirOptions { user: nobody(), ..Default::default() })
            .await
            .map(|_| ()),
        Code::PermissionDenied,
        "/e/secret",
    );
    expect_code(
        client.make_dir(&id, "/nobody-here", MakeDirOptions { user: nobody(), ..none() }).await,
        Code::PermissionDenied,
        "/nobody-here",
    );
    expect_code(
        client.remove(&id, "/e/file", false, Some("nobody")).await,
        Code::PermissionDenied,
        "/e/file",
    );
    expect_code(
        client.rename(&id, "/e/file", "/e/moved", false, Some("65534")).await,
        Code::PermissionDenied,
        "/e/moved",
    );
    client.make_dir(&id, "/tmp/mine", MakeDirOptions { user: nobody(), ..none() }).await.unwrap();
    let mine = client.stat(&id, "/tmp/mine", false, None).await.unwrap();
    assert_eq!((mine.uid, mine.gid), (65534, 65534), "made as nobody");
    assert!(client
        .list_dir(&id, "/e/secret", ListDirOptions::default())
        .await
        .unwrap()
        .collect()
        .await
        .unwrap()
        .is_empty());
    sandbox.stop().await.unwrap();
    assert!(label.containers().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_directory_comes_in_batches() {
    if !agent_engine() {
        return;
    }
    let label = TestLabel::new();
    let (_server, client, sandbox) = start(&label).await;
    let id = sandbox.id().to_string();
    sh(&sandbox, "mkdir /big && cd /big && i=0; while [ $i -lt 3000 ]; do : > f$i; i=$((i+1)); done").await;
    let mut stream = client.list_dir(&id, "/big", ListDirOptions::default()).await.unwrap();
    let (mut batches, mut total) = (0, 0);
    while let Some(batch) = stream.next_batch().await.unwrap() {
        batches += 1;
        total += batch.len();
    }
    assert_eq!(total, 3000);
    assert!(batches > 1, "streamed in batches ({batches})");
    sandbox.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_dir_sees_create_modify_remove_and_rename() {
    if !agent_engine() {
        return;
    }
    let label = TestLabel::new();
    let (_server, client, sandbox) = start(&label).await;
    let id = sandbox.id().to_string();
    sh(&sandbox, "mkdir -p /watched/deep").await;
    let mut watch = client.watch_dir(&id, "/watched", true, None).await.unwrap();
    sh(&sandbox, "cd /watched && : > f && echo x >> f && mv f g && rm g && mkdir d && echo y > d/in && echo z > deep/below && mv deep /moved-out").await;
    let mut seen: Vec<(FileEventType, Vec<u8>)> = Vec::new();
    let last = (FileEventType::Remove, b"/watched/deep".to_vec());
    while !seen.contains(&last) {
        match tokio::time::timeout(Duration::from_secs(20), watch.next()).await {
            Ok(Ok(Some(e))) => {
                if e.event_type == FileEventType::Rename {
                    assert_eq!(e.old_path, b"/watched/f", "a rename names where it was");
                }
                // Modify may come once per write: keep the first of a run.
                if seen.last() != Some(&(e.event_type, e.path.clone())) {
                    seen.push((e.event_type, e.path));
                }
            }
            other => panic!("watch ended early: {other:?}; seen {seen:?}"),
        }
    }
    // In this order (a file made in a new directory before its watch is in place can be
    // missed: inotify's own race, so `d/in` is not required).
    let expected = [
        (FileEventType::Create, b"/watched/f".to_vec()),
        (FileEventType::Modify, b"/watched/f".to_vec()),
        (FileEventType::Rename, b"/watched/g".to_vec()),
        (FileEventType::Remove, b"/watched/g".to_vec()),
        (FileEventType::Create, b"/watched/d".to_vec()),
        (FileEventType::Create, b"/watched/deep/below".to_vec()),
        (FileEventType::Modify, b"/watched/deep/below".to_vec()),
        last.clone(),
    ];
    let mut rest = seen.iter();
    for want in &expected {
        assert!(rest.any(|got| got == want), "{want:?} in order in {seen:?}");
    }
    // The watched directory itself removed: the stream ends.
    sh(&sandbox, "rm -rf /watched").await;
    let end = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match watch.next().await {
                Ok(Some(_)) => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("the stream ends");
    assert!(matches!(end, Ok(None)), "{end:?}");
    sandbox.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_that_stops_reading_is_ended_with_resource_exhausted() {
    if !agent_engine() {
        return;
    }
    let label = TestLabel::new();
    let (_server, client, sandbox) = start(&label).await;
    let id = sandbox.id().to_string();
    // Far more event bytes than wait ahead of the server's bound while nobody reads: the
    // client's HTTP/2 stream window (8 MiB, `client.rs`), hyper's send buffer and the
    // service's queue. Fewer, and the watch ends only when the server happens to fall behind
    // the agent's burst (a race: a third of the runs on gVisor never ended).
    let flood = if testkit::on_runsc() {
        // gVisor's inotify merges a file's repeated modify events (its reader falls behind
        // under ptrace), and a file operation costs it ~0.5 ms: distinct files, a create and
        // a delete each, made deep in the watched tree so each event carries a ~3.5 KB path
        // (8,000 events, ~28 MB on the wire, where ~3,500 overflow the window and the bound).
        let deep: Vec<String> = (0..14).map(|i| format!("{i:x}{}", "d".repeat(249))).collect();
        let deep = format!("/flood/{}", deep.join("/"));
        sh(&sandbox, &format!("mkdir -p {deep}")).await;
        format!("cd {deep} && seq 1 4000 | xargs touch && seq 1 4000 | xargs rm -f")
    } else {
        // One-byte writes to a file with a long name, each a modify event of about 230 bytes
        // on the wire (~46 MB).
        sh(&sandbox, "mkdir /flood").await;
        format!("dd if=/dev/zero of=/flood/{} bs=1 count=200000 2>/dev/null", "n".repeat(200))
    };
    let mut watch = client.watch_dir(&id, "/flood", true, None).await.unwrap();
    sh(&sandbox, &flood).await;
    let mut events = 0usize;
    let end = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match watch.next().await {
                Ok(Some(_)) => events += 1,
                other => return other,
            }
        }
    })
    .await
    .expect("the watch ends");
    let e = end.expect_err("ended with a status");
    assert_eq!(e.code(), Code::ResourceExhausted, "{e}");
    assert!(e.message().contains("/flood"), "{}", e.message());
    assert!(e.message().contains("behind"), "the server's bound, not a kernel overflow: {}", e.message());
    assert!(events < 200_000, "the watch ended before delivering everything ({events})");
    // The sandbox's agent is still fine.
    assert_eq!(client.stat(&id, "/flood", false, None).await.unwrap().file_type, FileType::Dir);
    sandbox.stop().await.unwrap();
}

/// On the docker engine (`SANDBOXD_TEST_ENGINE=docker`) there is no agent in the sandbox.
async fn docker_engine_refuses_file_calls() {
    let label = TestLabel::new();
    let (_server, client, sandbox) = start(&label).await;
    let id = sandbox.id().to_string();
    expect_code(client.stat(&id, "/", false, None).await, Code::FailedPrecondition, "exec.engine");
    expect_code(
        client.make_dir(&id, "/x", MakeDirOptions::default()).await,
        Code::FailedPrecondition,
        "agent",
    );
    expect_code(client.watch_dir(&id, "/", false, None).await.map(|_| ()), Code::FailedPrecondition, "agent");
    sandbox.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_docker_engine_answers_failed_precondition_naming_why() {
    let label = TestLabel::new();
    let server =
        TestService::start_json(&label, serde_json::json!({"docker": {"exec": {"engine": "docker"}}}));
    let client = server.client().await;
    let sandbox = Sandbox::start(&client, spec(BUSYBOX)).await.expect("create");
    let id = sandbox.id().to_string();
    expect_code(client.stat(&id, "/", false, None).await, Code::FailedPrecondition, "exec.engine: docker");
    expect_code(
        client.list_dir(&id, "/", ListDirOptions::default()).await.map(|_| ()),
        Code::FailedPrecondition,
        "agent",
    );
    sandbox.stop().await.unwrap();
}

fn upload_with_xattrs(
    id: &str,
    path: &str,
    content: &[u8],
    xattrs: &[(&str, &[u8])],
) -> Vec<sandboxd_client::proto::UploadRequest> {
    use sandboxd_client::proto::upload_request::Request;
    let mut header = testkit::raw::upload_header(id, path, Some(content.len() as u64));
    if let Some(Request::Header(h)) = header.request.as_mut() {
        h.xattrs = xattrs.iter().map(|(n, v)| (n.to_string(), v.to_vec())).collect();
    }
    vec![header, testkit::raw::chunk(content.to_vec())]
}

async fn xattrs_of(
    raw: &mut testkit::raw::RawClient,
    id: &str,
    path: &str,
) -> std::collections::BTreeMap<String, Vec<u8>> {
    let stat = sandboxd_client::proto::StatRequest {
        sandbox_id: id.into(),
        path: path.into(),
        ..Default::default()
    };
    raw.stat(stat).await.expect("stat").into_inner().entry.expect("entry").xattrs.into_iter().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uploads_extended_attributes_are_shown_by_stat_and_list_dir() {
    let label = TestLabel::new();
    let (server, client, sandbox) = start(&label).await;
    let id = sandbox.id().to_string();
    let mut raw = server.raw().await;
    // gVisor's root filesystem keeps no user. attributes (its tmpfs does); runc's overlay does.
    let dir = if testkit::on_runsc() { "/dev/shm/m" } else { "/m" };
    let (a, b, bad_path) = (format!("{dir}/a.txt"), format!("{dir}/b.txt"), format!("{dir}/bad.txt"));
    let attrs: &[(&str, &[u8])] = &[("user.e2b.author", b"mish"), ("user.bin", b"\x00\xff")];
    let sent = raw.upload(tokio_stream::iter(upload_with_xattrs(&id, &a, b"hi", attrs))).await;
    if !agent_engine() {
        let err = sent.expect_err("no agent, no attributes");
        assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
        assert!(err.message().contains("agent"), "{err:?}");
        expect_code(client.stat(&id, &a, false, None).await, Code::FailedPrecondition, "agent");
        return;
    }
    sent.expect("upload with attributes");
    if testkit::on_runsc() {
        let err = raw
            .upload(tokio_stream::iter(upload_with_xattrs(&id, "/root-fs.txt", b"x", attrs)))
            .await
            .expect_err("gVisor's root filesystem has no user. attributes");
        assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
        assert!(err.message().contains("extended attributes"), "{err:?}");
        expect_code(client.stat(&id, "/root-fs.txt", false, None).await, Code::NotFound, "/root-fs.txt");
    }
    let want: std::collections::BTreeMap<String, Vec<u8>> =
        attrs.iter().map(|(n, v)| (n.to_string(), v.to_vec())).collect();
    assert_eq!(xattrs_of(&mut raw, &id, &a).await, want);
    let list = sandboxd_client::proto::ListDirRequest {
        sandbox_id: id.clone(),
        path: dir.as_bytes().to_vec(),
        depth: 1,
        ..Default::default()
    };
    let mut batches = raw.list_dir(list).await.expect("list").into_inner();
    let batch = batches.message().await.expect("batch").expect("one batch");
    assert_eq!(batch.entries.len(), 1);
    assert_eq!(
        batch.entries[0].xattrs.clone().into_iter().collect::<std::collections::BTreeMap<_, _>>(),
        want
    );

    // Renamed, the file keeps them; overwritten without any, it has none.
    client.rename(&id, &a, &b, false, None).await.expect("rename");
    assert_eq!(xattrs_of(&mut raw, &id, &b).await, want);
    raw.upload(tokio_stream::iter(upload_with_xattrs(&id, &b, b"again", &[]))).await.expect("overwrite");
    assert!(xattrs_of(&mut raw, &id, &b).await.is_empty(), "an overwrite drops the old file's attributes");

    // Names outside user., and oversized values, are refused naming the field, writing nothing.
    for bad in [("trusted.x", &b"1"[..]), ("security.selinux", b"x"), ("user.", b"x")] {
        let err = raw
            .upload(tokio_stream::iter(upload_with_xattrs(&id, &bad_path, b"x", &[bad])))
            .await
            .expect_err("a bad attribute");
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains("xattrs"), "{err:?}");
    }
    let big = vec![7u8; 64 * 1024 + 1];
    let err = raw
        .upload(tokio_stream::iter(upload_with_xattrs(&id, &bad_path, b"x", &[("user.big", &big)])))
        .await
        .expect_err("a value past 64 KiB");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    expect_code(client.stat(&id, &bad_path, false, None).await, Code::NotFound, &bad_path);
    sandbox.stop().await.unwrap();
}
