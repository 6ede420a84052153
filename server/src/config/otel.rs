//! The `server.tracing` section: OpenTelemetry traces exported over OTLP (`crate::otel`).
//! Off unless `otlp_endpoint` is set.

use serde::Deserialize;

use super::rules::ConfigError;

/// The `server.tracing` section.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TracingSection {
    /// The collector's OTLP/gRPC endpoint (`http://HOST:4317`); `null`: no traces.
    pub otlp_endpoint: Option<String>,
    /// Share of traces started here that are recorded, in 0..=1; a caller's sampled or
    /// unsampled `traceparent` decides for the traces it continues.
    pub sampling_ratio: f64,
    /// The `service.name` of the spans.
    pub service_name: String,
}

impl Default for TracingSection {
    fn default() -> Self {
        Self { otlp_endpoint: None, sampling_ratio: 1.0, service_name: "sandboxd".into() }
    }
}

impl TracingSection {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(endpoint) = &self.otlp_endpoint {
            let field = "server.tracing.otlp_endpoint";
            let uri: http::Uri = endpoint.parse().map_err(|e| {
                ConfigError::new(field, format!("must be null or http://HOST:PORT ({e}; got {endpoint:?})"))
            })?;
            if uri.scheme_str() != Some("http") || uri.host().is_none_or(str::is_empty) {
                return Err(ConfigError::new(
                    field,
                    format!(
                        "must be null or http://HOST:PORT, a collector's plain OTLP/gRPC port (got {endpoint:?}); \
                         for TLS, run a local collector that forwards"
                    ),
                ));
            }
        }
        if !(0.0..=1.0).contains(&self.sampling_ratio) {
            return Err(ConfigError::new(
                "server.tracing.sampling_ratio",
                format!("must be in 0..=1 (got {})", self.sampling_ratio),
            ));
        }
        if self.service_name.trim().is_empty() {
            return Err(ConfigError::new("server.tracing.service_name", "must not be empty"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::FileConfig;
    use serde_json::json;

    fn tracing(v: serde_json::Value) -> Result<FileConfig, crate::config::ConfigError> {
        FileConfig::from_json_value(&json!({"server": {"tracing": v}}))
    }

    #[test]
    fn off_by_default_and_bad_values_name_their_field() {
        let c = tracing(json!({})).unwrap();
        assert_eq!(c.server.tracing.otlp_endpoint, None);
        assert_eq!(c.server.tracing.service_name, "sandboxd");
        let c = tracing(json!({"otlp_endpoint": "http://collector:4317", "sampling_ratio": 0.25})).unwrap();
        assert_eq!(c.server.tracing.otlp_endpoint.as_deref(), Some("http://collector:4317"));
        for (bad, field) in [
            (json!({"otlp_endpoint": "collector:4317"}), "server.tracing.otlp_endpoint"),
            (json!({"otlp_endpoint": "https://collector:4317"}), "server.tracing.otlp_endpoint"),
            (json!({"otlp_endpoint": "http://"}), "server.tracing.otlp_endpoint"),
            (json!({"sampling_ratio": 1.5}), "server.tracing.sampling_ratio"),
            (json!({"sampling_ratio": -0.1}), "server.tracing.sampling_ratio"),
            (json!({"service_name": " "}), "server.tracing.service_name"),
        ] {
            let err = tracing(bad.clone()).expect_err(&bad.to_string());
            assert_eq!(err.field, field, "{bad}: {err}");
        }
    }
}
