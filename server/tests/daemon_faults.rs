//! Faults of the Docker daemon itself: a PRIVATE `dockerd` (own socket, data root, exec root,
//! pidfile, own containerd, own network namespace) that each test kills and starts again, with
//! a `sandboxd` pointed at it through `DOCKER_HOST`. The machine's daemon is never touched:
//! images move in with `docker save | docker -H unix://PRIVATE load`.
//!
//! Why a network namespace: `dockerd --bridge=none` deletes any link named `docker0` at start
//! (libnetwork's `removeDefaultBridgeInterface`), which would take the machine daemon's bridge
//! with it. `unshare --net` gives the private daemon a namespace of its own to do that in.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sandboxd_client::proto;
use sandboxd_client::proto::sandbox_service_client::SandboxServiceClient;
use testkit::images::BUSYBOX;
use testkit::TestLabel;
use tonic::Code;

/// The server binary Cargo built for these tests.
const SANDBOXD: &str = env!("CARGO_BIN_EXE_sandboxd");

type RawClient = SandboxServiceClient<tonic::transport::Channel>;

/// One private daemon at a time: each costs a containerd and a dockerd on a 2-core machine.
static ONE_DAEMON: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const DOCKERD: &str = "/usr/sbin/dockerd";
const CONTAINERD: &str = "/usr/bin/containerd";

/// A private containerd + dockerd under one directory; stopped, unmounted and removed on drop.
struct PrivateDocker {
    dir: PathBuf,
    namespace: String,
    containerd: Option<Child>,
    dockerd: Option<Child>,
}

