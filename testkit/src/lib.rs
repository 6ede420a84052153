//! What sandboxd's integration suites (`server/tests/`, `ctl/tests/`) and benches share, in the
//! manner of tonic's `tests/integration_tests`: the test images ([`images`]), a per-test label on
//! every container so each test can prove it left nothing behind and clean-up never touches
//! anyone else's ([`TestLabel`]), the exec engine and agent transport under test ([`engine`],
//! [`transport`]), a provider with test defaults, the service in-process
//! ([`service::TestService`]), the `sandboxd` binary as a fixture ([`server::TestServer`], for
//! CLI, signal and listener tests; the one place that knows the server's command line), the
//! test defaults as a config file spells them ([`config`]), the generated stub and its common
//! requests ([`raw`]), a `Pty` call and the session listing ([`pty`]), bounded waits
//! ([`wait`]), the host's process tree ([`procs`]), `sandboxctl` in a real terminal ([`ctl`]),
//! a private Docker daemon for daemon faults ([`private_docker::PrivateDocker`]) and the test
//! cluster of `scripts/cluster-up.sh` ([`cluster::TestCluster`]). A helper two suites need
//! lives here, never as a copy in each.

pub mod cluster;
pub mod config;
pub mod conformance;
pub mod ctl;
pub mod fake;
pub mod images;
pub mod metrics;
pub mod private_docker;
pub mod procs;
pub mod pty;
pub mod raw;
pub mod server;
pub mod service;
pub mod wait;

use std::collections::HashMap;

use std::process::Command;

use sandboxd::backends::docker::DockerProvider;
use sandboxd::config::{DockerConfig, ExecEngineKind, ExecTransport};
use sandboxd::core::backend::SandboxBackend;

/// A label every test container carries (the test script sweeps it) plus one unique per test.
pub struct TestLabel {
    pub value: String,
}

impl Default for TestLabel {
    fn default() -> Self {
        Self::new()
    }
}

impl TestLabel {
    pub fn new() -> Self {
        Self { value: uuid::Uuid::new_v4().simple().to_string() }
    }

    pub fn run_args(&self) -> Vec<String> {
        vec![
            "--label".into(),
            "sandboxd.test=1".into(),
            "--label".into(),
            format!("sandboxd.test.case={}", self.value),
        ]
    }

    /// Containers (running or not) created under this label, once the removals `Close` left
    /// to the background have ended (see [`Self::settled`]).
    pub fn containers(&self) -> Vec<String> {
        self.settled().into_iter().map(|(id, _)| id).collect()
    }

    /// Container names (running or not) created under this label, once the background
    /// removals have ended (see [`Self::settled`]).
    pub fn names(&self) -> Vec<String> {
        self.settled().into_iter().map(|(_, name)| name).collect()
    }

    /// (id, state, name) of this label's containers as Docker lists them now, without waiting
    /// for removals under way (what [`Self::settled`] looks at each time round).
    pub fn listed_now(&self) -> Vec<(String, String, String)> {
        let out = docker(&[
            "ps",
            "-a",
            "--filter",
            &format!("label=sandboxd.test.case={}", self.value),
            "--format",
            "{{.ID}} {{.State}} {{.Names}}",
        ]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| {
                let mut words = line.splitn(3, ' ');
                Some((words.next()?.to_string(), words.next()?.to_string(), words.next()?.to_string()))
            })
            .collect()
    }

