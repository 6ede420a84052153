//! The configuration reference (docs/configuration.md) against the parser itself (issue 22): every key the
//! config file accepts is in the reference's sample config and in its table, the sample is the
//! defaults, and no document names a key the parser does not know. Every `sandboxd` flag (and
//! its environment variable) is in the server flags table.
//!
//! The keys are not listed here: they are read from the parser. Every section is a struct with
//! `deny_unknown_fields`, so a probe key at a path makes the parser name the fields it knows
//! there ("unknown field `…`, expected one of `a`, `b`"); a field that accepts `{}` and
//! answers a probe the same way is a section, and is walked in turn.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use sandboxd::config::FileConfig;
use serde_json::{json, Map, Value};

const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
const PROBE: &str = "__sandboxd_docs_probe__";
/// Where the configuration reference lives, and its heading.
const README: &str = "README.md";
const REFERENCE: &str = "docs/configuration.md";
const REFERENCE_HEADING: &str = "# Configuration";
const DOCKER_SECTIONS: [&str; 4] = ["create", "exec", "probe", "runtimes"];
/// A backticked `docker.yaml` is a file, not a key.
const FILE_EXTENSIONS: [&str; 8] = ["yaml", "yml", "json", "toml", "md", "rs", "py", "sh"];

fn read(relative: &str) -> String {
    let path = Path::new(REPO).join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `leaf` placed at `path` in an otherwise empty config.
fn nest(path: &[String], leaf: Value) -> Value {
    path.iter().rev().fold(leaf, |inner, key| {
        let mut map = Map::new();
        map.insert(key.clone(), inner);
        Value::Object(map)
    })
}

fn parse(root: &Value) -> Result<FileConfig, String> {
    FileConfig::from_json_value(root).map_err(|e| e.message)
}

/// The field names the parser lists when it meets the probe key inside `value` at `path`.
fn fields_named_at(path: &[String], value: Value) -> Option<Vec<String>> {
    let message = parse(&nest(path, value)).err()?;
    let rest = message.strip_prefix(&format!("unknown field `{PROBE}`"))?;
    if rest.contains("there are no fields") {
        return Some(Vec::new());
    }
    let listed = rest.split_once("expected")?.1;
    Some(listed.split('`').skip(1).step_by(2).map(String::from).collect())
}

/// Every key of the config file, as dotted paths, and the sections among them.
struct ParserKeys {
    keys: BTreeSet<String>,
    sections: BTreeSet<String>,
    /// Keys whose value is a list of entries with fields of their own (`pools`), with those.
    lists: Vec<(String, Vec<String>)>,
}

fn parser_keys() -> ParserKeys {
    let mut found = ParserKeys { keys: BTreeSet::new(), sections: BTreeSet::new(), lists: Vec::new() };
    let top = fields_named_at(&[], json!({ PROBE: 0 })).expect("the parser names the top-level keys");
    assert!(top.contains(&"docker".to_string()), "top-level keys: {top:?}");
    walk(&[], top, &mut found);
    found
}

fn walk(path: &[String], fields: Vec<String>, found: &mut ParserKeys) {
    for field in fields {
        let child: Vec<String> = path.iter().cloned().chain([field]).collect();
        let dotted = child.join(".");
        let section = parse(&nest(&child, json!({}))).is_ok();
        match fields_named_at(&child, json!({ PROBE: 0 })) {
            Some(inner) if section => {
                found.sections.insert(dotted);
                walk(&child, inner, found);
            }
            _ => {
                if let Some(entry) = fields_named_at(&child, json!([{ PROBE: 0 }])) {
                    found.lists.push((dotted.clone(), entry));
                }
                found.keys.insert(dotted);
            }
        }
    }
}

/// The fenced block after `<!-- example NAME: … -->` (the marker every documented example
/// carries; clients/python/tests/test_markdown_examples.py checks there is one per block).
fn example<'a>(markdown: &'a str, name: &str) -> &'a str {
    let marker = format!("<!-- example {name}: ");
    let starts: Vec<_> = markdown.match_indices(&marker).collect();
    assert_eq!(starts.len(), 1, "one `{marker}…` marker");
    let after = &markdown[starts[0].0..];
    let fence = after.find("\n```").expect("a fenced block after the marker") + 1;
    let body = &after[fence..];
    let body = &body[body.find('\n').unwrap() + 1..];
    &body[..body.find("```").expect("the block's closing fence")]
}

