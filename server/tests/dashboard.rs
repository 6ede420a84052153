//! The Grafana dashboard (`deploy/grafana/sandboxd.json`) queries only metrics the server
//! exports: every metric name in its PromQL must be in a real server's `/metrics`, scraped
//! after a create and an exec (so that series registered on first use exist). Strict: a panel
//! over a metric that does not exist yet fails here until the metric lands.

use std::collections::BTreeSet;

use sandboxd_client::{spec, Client, ExecOptions, Sandbox};
use testkit::images::BUSYBOX;
use testkit::server::{scrape, TestServer};
use testkit::TestLabel;

const SANDBOXD: &str = env!("CARGO_BIN_EXE_sandboxd");
const DASHBOARD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/grafana/sandboxd.json");

/// PromQL words that are neither metrics nor functions (functions are followed by `(`).
const KEYWORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
];

/// The metric names a PromQL expression selects: identifiers outside label matchers (`{…}`),
/// ranges (`[…]`) and strings, that are not functions, aggregation modifiers' label lists or
/// keywords.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    // After `by`/`without`/`on`/`ignoring`/`group_*`: the next `( … )` is a list of labels.
    let mut label_list_next = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => {
                i += 1;
                while i < chars.len() && chars[i] != c {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
            }
            '{' | '[' => {
                // Label matchers' values are strings that may hold `}`.
                let close = if c == '{' { '}' } else { ']' };
                while i < chars.len() && chars[i] != close {
                    if chars[i] == '"' {
                        i += 1;
                        while i < chars.len() && chars[i] != '"' {
                            i += if chars[i] == '\\' { 2 } else { 1 };
                        }
                    }
                    i += 1;
                }
                i += 1;
            }
            '(' if label_list_next => {
                while i < chars.len() && chars[i] != ')' {
                    i += 1;
                }
                i += 1;
                label_list_next = false;
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let rest: String = chars[i..].iter().collect::<String>();
                let rest = rest.trim_start();
                // A function or an aggregation (`sum(…)`, `sum by (…) (…)`) is no metric.
                let called = rest.starts_with('(')
                    || ["by", "without"]
                        .iter()
                        .any(|k| rest.strip_prefix(k).is_some_and(|r| r.trim_start().starts_with('(')));
                if KEYWORDS.contains(&word.as_str()) {
                    label_list_next = matches!(
                        word.as_str(),
                        "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
                    );
                } else if !called {
                    names.insert(word);
                }
            }
            // A number (`0.95`, `1e3`) is not a name: skip it whole.
            c if c.is_ascii_digit() => {
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    names
}

/// Every PromQL expression of the dashboard: panel targets and query variables.
fn queries(dashboard: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut panels: Vec<&serde_json::Value> =
        dashboard["panels"].as_array().expect("panels").iter().collect();
    while let Some(panel) = panels.pop() {
        if let Some(nested) = panel["panels"].as_array() {
            panels.extend(nested);
        }
        for target in panel["targets"].as_array().into_iter().flatten() {
            out.push(target["expr"].as_str().expect("every target has a PromQL expr").to_string());
        }
    }
    for variable in dashboard["templating"]["list"].as_array().into_iter().flatten() {
        if variable["type"] == "query" {
            let query = variable["query"]["query"].as_str().or(variable["query"].as_str()).expect("query");
            // `label_values(METRIC, label)`: the metric is the first argument.
            let inner = query.trim_start_matches("label_values(").trim_end_matches(')');
            out.push(inner.split(',').next().unwrap().trim().to_string());
        }
    }
    out
}

/// The sample names `/metrics` has: from the samples, and from each family's `# TYPE` line
/// (a family with no series yet still names what its series will be called).
fn exported_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split_whitespace();
            let (Some(name), Some(kind)) = (words.next(), words.next()) else { continue };
            let suffixes: &[&str] = match kind {
                "counter" => &["_total", "_created"],
                "histogram" => &["_bucket", "_sum", "_count", "_created"],
                "summary" => &["", "_sum", "_count", "_created"],
                "info" => &["_info"],
                _ => &[""],
            };
            names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
        } else if !line.starts_with('#') && !line.trim().is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_string());
        }
    }
    names
}

