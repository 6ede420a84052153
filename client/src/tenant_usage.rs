//! `TenantUsage`: what a tenant spent over one period (its closed sandboxes' receipts, their
//! exact sums) beside its budgets, for a trainer that bills or throttles itself.

use crate::client::Client;
use crate::error::Result;
use crate::proto;

impl Client {
    /// The receipts of `tenant` (`None`: the caller's own, as a tenant key must ask) over the
    /// period holding `at_unix_ms` (`None`: the current one), their sums and the tenant's
    /// budgets per period (0: none).
    pub async fn tenant_usage(
        &self,
        tenant: Option<&str>,
        at_unix_ms: Option<i64>,
    ) -> Result<proto::TenantUsageResponse> {
        let request =
            proto::TenantUsageRequest { tenant: tenant.unwrap_or_default().to_string(), at_unix_ms };
        Ok(self.raw().tenant_usage(request).await?.into_inner())
    }
}
