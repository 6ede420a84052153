//! The agent on its unix socket against the real daemon: a create is one `docker run` plus the
//! agent's hello, calls reach the agent with no host process per sandbox, a stalled reader
//! holds up only itself, nothing in the sandbox can redirect the server, an image without a
//! shell is a sandbox, and sandboxes made on either transport are served by a server on the
//! other. Always on the agent engine.

use std::time::{Duration, Instant};

use sandboxd::agent_client::channel::Transport;
use sandboxd::backends::docker::DockerProvider;
use sandboxd::config::{DockerConfig, ExecEngineKind, ExecTransport};
use sandboxd::core::spec::{ExecParams, SandboxHandle, SandboxSpec};
use sandboxd_client::proto;
use testkit::images;
use testkit::raw::{busybox, create_id};
use testkit::service::TestService;
use testkit::{exec_params as params, provider_with, provider_with_binary, TestLabel};

/// The agent engine on the socket transport, whatever `SANDBOXD_TEST_TRANSPORT` says.
fn agent_provider(label: &TestLabel, edit: impl FnOnce(&mut DockerConfig)) -> DockerProvider {
    provider_with(label, |c| {
        c.exec.engine = ExecEngineKind::Agent;
        c.exec.transport = ExecTransport::Socket;
        edit(c)
    })
}

/// The service on the agent engine's socket transport.
fn socket_service(label: &TestLabel) -> TestService {
    TestService::start_with(label, None, |c| {
        c.docker.exec.engine = ExecEngineKind::Agent;
        c.docker.exec.transport = ExecTransport::Socket;
    })
}

fn nobody() -> ExecParams {
    ExecParams { user: Some("nobody".into()), ..params() }
}

/// Host `docker exec` clients, children of this process, into one of `sandboxes` (by the hex
/// of their ids, which their creating names share): the other tests of this binary run beside.
fn docker_exec_children(sandboxes: &[&SandboxHandle]) -> Vec<i32> {
    let hexes: Vec<&str> = sandboxes.iter().map(|h| h.sandbox_id.trim_start_matches("sandboxd-")).collect();
    testkit::procs::children_named(std::process::id() as i32, "docker")
        .into_iter()
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<String> =
                cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
            args.iter().any(|a| a == "exec") && args.iter().any(|a| hexes.iter().any(|hex| a.ends_with(hex)))
        })
        .collect()
}

/// Where the server keeps sandbox `id`'s run directory (the tests' default state directory).
fn run_dir(id: &str) -> std::path::PathBuf {
    sandboxd::config::default_state_dir().join("sandboxes").join(id).join("run")
}

