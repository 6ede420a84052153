//! Usage receipts: what each closed sandbox used (its `SandboxUsage` read at `Close`), kept by
//! tenant so a tenant's spend over a period is the exact sum of its sandboxes' receipts
//! (`TenantUsage`, the `tenant_*_seconds` metrics, the budgets in `service/quota.rs`). Kept in
//! this process's memory for `KEEP_PERIODS` periods of the longest budget period (a day at
//! least).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::core::usage::SandboxUsage;

/// Receipts older than this are forgotten.
const KEEP: Duration = Duration::from_secs(7 * 86_400);

/// What one closed sandbox used.
#[derive(Debug, Clone, PartialEq)]
pub struct Receipt {
    pub sandbox_id: String,
    /// When it was closed, in ms since the Unix epoch.
    pub closed_at_ms: i64,
    pub usage: SandboxUsage,
}

/// A tenant's receipts over a period and their sum.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Spend {
    pub receipts: Vec<Receipt>,
    pub sandbox_seconds: f64,
    pub cpu_seconds: f64,
}

/// Every tenant's receipts (`""`: sandboxes of no tenant).
#[derive(Default)]
pub struct Receipts {
    by_tenant: Mutex<HashMap<String, Vec<Receipt>>>,
}

impl Receipts {
    /// Keep `receipt` for `tenant` and count it in the tenant's metrics.
    pub fn record(&self, tenant: Option<&str>, receipt: Receipt) {
        let tenant = tenant.unwrap_or_default().to_string();
        let m = crate::metrics::global();
        let labels = crate::metrics::TenantLabels::of(&tenant);
        m.tenant_sandbox_seconds.get_or_create(&labels).inc_by(receipt.usage.wall_time.as_secs_f64());
        m.tenant_cpu_seconds.get_or_create(&labels).inc_by(receipt.usage.cpu_time.as_secs_f64());
        let oldest = receipt.closed_at_ms - KEEP.as_millis() as i64;
        let mut all = self.by_tenant.lock().unwrap_or_else(|p| p.into_inner());
        let list = all.entry(tenant).or_default();
        list.retain(|r| r.closed_at_ms >= oldest);
        list.push(receipt);
    }

    /// `tenant`'s receipts of sandboxes closed in `[from_ms, to_ms)`, and their sums.
    pub fn spend(&self, tenant: Option<&str>, from_ms: i64, to_ms: i64) -> Spend {
        let all = self.by_tenant.lock().unwrap_or_else(|p| p.into_inner());
        let receipts: Vec<Receipt> = all
            .get(tenant.unwrap_or_default())
            .map(|list| list.iter().filter(|r| (from_ms..to_ms).contains(&r.closed_at_ms)).cloned().collect())
            .unwrap_or_default();
        let sandbox_seconds = receipts.iter().map(|r| r.usage.wall_time.as_secs_f64()).sum();
        let cpu_seconds = receipts.iter().map(|r| r.usage.cpu_time.as_secs_f64()).sum();
        Spend { receipts, sandbox_seconds, cpu_seconds }
    }
}

/// The period of length `period` (aligned to the Unix epoch) that holds `at_ms`: its start and
/// end in ms.
pub fn period_of(at_ms: i64, period: Duration) -> (i64, i64) {
    let len = (period.as_millis() as i64).max(1);
    let start = at_ms.div_euclid(len) * len;
    (start, start + len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receipt(id: &str, at: i64, wall: u64, cpu: u64) -> Receipt {
        Receipt {
            sandbox_id: id.into(),
            closed_at_ms: at,
            usage: SandboxUsage {
                wall_time: Duration::from_millis(wall),
                cpu_time: Duration::from_millis(cpu),
                ..Default::default()
            },
        }
    }

    #[test]
    fn a_period_sums_exactly_its_own_tenants_receipts() {
        let book = Receipts::default();
        book.record(Some("a"), receipt("s1", 1_000, 1_500, 250));
        book.record(Some("a"), receipt("s2", 2_000, 500, 750));
        book.record(Some("b"), receipt("s3", 2_000, 9_000, 9_000));
        book.record(Some("a"), receipt("s4", 10_000, 1_000, 1_000));
        let spend = book.spend(Some("a"), 0, 10_000);
        assert_eq!(spend.receipts.iter().map(|r| r.sandbox_id.as_str()).collect::<Vec<_>>(), ["s1", "s2"]);
        assert_eq!((spend.sandbox_seconds, spend.cpu_seconds), (2.0, 1.0));
        assert_eq!(period_of(10_500, Duration::from_secs(10)), (10_000, 20_000));
        assert_eq!(period_of(9_999, Duration::from_secs(10)), (0, 10_000));
    }
}
