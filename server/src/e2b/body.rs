//! Request bodies of the control plane: JSON, with the failing field named.

use tonic::Status;

/// The JSON body, or 400 naming what is wrong with it.
pub fn body<T: serde::de::DeserializeOwned + Default>(bytes: &[u8]) -> Result<T, Status> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        Status::invalid_argument(format!("request body field `{path}`: {}", e.inner()))
    })
}
