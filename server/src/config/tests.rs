use std::time::Duration;

use serde_json::json;

use super::*;

fn load(v: serde_json::Value) -> Result<DockerConfig, ConfigError> {
    DockerConfig::from_json_value(&v)
}

#[test]
fn defaults_match_the_seed() {
    let c = load(json!({})).unwrap();
    assert_eq!(c.create.start_timeout, Some(Duration::from_secs(600)));
    assert!(c.create.use_init);
    assert_eq!(c.create.publish_host, "127.0.0.1");
    assert_eq!(c.create.transport_retries, 2);
    assert_eq!(c.create.transport_retry_delay, Duration::from_secs(1));
    assert_eq!(c.exec.default_timeout, Some(Duration::from_secs(180)));
    assert_eq!(c.exec.concurrency, 32);
    assert_eq!(c.exec.engine, ExecEngineKind::Agent);
    assert_eq!(c.probe.command.as_deref(), Some(READY_PROBE_COMMAND));
    assert_eq!(c.probe.timeout, Duration::from_secs(30));
    assert_eq!(c.probe.stable_count, 1);
}

#[test]
fn unknown_key_is_named() {
    let err = load(json!({"docker": {"create": {"pids_limt": 3}}})).unwrap_err();
    assert!(err.message.contains("pids_limt"), "{err}");
    let err = load(json!({"docker": {"bogus": {}}})).unwrap_err();
    assert!(err.message.contains("bogus"), "{err}");
    let err = FileConfig::from_json_value(&json!({"dockr": {}})).unwrap_err();
    assert!(err.message.contains("dockr"), "{err}");
    let err = FileConfig::from_json_value(&json!({"server": {"allow_volumes": true}})).unwrap_err();
    assert!(err.message.contains("allow_volumes"), "{err}");
}

#[test]
fn post_init_validation() {
    let cases = [
        (json!({"create": {"start_timeout_s": 0}}), "create.start_timeout_s"),
        (json!({"create": {"pids_limit": 0}}), "create.pids_limit"),
        (json!({"create": {"publish_host": "localhost"}}), "create.publish_host"),
        (json!({"create": {"transport_retries": -1}}), "create.transport_retries"),
        (json!({"create": {"transport_retry_delay_s": -0.5}}), "create.transport_retry_delay_s"),
        (json!({"create": {"pull_policy": "sometimes"}}), "create.pull_policy"),
        (json!({"exec": {"default_timeout_s": -1}}), "exec.default_timeout_s"),
        (json!({"exec": {"concurrency": 0}}), "exec.concurrency"),
        (json!({"exec": {"create_concurrency": 0}}), "exec.create_concurrency"),
        (json!({"exec": {"control_concurrency": 0}}), "exec.control_concurrency"),
        (json!({"exec": {"transfer_concurrency": 0}}), "exec.transfer_concurrency"),
        (json!({"exec": {"exec_shell": ""}}), "exec.exec_shell"),
        (json!({"exec": {"max_output_bytes": 0}}), "exec.max_output_bytes"),
        (json!({"exec": {"agent_dir": "relative"}}), "exec.agent_dir"),
        (json!({"probe": {"timeout_s": 0}}), "probe.timeout_s"),
        (json!({"probe": {"deadline_s": 0}}), "probe.deadline_s"),
        (json!({"probe": {"stable_count": 0}}), "probe.stable_count"),
        (json!({"probe": {"stable_delay_s": -1}}), "probe.stable_delay_s"),
    ];
    for (docker, field) in cases {
        let err = load(json!({ "docker": docker })).unwrap_err();
        assert_eq!(err.field, field, "{docker}");
    }
}

#[test]
fn durations_are_seconds_and_bad_ones_are_named() {
    let c = load(json!({"docker": {"exec": {"default_timeout_s": 1.5}, "probe": {"stable_delay_s": 0}}}))
        .unwrap();
    assert_eq!(c.exec.default_timeout, Some(Duration::from_millis(1500)));
    assert_eq!(c.probe.stable_delay, Duration::ZERO);
    for (docker, field) in [
        (json!({"exec": {"default_timeout_s": 1e300}}), "exec.default_timeout_s"),
        (json!({"probe": {"timeout_s": -0.001}}), "probe.timeout_s"),
    ] {
        let err = load(json!({ "docker": docker })).unwrap_err();
        assert_eq!(err.field, field, "{docker}");
    }
    let err = FileConfig::from_json_value(&json!({"server": {"sweep_interval_s": -1}})).unwrap_err();
    assert_eq!(err.field, "server.sweep_interval_s");
    let err = load(json!({"docker": {"exec": {"default_timeout_s": "60"}}})).unwrap_err();
    assert_eq!(err.field, "docker.exec.default_timeout_s", "a wrong type is named by its path");
}

#[test]
fn a_value_of_the_wrong_type_names_its_field() {
    let err = load(json!({"docker": {"create": {"pids_limit": "many"}}})).unwrap_err();
    assert_eq!(err.field, "docker.create.pids_limit", "{err}");
    let err = FileConfig::from_json_value(&json!({"server": {"allow_client_volumes": "yes"}})).unwrap_err();
    assert_eq!(err.field, "server.allow_client_volumes", "{err}");
}

