use std::collections::BTreeMap;

use super::*;
use crate::config::{DockerCreateConfig, DockerExecConfig};
use crate::core::spec::{SandboxResources, SandboxSpec};

#[test]
fn the_agent_is_one_read_only_file_mount() {
    let a = agent_mount_args(std::path::Path::new("/var/lib/sandboxd/agent-0123"));
    assert_eq!(
        a,
        ["--mount", "type=bind,source=/var/lib/sandboxd/agent-0123,target=/.sandboxd/agent,readonly"]
    );
}
use crate::core::spec::ProviderOptions;

fn v(items: &[&str]) -> Vec<String> {
    items.iter().map(|x| x.to_string()).collect()
}

#[test]
fn run_with_defaults() {
    let cfg = DockerCreateConfig::default();
    let spec = SandboxSpec::new("docker://img:1");
    assert_eq!(
        run_args(&cfg, &spec, "sandboxd-x"),
        v(&[
            "run",
            "-d",
            "--name",
            "sandboxd-x",
            "--label",
            "sandboxd.sandbox=1",
            "--init",
            "--cpus",
            "2",
            "--memory",
            "4096m",
            "--memory-swap",
            "4096m",
            "--cap-drop",
            "AUDIT_WRITE",
            "--cap-drop",
            "MKNOD",
            "--cap-drop",
            "NET_RAW",
            "--cap-drop",
            "SETFCAP",
            "--cap-drop",
            "SETPCAP",
            "--cap-drop",
            "SYS_CHROOT",
            "--pids-limit",
            "4096",
            "--security-opt",
            "no-new-privileges",
            "--pull=missing",
            "--entrypoint",
            "/bin/sh",
            "img:1",
            "-c",
            "while :; do sleep 2147483647; done"
        ])
    );
}

#[test]
fn run_with_everything() {
    let cfg = DockerCreateConfig {
        network: Some("none".into()),
        read_only: true,
        cap_drop: vec!["ALL".into()],
        security_opt: vec!["no-new-privileges".into()],
        pids_limit: Some(128),
        extra_run_args: vec!["--label".into(), "op=1".into()],
        publish_host: "::1".into(),
        use_init: false,
        ..Default::default()
    };
    let spec = SandboxSpec {
        image: "img".into(),
        ttl_s: Some(2.2),
        workdir: Some("/work".into()),
        env: [("A".to_string(), "1".to_string())].into(),
        resources: SandboxResources {
            cpu: Some(1.5),
            memory_mib: Some(256),
            gpu: Some(1),
            disk_gib: Some(9),
            gpu_type: Some("h100".into()),
        },
        ports: vec![8080],
        provider_options: ProviderOptions {
            volumes: vec!["/data:/data".into()],
            run_args: vec!["--tmpfs=/x".into()],
        },
        ..Default::default()
    };
    assert_eq!(
        run_args(&cfg, &spec, "n"),
        v(&[
            "run",
            "-d",
            "--name",
            "n",
            "--label",
            "sandboxd.sandbox=1",
            "--label",
            "sandboxd.ports=8080",
            "-w",
            "/work",
            "--env",
            "A",
            "--cpus",
            "1.5",
            "--memory",
            "256m",
            "--memory-swap",
            "256m",
            "--gpus",
            "1",
            "--network",
            "none",
            "--read-only",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--pids-limit",
            "128",
            "--publish",
            "[::1]::8080/tcp",
            "-v",
            "/data:/data",
            "--pull=missing",
            "--label",
            "op=1",
            "--tmpfs=/x",
            "--entrypoint",
            "/bin/sh",
            "img",
            "-c",
            "while :; do sleep 2147483647; done"
        ])
    );
}

#[test]
fn run_with_custom_entrypoint_and_no_limits() {
    let cfg = DockerCreateConfig { apply_resource_limits: false, ..Default::default() };
    let spec = SandboxSpec {
        image: "img".into(),
        ttl_s: Some(5.0),
        entrypoint: Some(v(&["/bin/app", "--serve"])),
        resources: SandboxResources { cpu: Some(2.0), gpu: Some(1), ..Default::default() },
        ..Default::default()
    };
    let argv = run_args(&cfg, &spec, "n");
    assert!(!argv.contains(&"--rm".to_string()));
    assert!(!argv.contains(&"--cpus".to_string()));
    assert!(!argv.contains(&"--gpus".to_string()), "--gpus is a resource limit: {argv:?}");
    assert!(argv.ends_with(&v(&["--entrypoint", "/bin/app", "img", "--serve"])));
}