/// The section under `heading`, to the next heading of the same level.
fn section<'a>(markdown: &'a str, heading: &str) -> &'a str {
    let start = markdown.find(&format!("\n{heading}\n")).unwrap_or_else(|| panic!("no `{heading}`")) + 1;
    let rest = &markdown[start + heading.len()..];
    let end = rest.find("\n## ").map_or(markdown.len(), |i| start + heading.len() + i);
    &markdown[start..end]
}

/// The dotted leaf keys of a sample config, descending only into the parser's sections.
fn sample_keys(value: &Value, prefix: &str, sections: &BTreeSet<String>, out: &mut BTreeSet<String>) {
    let Value::Object(map) = value else { return };
    for (key, inner) in map {
        let dotted = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
        if inner.is_object() && sections.contains(&dotted) {
            sample_keys(inner, &dotted, sections, out);
        } else {
            out.insert(dotted);
        }
    }
}

/// Backticked config keys a document names: `docker.create.x`, `server.x`, …, and the docker
/// section's keys relative to it (`create.pull_policy`, as its error messages name them).
fn named_keys(markdown: &str) -> BTreeSet<String> {
    let is_key = |t: &str| {
        t.contains('.')
            && !t.ends_with('.')
            && !t.rsplit('.').next().is_some_and(|ext| FILE_EXTENSIONS.contains(&ext))
            && t.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.')
    };
    markdown
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| is_key(t))
        .filter_map(|t| match t.split('.').next() {
            // `docker.io` is a package: the docker section's keys are under its three sections.
            Some("docker") if !t.split('.').nth(1).is_some_and(|s| DOCKER_SECTIONS.contains(&s)) => None,
            Some("docker" | "server" | "network" | "cluster" | "pools") => Some(t.to_string()),
            Some("create" | "exec" | "probe") => Some(format!("docker.{t}")),
            _ => None,
        })
        .collect()
}

#[test]
fn the_walk_finds_what_the_parser_is_known_to_have() {
    let found = parser_keys();
    for key in [
        "docker.create.pull_policy",
        "docker.exec.engine",
        "docker.probe.stable_delay_s",
        "server.limits.watch_buffer_events",
        "server.auth.tenants_file",
        "network.default_policy",
        "cluster.node_cache_s",
        "pools",
    ] {
        assert!(found.keys.contains(key), "{key} not found: {:?}", found.keys);
    }
    for section in ["docker", "docker.create", "server", "server.limits", "server.auth", "network", "cluster"]
    {
        assert!(found.sections.contains(section), "{section}: {:?}", found.sections);
    }
    assert!(!found.keys.contains("docker.create"), "a section is not a key");
    let pools = found.lists.iter().find(|(k, _)| k == "pools").expect("pools is a list of entries");
    assert!(pools.1.contains(&"template".to_string()), "{pools:?}");
}

#[test]
fn the_sample_config_has_every_key_at_its_default() {
    let found = parser_keys();
    let page = format!("\n{}", read(REFERENCE)); // the heading is the first line
    let reference = section(&page, REFERENCE_HEADING);
    let sample_text = example(reference, "config-sample");
    let sample: Value = serde_json::from_str(sample_text).expect("the sample config is JSON");
    let parsed = FileConfig::from_json_value(&sample).unwrap_or_else(|e| panic!("the sample config: {e}"));
    assert!(parsed == FileConfig::default(), "the sample config must show the defaults: {parsed:#?}");
    let mut in_sample = BTreeSet::new();
    sample_keys(&sample, "", &found.sections, &mut in_sample);
    let missing: Vec<_> = found.keys.difference(&in_sample).collect();
    assert!(
        missing.is_empty(),
        "keys the parser accepts but docs/configuration.md's sample config (the `config-sample` block under \
         `{REFERENCE_HEADING}`) lacks; add each with its default: {missing:?}"
    );
    let unknown: Vec<_> = in_sample.difference(&found.keys).collect();
    assert!(unknown.is_empty(), "keys in the sample the parser does not know: {unknown:?}");
}

