//! A PRIVATE Docker daemon for faults that need a daemon to die (and for runs that must not
//! risk the machine's): its own containerd, socket, data root, exec root, pid file, config file
//! (the machine's /etc/docker/daemon.json is not read) and network namespace. The machine's
//! daemon is never touched; images move in with `docker save | docker -H unix://PRIVATE load`.
//!
//! Why a network namespace: `dockerd --bridge=none` deletes any link named `docker0` at start
//! (libnetwork's `removeDefaultBridgeInterface`), and a daemon with a bridge makes its own
//! `docker0`; either would act on the machine daemon's bridge. `unshare --net` gives the private
//! daemon a namespace of its own to do that in.
//!
//! Why its own containerd: SIGKILLing the daemon then leaves its containers running under
//! containerd, as a crashed machine daemon does.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::wait::wait_until;

const DOCKERD: &str = "/usr/sbin/dockerd";
const CONTAINERD: &str = "/usr/bin/containerd";

/// Whether containers get a network: `None` matches the fault tests (no bridge, so containers
/// run with `network: none`); `Bridge` gives the daemon a `docker0` inside its own namespace
/// (the default network, as the machine daemon has).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrivateNetwork {
    None,
    Bridge,
}

/// A private containerd + dockerd under one directory; stopped, unmounted and removed on drop.
pub struct PrivateDocker {
    dir: PathBuf,
    namespace: String,
    network: PrivateNetwork,
    containerd: Option<Child>,
    dockerd: Option<Child>,
}

impl PrivateDocker {
    /// Starts both daemons (no bridge) and loads `images` from the machine's daemon.
    pub fn start(images: &[&str]) -> PrivateDocker {
        Self::start_with(images, PrivateNetwork::None)
    }

    pub fn start_with(images: &[&str], network: PrivateNetwork) -> PrivateDocker {
        crate::require_docker();
        for bin in [DOCKERD, CONTAINERD] {
            assert!(Path::new(bin).is_file(), "{bin} is missing: a private Docker daemon needs it");
        }
        // Short: unix socket paths are limited to 108 bytes.
        let id = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
        let dir = PathBuf::from(format!("/tmp/sbxdd-{id}"));
        std::fs::create_dir_all(&dir).expect("private docker dir");
        let mut docker =
            PrivateDocker { dir, namespace: format!("sbxdd-{id}"), network, containerd: None, dockerd: None };
        docker.start_containerd();
        docker.start_dockerd();
        for image in images {
            docker.load(image);
        }
        docker
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// `unix://…/docker.sock`, for `DOCKER_HOST` and `docker -H`.
    pub fn host(&self) -> String {
        format!("unix://{}", self.path("docker.sock").display())
    }

    /// A log file in the daemon's directory (opened for appending).
    pub fn log(&self, name: &str) -> std::fs::File {
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

    /// Start (again) on the same socket and data root, and wait until it answers.
    pub fn start_dockerd(&mut self) {
        std::fs::write(self.path("daemon.json"), "{}").expect("daemon.json");
        let bridge: &[&str] = match self.network {
            PrivateNetwork::None => &["--bridge=none"],
            PrivateNetwork::Bridge => &[],
        };
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
            .args(["--iptables=false", "--ip6tables=false", "--ip-masq=false"])
            .args(bridge)
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
    pub fn kill_dockerd(&mut self) {
        if let Some(mut child) = self.dockerd.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// An orderly stop: SIGTERM, and the daemon stops its containers (no live restore) before
    /// it exits; SIGKILL after 60 s.
    pub fn stop_dockerd(&mut self) {
        if let Some(child) = &self.dockerd {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let stopped = wait_until(Duration::from_secs(60), || {
            self.dockerd.as_mut().is_none_or(|c| c.try_wait().ok().flatten().is_some())
        });
        if stopped.is_none() {
            self.kill_dockerd();
        }
        self.dockerd = None;
    }

    /// The daemon killed and started again, on the same socket and data root.
    pub fn restart_dockerd(&mut self) {
        self.kill_dockerd();
        self.start_dockerd();
    }

    /// `docker -H PRIVATE args…`.
    pub fn docker(&self, args: &[&str]) -> std::process::Output {
        self.docker_command(args).output().expect("docker -H")
    }

    /// `docker -H PRIVATE args…`, stdin closed.
    fn docker_command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("docker");
        command.arg("-H").arg(self.host()).args(args).stdin(Stdio::null());
        command
    }

    /// `docker -H PRIVATE args…`, killed after `limit`: a wedged daemon (docker 20.10's
    /// libnetwork deadlock) never answers `rm`, and clean-up must still finish.
    fn docker_within(&self, args: &[&str], limit: Duration) {
        let child = self.docker_command(args).stdout(Stdio::null()).stderr(Stdio::null()).spawn();
        if let Ok(mut child) = child {
            if wait_until(limit, || child.try_wait().ok().flatten().is_some()).is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    /// Moves `image` in from the machine's daemon.
    pub fn load(&self, image: &str) {
        let mut save =
            Command::new("docker").args(["save", image]).stdout(Stdio::piped()).spawn().expect("docker save");
        let load = self
            .docker_command(&["load", "-q"])
            .stdin(save.stdout.take().expect("save stdout"))
            .output()
            .expect("docker load");
        assert!(save.wait().expect("docker save").success(), "docker save {image} failed");
        assert!(load.status.success(), "docker load: {}", String::from_utf8_lossy(&load.stderr));
    }

    /// Names of the private daemon's containers, all of them or those with `label`.
    pub fn containers(&self, label: Option<&str>) -> Vec<String> {
        let filter = label.map(|l| format!("label={l}"));
        let mut args = vec!["ps", "-a", "--format", "{{.Names}}"];
        if let Some(filter) = &filter {
            args.extend(["--filter", filter.as_str()]);
        }
        let out = self.docker(&args);
        String::from_utf8_lossy(&out.stdout).split_whitespace().map(String::from).collect()
    }

    /// The last lines of one of the daemon directory's logs.
    pub fn tail(&self, log: &str) -> String {
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
            let ids = self.docker(&["ps", "-aq"]);
            let ids: Vec<String> =
                String::from_utf8_lossy(&ids.stdout).split_whitespace().map(String::from).collect();
            if !ids.is_empty() {
                let mut args = vec!["rm", "-f"];
                args.extend(ids.iter().map(String::as_str));
                self.docker_within(&args, Duration::from_secs(60));
            }
            self.stop_dockerd();
        }
        if let Some(mut child) = self.containerd.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // Shims (and the containers under them) that outlived containerd: ours by their path.
        for pid in self.own_processes() {
            for child in crate::procs::descendants(pid as u32).into_iter().chain([pid as u32]) {
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
