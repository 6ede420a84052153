//! `ls`, `status` and `rm`: finding sandboxes by label and removing them, one by one or in bulk.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::builder::TypedValueParser;
use clap::Args;
use sandboxd_client::{proto, Client, ListOptions, SandboxInfo, SandboxStatus};

use crate::error::CtlError;
use crate::{parse, Output};

/// `ls --status NAME`: the states by their names (`running`, ...), listed in `--help`.
pub(crate) fn status_parser() -> impl TypedValueParser<Value = SandboxStatus> {
    clap::builder::PossibleValuesParser::new(SandboxStatus::ALL.map(SandboxStatus::as_str)).map(|name| {
        SandboxStatus::ALL.into_iter().find(|s| s.as_str() == name).unwrap_or(SandboxStatus::Unknown)
    })
}

#[derive(Debug, Args)]
pub struct LsArgs {
    /// Only sandboxes carrying this label (repeatable; all must match).
    #[arg(long = "label", short = 'l', value_name = "K=V", value_parser = parse::key_value)]
    pub(crate) labels: Vec<(String, String)>,
    /// Only sandboxes in this state (repeatable).
    #[arg(long = "status", value_parser = status_parser())]
    pub(crate) statuses: Vec<SandboxStatus>,
    /// `table` or `json` (one JSON array; with -w one JSON object a line).
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    pub(crate) output: Output,
    /// Keep watching: after the table, a row per change (created, paused, stopped, removed,
    /// ...) until Ctrl-C.
    #[arg(long, short = 'w')]
    pub(crate) watch: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The sandbox.
    sandbox_id: String,
}

#[derive(Debug, Args)]
pub struct RmArgs {
    /// Sandboxes to remove.
    sandbox_ids: Vec<String>,
    /// Remove every sandbox carrying this label (repeatable; all must match).
    #[arg(long = "label", short = 'l', value_name = "K=V", value_parser = parse::key_value)]
    labels: Vec<(String, String)>,
}

pub fn labels(pairs: Vec<(String, String)>) -> HashMap<String, String> {
    pairs.into_iter().collect()
}

/// `ls` without `--watch` (`main` sends `ls --watch` to `events::watch_list`).
pub async fn ls(client: &Client, args: LsArgs) -> Result<i32, CtlError> {
    let options = ListOptions { labels: labels(args.labels), statuses: args.statuses, ..Default::default() };
    let sandboxes = client.list_all(options).await?;
    match args.output {
        Output::Json => {
            let items: Vec<serde_json::Value> = sandboxes.iter().map(json).collect();
            println!("{}", serde_json::Value::Array(items));
        }
        Output::Table => print!("{}", table(&sandboxes, now_ms())),
    }
    Ok(0)
}

pub(crate) fn json(s: &SandboxInfo) -> serde_json::Value {
    serde_json::json!({
        "sandbox_id": s.sandbox_id,
        "image": s.image,
        "status": s.status.as_str(),
        "metadata": s.metadata,
        "ports": s.ports,
        "workdir": s.workdir,
        "created_at_unix_ms": s.created_at_unix_ms,
        "expires_at_unix_ms": s.expires_at_unix_ms,
        "runtime": s.runtime,
    })
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// `2m`, `3h`, `5d`: how long ago.
pub(crate) fn age(created_ms: i64, now_ms: i64) -> String {
    let s = (now_ms - created_ms).max(0) / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=86_399 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// The `ls` table's cells, header first.
fn cells(sandboxes: &[SandboxInfo], now_ms: i64) -> Vec<[String; 5]> {
    let mut rows =
        vec![["SANDBOX ID".to_string(), "STATUS".into(), "IMAGE".into(), "AGE".into(), "LABELS".into()]];
    for s in sandboxes {
        let mut labels: Vec<String> = s.metadata.iter().map(|(k, v)| format!("{k}={v}")).collect();
        labels.sort();
        rows.push([
            s.sandbox_id.clone(),
            s.status.as_str().into(),
            s.image.clone(),
            age(s.created_at_unix_ms, now_ms),
            labels.join(","),
        ]);
    }
    rows
}

/// Column widths of the `ls` table (`ls -w` keeps them for the rows that follow; a sandbox id
/// and a state always fit).
pub(crate) fn widths(sandboxes: &[SandboxInfo], now_ms: i64) -> Vec<usize> {
    let rows = cells(sandboxes, now_ms);
    let floor = [41, 8, 0, 3, 0];
    (0..5).map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0).max(floor[i])).collect()
}

pub(crate) fn table(sandboxes: &[SandboxInfo], now_ms: i64) -> String {
    let rows = cells(sandboxes, now_ms);
    let widths: Vec<usize> =
        (0..5).map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
    table_with(sandboxes, now_ms, &widths)
}

/// The `ls` table with these column widths (`ls -w` keeps its rows aligned with what follows).
pub(crate) fn table_with(sandboxes: &[SandboxInfo], now_ms: i64, widths: &[usize]) -> String {
    let rows = cells(sandboxes, now_ms);
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

pub async fn status(client: &Client, args: StatusArgs) -> Result<i32, CtlError> {
    let response =
        client.raw().status(proto::StatusRequest { sandbox_id: args.sandbox_id }).await?.into_inner();
    println!("{}", SandboxStatus::from_wire(response.status));
    Ok(0)
}

pub async fn rm(client: &Client, args: RmArgs) -> Result<i32, CtlError> {
    if args.sandbox_ids.is_empty() && args.labels.is_empty() {
        return Err(CtlError::local("rm needs sandbox ids or --label K=V"));
    }
    let mut ids = args.sandbox_ids;
    if !args.labels.is_empty() {
        let options = ListOptions { labels: labels(args.labels), ..Default::default() };
        ids.extend(client.list_all(options).await?.into_iter().map(|s| s.sandbox_id));
    }
    let mut failed = None;
    for id in ids {
        match client.raw().close(proto::CloseRequest { sandbox_id: id.clone() }).await {
            Ok(_) => println!("{id}"),
            Err(status) => {
                let e = CtlError::from(status).context(&id);
                eprintln!("sandboxctl: {e}");
                failed = Some(e);
            }
        }
    }
    match failed {
        Some(_) => Ok(1),
        None => Ok(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_and_ages() {
        let s = SandboxInfo {
            sandbox_id: "sandboxd-1".into(),
            image: "img".into(),
            status: SandboxStatus::Running,
            metadata: [("run".to_string(), "r1".to_string())].into(),
            ports: vec![],
            workdir: None,
            created_at_unix_ms: 1_000,
            expires_at_unix_ms: None,
            runtime: "runc".into(),
        };
        let text = table(&[s], 1_000 + 125_000);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "SANDBOX ID  STATUS   IMAGE  AGE  LABELS");
        assert_eq!(lines[1], "sandboxd-1  running  img    2m   run=r1");
    }
}
