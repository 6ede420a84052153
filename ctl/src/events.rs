//! `events`, `ls -w` and `stats`: what happens to sandboxes as it happens, and what they use.
//!
//! `events` prints one line per lifecycle event (`Watch`) until Ctrl-C; `ls -w` prints the
//! table `ls` prints, then a row per change; `stats` reads each sandbox's usage twice a second
//! apart (`Stats`), so CPU % is over that second, as `docker stats --no-stream` shows it.

use std::collections::HashMap;
use std::time::{Duration, UNIX_EPOCH};

use clap::Args;
use sandboxd_client::{Client, EventKind, SandboxEvent, SandboxStats, SandboxStatus, WatchOptions};

use crate::error::CtlError;
use crate::{inventory, parse, Output};

#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Only sandboxes carrying this label (repeatable; all must match).
    #[arg(long = "label", short = 'l', value_name = "K=V", value_parser = parse::key_value)]
    labels: Vec<(String, String)>,
    /// Only events after which the sandbox is in this state (repeatable).
    #[arg(long = "status", value_parser = inventory::status_parser())]
    statuses: Vec<SandboxStatus>,
    /// First one `existing` line per sandbox that matches now.
    #[arg(long)]
    existing: bool,
    /// `table` (one line an event) or `json` (one JSON object a line).
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    output: Output,
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// The sandboxes.
    #[arg(required = true)]
    sandbox_ids: Vec<String>,
    /// `table` (as `docker stats --no-stream`) or `json` (one JSON array, raw numbers).
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    output: Output,
}

pub async fn events(client: &Client, args: EventsArgs) -> Result<i32, CtlError> {
    let options = WatchOptions {
        labels: args.labels.into_iter().collect(),
        statuses: args.statuses,
        include_existing: args.existing,
    };
    let mut stream = client.watch(options).await?;
    while let Some(event) = stream.next().await? {
        match args.output {
            Output::Json => println!("{}", json(&event)),
            Output::Table => println!("{}", line(&event)),
        }
    }
    Ok(0)
}

/// `ls -w`: the table `ls` prints, then one row per change until Ctrl-C. The watch starts
/// before the listing, so no change between the two is lost (one may be shown twice).
pub async fn watch_list(
    client: &Client,
    labels: HashMap<String, String>,
    statuses: Vec<SandboxStatus>,
    output: Output,
) -> Result<i32, CtlError> {
    let mut stream = client
        .watch(WatchOptions { labels: labels.clone(), statuses: statuses.clone(), include_existing: false })
        .await?;
    let listed =
        client.list_all(sandboxd_client::ListOptions { labels, statuses, ..Default::default() }).await?;
    let now = inventory::now_ms();
    let widths = inventory::widths(&listed, now);
    match output {
        Output::Json => {
            for s in &listed {
                println!("{}", inventory::json(s));
            }
        }
        Output::Table => print!("{}", inventory::table_with(&listed, now, &widths)),
    }
    while let Some(event) = stream.next().await? {
        match output {
            Output::Json => println!("{}", json(&event)),
            Output::Table => println!("{}", row(&event, &widths, inventory::now_ms())),
        }
    }
    Ok(0)
}

/// One `ls` row for the sandbox as the event leaves it (`removed` once it is gone).
fn row(event: &SandboxEvent, widths: &[usize], now_ms: i64) -> String {
    let status = match (event.kind, &event.sandbox) {
        (EventKind::Removed, _) => "removed".to_string(),
        (_, Some(info)) => info.status.as_str().to_string(),
        (_, None) => event.kind.as_str().to_string(),
    };
    let (image, age, labels) = match &event.sandbox {
        Some(info) => {
            let mut labels: Vec<String> = info.metadata.iter().map(|(k, v)| format!("{k}={v}")).collect();
            labels.sort();
            let age = if info.created_at_unix_ms > 0 {
                inventory::age(info.created_at_unix_ms, now_ms)
            } else {
                String::new()
            };
            (info.image.clone(), age, labels.join(","))
        }
        None => Default::default(),
    };
    let cells = [event.sandbox_id.clone(), status, image, age, labels];
    let padded: Vec<String> = cells.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
    padded.join("  ").trim_end().to_string()
}

/// `2026-12-01T23:50:12.345Z  stopped  sandboxd-…  exit_code=137 oom_killed reason="…"`.
fn line(event: &SandboxEvent) -> String {
    let time = UNIX_EPOCH + Duration::from_millis(event.time_unix_ms.max(0) as u64);
    let mut out = format!(
        "{}  {:<13}  {}",
        humantime::format_rfc3339_millis(time),
        event.kind.as_str(),
        event.sandbox_id
    );
    if let Some(code) = event.exit_code {
        out.push_str(&format!("  exit_code={code}"));
    }
    if event.oom_killed {
        out.push_str("  oom_killed");
    }
    if let Some(kind) = event.failure_kind {
        out.push_str(&format!("  failure={}", kind.reason()));
    }
    if !event.reason.is_empty() {
        out.push_str(&format!("  reason={:?}", event.reason));
    }
    out
}

