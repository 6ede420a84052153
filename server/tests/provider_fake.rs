//! The provider's exact docker command lines and its create reconciliation, checked at the
//! subprocess boundary with a recording fake `docker`. (Every behaviour here also runs against
//! the real daemon in `provider.rs`; the fake only adds what a real daemon cannot be made to do
//! on demand: lose a `docker run` response, or hold a name for a stranger.)

use std::path::{Path, PathBuf};

use sandboxd::backends::docker::DockerProvider;
use sandboxd::config::DockerConfig;
use sandboxd::core::spec::ExecParams;
use sandboxd::core::spec::SandboxSpec;
use sandboxd::ProviderError;

/// A fake docker: logs each argv (one line, args joined by `|`) and answers per subcommand with
/// the shell snippets given.
struct FakeDocker {
    dir: tempfile::TempDir,
}

impl FakeDocker {
    fn new(run: &str, inspect: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("calls.log");
        let script = format!(
            r#"#!/bin/sh
log='{log}'
line=""
for a in "$@"; do line="$line|$(printf '%s' "$a" | tr '\n' ' ')"; done
printf "%s\\n" "${{line#|}}" >> "$log"
printf '%s\t%s\t%s\t%s\t%s\n' "$1" "${{TOKEN-}}" "${{DOCKER_HOST-}}" "${{SANDBOXD_ENV_PATH-}}" "$PATH" >> "$log.env"
n=$(grep -c "^$1|" "$log")
case "$1" in
  run) {run} ;;
  inspect) {inspect} ;;
  start) exit 0 ;;
  rm) exit 0 ;;
  exec) printf docker-sandbox-ready; printf '\n__sandboxd_shell=bash\n' >&2; exit 0 ;;
  port) echo "0.0.0.0:49153"; echo "[::]:49153" ;;
  *) exit 0 ;;
esac
"#,
            log = log.display()
        );
        let path = dir.path().join("docker");
        std::fs::write(&path, script).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        Self { dir }
    }

    fn binary(&self) -> PathBuf {
        self.dir.path().join("docker")
    }

    /// The calls the operations made, in order. The status table's own stream (`docker
    /// events` and the `docker ps` that resynchronises it) starts in the background at the
    /// first state question and is left out, so its timing cannot shift the indexes.
    fn calls(&self) -> Vec<Vec<String>> {
        let table_stream = sandboxd::backends::docker::argv::events_args();
        let table_resync = sandboxd::backends::docker::argv::owned_states_args();
        read_calls(&self.dir.path().join("calls.log"))
            .into_iter()
            .filter(|c| *c != table_stream && *c != table_resync)
            .collect()
    }

    fn provider(&self, edit: impl FnOnce(&mut DockerConfig)) -> DockerProvider {
        let mut config = DockerConfig::default();
        config.create.transport_retry_delay = std::time::Duration::ZERO;
        // The exact command lines pinned here are the `docker exec` engine's.
        config.exec.engine = sandboxd::config::ExecEngineKind::Docker;
        // A fake docker has no storage driver to put a disk bound on (the loop disk is
        // `walls.rs`'s, on the real daemon).
        config.create.default_disk_gib = None;
        config.create.disk_bound = sandboxd::config::DiskBound::StorageOpt;
        // Nor a tenant network (its own `docker network` calls are walls.rs's to check).
        config.create.tenant_network = false;
        edit(&mut config);
        DockerProvider::with_binary(config, self.binary()).unwrap()
    }
}

fn read_calls(log: &Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| l.split('|').map(String::from).collect())
        .collect()
}

fn subcommands(calls: &[Vec<String>]) -> Vec<String> {
    calls.iter().map(|c| c[0].clone()).collect()
}

const OWNED_CREATED: &str =
    r#"printf '{"sandboxd.sandbox":"1"}\tsandboxd-test/busybox:1\tcreated\t\n'; exit 0"#;
const STRANGER: &str = r#"printf 'null\tsandboxd-test/busybox:1\trunning\t\n'; exit 0"#;
const MISSING: &str = r#"echo "Error: No such object: x" >&2; exit 1"#;