    /// (id, name) of this label's containers. `Close` ends a sandbox (its processes killed, its
    /// id NOT_FOUND) before it answers and leaves Docker's removal to the background: while a
    /// listed container is not running (killed, being removed) this waits, up to 30 s, for it
    /// to go, so "nothing left behind" means removed, never "not yet removed"; running ones
    /// count once they stayed so for a second (a killed sandbox reads running until the daemon
    /// hears of its init's exit). A container that stays stopped is listed after the wait (a
    /// real leftover fails its test).
    pub fn settled(&self) -> Vec<(String, String)> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut steady: Option<std::time::Instant> = None;
        loop {
            let listed = self.listed_now();
            let closing = listed.iter().any(|(_, state, name)| {
                name.starts_with("sandboxd-closing-")
                    || matches!(state.as_str(), "exited" | "dead" | "removing")
            });
            let now = std::time::Instant::now();
            let steady_since = if closing { None } else { Some(*steady.get_or_insert(now)) };
            steady = steady_since;
            let held = steady_since
                .is_some_and(|since| listed.is_empty() || now - since >= std::time::Duration::from_secs(1));
            if held || now >= deadline {
                return listed.into_iter().map(|(id, _, name)| (id, name)).collect();
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    /// Removes this label's containers, then the networks, volumes and snapshot images that
    /// carry it (the operator's labels, so the test's too) and the containers' run directories
    /// in the default state directory: `scripts/remove-test-leftovers.sh --case`, the one place
    /// that knows what a test leaves.
    pub fn remove_all(&self) {
        let script = cluster::repo_root().join("scripts").join("remove-test-leftovers.sh");
        let out = Command::new("bash")
            .arg(&script)
            .args(["--case", &self.value])
            .stdin(std::process::Stdio::null())
            .output();
        match out {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!("{}: {}", script.display(), String::from_utf8_lossy(&out.stderr)),
            Err(e) => eprintln!("{}: {e}", script.display()),
        }
    }
}

impl Drop for TestLabel {
    fn drop(&mut self) {
        self.remove_all();
    }
}

/// A provider on the agent engine whatever the engine under test, `edit` applied after.
pub fn agent_provider(label: &TestLabel, edit: impl FnOnce(&mut DockerConfig)) -> DockerProvider {
    provider_with(label, |c| {
        c.exec.engine = ExecEngineKind::Agent;
        edit(c)
    })
}

/// Exec parameters with a 60 s timeout, nothing else set.
pub fn exec_params() -> sandboxd::core::spec::ExecParams {
    sandboxd::core::spec::ExecParams {
        timeout: Some(std::time::Duration::from_secs(60)),
        ..Default::default()
    }
}

/// Fail (never skip) when the daemon is unreachable, and build the test images.
pub fn require_docker() {
    images::host_has_docker().expect("Docker must be reachable for integration tests");
    images::ensure_images().expect("building test images");
}

/// The exec engine the suites run on: `SANDBOXD_TEST_ENGINE=docker` or `agent` (the default).
/// `scripts/test.sh` runs the provider, service and client suites once on each.
pub fn engine() -> ExecEngineKind {
    match std::env::var("SANDBOXD_TEST_ENGINE").as_deref() {
        Ok("docker") => ExecEngineKind::Docker,
        Ok("agent") | Ok("") | Err(_) => ExecEngineKind::Agent,
        Ok(other) => panic!("SANDBOXD_TEST_ENGINE must be agent or docker (got {other:?})"),
    }
}

/// `engine()` as the config file spells it.
pub fn engine_name() -> &'static str {
    match engine() {
        ExecEngineKind::Agent => "agent",
        ExecEngineKind::Docker => "docker",
    }
}

/// How the agent engine reaches new sandboxes in the suites: `SANDBOXD_TEST_TRANSPORT=channel`
/// (the `docker exec -i` fallback) or `socket` (the default). `scripts/test.sh` reruns the
/// provider, client, files and terminal-session suites on the channel.
pub fn transport() -> ExecTransport {
    match std::env::var("SANDBOXD_TEST_TRANSPORT").as_deref() {
        Ok("channel") => ExecTransport::Channel,
        Ok("socket") | Ok("") | Err(_) => ExecTransport::Socket,
        Ok(other) => panic!("SANDBOXD_TEST_TRANSPORT must be socket or channel (got {other:?})"),
    }
}

/// `transport()` as the config file spells it.
pub fn transport_name() -> &'static str {
    match transport() {
        ExecTransport::Socket => "socket",
        ExecTransport::Channel => "channel",
    }
}

/// The OCI runtime the suites' sandboxes run on: `SANDBOXD_TEST_RUNTIME=runsc` (gVisor, with
/// `DOCKER_HOST` naming a daemon that has it registered: `scripts/runsc-daemon.sh up`) or
/// `runc` (the default). `scripts/test.sh` reruns the main suites on runsc.
pub fn runtime_name() -> &'static str {
    match std::env::var("SANDBOXD_TEST_RUNTIME").as_deref() {
        Ok("runsc") => "runsc",
        Ok("runc") | Ok("") | Err(_) => "runc",
        Ok(other) => panic!("SANDBOXD_TEST_RUNTIME must be runc or runsc (got {other:?})"),
    }
}

/// What the suites' servers offer: `runc`, and `runsc` too when the suites run on it.
pub fn runtime_offers() -> serde_json::Value {
    match runtime_name() {
        "runsc" => serde_json::json!([{"name": "runc"}, {"name": "runsc"}]),
        _ => serde_json::json!([{"name": "runc"}]),
    }
}

/// Whether the suites run on gVisor (`SANDBOXD_TEST_RUNTIME=runsc`).
pub fn on_runsc() -> bool {
    runtime_name() == "runsc"
}

/// The network namespace of the daemon under test (`SANDBOXD_TEST_DAEMON_NETNS`, a name under
/// `/run/netns`, as `scripts/runsc-daemon.sh` makes): where its published ports listen.
pub fn daemon_netns() -> Option<String> {
    std::env::var("SANDBOXD_TEST_DAEMON_NETNS").ok().filter(|n| !n.is_empty())
}