impl PrivateDocker {
    /// Starts both daemons and loads `images` from the machine's daemon.
    fn start(images: &[&str]) -> PrivateDocker {
        testkit::require_docker();
        for bin in [DOCKERD, CONTAINERD] {
            assert!(Path::new(bin).is_file(), "{bin} is missing: the daemon-fault tests need it");
        }
        // Short: unix socket paths are limited to 108 bytes.
        let id = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
        let dir = PathBuf::from(format!("/tmp/sbxdd-{id}"));
        std::fs::create_dir_all(&dir).expect("private docker dir");
        let mut docker =
            PrivateDocker { dir, namespace: format!("sbxdd-{id}"), containerd: None, dockerd: None };
        docker.start_containerd();
        docker.start_dockerd();
        for image in images {
            docker.load(image);
        }
        docker
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// `unix://…/docker.sock`, for `DOCKER_HOST` and `docker -H`.
    fn host(&self) -> String {
        format!("unix://{}", self.path("docker.sock").display())
    }

    fn log(&self, name: &str) -> std::fs::File {
        std::fs::OpenOptions::new().create(true).append(true).open(self.path(name)).expect("log")
    }

    fn start_containerd(&mut self) {
        let d = &self.dir;
        let config = format!(
            "version = 2\nroot = \"{root}\"\nstate = \"{state}\"\n\
             disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\
             [grpc]\n  address = \"{sock}\"\n[ttrpc]\n  address = \"{sock}.ttrpc\"\n\
             [debug]\n  address = \"\"\n[metrics]\n  address = \"\"\n",
            root = d.join("containerd-root").display(),
            state = d.join("containerd-state").display(),
            sock = d.join("containerd.sock").display(),
        );
        std::fs::write(self.path("containerd.toml"), config).expect("containerd config");
        let child = Command::new(CONTAINERD)
            .arg("--config")
            .arg(self.path("containerd.toml"))
            .stdin(Stdio::null())
            .stdout(self.log("containerd.log"))
            .stderr(self.log("containerd.log"))
            .spawn()
            .expect("spawn containerd");
        self.containerd = Some(child);
        let sock = self.path("containerd.sock");
        wait_until(Duration::from_secs(30), || sock.exists())
            .unwrap_or_else(|| panic!("private containerd did not start: {}", self.tail("containerd.log")));
    }

    fn start_dockerd(&mut self) {
        // An empty config file: the machine's /etc/docker/daemon.json (data-root, storage
        // driver) must not apply to this daemon.
        std::fs::write(self.path("daemon.json"), "{}").expect("daemon.json");
        let child = Command::new("unshare")
            .arg("--net")
            .arg("--")
            .arg(DOCKERD)
            .arg("--config-file")
            .arg(self.path("daemon.json"))
            .arg("-H")
            .arg(self.host())
            .arg("--containerd")
            .arg(self.path("containerd.sock"))
            .arg("--containerd-namespace")
            .arg(&self.namespace)
            .arg("--containerd-plugins-namespace")
            .arg(format!("{}-plugins", self.namespace))
            .arg("--data-root")
            .arg(self.path("data"))
            .arg("--exec-root")
            .arg(self.path("exec"))
            .arg("--pidfile")
            .arg(self.path("docker.pid"))
            .args(["--iptables=false", "--ip-masq=false", "--bridge=none"])
            .stdin(Stdio::null())
            .stdout(self.log("dockerd.log"))
            .stderr(self.log("dockerd.log"))
            .spawn()
            .expect("spawn unshare --net dockerd");
        self.dockerd = Some(child);
        let ready = wait_until(Duration::from_secs(60), || {
            self.docker(&["info", "--format", "{{.ServerVersion}}"]).status.success()
        });
        ready.unwrap_or_else(|| panic!("private dockerd did not start: {}", self.tail("dockerd.log")));
    }

    /// SIGKILL the daemon (its containers stay with containerd until it starts again).
    fn kill_dockerd(&mut self) {
        if let Some(mut child) = self.dockerd.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The daemon again, on the same socket and data root.
    fn restart_dockerd(&mut self) {
        self.kill_dockerd();
        self.start_dockerd();
    }

    fn docker(&self, args: &[&str]) -> std::process::Output {
        Command::new("docker")
            .arg("-H")
            .arg(self.host())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("docker -H")
    }

    fn load(&self, image: &str) {
        let mut save =
            Command::new("docker").args(["save", image]).stdout(Stdio::piped()).spawn().expect("docker save");
        let load = Command::new("docker")
            .arg("-H")
            .arg(self.host())
            .arg("load")
            .stdin(save.stdout.take().expect("save stdout"))
            .output()
            .expect("docker load");
        assert!(save.wait().expect("docker save").success(), "docker save {image} failed");
        assert!(load.status.success(), "docker load: {}", String::from_utf8_lossy(&load.stderr));
    }

    /// Names of the private daemon's containers with `label`.
    fn containers(&self, label: &str) -> Vec<String> {
        let out = self.docker(&["ps", "-a", "--filter", &format!("label={label}"), "--format", "{{.Names}}"]);
        String::from_utf8_lossy(&out.stdout).split_whitespace().map(String::from).collect()
    }

    fn tail(&self, log: &str) -> String {
        let text = std::fs::read_to_string(self.path(log)).unwrap_or_default();
        text.lines().rev().take(15).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
    }

    /// Processes whose command line names this daemon's directory (containerd shims).
    fn own_processes(&self) -> Vec<i32> {
        let needle = self.dir.to_string_lossy().into_owned();
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&needle))
            })
            .collect()
    }
}

