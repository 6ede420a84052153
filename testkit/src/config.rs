//! The test defaults as the config file spells them, for the binary ([`crate::server`]) and for
//! the service in-process from JSON ([`crate::service::TestService::start_json`]): one place, so
//! both run a test's containers the same way.

use serde_json::Value;

use crate::TestLabel;

/// The test defaults (`label` on every container, a 60 s exec timeout, the exec engine and
/// transport under test) with the sections of `extra` merged in (`extra` wins).
pub fn test_config(label: &TestLabel, extra: Value) -> Value {
    with_run_args(label.run_args(), extra)
}

/// `test_config` for a label's `run_args` (what a [`crate::server::Launch`] keeps of it).
pub(crate) fn with_run_args(run_args: Vec<String>, extra: Value) -> Value {
    let mut body = serde_json::json!({
        "docker": {
            "create": {"extra_run_args": run_args, "runtime": crate::runtime_name()},
            "exec": {
                "default_timeout_s": 60.0,
                "engine": crate::engine_name(),
                "transport": crate::transport_name(),
            },
            "runtimes": crate::runtime_offers(),
        }
    });
    merge(&mut body, extra);
    body
}

/// Merges `extra` into `base`: objects key by key, anything else replaced.
pub fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Object(b), Value::Object(e)) => {
            for (k, v) in e {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, e) => *b = e,
    }
}

/// A readiness probe that holds every create for `seconds` (the window a fault hits).
pub fn slow_probe(seconds: u32) -> Value {
    serde_json::json!({"docker": {"probe": {
        "command": format!("sleep {seconds}; printf docker-sandbox-ready"),
        "timeout_s": 120,
    }}})
}