#[test]
fn exec_flags_in_order_with_marker_last() {
    let cfg = DockerExecConfig { extra_exec_args: v(&["--privileged"]), ..Default::default() };
    let env: BTreeMap<String, String> = [("K".to_string(), "v".to_string())].into();
    let opts = ExecOptions {
        cwd: Some("/w"),
        env: Some(&env),
        user: Some("0"),
        interactive: true,
        tty: true,
        last_env: Some("SANDBOXD_PTY_SESSION=abc"),
    };
    assert_eq!(
        exec_args(&cfg, "c", &opts, &shell_command("bash", "echo hi")),
        v(&[
            "exec",
            "-i",
            "-t",
            "-w",
            "/w",
            "--env",
            "K",
            "--user",
            "0",
            "--privileged",
            "--env",
            "SANDBOXD_PTY_SESSION=abc",
            "c",
            "bash",
            "-c",
            "echo hi"
        ])
    );
    assert_eq!(
        exec_args(&DockerExecConfig::default(), "c", &ExecOptions::default(), &shell_command("sh", "x")),
        v(&["exec", "c", "sh", "-c", "x"])
    );
}

#[test]
fn env_values_never_reach_the_argv() {
    let env: BTreeMap<String, String> = [
        ("TOKEN".to_string(), "s3cret".to_string()),
        ("DOCKER_HOST".to_string(), "tcp://inner:2375".to_string()),
        ("PATH".to_string(), "/opt/bin:/bin".to_string()),
    ]
    .into();
    let spec = SandboxSpec { image: "img".into(), env: env.clone(), ..Default::default() };
    let run = run_args(&DockerCreateConfig::default(), &spec, "n");
    assert!(run.windows(2).any(|w| w == ["--env", "TOKEN"]), "{run:?}");
    assert!(run.windows(2).any(|w| w == ["--env-file", ENV_FILE_STDIN]), "{run:?}");
    assert!(!run.iter().any(|a| a.contains("s3cret") || a.contains("inner") || a.contains("/opt/bin")));
    let (values, file) = run_env(&env);
    assert_eq!(values, [("TOKEN".to_string(), "s3cret".to_string())]);
    assert_eq!(
        String::from_utf8(file.unwrap()).unwrap(),
        "DOCKER_HOST=tcp://inner:2375\nPATH=/opt/bin:/bin\n"
    );

    let opts = ExecOptions { env: Some(&env), ..Default::default() };
    let exec = exec_args(&DockerExecConfig::default(), "c", &opts, &shell_command("sh", "x"));
    assert_eq!(
        exec,
        v(&[
            "exec",
            "--env",
            "SANDBOXD_ENV_DOCKER_HOST",
            "--env",
            "SANDBOXD_ENV_PATH",
            "--env",
            "TOKEN",
            "c",
            "sh",
            "-c",
            "x"
        ])
    );
    let (values, prefix) = exec_env(&env);
    assert!(values.contains(&("SANDBOXD_ENV_PATH".to_string(), "/opt/bin:/bin".to_string())));
    assert!(values.contains(&("TOKEN".to_string(), "s3cret".to_string())));
    assert!(
        !values.iter().any(|(k, _)| k == "PATH" || k == "DOCKER_HOST"),
        "never set for the client: {values:?}"
    );
    assert_eq!(
        prefix,
        "DOCKER_HOST=\"$SANDBOXD_ENV_DOCKER_HOST\"; export DOCKER_HOST; unset SANDBOXD_ENV_DOCKER_HOST; \
         PATH=\"$SANDBOXD_ENV_PATH\"; export PATH; unset SANDBOXD_ENV_PATH; "
    );
    for key in ["DOCKER_CONFIG", "LD_PRELOAD", "https_proxy", "HOME", "OTEL_EXPORTER_OTLP_ENDPOINT"] {
        assert!(configures_docker_client(key), "{key}");
    }
    for key in ["TOKEN", "TERM", "LANG", "GOPATH", "PYTHONPATH"] {
        assert!(!configures_docker_client(key), "{key}");
    }
    let bad = |k: &str, v: &str| [(k.to_string(), v.to_string())].into();
    assert!(check_docker_env(&bad("DOCKER_X-Y", "1"), false).is_err());
    assert!(check_docker_env(&bad("SANDBOXD_ENV_X", "1"), false).unwrap_err().contains("reserved"));
    assert!(check_docker_env(&bad("PATH", "a\nb"), true).is_err());
    assert!(check_docker_env(&bad("PATH", "a\nb"), false).is_ok(), "exec renames, any value goes");
    assert!(check_docker_env(&bad("TOKEN", "a\nb"), true).is_ok());
}