#[tokio::test]
async fn lost_run_response_is_reconciled_by_name_and_started() {
    // The first run hangs past start_timeout_s (its response is lost), but the container exists.
    let fake = FakeDocker::new(r#"if [ "$n" = 1 ]; then sleep 5; fi; exit 0"#, OWNED_CREATED);
    let p = fake.provider(|c| c.create.start_timeout = Some(std::time::Duration::from_millis(500)));
    let h = p.create(&SandboxSpec::new("sandboxd-test/busybox:1")).await.unwrap();
    assert_eq!(h.shell, "bash");
    let calls = fake.calls();
    assert_eq!(subcommands(&calls), ["run", "inspect", "start", "exec", "rename"]);
    let creating = sandboxd::backends::docker::argv::creating_name(&h.sandbox_id);
    assert_eq!(calls[1].last(), Some(&creating), "inspects the exact name");
    assert_eq!(calls[2], ["start".to_string(), creating.clone()]);
    assert_eq!(calls[4], ["rename".to_string(), creating, h.sandbox_id.clone()], "renamed once complete");
}

#[tokio::test]
async fn name_conflict_with_a_stranger_is_never_removed() {
    let fake = FakeDocker::new(
        r#"echo 'docker: Error response from daemon: Conflict. The container name "/x" is already in use by container "abc".' >&2; exit 125"#,
        STRANGER,
    );
    let p = fake.provider(|_| {});
    let err = p.create(&SandboxSpec::new("sandboxd-test/busybox:1")).await.unwrap_err();
    assert!(matches!(err, ProviderError::Create(_)), "{err:?}");
    assert!(err.to_string().contains("does not own"), "{err}");
    let subs = subcommands(&fake.calls());
    assert_eq!(subs, ["run", "inspect"]);
    assert!(!subs.contains(&"rm".to_string()));
}

#[tokio::test]
async fn transport_errors_are_retried_then_reported_unavailable() {
    let fake = FakeDocker::new(
        r#"echo 'docker: Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?' >&2; exit 125"#,
        MISSING,
    );
    let p = fake.provider(|c| c.create.transport_retries = 2);
    let err = p.create(&SandboxSpec::new("sandboxd-test/busybox:1")).await.unwrap_err();
    assert!(matches!(err, ProviderError::Unavailable(_)), "{err:?}");
    let subs = subcommands(&fake.calls());
    assert_eq!(subs.iter().filter(|s| *s == "run").count(), 3, "{subs:?}");
    // Every attempt used the same fixed name, so a late success could never duplicate it.
    let names: std::collections::BTreeSet<String> =
        fake.calls().iter().filter(|c| c[0] == "run").map(|c| c[3].clone()).collect();
    assert_eq!(names.len(), 1);
}

#[tokio::test]
async fn transport_error_then_success_on_retry() {
    let fake = FakeDocker::new(
        r#"if [ "$n" = 1 ]; then echo 'error during connect: unexpected EOF' >&2; exit 1; fi; exit 0"#,
        MISSING,
    );
    let p = fake.provider(|_| {});
    p.create(&SandboxSpec::new("sandboxd-test/busybox:1")).await.unwrap();
    assert_eq!(subcommands(&fake.calls()), ["run", "inspect", "run", "exec", "rename"]);
}

#[tokio::test]
async fn exact_exec_port_and_rm_command_lines() {
    let fake = FakeDocker::new("exit 0", OWNED_CREATED);
    let p = fake.provider(|c| {
        c.exec.extra_exec_args = vec!["--privileged".into()];
        c.create.publish_host = "10.1.2.3".into();
    });
    let h = p.create(&SandboxSpec { ports: vec![8080], ..SandboxSpec::new("img") }).await.unwrap();
    let env = [("SECRET".to_string(), "v".to_string())].into();
    p.exec(
        &h,
        "echo hi",
        &ExecParams {
            cwd: Some("/w".into()),
            env,
            user: Some("root".into()),
            stdin: Some(b"x".to_vec()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let ep = p.endpoint(&h, 8080).await.unwrap();
    assert_eq!(ep.endpoint, "http://10.1.2.3:49153", "0.0.0.0 maps to publish_host");
    p.close(&h.id()).await.unwrap();
    // The close kills; the removal finishes in the background (waited for here).
    p.settle_removals().await;
    let calls = fake.calls();
    let name = h.sandbox_id.clone();
    let expect_exec: Vec<String> = [
        "exec",
        "-i",
        "-w",
        "/w",
        "--env",
        "SECRET",
        "--user",
        "0",
        "--privileged",
        &name,
        "bash",
        "-c",
        "echo hi",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(calls[2][0], "rename", "the create's last step");
    assert_eq!(calls[3], expect_exec);
    assert_eq!(calls[4], ["port".to_string(), name.clone(), "8080/tcp".into()]);
    // No cgroup of a fake container to end it through: docker kill, then in the background
    // docker wait (the daemon has handled the exit) and rm.
    assert_eq!(calls[5], ["kill".to_string(), name.clone()]);
    assert_eq!(calls[6], ["wait".to_string(), name.clone()]);
    assert_eq!(calls[7], ["rm".to_string(), "-f".into(), name]);
}

#[tokio::test]
async fn pty_session_marker_is_the_last_env_flag() {
    let fake = FakeDocker::new("exit 0", OWNED_CREATED);
    let p = fake.provider(|_| {});
    let h = p.create(&SandboxSpec::new("img")).await.unwrap();
    let env =
        [("SANDBOXD_PTY_SESSION".to_string(), "forged".to_string()), ("A".to_string(), "1".to_string())]
            .into();
    let spec = sandboxd::core::spec::PtySpec {
        env,
        user: Some("root".into()),
        rows: 30,
        cols: 90,
        ..Default::default()
    };
    let session = p.create_pty(&h, &spec).await.unwrap();
    let _ = session.wait_exit(Some(std::time::Duration::from_secs(10))).await;
    session.close().await.unwrap();
    let calls = fake.calls();
    let pty_call =
        calls.iter().find(|c| c.len() > 2 && c[0] == "exec" && c[1] == "-i" && c[2] == "-t").unwrap();
    let name_at = pty_call.iter().position(|a| a == &h.sandbox_id).unwrap();
    let flags = &pty_call[..name_at];
    let envs: Vec<&String> =
        flags.iter().enumerate().filter(|(i, _)| *i > 0 && flags[i - 1] == "--env").map(|(_, v)| v).collect();
    let marker = format!("SANDBOXD_PTY_SESSION={}", session.id());
    assert_eq!(envs.last().map(|s| s.as_str()), Some(marker.as_str()), "{pty_call:?}");
    assert!(envs.contains(&&"SANDBOXD_PTY_SESSION".to_string()), "spec env is passed, then overridden");
    assert_eq!(flags[flags.len() - 2..], ["--env".to_string(), marker.clone()]);
    assert!(flags.windows(2).any(|w| w == ["--user".to_string(), "0".to_string()]));
    // The program is the launcher under the sandbox's shell, with both pid record paths.
    let program = &pty_call[name_at + 1..];
    assert_eq!(program[0], "bash");
    assert_eq!(program[1], "-c");
    assert_eq!(program[3], format!("/tmp/.sandboxd-pty-{}", session.id()));
    assert_eq!(program[4], format!("/dev/shm/.sandboxd-pty-{}", session.id()));
}

/// Env values (issue 9): a client's values never reach a docker command line (any host user can
/// read `/proc/<pid>/cmdline`); they travel in the docker client's environment behind
/// `--env KEY`, and a key that would configure the client itself (`DOCKER_HOST`, `PATH`) never
/// lands in the client's environment under its own name: an env file on the detached run's stdin
/// for `docker run`, a renamed variable the container's shell renames back for `docker exec`.
#[tokio::test]
async fn env_values_travel_in_the_docker_clients_environment_never_on_its_argv() {
    let fake = FakeDocker::new(r#"cat > "$log.stdin"; exit 0"#, OWNED_CREATED);
    let p = fake.provider(|_| {});
    let env = [
        ("TOKEN".to_string(), "tok-SECRET-create".to_string()),
        ("DOCKER_HOST".to_string(), "tcp://evil-SECRET:2375".to_string()),
    ]
    .into();
    let h = p.create(&SandboxSpec { env, ..SandboxSpec::new("img") }).await.unwrap();
    let env = [
        ("TOKEN".to_string(), "tok-SECRET-exec".to_string()),
        ("PATH".to_string(), "/evil-SECRET/bin".to_string()),
    ]
    .into();
    p.exec(&h, "echo hi", &ExecParams { env, ..Default::default() }).await.unwrap();
    let pty_env = [("TOKEN".to_string(), "tok-SECRET-pty".to_string())].into();
    let spec = sandboxd::core::spec::PtySpec { env: pty_env, rows: 30, cols: 90, ..Default::default() };
    let session = p.create_pty(&h, &spec).await.unwrap();
    let _ = session.wait_exit(Some(std::time::Duration::from_secs(10))).await;
    session.close().await.unwrap();

    let calls = fake.calls();
    for call in &calls {
        assert!(!call.iter().any(|a| a.contains("SECRET")), "a value on a docker argv: {call:?}");
    }
    let run = calls.iter().find(|c| c[0] == "run").unwrap();
    assert!(run.windows(2).any(|w| w == ["--env", "TOKEN"]), "{run:?}");
    assert!(run.windows(2).any(|w| w == ["--env-file", "/dev/stdin"]), "{run:?}");
    let stdin = std::fs::read_to_string(fake.dir.path().join("calls.log.stdin")).unwrap();
    assert_eq!(stdin, "DOCKER_HOST=tcp://evil-SECRET:2375\n", "docker-client keys go in the env file");
    let exec = calls
        .iter()
        .find(|c| c[0] == "exec" && c.contains(&"--env".to_string()) && !c.contains(&"-t".to_string()))
        .unwrap();
    assert!(exec.windows(2).any(|w| w == ["--env", "SANDBOXD_ENV_PATH"]), "{exec:?}");
    let script = exec.last().unwrap();
    assert!(
        script.starts_with("PATH=\"$SANDBOXD_ENV_PATH\"; export PATH; unset SANDBOXD_ENV_PATH; "),
        "{script}"
    );
    assert!(script.ends_with("echo hi"), "{script}");

    // What each docker client saw in its environment: `subcommand TOKEN DOCKER_HOST alias PATH`.
    let seen = std::fs::read_to_string(fake.dir.path().join("calls.log.env")).unwrap();
    let rows: Vec<Vec<&str>> = seen.lines().map(|l| l.split('\t').collect()).collect();
    for want in ["tok-SECRET-create", "tok-SECRET-exec", "tok-SECRET-pty"] {
        assert!(rows.iter().any(|r| r[1] == want), "{want} reached no docker client: {seen}");
    }
    assert!(rows.iter().any(|r| r[0] == "exec" && r[3] == "/evil-SECRET/bin"), "{seen}");
    for row in &rows {
        assert!(
            !row[2].contains("evil") && !row[4].contains("evil"),
            "the client itself was redirected: {row:?}"
        );
    }
}

#[tokio::test]
async fn docker_client_keys_that_cannot_travel_safely_are_invalid_arguments() {
    let fake = FakeDocker::new("exit 0", OWNED_CREATED);
    let p = fake.provider(|_| {});
    let env = [("LD_PRELOAD".to_string(), "/a.so\n/b.so".to_string())].into();
    let err = p.create(&SandboxSpec { env, ..SandboxSpec::new("img") }).await.unwrap_err();
    assert!(matches!(&err, ProviderError::InvalidArgument { field, .. } if field == "spec.env"), "{err:?}");
    assert!(err.to_string().contains("LD_PRELOAD"), "{err}");
    let env = [("SANDBOXD_ENV_PATH".to_string(), "x".to_string())].into();
    let err = p.create(&SandboxSpec { env, ..SandboxSpec::new("img") }).await.unwrap_err();
    assert!(err.to_string().contains("reserved"), "{err}");
    assert!(fake.calls().is_empty(), "nothing ran: {:?}", fake.calls());
}
