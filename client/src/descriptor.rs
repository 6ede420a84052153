//! What [`crate::Sandbox::connect`] accepts, so a caller needs no JSON crate of its own.

use crate::error::{ClientError, Result};
use crate::proto;
use sandboxd_proto::contract::SandboxDescriptor;

/// A sandbox descriptor: the JSON value [`crate::Sandbox::serialize`] made, that JSON as text, a
/// bare sandbox id, a `SandboxDescriptor`, or a [`proto::SandboxRef`].
pub trait IntoSandboxRef {
    /// The descriptor as the wire type, checked.
    fn into_sandbox_ref(self) -> Result<proto::SandboxRef>;
}

impl IntoSandboxRef for &serde_json::Value {
    fn into_sandbox_ref(self) -> Result<proto::SandboxRef> {
        parse_descriptor(self)
    }
}

impl IntoSandboxRef for serde_json::Value {
    fn into_sandbox_ref(self) -> Result<proto::SandboxRef> {
        parse_descriptor(&self)
    }
}

/// JSON text (`{"sandbox_id": …}`) or a bare id.
impl IntoSandboxRef for &str {
    fn into_sandbox_ref(self) -> Result<proto::SandboxRef> {
        let text = self.trim();
        if text.starts_with('{') {
            let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
                ClientError::InvalidArgument(format!("sandbox descriptor: not valid JSON: {e}"))
            })?;
            parse_descriptor(&value)
        } else {
            parse_descriptor(&serde_json::json!({ "sandbox_id": text }))
        }
    }
}

impl IntoSandboxRef for &String {
    fn into_sandbox_ref(self) -> Result<proto::SandboxRef> {
        self.as_str().into_sandbox_ref()
    }
}

impl IntoSandboxRef for String {
    fn into_sandbox_ref(self) -> Result<proto::SandboxRef> {
        self.as_str().into_sandbox_ref()
    }
}

impl IntoSandboxRef for &sandboxd_proto::contract::SandboxDescriptor {
    fn into_sandbox_ref(self) -> Result<proto::SandboxRef> {
        parse_descriptor(&self.to_json_value())
    }
}

impl IntoSandboxRef for proto::SandboxRef {
    fn into_sandbox_ref(self) -> Result<proto::SandboxRef> {
        if self.sandbox_id.is_empty() {
            return Err(ClientError::InvalidArgument("sandbox descriptor: empty sandbox_id".into()));
        }
        Ok(self)
    }
}

impl IntoSandboxRef for &proto::SandboxRef {
    fn into_sandbox_ref(self) -> Result<proto::SandboxRef> {
        self.clone().into_sandbox_ref()
    }
}

/// A descriptor made by `serialize()` (or by hand): `sandbox_id` required, `ports`, `workdir`
/// and `token` optional.
pub(crate) fn parse_descriptor(value: &serde_json::Value) -> Result<proto::SandboxRef> {
    let descriptor = SandboxDescriptor::from_json_value(value)
        .map_err(|e| ClientError::InvalidArgument(format!("sandbox descriptor: {e}")))?;
    Ok(proto::SandboxRef {
        sandbox_id: descriptor.sandbox_id,
        ports: descriptor.ports.unwrap_or_default().into_iter().map(u32::from).collect(),
        workdir: descriptor.workdir,
        metadata: Default::default(),
        // The token a descriptor carries goes back to the server with `Connect`.
        token: value.get("token").and_then(|t| t.as_str()).unwrap_or_default().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_id_and_value_agree() {
        let from_text = r#"{"sandbox_id": "sbx-1", "ports": [80]}"#.into_sandbox_ref().unwrap();
        assert_eq!((from_text.sandbox_id.as_str(), from_text.ports.as_slice()), ("sbx-1", &[80u32][..]));
        assert_eq!("sbx-1".into_sandbox_ref().unwrap().sandbox_id, "sbx-1");
        assert!("{not json".into_sandbox_ref().is_err());
        assert!("".into_sandbox_ref().is_err());
    }
}