#[test]
fn small_commands() {
    assert_eq!(rm_args("n"), v(&["rm", "-f", "n"]));
    assert_eq!(start_args("n"), v(&["start", "n"]));
    assert_eq!(port_args("n", 80), v(&["port", "n", "80/tcp"]));
    assert_eq!(cp_in_args("n"), v(&["cp", "-", "n:/"]));
    assert_eq!(cp_out_args("n", "/a b"), v(&["cp", "-L", "n:/a b", "-"]));
    assert_eq!(inspect_args("n")[..4], v(&["inspect", "--type", "container", "-f"])[..]);
    assert_eq!(pull_policy_args("missing").unwrap(), v(&["--pull=missing"]));
    assert!(pull_policy_args("sometimes").unwrap_err().contains("always, missing, never"));
    let ulimits: BTreeMap<String, String> = [("nofile".to_string(), "1024:2048".to_string())].into();
    let sysctls: BTreeMap<String, String> = [("net.core.somaxconn".to_string(), "1024".to_string())].into();
    assert_eq!(
        service_option_args(&v(&["/run"]), &ulimits, &sysctls, &v(&["seccomp=unconfined"])),
        v(&[
            "--tmpfs",
            "/run",
            "--ulimit",
            "nofile=1024:2048",
            "--sysctl",
            "net.core.somaxconn=1024",
            "--security-opt",
            "seccomp=unconfined"
        ])
    );
}

#[test]
fn lease_labels_follow_the_ownership_label_and_creates_run_under_their_own_name() {
    let run = run_args(&DockerCreateConfig::default(), &SandboxSpec::new("img"), "c");
    let run = with_labels(run, &[("sandboxd.created_ms", "5".into())]);
    assert_eq!(
        run[..8],
        v(&["run", "-d", "--name", "c", "--label", "sandboxd.sandbox=1", "--label", "sandboxd.created_ms=5"])
            [..]
    );
    let id = crate::core::spec::SandboxId::generate().to_string();
    let creating = creating_name(&id);
    assert!(creating.starts_with(CREATING_NAME_PREFIX) && creating.ends_with(&id["sandboxd-".len()..]));
    assert!(
        !crate::core::spec::SandboxId::has_valid_shape(&creating),
        "a create in progress is never reachable by id"
    );
    assert_eq!(rename_args("a", "b"), v(&["rename", "a", "b"]));
    let cfg = DockerCreateConfig {
        extra_run_args: v(&["--label", "team=a", "--label=tier=2", "--init"]),
        ..Default::default()
    };
    let list = sweep_list_args(&cfg);
    assert!(list.last().unwrap().contains("{{.Label \"sandboxd.expires_ms\"}}"));
    assert!(
        list.windows(2).any(|w| w == ["--filter", "label=team=a"])
            && list.windows(2).any(|w| w == ["--filter", "label=tier=2"]),
        "{list:?}"
    );
}

#[test]
fn ids_and_ports() {
    let name = crate::core::spec::SandboxId::generate().to_string();
    assert!(crate::core::spec::SandboxId::has_valid_shape(&name), "{name}");
    assert!(!crate::core::spec::SandboxId::has_valid_shape("--privileged"));
    assert!(!crate::core::spec::SandboxId::has_valid_shape("sandboxd-../../x"));
    assert!(!crate::core::spec::SandboxId::has_valid_shape("other-0123456789abcdef0123456789abcdef"));
    assert_eq!(parse_port_binding("127.0.0.1:49153").unwrap(), ("127.0.0.1".into(), 49153));
    assert_eq!(parse_port_binding("[::]:8080").unwrap(), ("::".into(), 8080));
    assert!(parse_port_binding("nonsense").is_err());
    assert_eq!(http_endpoint("::1", 80), "http://[::1]:80");
    assert_eq!(publish_arg("127.0.0.1", 80), "127.0.0.1::80/tcp");
}

