//! Between the wire types of `sandbox.v1` and the service's own types: specs, descriptors,
//! durations, and the warm pools' specs and counts.

use std::collections::BTreeMap;

use sandboxd_proto::v1 as pb;
use tonic::Status;

use super::status::invalid;
use crate::core::pools::{PoolSpec, PoolStatus};
use crate::core::spec::{ProviderOptions, SandboxDescriptor, SandboxHandle, SandboxResources, SandboxSpec};

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
            .map(|v| crate::core::runtime::VolumeMount {
                name: v.name,
                target: v.target,
                read_only: v.read_only,
                subpath: v.subpath,
            })
            .collect(),
        runtime: Some(spec.runtime).filter(|r| !r.is_empty()),
        tenant: None,
        egress: None,
        pool_member: None,
        setup: spec.setup,
        setup_timeout_s: spec.setup_timeout_s,
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

/// A wire `PoolSpec` as the pools take it (checked there, fields named `pool.…`).
pub fn pool_spec_from_proto(pool: pb::PoolSpec) -> Result<PoolSpec, Status> {
    let template = pool.template.unwrap_or_default();
    if template.pool.is_some() {
        return Err(invalid("pool.template.pool", "must be unset"));
    }
    if !template.image.is_empty() && template.image != pool.image {
        return Err(invalid("pool.template.image", "must be unset or equal pool.image"));
    }
    let mut template = spec_from_proto(template).map_err(|s| {
        Status::new(s.code(), s.message().replacen("invalid spec.", "invalid pool.template.", 1))
    })?;
    template.image = pool.image;
    Ok(PoolSpec { name: pool.name, template, target: pool.target, max: pool.max, recycle: pool.recycle })
}

/// A pool's spec on the wire.
pub fn pool_spec_to_proto(spec: &PoolSpec) -> pb::PoolSpec {
    let t = &spec.template;
    let template = pb::SandboxSpec {
        image: String::new(),
        ttl_s: None,
        ready_timeout_s: t.ready_timeout_s,
        workdir: t.workdir.clone(),
        env: t.env.clone().into_iter().collect(),
        files: t.files.clone().into_iter().collect(),
        metadata: t.metadata.clone().into_iter().collect(),
        resources: Some(pb::SandboxResources {
            cpu: t.resources.cpu,
            memory_mib: t.resources.memory_mib,
            disk_gib: t.resources.disk_gib,
            gpu: t.resources.gpu,
            gpu_type: t.resources.gpu_type.clone(),
        }),
        entrypoint: t.entrypoint.clone().unwrap_or_default(),
        ports: t.ports.iter().map(|p| u32::from(*p)).collect(),
        provider_options: Some(pb::ProviderOptions {
            volumes: t.provider_options.volumes.clone(),
            run_args: t.provider_options.run_args.clone(),
        }),
        snapshot_id: t.snapshot_id.clone(),
        setup: t.setup.clone(),
        setup_timeout_s: t.setup_timeout_s,
        pool: None,
        network: t.network.clone(),
        cap_add: t.cap_add.clone(),
        shm_size_bytes: t.shm_size_bytes,
        volumes: t
            .volumes
            .iter()
            .map(|v| pb::VolumeMount {
                name: v.name.clone(),
                target: v.target.clone(),
                read_only: v.read_only,
                subpath: v.subpath.clone(),
            })
            .collect(),
        network_policy: None,
        runtime: t.runtime.clone().unwrap_or_default(),
    };
    pb::PoolSpec {
        name: spec.name.clone(),
        image: t.image.clone(),
        template: Some(template),
        target: spec.target,
        max: spec.max,
        recycle: spec.recycle,
    }
}

/// A pool and its counts on the wire.
pub fn pool_info(status: PoolStatus) -> pb::PoolInfo {
    pb::PoolInfo {
        name: status.spec.name.clone(),
        spec: Some(pool_spec_to_proto(&status.spec)),
        target: status.spec.target,
        max: status.spec.max,
        ready: status.ready,
        claimed: status.claimed,
        created: status.created,
        in_use: status.in_use,
        from_config: status.from_config,
        tenant: status.tenant.unwrap_or_default(),
        recycled: status.recycled,
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

    #[test]
    fn a_pool_spec_round_trips_and_its_template_is_checked() {
        let template = pb::SandboxSpec {
            workdir: Some("/tmp".into()),
            env: [("A".to_string(), "1".to_string())].into(),
            ports: vec![8080],
            ..Default::default()
        };
        let wire = pb::PoolSpec {
            name: "py".into(),
            image: "img".into(),
            template: Some(template.clone()),
            target: 2,
            max: 4,
            recycle: true,
        };
        let spec = pool_spec_from_proto(wire.clone()).unwrap();
        assert!(spec.recycle);
        assert_eq!((spec.template.image.as_str(), spec.target, spec.max), ("img", 2, 4));
        let back = pool_spec_to_proto(&spec);
        assert_eq!(
            (back.name, back.image, back.target, back.max),
            (wire.name.clone(), wire.image.clone(), 2, 4)
        );
        let t = back.template.unwrap();
        assert_eq!(
            (t.workdir, t.env, t.ports, t.image),
            (template.workdir.clone(), template.env.clone(), vec![8080], String::new())
        );
        let claimed =
            pb::PoolSpec { template: Some(pb::SandboxSpec { pool: Some("x".into()), ..template }), ..wire };
        let err = pool_spec_from_proto(claimed).unwrap_err();
        assert!(err.message().contains("pool.template.pool"), "{err:?}");
    }
}