fn json(event: &SandboxEvent) -> serde_json::Value {
    serde_json::json!({
        "kind": event.kind.as_str(),
        "sandbox_id": event.sandbox_id,
        "time_unix_ms": event.time_unix_ms,
        "exit_code": event.exit_code,
        "oom_killed": event.oom_killed,
        "failure_kind": event.failure_kind.map(|k| k.reason()),
        "reason": event.reason,
        "sandbox": event.sandbox.as_ref().map(inventory::json),
    })
}

#[derive(Debug, Args)]
pub struct UsageArgs {
    /// The sandbox.
    sandbox_id: String,
}

/// `sandboxctl usage ID`: the sandbox's totals so far, as one JSON object.
pub async fn usage(client: &Client, args: UsageArgs) -> Result<i32, CtlError> {
    let request = sandboxd_client::proto::UsageRequest { sandbox_id: args.sandbox_id.clone() };
    let response =
        client.raw().usage(request).await.map_err(|e| CtlError::from(e).context(&args.sandbox_id))?;
    let u = response.into_inner().usage.unwrap_or_default();
    println!("{}", usage_json(&u));
    Ok(0)
}

#[derive(Debug, Args)]
pub struct TenantUsageArgs {
    /// The tenant (an operator's token names one; a tenant key reads its own: leave it out).
    #[arg(long)]
    tenant: Option<String>,
    /// Any instant of the period asked about, in ms since the Unix epoch (default: now).
    #[arg(long)]
    at_unix_ms: Option<i64>,
}

/// `sandboxctl tenant-usage`: a tenant's receipts over one period, their sums and its budgets,
/// as one JSON object.
pub async fn tenant_usage(client: &Client, args: TenantUsageArgs) -> Result<i32, CtlError> {
    let r = client.tenant_usage(args.tenant.as_deref(), args.at_unix_ms).await.map_err(CtlError::from)?;
    let receipts: Vec<serde_json::Value> = r
        .receipts
        .iter()
        .map(|receipt| {
            serde_json::json!({
                "sandbox_id": receipt.sandbox_id,
                "closed_at_unix_ms": receipt.closed_at_unix_ms,
                "usage": usage_json(&receipt.usage.unwrap_or_default()),
            })
        })
        .collect();
    println!(
        "{}",
        serde_json::json!({
            "tenant": r.tenant,
            "period_start_unix_ms": r.period_start_unix_ms,
            "period_end_unix_ms": r.period_end_unix_ms,
            "sandbox_seconds": r.sandbox_seconds,
            "cpu_seconds": r.cpu_seconds,
            "sandbox_seconds_limit": r.sandbox_seconds_limit,
            "cpu_seconds_limit": r.cpu_seconds_limit,
            "receipts": receipts,
        })
    );
    Ok(0)
}

#[derive(Debug, Args)]
pub struct ResetArgs {
    /// The sandbox.
    sandbox_id: String,
}

/// `sandboxctl reset ID`: the sandbox back to its created state, what was done as JSON.
pub async fn reset(client: &Client, args: ResetArgs) -> Result<i32, CtlError> {
    let request = sandboxd_client::proto::ResetRequest { sandbox_id: args.sandbox_id.clone() };
    let response =
        client.raw().reset(request).await.map_err(|e| CtlError::from(e).context(&args.sandbox_id))?;
    let r = response.into_inner();
    println!(
        "{}",
        serde_json::json!({
            "paths_restored": r.paths_restored,
            "processes_killed": r.processes_killed,
            "duration_ms": r.duration_ms,
        })
    );
    Ok(0)
}

/// A `SandboxUsage` as JSON (also what `rm --usage` prints per sandbox).
pub fn usage_json(u: &sandboxd_client::proto::SandboxUsage) -> serde_json::Value {
    serde_json::json!({
        "wall_time_s": u.wall_time_s,
        "cpu_time_s": u.cpu_time_s,
        "peak_memory_bytes": u.peak_memory_bytes,
        "disk_write_bytes": u.disk_write_bytes,
        "network_rx_bytes": u.network_rx_bytes,
        "network_tx_bytes": u.network_tx_bytes,
        "processes_started": u.processes_started,
    })
}