#[test]
fn the_agent_starts_as_the_keep_alive_wrapping_the_entrypoint() {
    let cfg = DockerCreateConfig::default();
    let run_in = |user: &str, spec: &SandboxSpec, run_dir: Option<&str>| {
        let agent = AgentRun {
            binary: "/s/agent-1".into(),
            run_dir: run_dir.map(Into::into),
            image_user: user.into(),
            init_flags: v(&["--probe", "true"]),
        };
        agent_run_args(&cfg, spec, "n", &agent)
    };
    let run = |user: &str, spec: &SandboxSpec| run_in(user, spec, Some("/s/sandboxes/sandboxd-x/run"));
    let a = run("", &SandboxSpec::new("img"));
    let tail = a.iter().position(|x| x == "--entrypoint").unwrap();
    assert_eq!(
        a[tail..],
        v(&["--entrypoint", "/.sandboxd/agent", "img", "init", "--probe", "true", "--keep-alive", "--"])
            .into_iter()
            .chain(v(&["/bin/sh", "-c"]))
            .chain([cfg.keepalive_cmd.clone()])
            .collect::<Vec<_>>()[..]
    );
    assert!(a.iter().any(|x| x == "type=bind,source=/s/sandboxes/sandboxd-x/run,target=/.sandboxd/run"));
    assert!(a.iter().any(|x| x == "sandboxd.agent.user="), "{a:?}");
    assert!(!a.iter().any(|x| x.starts_with("sandboxd.agent.inner")), "{a:?}");
    assert!(!a.windows(2).any(|w| w == ["-u", "0"]), "a root image needs no -u: {a:?}");
    // A sandbox made to be checkpointed: its socket on a tmpfs inside it, marked so.
    let inner = run_in("", &SandboxSpec::new("img"), None);
    assert!(inner.iter().any(|x| x == "type=tmpfs,target=/.sandboxd/run,tmpfs-mode=0700"), "{inner:?}");
    assert!(inner.iter().any(|x| x == "sandboxd.agent.inner=1"), "{inner:?}");
    assert!(!inner.iter().any(|x| x.starts_with("type=bind,source=/s/sandboxes")), "{inner:?}");
    let mut spec = SandboxSpec::new("img");
    spec.entrypoint = Some(v(&["app", "--port", "1"]));
    let a = run("sandbox", &spec);
    assert!(a.windows(2).any(|w| w == ["-u", "0"]), "{a:?}");
    assert!(a.iter().any(|x| x == "sandboxd.agent.user=sandbox"));
    assert!(
        a.ends_with(&v(&["init", "--user", "sandbox", "--probe", "true", "--", "app", "--port", "1"])),
        "{a:?}"
    );
    assert_eq!(a.iter().filter(|x| *x == "--entrypoint").count(), 1);
    assert!(sets_user_or_entrypoint(&v(&["--user", "1"])) && sets_user_or_entrypoint(&v(&["-u0"])));
    assert!(sets_user_or_entrypoint(&v(&["--entrypoint=/x"])));
    assert!(!sets_user_or_entrypoint(&v(&["--ulimit", "nofile=1", "--label", "a=b"])));
}

#[test]
fn stats_and_list_filters() {
    assert_eq!(
        stats_inspect_args("sandboxd-a"),
        v(&[
            "inspect",
            "--type",
            "container",
            "-f",
            "{{.Id}}\t{{.State.Pid}}\t{{.State.Status}}",
            "sandboxd-a"
        ])
    );
    let operator = v(&["--label", "team=a", "-e", "X=1"]);
    assert_eq!(
        pool_owner_filter_args("/state/mark", &operator),
        v(&["--filter", "label=sandboxd.pool.owner=/state/mark", "--filter", "label=team=a"])
    );
    assert_eq!(pool_member_filter_args(), v(&["--filter", "label=sandboxd.pool"]));
    assert_eq!(tenant_filter_args("red"), v(&["--filter", "label=sandboxd.tenant=red"]));
}
