//! What the clients report and the driver adds up: one JSON line per event on a client's
//! stdout, folded into counters that end as the run's one summary line.

use std::collections::BTreeMap;

use serde_json::{json, Value};

/// One line a client prints: a finished call, a held sandbox, or a created/closed sandbox.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A call ended: its kind, its outcome (`OK`, a gRPC code name, `CANCELLED_BY_CLIENT`,
    /// `HANG`), and by how much it overran its deadline (0 when in time or not judged).
    Call { op: String, outcome: String, overrun_ms: u64 },
    /// A worker stopped at the driver's hold number `hold`, keeping this sandbox (none if it
    /// had none).
    Held { hold: u64, sandbox: Option<String> },
    /// A worker saw wrong bytes (a download or an echo that does not match what was sent).
    Corrupt { detail: String },
}

impl Event {
    pub fn to_line(&self) -> String {
        match self {
            Event::Call { op, outcome, overrun_ms } => {
                json!({"k": "call", "op": op, "outcome": outcome, "overrun_ms": overrun_ms}).to_string()
            }
            Event::Held { hold, sandbox } => {
                json!({"k": "held", "hold": hold, "sandbox": sandbox}).to_string()
            }
            Event::Corrupt { detail } => json!({"k": "corrupt", "detail": detail}).to_string(),
        }
    }

    pub fn parse(line: &str) -> Option<Event> {
        let v: Value = serde_json::from_str(line).ok()?;
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(String::from);
        match v.get("k")?.as_str()? {
            "call" => Some(Event::Call {
                op: s("op")?,
                outcome: s("outcome")?,
                overrun_ms: v.get("overrun_ms")?.as_u64()?,
            }),
            "held" => Some(Event::Held { hold: v.get("hold")?.as_u64()?, sandbox: s("sandbox") }),
            "corrupt" => Some(Event::Corrupt { detail: s("detail")? }),
            _ => None,
        }
    }
}

/// Everything counted during a run.
#[derive(Debug, Default)]
pub struct Totals {
    pub ops: BTreeMap<String, u64>,
    pub outcomes: BTreeMap<String, u64>,
    pub ok_by_kind: BTreeMap<String, u64>,
    pub overruns: Vec<String>,
    pub corrupt: Vec<String>,
    pub faults: BTreeMap<&'static str, u64>,
    pub violations: Vec<String>,
}

impl Totals {
    pub fn record(&mut self, event: &Event) {
        match event {
            Event::Call { op, outcome, overrun_ms } => {
                *self.ops.entry(op.clone()).or_default() += 1;
                *self.outcomes.entry(outcome.clone()).or_default() += 1;
                if outcome == "OK" {
                    *self.ok_by_kind.entry(op.clone()).or_default() += 1;
                }
                if *overrun_ms > 0 && self.overruns.len() < 1000 {
                    self.overruns.push(format!("{op} {outcome} +{overrun_ms}ms"));
                }
            }
            Event::Corrupt { detail } => self.corrupt.push(detail.clone()),
            Event::Held { .. } => {}
        }
    }

    pub fn fault(&mut self, kind: &'static str) {
        *self.faults.entry(kind).or_default() += 1;
    }

    /// `a=1,b=2` of a map (`-` when empty).
    fn list<K: std::fmt::Display>(map: &BTreeMap<K, u64>) -> String {
        if map.is_empty() {
            return "-".into();
        }
        map.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
    }

    /// The one summary line.
    pub fn summary(&self, extra: &[(&str, String)]) -> String {
        let total: u64 = self.ops.values().sum();
        let mut line = format!(
            "SOAK {} ops={total} by_kind[{}] outcomes[{}] faults[{}] overruns={} corrupt={}",
            if self.violations.is_empty() { "PASS" } else { "FAIL" },
            Self::list(&self.ops),
            Self::list(&self.outcomes),
            Self::list(&self.faults),
            self.overruns.len(),
            self.corrupt.len(),
        );
        for (k, v) in extra {
            line.push_str(&format!(" {k}={v}"));
        }
        line.push_str(&format!(" violations={}", self.violations.len()));
        line
    }
}