#[test]
fn yaml_with_the_same_keys_is_accepted() {
    let yaml = "docker:\n  create:\n    pids_limit: 64\n    network: null\n  exec:\n    concurrency: 4\nserver:\n  allow_client_volumes: false\n";
    let c = FileConfig::from_text(yaml, true).unwrap();
    assert_eq!((c.docker.create.pids_limit, c.docker.exec.concurrency), (Some(64), 4));
    assert_eq!(FileConfig::from_text("", true).unwrap(), FileConfig::default());
    let err = FileConfig::from_text("docker:\n  exec:\n    concurrency: lots\n", true).unwrap_err();
    assert_eq!(err.field, "docker.exec.concurrency");
    assert!(is_yaml(Path::new("docker.yaml"), "{}") && !is_yaml(Path::new("c.json"), "a: 1"));
    assert!(is_yaml(Path::new("conf"), "docker: {}") && !is_yaml(Path::new("conf"), "{\"docker\": {}}"));
}

#[test]
fn snapshot_bounds() {
    let c = FileConfig::from_json_value(&json!({})).unwrap();
    assert_eq!((c.server.max_snapshots, c.server.snapshot_ttl), (100, Some(Duration::from_secs(86_400))));
    let c = FileConfig::from_json_value(&json!({"server": {"max_snapshots": 3, "snapshot_ttl_s": null}}))
        .unwrap();
    assert_eq!((c.server.max_snapshots, c.server.snapshot_ttl), (3, None));
    for (server, field) in [
        (json!({"max_snapshots": 0}), "server.max_snapshots"),
        (json!({"snapshot_ttl_s": 0}), "server.snapshot_ttl_s"),
    ] {
        let err = FileConfig::from_json_value(&json!({ "server": server })).unwrap_err();
        assert_eq!(err.field, field);
    }
}

#[test]
fn exec_engine_is_agent_or_docker() {
    assert_eq!(
        load(json!({"docker": {"exec": {"engine": "docker"}}})).unwrap().exec.engine,
        ExecEngineKind::Docker
    );
    let err = load(json!({"docker": {"exec": {"engine": "ssh"}}})).unwrap_err();
    assert!(err.message.contains("agent") && err.message.contains("docker"), "{err}");
}

#[test]
fn exec_transport_is_socket_or_channel() {
    assert_eq!(load(json!({})).unwrap().exec.transport, ExecTransport::Socket);
    let c = load(json!({"docker": {"exec": {"engine": "agent", "transport": "channel"}}})).unwrap();
    assert_eq!(c.exec.transport, ExecTransport::Channel);
    let err = load(json!({"docker": {"exec": {"transport": "ssh"}}})).unwrap_err();
    assert_eq!(err.field, "docker.exec.transport");
    assert!(err.message.contains("`socket`") && err.message.contains("`channel`"), "{err:?}");
}

#[test]
fn nulls_and_ipv6_are_accepted() {
    let c = load(json!({"docker": {
        "create": {"start_timeout_s": null, "publish_host": "::1", "pids_limit": 64},
        "exec": {"default_timeout_s": null, "exec_shell": "bash"},
        "probe": {"command": null, "timeout_s": 0}
    }}))
    .unwrap();
    assert_eq!(c.create.start_timeout, None);
    assert_eq!(c.exec.exec_shell.as_deref(), Some("bash"));
    assert_eq!(c.probe.command, None);
}

#[test]
fn cluster_mode_defaults_to_single_and_is_checked() {
    let c = FileConfig::from_json_value(&json!({})).unwrap();
    assert_eq!(c.cluster.mode, ClusterMode::Single);
    assert_eq!(c.cluster.peer_port, DEFAULT_PEER_PORT);
    let c = FileConfig::from_json_value(
        &json!({"cluster": {"mode": "swarm", "constraints": ["node.role==manager"]}}),
    )
    .unwrap();
    assert_eq!(c.cluster.mode, ClusterMode::Swarm);
    for (cluster, field) in [
        (json!({"peer_port": 0}), "cluster.peer_port"),
        (json!({"constraints": ["--mount=x"]}), "cluster.constraints"),
        (json!({"node_cache_s": 0}), "cluster.node_cache_s"),
    ] {
        let err = FileConfig::from_json_value(&json!({ "cluster": cluster })).unwrap_err();
        assert_eq!(err.field, field, "{err}");
    }
    let err = FileConfig::from_json_value(&json!({"cluster": {"mode": "k8s"}})).unwrap_err();
    assert!(err.message.contains("swarm"), "{err}");
}

#[test]
fn allowed_capabilities_are_spelled_as_docker_does_once_loaded() {
    let c = load(json!({"docker": {"create": {"allowed_cap_add": ["cap_sys_ptrace", "SYS_NICE"]}}})).unwrap();
    assert_eq!(c.create.allowed_cap_add, ["SYS_PTRACE", "SYS_NICE"]);
    for (cap, why) in [("CAP_NET_ADMIN", "never given"), ("sys-ptrace", "not a capability")] {
        let err = load(json!({"docker": {"create": {"allowed_cap_add": [cap]}}})).unwrap_err();
        assert_eq!(err.field, "create.allowed_cap_add");
        assert!(err.message.contains(why), "{err}");
    }
    // A config made in code is spelled the same way when a backend takes it.
    let mut code = DockerConfig::default();
    code.create.allowed_cap_add = vec!["Cap_Sys_Ptrace".into()];
    assert_eq!(code.checked().unwrap().create.allowed_cap_add, ["SYS_PTRACE"]);
}