impl Drop for PrivateDocker {
    fn drop(&mut self) {
        // Containers first, while a daemon can still remove them.
        if self.dockerd.is_some() {
            let out = self.docker(&["ps", "-aq"]);
            let ids: Vec<String> =
                String::from_utf8_lossy(&out.stdout).split_whitespace().map(String::from).collect();
            if !ids.is_empty() {
                let mut args = vec!["rm", "-f"];
                args.extend(ids.iter().map(String::as_str));
                let _ = self.docker(&args);
            }
            if let Some(child) = &self.dockerd {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(child.id() as i32),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
            let stopped = wait_until(Duration::from_secs(20), || {
                self.dockerd.as_mut().is_some_and(|c| c.try_wait().ok().flatten().is_some())
            });
            if stopped.is_none() {
                self.kill_dockerd();
            }
            self.dockerd = None;
        }
        if let Some(mut child) = self.containerd.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // Shims (and the containers under them) that outlived containerd: ours by their path.
        for pid in self.own_processes() {
            for child in testkit::procs::descendants(pid as u32).into_iter().chain([pid as u32]) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(child as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        // Mounts the daemon left (overlays, netns files, the data root's own bind mount).
        for mount in mounts_under(&self.dir) {
            let _ = Command::new("umount").arg("-l").arg(&mount).stderr(Stdio::null()).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Mount points at or below `dir`, deepest first.
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut found: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4))
        .map(PathBuf::from)
        .filter(|p| p.starts_with(dir))
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found.dedup();
    found
}

/// Polls `check` every 100 ms until it holds (`Some`) or `within` passes (`None`).
fn wait_until(within: Duration, mut check: impl FnMut() -> bool) -> Option<()> {
    let end = Instant::now() + within;
    loop {
        if check() {
            return Some(());
        }
        if Instant::now() > end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A `sandboxd` whose docker is the private daemon; killed on drop.
struct Server {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(docker: &PrivateDocker, label: &TestLabel) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("config.json");
        let body = serde_json::json!({
            "docker": {
                // The private daemon has no bridge.
                "create": {"extra_run_args": label.run_args(), "network": "none"},
                "exec": {"default_timeout_s": 60.0, "engine": testkit::engine_name()},
            },
            "server": {
                "state_dir": dir.path().join("state"),
                "sweep_interval_s": 1.0,
                "create_timeout_s": 10.0,
            },
        });
        std::fs::write(&config, body.to_string()).expect("config");
        let mut child = Command::new(SANDBOXD)
            .args(["--listen", "127.0.0.1:0", "--config"])
            .arg(&config)
            .env("DOCKER_HOST", docker.host())
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(docker.log("sandboxd.log"))
            .spawn()
            .expect("spawn sandboxd");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("sandboxd listening on ") {
                    let _ = tx.send(addr.trim().to_string());
                }
            }
        });
        let addr = rx.recv_timeout(Duration::from_secs(30)).expect("sandboxd did not start listening");
        Server { child, addr, _dir: dir }
    }

    async fn client(&self) -> RawClient {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", self.addr))
            .expect("url")
            .connect()
            .await
            .expect("connect");
        SandboxServiceClient::new(channel)
    }
}

async fn create(client: &mut RawClient) -> Result<String, tonic::Status> {
    let spec = proto::SandboxSpec { image: BUSYBOX.into(), ..Default::default() };
    let resp = client.create(proto::CreateRequest { spec: Some(spec) }).await?;
    Ok(resp.into_inner().sandbox.expect("sandbox").sandbox_id)
}

async fn exec(client: &mut RawClient, id: &str, command: &str) -> Result<proto::ExecResponse, tonic::Status> {
    let req = proto::ExecRequest {
        sandbox_id: id.into(),
        command: command.into(),
        timeout_s: Some(120.0),
        ..Default::default()
    };
    Ok(client.exec(req).await?.into_inner())
}

/// No call may wait on a dead daemon: this long is a hang, not slowness.
const HANG: Duration = Duration::from_secs(45);

/// After the daemon is back, the same server creates and runs commands again.
async fn assert_serves_again(client: &mut RawClient) {
    let id = tokio::time::timeout(HANG, create(client))
        .await
        .expect("create after the daemon came back hung")
        .expect("create after the daemon came back");
    let out = exec(client, &id, "echo back").await.expect("exec after the daemon came back");
    assert_eq!((out.return_code, out.stdout.as_slice()), (0, b"back\n".as_slice()), "{out:?}");
    client.close(proto::CloseRequest { sandbox_id: id }).await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemon_killed_mid_exec_answers_unavailable_and_recovers() {
    let _one = ONE_DAEMON.lock().await;
    let mut docker = PrivateDocker::start(&[BUSYBOX]);
    let label = TestLabel::new();
    let server = Server::start(&docker, &label);
    let mut client = server.client().await;
    let id = create(&mut client).await.expect("create on the private daemon");

    // A command that would run for two minutes; the daemon dies under it.
    let mut exec_client = client.clone();
    let exec_id = id.clone();
    let running =
        tokio::spawn(async move { exec(&mut exec_client, &exec_id, "echo started; sleep 120").await });
    let started = wait_until(Duration::from_secs(30), || {
        let out = docker.docker(&["top", &id, "-eo", "pid,args"]);
        String::from_utf8_lossy(&out.stdout).contains("sleep 120")
    });
    assert!(
        started.is_some(),
        "the exec never started in the private daemon: top {:?}; sandboxd: {}",
        docker.docker(&["top", &id, "-eo", "pid,args"]),
        docker.tail("sandboxd.log")
    );
    docker.kill_dockerd();

    let answer = tokio::time::timeout(HANG, running)
        .await
        .expect("exec hung after the daemon was killed")
        .expect("exec task");
    // Recovery is checked before the code, so one run shows both.
    docker.start_dockerd();
    assert_serves_again(&mut client).await;
    match answer {
        // The docker client lost its daemon: the README's "the Docker daemon cannot be reached".
        Err(status) => assert_eq!(status.code(), Code::Unavailable, "{status:?}"),
        // Or the exec is reported as refused by the container or daemon (125, "sandbox"),
        // never as the command's own exit status.
        Ok(out) => assert_eq!((out.return_code, out.error_type.as_str()), (125, "sandbox"), "{out:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemon_gone_during_create_answers_unavailable_and_leaves_no_container() {
    let _one = ONE_DAEMON.lock().await;
    let mut docker = PrivateDocker::start(&[BUSYBOX]);
    let label = TestLabel::new();
    let server = Server::start(&docker, &label);
    let mut client = server.client().await;
    let label_filter = format!("sandboxd.test.case={}", label.value);

    // The daemon dies as soon as the create's container exists (during its readiness probe).
    let mut create_client = client.clone();
    let creating = tokio::spawn(async move { create(&mut create_client).await });
    let appeared = wait_until(Duration::from_secs(30), || !docker.containers(&label_filter).is_empty());
    assert!(appeared.is_some(), "the create never made a container");
    docker.kill_dockerd();

    let answer = tokio::time::timeout(HANG, creating)
        .await
        .expect("create hung after the daemon was killed")
        .expect("create task");

    // Back: the half-made container is removed (by the create's own clean-up or the sweep).
    docker.start_dockerd();
    let gone = wait_until(Duration::from_secs(60), || docker.containers(&label_filter).is_empty());
    assert!(gone.is_some(), "half-created container left: {:?}", docker.containers(&label_filter));
    assert_serves_again(&mut client).await;
    let status = answer.expect_err("a create whose daemon died cannot succeed");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_while_the_daemon_is_down_is_unknown_or_unavailable_and_never_hangs() {
    let _one = ONE_DAEMON.lock().await;
    let mut docker = PrivateDocker::start(&[BUSYBOX]);
    let label = TestLabel::new();
    let server = Server::start(&docker, &label);
    let mut client = server.client().await;
    let id = create(&mut client).await.expect("create on the private daemon");
    docker.kill_dockerd();

    let answer = tokio::time::timeout(HANG, client.status(proto::StatusRequest { sandbox_id: id.clone() }))
        .await
        .expect("Status hung while the daemon was down");
    match answer {
        Ok(resp) => assert_eq!(
            resp.into_inner().status(),
            proto::SandboxStatus::Unknown,
            "with the daemon down, Status cannot know the sandbox runs"
        ),
        Err(status) => assert_eq!(status.code(), Code::Unavailable, "{status:?}"),
    }

    // Back: the daemon stopped the container it found running (no live restore), and Status says so.
    docker.restart_dockerd();
    let settled = tokio::time::timeout(HANG, async {
        loop {
            if let Ok(resp) = client.status(proto::StatusRequest { sandbox_id: id.clone() }).await {
                if resp.into_inner().status() != proto::SandboxStatus::Unknown {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    assert!(settled.is_ok(), "Status stayed UNKNOWN after the daemon came back");
    assert_serves_again(&mut client).await;
}