#[test]
fn the_reference_table_names_every_key() {
    let found = parser_keys();
    let page = format!("\n{}", read(REFERENCE)); // the heading is the first line
    let reference = section(&page, REFERENCE_HEADING);
    let missing: Vec<_> = found.keys.iter().filter(|k| !reference.contains(&format!("`{k}`"))).collect();
    assert!(
        missing.is_empty(),
        "keys the parser accepts but docs/configuration.md does not describe \
         (a table row naming the full dotted key, e.g. `docker.exec.engine`): {missing:?}"
    );
}

#[test]
fn no_document_names_a_key_the_parser_does_not_know() {
    let found = parser_keys();
    let known: BTreeSet<&String> = found.keys.iter().chain(&found.sections).collect();
    let mut documents = vec![README.to_string(), "clients/python/README.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(Path::new(REPO).join("docs"))
        .unwrap()
        .map(|e| format!("docs/{}", e.unwrap().file_name().to_string_lossy()))
        .filter(|p| p.ends_with(".md"))
        .collect();
    docs.sort();
    documents.extend(docs);
    for document in documents {
        let unknown: Vec<_> = named_keys(&read(&document))
            .into_iter()
            .filter(|k| !known.contains(k) && !k.starts_with("pools."))
            .collect();
        assert!(unknown.is_empty(), "{document} names config keys the parser does not know: {unknown:?}");
    }
}

#[test]
fn the_documented_config_fragments_parse() {
    // A pool as docs/pools.md defines one: every field a pool entry has, accepted as written.
    let found = parser_keys();
    let pools_md = read("docs/pools.md");
    let yaml = example(&pools_md, "pools-config");
    let parsed = FileConfig::from_text(yaml, true).unwrap_or_else(|e| panic!("docs/pools.md's pool: {e}"));
    assert_eq!(parsed.pools.len(), 1);
    let entry: Value = serde_yaml::from_str::<Value>(yaml).unwrap()["pools"][0].clone();
    let (_, fields) = found.lists.iter().find(|(k, _)| k == "pools").unwrap();
    for field in fields {
        assert!(entry.get(field).is_some(), "docs/pools.md's pool lacks `{field}`");
    }
    // The cluster section as docs/cluster.md shows it.
    let cluster_md = read("docs/cluster.md");
    let cluster = example(&cluster_md, "cluster-config");
    FileConfig::from_text(cluster, true).unwrap_or_else(|e| panic!("docs/cluster.md's cluster config: {e}"));
}

#[test]
fn the_server_flags_table_names_every_flag_and_its_variable() {
    let help = Command::new(env!("CARGO_BIN_EXE_sandboxd")).arg("--help").output().expect("sandboxd --help");
    assert!(help.status.success());
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    // A flag is the first word of a help line (`      --listen <LISTEN>`, `  -h, --help`).
    let flags: BTreeSet<String> = help
        .lines()
        .filter_map(|line| {
            let line = line.trim_start();
            let line =
                line.split_once(", ").filter(|(short, _)| short.len() == 2).map_or(line, |(_, long)| long);
            let flag: String = line.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
            (flag.starts_with("--") && flag != "--help" && flag != "--version").then_some(flag)
        })
        .collect();
    let variables: BTreeSet<String> =
        help.split("[env: ").skip(1).map(|rest| rest.split('=').next().unwrap().to_string()).collect();
    assert!(flags.contains("--listen") && variables.contains("SANDBOXD_LISTEN"), "{help}");
    let page = format!("\n{}", read(REFERENCE)); // the heading is the first line
    let table = section(&page, REFERENCE_HEADING);
    let table = &table[table.find("| flag |").expect("the server flags table")..];
    let table = &table[..table.find("\n\n").unwrap_or(table.len())];
    for name in flags.iter().chain(&variables) {
        assert!(table.contains(&format!("`{name}`")), "the server flags table lacks `{name}`");
    }
    let documented: BTreeSet<String> = table
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| t.starts_with("--") || t.starts_with("SANDBOXD_"))
        .map(String::from)
        .collect();
    let unknown: Vec<_> =
        documented.iter().filter(|t| !flags.contains(*t) && !variables.contains(*t)).collect();
    assert!(unknown.is_empty(), "the server flags table names what `sandboxd --help` does not: {unknown:?}");
}
