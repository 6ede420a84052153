//! The test cluster of `scripts/cluster-up.sh` as a fixture: N private Docker daemons in network
//! namespaces of their own, formed into a Swarm, a sandboxd beside each; `scripts/cluster-down.sh`
//! on drop. The scripts are what a person runs ("try it on one machine"), so the suites drive
//! exactly them rather than a second copy of their steps.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// One line of `cluster-up.sh`'s output: `NODE_NAME SANDBOXD_ADDR DOCKER_HOST DOCKERD_PID`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNode {
    pub name: String,
    /// `127.0.0.1:PORT`: dialable from the host.
    pub sandboxd_addr: String,
    /// `unix://…/docker.sock` of the node's private daemon.
    pub docker_host: String,
    pub dockerd_pid: u32,
}

impl ClusterNode {
    /// Parses one output line; `None` when it does not have the four fields.
    pub fn parse(line: &str) -> Option<ClusterNode> {
        let mut fields = line.split_whitespace();
        let node = ClusterNode {
            name: fields.next()?.to_string(),
            sandboxd_addr: fields.next()?.to_string(),
            docker_host: fields.next()?.to_string(),
            dockerd_pid: fields.next()?.parse().ok()?,
        };
        fields.next().is_none().then_some(node)
    }

    /// `http://127.0.0.1:PORT`, for the Rust client.
    pub fn url(&self) -> String {
        format!("http://{}", self.sandboxd_addr)
    }

    /// `docker -H NODE args…`.
    pub fn docker(&self, args: &[&str]) -> Output {
        Command::new("docker")
            .arg("-H")
            .arg(&self.docker_host)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("docker -H")
    }