pub async fn stats(client: &Client, args: StatsArgs) -> Result<i32, CtlError> {
    let mut first = Vec::new();
    for id in &args.sandbox_ids {
        first.push(client.stats(id.clone()).await.map_err(|e| CtlError::from(e).context(id))?);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut rows = Vec::new();
    for (id, before) in args.sandbox_ids.iter().zip(first) {
        let now = client.stats(id.clone()).await.map_err(|e| CtlError::from(e).context(id))?;
        rows.push((id.clone(), cpu_percent(&before, &now), now));
    }
    match args.output {
        Output::Json => {
            let items: Vec<serde_json::Value> =
                rows.iter().map(|(id, cpu, s)| stats_json(id, *cpu, s)).collect();
            println!("{}", serde_json::Value::Array(items));
        }
        Output::Table => print!("{}", stats_table(&rows)),
    }
    Ok(0)
}

/// CPU time over wall time between two readings, in percent of one CPU (as `docker stats`).
fn cpu_percent(before: &SandboxStats, now: &SandboxStats) -> f64 {
    let wall = now.read_at_unix_ns.saturating_sub(before.read_at_unix_ns);
    if wall <= 0 {
        return 0.0;
    }
    now.cpu_usage_ns.saturating_sub(before.cpu_usage_ns) as f64 / wall as f64 * 100.0
}

fn stats_json(id: &str, cpu_percent: f64, s: &SandboxStats) -> serde_json::Value {
    serde_json::json!({
        "sandbox_id": id,
        "cpu_percent": cpu_percent,
        "cpu_usage_ns": s.cpu_usage_ns,
        "cpu_limit": s.cpu_limit,
        "memory_usage_bytes": s.memory_usage_bytes,
        "memory_limit_bytes": s.memory_limit_bytes,
        "memory_peak_bytes": s.memory_peak_bytes,
        "pids": s.pids,
        "network_rx_bytes": s.network_rx_bytes,
        "network_tx_bytes": s.network_tx_bytes,
        "block_read_bytes": s.block_read_bytes,
        "block_write_bytes": s.block_write_bytes,
        "cgroup_version": s.cgroup_version,
        "read_at_unix_ns": s.read_at_unix_ns,
    })
}

/// Binary units for memory (`588KiB`), decimal for I/O (`486B`, `1.2kB`), as `docker stats`.
fn size(bytes: u64, binary: bool) -> String {
    let (base, units): (f64, [&str; 5]) = if binary {
        (1024.0, ["B", "KiB", "MiB", "GiB", "TiB"])
    } else {
        (1000.0, ["B", "kB", "MB", "GB", "TB"])
    };
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= base && unit < units.len() - 1 {
        value /= base;
        unit += 1;
    }
    if unit == 0 {
        return format!("{bytes}B");
    }
    // Go's `%.4g`: four significant digits, trailing zeros dropped.
    let int_digits = (value.abs().log10().floor() as i32 + 1).max(1);
    let decimals = (4 - int_digits).max(0) as usize;
    let text = format!("{value:.decimals$}");
    let text = if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.') } else { &text };
    format!("{text}{}", units[unit])
}

fn stats_table(rows: &[(String, f64, SandboxStats)]) -> String {
    let mut cells = vec![[
        "SANDBOX ID".to_string(),
        "CPU %".into(),
        "MEM USAGE / LIMIT".into(),
        "MEM %".into(),
        "NET I/O".into(),
        "BLOCK I/O".into(),
        "PIDS".into(),
    ]];
    for (id, cpu, s) in rows {
        let mem_percent = if s.memory_limit_bytes > 0 {
            s.memory_usage_bytes as f64 / s.memory_limit_bytes as f64 * 100.0
        } else {
            0.0
        };
        cells.push([
            id.clone(),
            format!("{cpu:.2}%"),
            format!("{} / {}", size(s.memory_usage_bytes, true), size(s.memory_limit_bytes, true)),
            format!("{mem_percent:.2}%"),
            format!("{} / {}", size(s.network_rx_bytes, false), size(s.network_tx_bytes, false)),
            format!("{} / {}", size(s.block_read_bytes, false), size(s.block_write_bytes, false)),
            s.pids.to_string(),
        ]);
    }
    let widths: Vec<usize> =
        (0..7).map(|i| cells.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for row in cells {
        let padded: Vec<String> = row.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        out.push_str(padded.join("   ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_docker_stats_prints_them() {
        assert_eq!(size(486, false), "486B");
        assert_eq!(size(602_112, true), "588KiB");
        assert_eq!(size(25_275_000_000, true), "23.54GiB");
        assert_eq!(size(1_200, false), "1.2kB");
    }

    #[test]
    fn cpu_percent_is_over_the_wall_time_between_readings() {
        let before = SandboxStats { read_at_unix_ns: 0, cpu_usage_ns: 0, ..Default::default() };
        let now =
            SandboxStats { read_at_unix_ns: 1_000_000_000, cpu_usage_ns: 500_000_000, ..Default::default() };
        assert!((cpu_percent(&before, &now) - 50.0).abs() < 1e-9);
    }

    #[test]
    fn an_event_is_one_line() {
        let event = SandboxEvent {
            kind: EventKind::Stopped,
            sandbox_id: "sandboxd-1".into(),
            sandbox: None,
            time_unix_ms: 1_000,
            exit_code: Some(137),
            oom_killed: true,
            reason: String::new(),
            failure_kind: Some(sandboxd_client::FailureKind::OomKilled),
        };
        assert_eq!(
            line(&event),
            "1970-01-01T00:00:01.000Z  stopped        sandboxd-1  exit_code=137  oom_killed  failure=OOM_KILLED"
        );
    }
}
