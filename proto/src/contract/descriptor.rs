//! A sandbox's serialized descriptor (`Sandbox::serialize`, `Connect`).

/// What `Sandbox::serialize` returns and `Connect` takes, as JSON: `sandbox_id` required,
/// `ports` and `workdir` optional. The same shape as NeMo Gym's serialized handle.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SandboxDescriptor {
    pub sandbox_id: String,
    #[serde(default)]
    pub ports: Option<Vec<u16>>,
    #[serde(default)]
    pub workdir: Option<String>,
}

impl SandboxDescriptor {
    /// From a JSON value, with a message naming what is wrong.
    pub fn from_json_value(value: &serde_json::Value) -> Result<Self, String> {
        if !value.is_object() {
            return Err("must be a JSON object".into());
        }
        let descriptor: SandboxDescriptor = serde_json::from_value(value.clone()).map_err(|e| {
            format!(
                "{e} (expected `sandbox_id` string, `ports` array of 1..=65535, `workdir` string or null)"
            )
        })?;
        if descriptor.sandbox_id.is_empty() {
            return Err("`sandbox_id` must be a non-empty string".into());
        }
        if descriptor.ports.iter().flatten().any(|p| *p == 0) {
            return Err("`ports` must hold integers in 1..=65535".into());
        }
        Ok(descriptor)
    }

    /// As JSON.
    pub fn to_json_value(&self) -> serde_json::Value {
        serde_json::json!({"sandbox_id": self.sandbox_id, "ports": self.ports.clone().unwrap_or_default(), "workdir": self.workdir})
    }
}