async fn stdout(p: &DockerProvider, h: &SandboxHandle, cmd: &str, params: &ExecParams) -> (String, i32) {
    let r = p.exec(h, cmd, params).await.unwrap();
    (r.stdout_str(), r.return_code)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_create_is_one_docker_run_and_the_agents_hello() {
    let label = TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    let (wrapper, log) = testkit::recording_docker(dir.path(), "\"$1 $2\"");
    let p = provider_with_binary(&label, wrapper, |c| {
        c.exec.engine = ExecEngineKind::Agent;
        c.exec.transport = ExecTransport::Socket;
        // Without a disk bound: a bounded create is `docker create`, the loop disk, then
        // `docker start` (walls.rs), still with no readiness exec.
        c.create.default_disk_gib = None;
    });
    assert!(p.agent_socket(), "this machine can use the agent's socket (root, local daemon)");
    // The image's user is read once per image (kept a while): the second create shows the
    // steady state.
    let first = p.create(&SandboxSpec::new(images::BASH)).await.unwrap();
    std::fs::write(&log, "").unwrap();
    let h = p.create(&SandboxSpec::new(images::BASH)).await.unwrap();
    let calls = std::fs::read_to_string(&log).unwrap();
    // `events` and `ps -a` are the provider's state watch, not the create's.
    let calls: Vec<&str> =
        calls.lines().filter(|l| !l.starts_with("events") && !l.starts_with("ps ")).collect();
    assert_eq!(calls.iter().filter(|c| c.starts_with("run ")).count(), 1, "{calls:?}");
    assert!(
        calls.iter().all(|c| c.starts_with("run ") || c.starts_with("rename ")),
        "a create is docker run and its rename: no readiness exec, no inspect: {calls:?}"
    );
    assert_eq!(h.shell, "bash", "the agent found bash and said so in its hello");
    assert_eq!(p.agent_transport(&h.sandbox_id), Some(Transport::Socket));
    let r = p.exec(&h, "printf hi", &params()).await.unwrap();
    assert_eq!((r.stdout_str().as_str(), r.return_code), ("hi", 0));
    assert!(r.usage.is_some(), "the agent answered");
    let calls = std::fs::read_to_string(&log).unwrap();
    assert!(!calls.lines().any(|l| l.starts_with("exec")), "no docker exec at all: {calls}");
    assert!(run_dir(&h.sandbox_id).join("agent.sock").exists());
    p.close(&h.id()).await.unwrap();
    p.close(&first.id()).await.unwrap();
    assert!(!run_dir(&h.sandbox_id).exists(), "closing the sandbox removes its run directory");
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_sandboxes_cost_no_host_process() {
    let label = TestLabel::new();
    let p = agent_provider(&label, |_| {});
    let mut handles = Vec::new();
    for _ in 0..3 {
        let h = p.create(&SandboxSpec::new(images::BUSYBOX)).await.unwrap();
        assert_eq!(stdout(&p, &h, "printf ok", &params()).await, ("ok".into(), 0));
        handles.push(h);
    }
    let all: Vec<&SandboxHandle> = handles.iter().collect();
    let mut left = docker_exec_children(&all);
    for _ in 0..20 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = docker_exec_children(&all);
    }
    assert!(left.is_empty(), "docker exec clients held for idle sandboxes: {left:?}");
    // The fallback does hold one per sandbox (so this count can fail).
    let mut spec = SandboxSpec::new(images::BUSYBOX);
    spec.provider_options.run_args = vec!["--user".into(), "0".into()];
    let old = p.create(&spec).await.unwrap();
    assert_eq!(stdout(&p, &old, "printf ok", &params()).await, ("ok".into(), 0));
    assert_eq!(p.agent_transport(&old.sandbox_id), Some(Transport::Exec));
    assert_eq!(docker_exec_children(&[&old]).len(), 1, "the exec channel's client");
    for h in handles.iter().chain([&old]) {
        p.close(&h.id()).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stalled_download_holds_up_no_other_client() {
    let label = TestLabel::new();
    let service = socket_service(&label);
    let mut a = service.raw().await;
    let id = create_id(&mut a, busybox()).await;
    let size = 32usize << 20;
    let made = a
        .exec(proto::ExecRequest {
            sandbox_id: id.clone(),
            command: format!("head -c {size} /dev/urandom > /big && printf made"),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(made.stdout, b"made");
    let request = || proto::DownloadRequest { sandbox_id: id.clone(), path: "/big".into() };
    // Client A reads one message and then stops reading, holding its stream open.
    let mut stalled = a.download(request()).await.unwrap().into_inner();
    assert!(stalled.message().await.unwrap().is_some());
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Client B, on its own connection, gets the whole file promptly.
    let mut b = service.raw().await;
    let started = Instant::now();
    let read = tokio::time::timeout(Duration::from_secs(30), async {
        let mut stream = b.download(request()).await.expect("download").into_inner();
        let mut first = None;
        let mut n = 0;
        while let Some(m) = stream.message().await.expect("chunk") {
            first.get_or_insert_with(|| started.elapsed());
            n += m.chunk.len();
        }
        (first, n)
    })
    .await;
    let (first, n) = read.expect("the second download finished within 30 s while the first stalled");
    assert_eq!(n, size);
    assert!(first.is_some_and(|t| t < Duration::from_secs(5)), "first chunk after {first:?}");
    // A still gets the rest once it reads again.
    let mut rest = 0;
    while let Some(m) = stalled.message().await.unwrap() {
        rest += m.chunk.len();
    }
    assert!(rest > 0 && rest < size, "{rest}");
    a.close(proto::CloseRequest { sandbox_id: id }).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_non_root_process_can_neither_connect_nor_replace_the_socket() {
    let label = TestLabel::new();
    let p = agent_provider(&label, |_| {});
    let h = p.create(&SandboxSpec::new(images::BUSYBOX)).await.unwrap();
    assert_eq!(p.agent_transport(&h.sandbox_id), Some(Transport::Socket));
    // Root in the sandbox can reach its agent (so the refusals below are about the user). Under
    // gVisor not even root can: the socket is a host socket (`--host-uds=create`), which the
    // sandbox may make but neither stat, open, connect to nor remove (`open` is not granted).
    let (out, code) = stdout(&p, &h, "/.sandboxd/agent ping", &params()).await;
    if testkit::on_runsc() {
        assert_ne!(code, 0, "root in a gVisor sandbox reached the host socket: {out}");
        let (out, code) = stdout(&p, &h, "rm -f /.sandboxd/run/agent.sock", &params()).await;
        assert_ne!(code, 0, "root in a gVisor sandbox removed the host socket: {out}");
    } else {
        assert_eq!(code, 0, "{out}");
    }
    for attempt in [
        "/.sandboxd/agent ping",
        "ls /.sandboxd/run",
        "rm -f /.sandboxd/run/agent.sock",
        "ln -sf /var/run/docker.sock /.sandboxd/run/agent.sock",
        "mv /.sandboxd/run /.sandboxd/old",
        "printf x > /.sandboxd/run/agent.sock",
    ] {
        let (out, code) = stdout(&p, &h, attempt, &nobody()).await;
        assert_ne!(code, 0, "nobody could `{attempt}`: {out}");
    }
    let r = p.exec(&h, "id -u", &nobody()).await.unwrap();
    assert_eq!(r.stdout_str().trim(), "65534");
    assert_eq!(p.agent_transport(&h.sandbox_id), Some(Transport::Socket), "the socket still serves");
    p.close(&h.id()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_socket_replaced_by_a_link_does_not_redirect_the_server() {
    let label = TestLabel::new();
    let p = agent_provider(&label, |_| {});
    let target = p.create(&SandboxSpec::new(images::BUSYBOX)).await.unwrap();
    let to_docker = p.create(&SandboxSpec::new(images::BUSYBOX)).await.unwrap();
    let to_other = p.create(&SandboxSpec::new(images::BUSYBOX)).await.unwrap();
    for h in [&target, &to_docker, &to_other] {
        let (_, code) = stdout(&p, h, &format!("printf {} > /marker", h.sandbox_id), &params()).await;
        assert_eq!(code, 0);
    }
    // Root in a sandbox swaps its socket for a link to a host path (the link is read on the
    // host): the host's Docker socket, or the socket of another sandbox.
    let other_socket = run_dir(&target.sandbox_id).join("agent.sock");
    assert!(other_socket.exists());
    for (h, link) in
        [(&to_docker, "/var/run/docker.sock".to_string()), (&to_other, other_socket.display().to_string())]
    {
        let plant = format!("rm /.sandboxd/run/agent.sock && ln -s {link} /.sandboxd/run/agent.sock");
        if testkit::on_runsc() {
            // gVisor refuses the sandbox any touch of the host socket (`--host-uds=create`
            // only): the link cannot even be planted, and every socket stays intact.
            assert_ne!(stdout(&p, h, &plant, &params()).await.1, 0, "root replaced a host socket");
            assert!(run_dir(&h.sandbox_id).join("agent.sock").exists());
            continue;
        }
        assert_eq!(stdout(&p, h, &plant, &params()).await.1, 0);
    }
    if testkit::on_runsc() {
        let second = agent_provider(&label, |_| {});
        for h in [&target, &to_docker, &to_other] {
            let h2 = second.handle(&h.sandbox_id).await.unwrap();
            assert_eq!(stdout(&second, &h2, "cat /marker", &params()).await.0, h.sandbox_id);
            assert_eq!(second.agent_transport(&h.sandbox_id), Some(Transport::Socket));
            second.close(&h.id()).await.unwrap();
        }
        return;
    }
    drop(p);
    // A restarted server reaches each sandbox by its socket: the two links are refused (said
    // once each) and their sandboxes answer through the exec channel, in the right sandbox.
    let second = agent_provider(&label, |_| {});
    for h in [&to_docker, &to_other] {
        let h2 = second.handle(&h.sandbox_id).await.unwrap();
        let (out, code) = stdout(&second, &h2, "cat /marker", &params()).await;
        assert_eq!((out.as_str(), code), (h.sandbox_id.as_str(), 0), "the call ran in its own sandbox");
        assert_eq!(second.agent_transport(&h.sandbox_id), Some(Transport::Exec));
    }
    let t2 = second.handle(&target.sandbox_id).await.unwrap();
    assert_eq!(stdout(&second, &t2, "cat /marker", &params()).await.0, target.sandbox_id);
    assert_eq!(
        second.agent_transport(&target.sandbox_id),
        Some(Transport::Socket),
        "an intact socket is used"
    );
    for h in [&target, &to_docker, &to_other] {
        second.close(&h.id()).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_non_root_image_runs_its_keep_alive_and_commands_as_its_user() {
    let label = TestLabel::new();
    let p = agent_provider(&label, |_| {});
    let h = p.create(&SandboxSpec::new(images::NONROOT)).await.unwrap();
    assert_eq!(p.agent_transport(&h.sandbox_id), Some(Transport::Socket));
    let (out, _) =
        stdout(&p, &h, "id -u; ps -o user,args | awk '$2 == \"/bin/sh\" && $3 == \"-c\"'", &params()).await;
    let mut lines = out.lines();
    let uid = lines.next().unwrap_or_default().to_string();
    assert_ne!(uid, "0", "a command runs as the image's user: {out}");
    let keepalive = lines.next().unwrap_or_default();
    assert!(!keepalive.trim_start().starts_with("root"), "the keep-alive runs as the image's user: {out}");
    p.close(&h.id()).await.unwrap();
}

/// An image with no program at all (not even a shell): the agent keeps it alive and skips the
/// probe; a shell command answers 125 / `sandbox` naming the missing shell, a program runs by
/// its argv, files move through the agent, and Close removes the container and its run dir.
#[tokio::test(flavor = "multi_thread")]
async fn an_image_without_a_shell_creates_runs_programs_by_path_and_moves_files() {
    let label = TestLabel::new();
    testkit::require_docker();
    let service = socket_service(&label);
    let mut raw = service.raw().await;
    let spec = proto::SandboxSpec { image: images::NOSHELL.into(), ..Default::default() };
    let id = create_id(&mut raw, spec).await;
    let r = testkit::raw::exec(&mut raw, &id, "echo hi").await;
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert_eq!((r.return_code, r.error_type.as_str()), (125, "sandbox"), "{stderr}");
    assert!(stderr.contains("\"sh\" is not in the sandbox's PATH"), "{stderr}");
    // A program by its argv: the agent's own binary is the one program in the sandbox.
    let started = raw
        .start_process(proto::StartProcessRequest {
            sandbox_id: id.clone(),
            argv: vec!["/.sandboxd/agent".into(), "--version".into()],
            ..Default::default()
        })
        .await
        .expect("start by argv")
        .into_inner();
    let attach = proto::AttachProcessRequest {
        sandbox_id: id.clone(),
        process_id: started.process_id,
        since: Some(0),
    };
    let mut events = raw.attach_process(attach).await.expect("attach").into_inner();
    let (mut out, mut code) = (Vec::new(), None);
    let read = tokio::time::timeout(Duration::from_secs(60), async {
        use proto::attach_process_response::Event;
        while let Some(m) = events.message().await.expect("attach stream") {
            match m.event {
                Some(Event::Output(o)) => out.extend(o.data),
                Some(Event::Exited(e)) => code = Some(e.exit_code),
                _ => {}
            }
        }
    });
    read.await.expect("the process's stream ended within 60 s");
    let text = String::from_utf8_lossy(&out);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.starts_with("sandboxd-agent"), "{text}");
    // Files both ways, through the agent.
    let body = b"no shell needed\n".to_vec();
    let upload = raw
        .upload(tokio_stream::iter(vec![
            testkit::raw::upload_header(&id, "/tmp/f", Some(body.len() as u64)),
            testkit::raw::chunk(body.clone()),
        ]))
        .await
        .expect("upload")
        .into_inner();
    assert_eq!(upload.bytes_written, body.len() as u64);
    let mut download =
        raw.download(proto::DownloadRequest { sandbox_id: id.clone(), path: "/tmp/f".into() }).await.unwrap();
    let mut got = Vec::new();
    while let Some(m) = download.get_mut().message().await.unwrap() {
        got.extend(m.chunk);
    }
    assert_eq!(got, body);
    let dir = run_dir(&id);
    assert!(dir.join("agent.sock").exists(), "served on its socket");
    raw.close(proto::CloseRequest { sandbox_id: id.clone() }).await.unwrap();
    // Docker's removal finishes after Close answers (closing.rs): waited for, bounded.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while testkit::container_exists(&id) && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(!testkit::container_exists(&id), "Close removed the container");
    assert!(!dir.parent().unwrap().exists(), "Close removed the run directory");
}

/// `exec.transport: channel` makes sandboxes without a socket; a server on either transport
/// serves a sandbox made on the other (a socket where it has one, its channel where not), with
/// the image's user kept.
#[tokio::test(flavor = "multi_thread")]
async fn sandboxes_made_on_either_transport_are_served_by_a_server_on_the_other() {
    let label = TestLabel::new();
    let on_socket = agent_provider(&label, |_| {});
    let on_channel = agent_provider(&label, |c| c.exec.transport = ExecTransport::Channel);
    assert!(on_socket.agent_socket() && !on_channel.agent_socket());
    // On gVisor, `docker exec -u 0` into a container whose image has a user of its own gets no
    // capabilities (runsc takes them from the container's spec; runc gives root its own), so
    // the channel's agent cannot switch users there: a non-root image needs the socket on
    // runsc (docs/runtimes.md, "Sandboxes on gVisor"). The rest holds with a root image.
    let (image, uid) =
        if testkit::on_runsc() { (images::BUSYBOX, "0\n") } else { (images::NONROOT, "1000\n") };
    let with_socket = on_socket.create(&SandboxSpec::new(image)).await.unwrap();
    let with_channel = on_channel.create(&SandboxSpec::new(image)).await.unwrap();
    assert!(run_dir(&with_socket.sandbox_id).join("agent.sock").exists());
    assert!(!run_dir(&with_channel.sandbox_id).exists(), "no run directory on the channel");
    for (p, h, transport) in [
        (&on_socket, &with_socket, Transport::Socket),
        (&on_socket, &with_channel, Transport::Exec),
        (&on_channel, &with_socket, Transport::Socket),
        (&on_channel, &with_channel, Transport::Exec),
    ] {
        let h = p.handle(&h.sandbox_id).await.unwrap();
        assert_eq!(stdout(p, &h, "id -u", &params()).await, (uid.into(), 0), "{}", h.sandbox_id);
        assert_eq!(p.agent_transport(&h.sandbox_id), Some(transport), "{}", h.sandbox_id);
    }
    on_channel.close(&with_socket.id()).await.unwrap();
    assert!(!run_dir(&with_socket.sandbox_id).parent().unwrap().exists(), "its run directory went too");
    on_socket.close(&with_channel.id()).await.unwrap();
}
