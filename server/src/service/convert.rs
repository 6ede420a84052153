//! Between the wire types of `sandbox.v1` and the provider's own types.

use std::collections::BTreeMap;

use sandboxd_proto::v1 as pb;
use tonic::Status;

use super::status::invalid;
use crate::spec::{ProviderOptions, SandboxDescriptor, SandboxHandle, SandboxResources, SandboxSpec};

/// A port on the wire (`uint32`) as a TCP port.
pub fn port(field: &str, value: u32) -> Result<u16, Status> {
    match u16::try_from(value) {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(invalid(field, format!("ports must be in 1..=65535 (got {value})"))),
    }
}

pub fn spec_from_proto(spec: pb::SandboxSpec) -> Result<SandboxSpec, Status> {
    let ports = spec.ports.iter().map(|p| port("spec.ports", *p)).collect::<Result<Vec<_>, _>>()?;
    let resources = spec.resources.unwrap_or_default();
    let options = spec.provider_options.unwrap_or_default();
    Ok(SandboxSpec {
        image: spec.image,
        ttl_s: spec.ttl_s,
        ready_timeout_s: spec.ready_timeout_s,
        workdir: spec.workdir,
        env: sorted(spec.env),
        files: spec.files.into_iter().collect(),
        metadata: sorted(spec.metadata),
        resources: SandboxResources {
            cpu: resources.cpu,
            memory_mib: resources.memory_mib,
            disk_gib: resources.disk_gib,
            gpu: resources.gpu,
            gpu_type: resources.gpu_type,
        },
        entrypoint: (!spec.entrypoint.is_empty()).then_some(spec.entrypoint),
        ports,
        provider_options: ProviderOptions { volumes: options.volumes, run_args: options.run_args },
        snapshot_id: spec.snapshot_id,
        network: spec.network,
        cap_add: spec.cap_add,
        shm_size_bytes: spec.shm_size_bytes,
        volumes: spec
            .volumes
            .into_iter()
            .map(|v| crate::runtime::VolumeMount {
                name: v.name,
                target: v.target,
                read_only: v.read_only,
                subpath: v.subpath,
            })
            .collect(),
        tenant: None,
        egress: None,
        pool_member: None,
    })
}

pub fn sorted(map: std::collections::HashMap<String, String>) -> BTreeMap<String, String> {
    map.into_iter().collect()
}

pub fn sandbox_ref(handle: &SandboxHandle) -> pb::SandboxRef {
    pb::SandboxRef {
        sandbox_id: handle.sandbox_id.clone(),
        ports: handle.ports.iter().map(|p| u32::from(*p)).collect(),
        workdir: handle.workdir.clone(),
        metadata: handle.metadata.clone().into_iter().collect(),
        token: String::new(),
    }
}

pub fn descriptor(sandbox: pb::SandboxRef) -> Result<SandboxDescriptor, Status> {
    let ports = sandbox.ports.iter().map(|p| port("sandbox.ports", *p)).collect::<Result<Vec<_>, _>>()?;
    Ok(SandboxDescriptor {
        sandbox_id: sandbox.sandbox_id,
        ports: (!ports.is_empty()).then_some(ports),
        workdir: sandbox.workdir,
    })
}

/// A positive number of seconds, at most `MAX_CLIENT_SECONDS` (one year).
pub fn seconds(field: &str, value: f64) -> Result<std::time::Duration, Status> {
    use crate::config::MAX_CLIENT_SECONDS;
    if value > 0.0 && value <= MAX_CLIENT_SECONDS {
        Ok(std::time::Duration::from_secs_f64(value))
    } else {
        Err(invalid(field, format!("must be > 0 and <= {MAX_CLIENT_SECONDS} seconds (got {value})")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_conversion_keeps_optional_and_checks_ports() {
        let spec = pb::SandboxSpec {
            image: "img".into(),
            ttl_s: Some(3.0),
            ports: vec![80],
            entrypoint: vec![],
            ..Default::default()
        };
        let s = spec_from_proto(spec).unwrap();
        assert_eq!((s.ttl_s, s.ports, s.entrypoint), (Some(3.0), vec![80], None));
        let bad = pb::SandboxSpec { image: "img".into(), ports: vec![70000], ..Default::default() };
        let err = spec_from_proto(bad).unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.message().contains("spec.ports"));
        assert!(seconds("timeout_s", 0.0).is_err() && seconds("timeout_s", f64::NAN).is_err());
        let err = seconds("timeout_s", 1e20).unwrap_err();
        assert!(err.message().contains("timeout_s") && err.message().contains("31536000"), "{err:?}");
    }
}