#[test]
fn promql_names_are_extracted() {
    let expr = r#"histogram_quantile(0.95, sum by (le, command) (rate(sandboxd_docker_command_duration_seconds_bucket{instance=~"$instance",x="a{b}"}[$__rate_interval]))) / clamp_min(sum without (pool) (sandboxd_pool_target), 1) and on (instance) up"#;
    let names: Vec<String> = metric_names(expr).into_iter().collect();
    assert_eq!(names, ["sandboxd_docker_command_duration_seconds_bucket", "sandboxd_pool_target", "up"]);
    let text = "# TYPE sandboxd_failures counter\n# TYPE sandboxd_x histogram\nsandboxd_g{a=\"b\"} 1\n";
    let exported = exported_names(text);
    for name in ["sandboxd_failures_total", "sandboxd_x_bucket", "sandboxd_x_count", "sandboxd_g"] {
        assert!(exported.contains(name), "{name} in {exported:?}");
    }
    assert!(!exported.contains("sandboxd_failures"), "a counter's samples end in _total");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_metric_is_exported() {
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(DASHBOARD).expect("the dashboard")).expect("JSON");
    let queries = queries(&dashboard);
    assert!(queries.len() >= 20, "the dashboard has its panels: {queries:?}");
    let mut used = BTreeSet::new();
    for query in &queries {
        let names = metric_names(query);
        assert!(!names.is_empty(), "a query over no metric: {query}");
        used.extend(names);
    }

    // Everything the dashboard shows has a series: a tenant's sandbox (tenant series), a warm
    // pool (fill), per-sandbox usage, an exec, a failed exec and an upload.
    let label = TestLabel::new();
    let dir = tempfile::tempdir().unwrap();
    let tenants_file = dir.path().join("tenants.json");
    let tenant = format!("dash-{}", &label.value[..12]);
    let tenants = serde_json::json!({"tenants": [
        {"name": tenant, "key_sha256": sandboxd::auth::tenants::key_sha256("dash-key")},
    ]});
    std::fs::write(&tenants_file, tenants.to_string()).unwrap();
    let server = TestServer::launch(SANDBOXD, &label)
        .config(serde_json::json!({
            "server": {
                "state_dir": dir.path().join("state"),
                "sweep_interval_s": 1,
                "auth": {"tenants_file": tenants_file},
                "metrics": {"per_sandbox": true, "per_sandbox_interval_s": 1},
            },
            "pools": [{"name": "dash", "image": BUSYBOX, "target": 1, "max": 1,
                       "template": {"metadata": {"case": label.value}}}],
        }))
        .flags(&["--metrics-listen", "localhost:0"])
        .start();
    let metrics = server.metrics_addr.clone().expect("metrics address");
    let client = Client::connect_with_token(server.url.clone(), "dash-key").await.expect("connect");
    let sandbox = Sandbox::start(&client, spec(BUSYBOX)).await.expect("create");
    sandbox.exec("true").await.expect("exec");
    // A failure (an exec stopped at its timeout), so failure series exist too.
    let timed_out = sandbox
        .exec_with("sleep 30", ExecOptions { timeout_s: Some(1.0), ..Default::default() })
        .await
        .expect("an exec past its timeout still answers");
    assert_eq!(timed_out.error_type, Some(sandboxd_client::ExecErrorType::Timeout));
    let local = dir.path().join("up.txt");
    std::fs::write(&local, b"dashboard").unwrap();
    sandbox.upload(&local, "/tmp/up.txt").await.expect("upload");
    // The refreshed series (per-sandbox usage, tenants, states, pool fill) come within seconds.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let exported = loop {
        let exported = exported_names(&scrape(&metrics));
        let missing = used.iter().filter(|name| !exported.contains(*name)).count();
        if missing == 0 || std::time::Instant::now() > deadline {
            break exported;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    };
    sandbox.stop().await.expect("close");

    let missing: Vec<&String> = used.iter().filter(|name| !exported.contains(*name)).collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics /metrics does not export: {missing:?}\nexported: {exported:?}"
    );
}
