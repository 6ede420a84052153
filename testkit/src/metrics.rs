//! Reading the server's Prometheus scrape in tests: one sample's value, and the name of the
//! RPC request counter's series.

/// The value of the sample `name{labels}` (labels as they appear, in order); 0 when absent.
pub fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .map(|v| v.trim().parse().expect("a number"))
        .unwrap_or(0.0)
}

/// The series of `sandboxd_rpc_requests_total` for `method` of `sandbox.v1.SandboxService`
/// answered with `code`.
pub fn rpc(method: &str, code: &str) -> String {
    format!("sandboxd_rpc_requests_total{{service=\"sandbox.v1.SandboxService\",method=\"{method}\",code=\"{code}\"}}")
}