    /// The node (hostname) each sandbox service's task runs on, asked of this node's daemon.
    pub fn placements(&self) -> BTreeMap<String, String> {
        let ids = self.docker(&["service", "ls", "-q", "--filter", "label=sandboxd.sandbox=1"]);
        let ids: Vec<String> =
            String::from_utf8_lossy(&ids.stdout).split_whitespace().map(String::from).collect();
        if ids.is_empty() {
            return BTreeMap::new();
        }
        let mut args = vec!["service", "ps", "--format", "{{.Name}} {{.Node}}"];
        args.extend(ids.iter().map(String::as_str));
        let out = self.docker(&args);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let (task, host) = l.split_once(' ')?;
                Some((
                    task.rsplit_once('.')?.0.trim_start_matches(['\\', '_', ' ']).to_string(),
                    host.to_string(),
                ))
            })
            .collect()
    }

    /// The names of the Swarm objects of `kind` (`service`, `config`) this node's daemon lists,
    /// sorted; `None` when the daemon does not answer.
    pub fn swarm_names(&self, kind: &str) -> Option<Vec<String>> {
        let out = self.docker(&[kind, "ls", "--format", "{{.Name}}"]);
        if !out.status.success() {
            return None;
        }
        let mut names: Vec<String> =
            String::from_utf8_lossy(&out.stdout).split_whitespace().map(String::from).collect();
        names.sort();
        Some(names)
    }

    /// `docker node update --availability AVAILABILITY NODE`, asked of this node.
    pub fn set_availability(&self, node: &str, availability: &str) {
        let out = self.docker(&["node", "update", "--availability", availability, node]);
        assert!(out.status.success(), "node update {node}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// A running test cluster; removed (whatever its state) when dropped.
pub struct TestCluster {
    pub name: String,
    pub dir: PathBuf,
    pub nodes: Vec<ClusterNode>,
    /// The ids of the containers its daemons made, read before `down` removes their data roots,
    /// so [`TestCluster::leftovers`] can find a container process that outlived them.
    containers: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

/// What `cluster-up.sh` printed and returned, for tests of its failures.
pub struct UpOutcome {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl TestCluster {
    /// `cluster-up.sh N` under a name of its own (so parallel suites never share a cluster) with
    /// this `sandboxd` binary; panics with the script's stderr when it fails.
    pub fn up(nodes: usize, sandboxd_bin: &Path) -> TestCluster {
        Self::up_with(nodes, sandboxd_bin, &[])
    }

    /// How a cluster suite starts: the test images built (`cluster-up.sh` copies them to every
    /// node), then [`TestCluster::up_with`].
    pub fn start(nodes: usize, sandboxd_bin: &Path, env: &[(&str, &str)]) -> TestCluster {
        crate::images::ensure_images().expect("test images");
        Self::up_with(nodes, sandboxd_bin, env)
    }

    /// A client of every node, in node order, with the cluster's token.
    pub async fn clients(&self) -> Vec<sandboxd_client::Client> {
        let token = self.token();
        let mut clients = Vec::new();
        for node in &self.nodes {
            clients
                .push(sandboxd_client::Client::connect_with_token(node.url(), token.clone()).await.unwrap());
        }
        clients
    }

    /// Like [`TestCluster::up`], with extra environment for the script (e.g.
    /// `SANDBOXD_CLUSTER_CONFIG`).
    pub fn up_with(nodes: usize, sandboxd_bin: &Path, env: &[(&str, &str)]) -> TestCluster {
        let (cluster, outcome) = Self::try_up(nodes, sandboxd_bin, env);
        assert!(outcome.success, "cluster-up.sh {nodes} failed:\n{}", outcome.stderr);
        let cluster = cluster.with_nodes(&outcome.stdout);
        assert_eq!(cluster.nodes.len(), nodes, "one line per node expected:\n{}", outcome.stdout);
        cluster
    }

    /// Runs `cluster-up.sh`, returning the fixture (which removes whatever was made) and what the
    /// script said, whether or not it succeeded.
    pub fn try_up(nodes: usize, sandboxd_bin: &Path, env: &[(&str, &str)]) -> (TestCluster, UpOutcome) {
        crate::require_docker();
        // A letter then hex: the scripts allow 1-8 lowercase letters or digits.
        let name = format!("t{}", &uuid::Uuid::new_v4().simple().to_string()[..6]);
        let dir = PathBuf::from(format!("/tmp/{name}"));
        let cluster = TestCluster { name, dir, nodes: Vec::new(), containers: Default::default() };
        let mut command = cluster.script("cluster-up.sh");
        command
            .arg(nodes.to_string())
            .env("SANDBOXD_BIN", sandboxd_bin)
            .env("SANDBOXD_CLUSTER_PORT", free_port_base(nodes).to_string());
        for (key, value) in env {
            command.env(key, value);
        }
        let out = command.output().expect("run scripts/cluster-up.sh");
        let outcome = UpOutcome {
            success: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        (cluster, outcome)
    }

    fn with_nodes(mut self, stdout: &str) -> TestCluster {
        self.nodes = stdout.lines().filter_map(ClusterNode::parse).collect();
        self
    }

    /// `bash scripts/NAME` with this cluster's name and directory.
    fn script(&self, name: &str) -> Command {
        let mut command = Command::new("bash");
        command
            .arg(repo_root().join("scripts").join(name))
            .env("SANDBOXD_CLUSTER_NAME", &self.name)
            .env("SANDBOXD_CLUSTER_DIR", &self.dir)
            .stdin(Stdio::null());
        command
    }

    /// The bearer token every node's sandboxd requires.
    pub fn token(&self) -> String {
        std::fs::read_to_string(self.dir.join("token")).expect("cluster token").trim().to_string()
    }

    /// `scripts/cluster-node.sh ACTION NODE WHAT` (`kill|stop|start|restart`,
    /// `dockerd|sandboxd|all`); panics with what it said when it fails.
    pub fn node_action(&self, action: &str, node: &ClusterNode, what: &str) {
        let out = self
            .script("cluster-node.sh")
            .args([action, &node.name, what])
            .output()
            .expect("cluster-node.sh");
        assert!(
            out.status.success(),
            "cluster-node.sh {action} {} {what}: {}",
            node.name,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `cluster-down.sh`; true when it succeeded. Safe to call more than once.
    pub fn down(&self) -> bool {
        self.remember_containers();
        self.script("cluster-down.sh").output().is_ok_and(|o| o.status.success())
    }

    /// Notes the ids of the containers in every node's data root.
    fn remember_containers(&self) {
        let mut containers = self.containers.lock().unwrap_or_else(|p| p.into_inner());
        for node in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            for entry in
                std::fs::read_dir(node.path().join("data/containers")).into_iter().flatten().flatten()
            {
                let id = entry.file_name().to_string_lossy().into_owned();
                if id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
                    containers.insert(id);
                }
            }
        }
    }

    /// What of the cluster is still there: processes naming its directory, processes of the
    /// containers its daemons made (orphans of a killed shim), its network namespaces, mounts
    /// under its directory, the directory itself. Empty after `down`.
    pub fn leftovers(&self) -> Vec<String> {
        let dir = format!("{}/", self.dir.display());
        let containers = self.containers.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut left = Vec::new();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else {
                continue;
            };
            if std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&dir))
            {
                left.push(format!("process {pid}"));
            }
            // A zombie is dead already, waiting for its reaper.
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z'));
            let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            if let Some(id) = containers.iter().find(|id| !zombie && cgroup.contains(id.as_str())) {
                left.push(format!("process {pid} of container {}", &id[..12]));
            }
        }
        let netns = Command::new("ip").args(["netns", "list"]).output().expect("ip netns list");
        for line in String::from_utf8_lossy(&netns.stdout).lines() {
            let ns = line.split_whitespace().next().unwrap_or_default();
            if ns.starts_with(&format!("{}-", self.name)) {
                left.push(format!("network namespace {ns}"));
            }
        }
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        for mount in mounts.lines().filter_map(|l| l.split_whitespace().nth(4)) {
            if mount.starts_with(&dir) {
                left.push(format!("mount {mount}"));
            }
        }
        if self.dir.exists() {
            left.push(format!("directory {}", self.dir.display()));
        }
        left
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        self.down();
    }
}

/// The repository root (testkit lives one level below it).
pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("repository root").to_path_buf()
}

/// A base port such that base+1..=base+nodes are free on loopback right now.
fn free_port_base(nodes: usize) -> u16 {
    for _ in 0..100 {
        let base = 20000 + fastrand_u16() % 30000;
        let free = (1..=nodes as u16).all(|i| std::net::TcpListener::bind(("127.0.0.1", base + i)).is_ok());
        if free {
            return base;
        }
    }
    panic!("no free loopback port range for the test cluster");
}

fn fastrand_u16() -> u16 {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    u16::from_le_bytes([bytes[0], bytes[1]])
}