/// Runs `work` on a thread of its own that has entered [`daemon_netns`] (when one is set), so
/// a test's client reaches the daemon's published ports; other threads stay where they are.
pub async fn in_daemon_netns<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    let netns = daemon_netns();
    tokio::task::spawn_blocking(move || {
        std::thread::spawn(move || {
            if let Some(name) = netns {
                let file = std::fs::File::open(format!("/run/netns/{name}"))
                    .unwrap_or_else(|e| panic!("SANDBOXD_TEST_DAEMON_NETNS {name:?}: {e}"));
                use std::os::fd::AsRawFd;
                // SAFETY: setns on a descriptor we hold open; it moves only this thread.
                let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(rc, 0, "entering network namespace {name:?}: {}", std::io::Error::last_os_error());
            }
            work()
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
    .await
    .expect("the namespace thread")
}

/// A provider with test-friendly defaults whose containers carry `label`.
pub fn provider_with(label: &TestLabel, edit: impl FnOnce(&mut DockerConfig)) -> DockerProvider {
    require_docker();
    DockerProvider::new(test_config(label, edit)).expect("provider")
}

/// As `provider_with`, sandboxes' run directories under `state_dir` (`server.state_dir`).
pub fn provider_in(
    label: &TestLabel,
    state_dir: &std::path::Path,
    edit: impl FnOnce(&mut DockerConfig),
) -> DockerProvider {
    require_docker();
    DockerProvider::new_in(test_config(label, edit), state_dir.to_path_buf()).expect("provider")
}

/// A `docker` wrapper in `dir` for [`provider_with_binary`] that appends `logged` (shell words
/// of its arguments: `"$1 $2"`, `"$*"`) to a log, one line a call, then runs the real client.
/// Returns the wrapper and its log.
pub fn recording_docker(dir: &std::path::Path, logged: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let real = sandboxd::backends::docker::cli::DockerCli::locate().expect("docker on PATH");
    let log = dir.join("calls");
    let wrapper = dir.join("docker");
    let script = format!(
        "#!/bin/sh\nprintf '%s\\n' {logged} >> {log}\nexec {real} \"$@\"\n",
        log = log.display(),
        real = real.display()
    );
    std::fs::write(&wrapper, script).unwrap();
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    (wrapper, log)
}

/// As `provider_with`, running `binary` as docker (a wrapper that slows or records commands).
pub fn provider_with_binary(
    label: &TestLabel,
    binary: std::path::PathBuf,
    edit: impl FnOnce(&mut DockerConfig),
) -> DockerProvider {
    require_docker();
    DockerProvider::with_binary(test_config(label, edit), binary).expect("provider")
}

/// The test defaults: `label` on every container, a 60 s exec timeout, the engine and
/// transport under test.
fn test_config(label: &TestLabel, edit: impl FnOnce(&mut DockerConfig)) -> DockerConfig {
    let mut config = DockerConfig::default();
    config.create.extra_run_args = label.run_args();
    config.exec.default_timeout = Some(std::time::Duration::from_secs(60));
    config.exec.engine = engine();
    config.exec.transport = transport();
    config.create.runtime = runtime_name().into();
    if on_runsc() {
        config.runtimes.0.push(sandboxd::config::RuntimeOffer::new("runsc"));
    }
    edit(&mut config);
    config
}

pub fn provider(label: &TestLabel) -> DockerProvider {
    provider_with(label, |_| {})
}

pub fn docker(args: &[&str]) -> std::process::Output {
    Command::new("docker").args(args).output().expect("docker")
}

/// Whether the machine's daemon has a container of this name or id (running or not).
pub fn container_exists(name: &str) -> bool {
    docker(&["inspect", "--type", "container", name]).status.success()
}

/// A label (metadata) map from pairs.
pub fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Upload one host file through the backend (what a caller of the seam does with a file).
pub async fn upload_file(
    backend: &dyn SandboxBackend,
    handle: &sandboxd::core::spec::SandboxHandle,
    source: &std::path::Path,
    target: &str,
) -> sandboxd::Result<u64> {
    let file = tokio::fs::File::open(source).await.map_err(|e| {
        sandboxd::ProviderError::FileNotFound(format!("cannot read local file {}: {e}", source.display()))
    })?;
    let meta = file.metadata().await?;
    if !meta.is_file() {
        return Err(sandboxd::ProviderError::FileNotFound(format!(
            "{} is not a regular file",
            source.display()
        )));
    }
    let reader = Box::new(tokio::io::BufReader::with_capacity(256 * 1024, file));
    backend.upload(handle, reader, meta.len(), target, None, &[]).await
}

/// Download one sandbox file to the host through the backend (parents of `target` created).
pub async fn download_file(
    backend: &dyn SandboxBackend,
    handle: &sandboxd::core::spec::SandboxHandle,
    source: &str,
    target: &std::path::Path,
) -> sandboxd::Result<u64> {
    use tokio::io::AsyncWriteExt;
    let mut download = backend.download(handle, source).await?;
    if let Some(parent) = target.parent() {
        tokio::fs::create_dir_all(parent).await?;
    }
    let mut file = tokio::fs::File::create(target).await?;
    let mut written = 0u64;
    while let Some(chunk) = download.next_chunk().await? {
        file.write_all(&chunk).await?;
        written += chunk.len() as u64;
    }
    file.flush().await?;
    Ok(written)
}
