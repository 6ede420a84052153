//! A pool's definition (`PoolSpec`) and the one rule of which `Create` it serves.
//!
//! **What "matches" means.** A sandbox of a pool is started before the call that gets it, so
//! only what can still be applied to a running sandbox may differ between the call and the
//! template: `env` (added to every exec and terminal), `files` (written at the claim),
//! `metadata` (kept in the claim record) and `ttl_s` (the lease starts at the claim). Everything
//! else is fixed at `docker run` and must be equal: `image`, `workdir`, `resources`,
//! `entrypoint`, `ports`, `provider_options`, `ready_timeout_s` and the runtime requirements
//! (`network`, `cap_add`, `shm_size_bytes`, `volumes`). A template with a `snapshot_id` (and no
//! image) is a pool of that snapshot: of a live one (`Checkpoint`), a live pool whose members
//! are restored, so a claim hands out a process state, not a boot (the service checks it is
//! live).
//! A `Create` that names its pool (`spec.pool`) may leave those fields unset (the template's
//! apply); one that does not name a pool is served by the first pool, by name, whose template
//! they equal exactly.

use std::collections::BTreeMap;

use crate::core::spec::SandboxSpec;
use crate::error::ProviderError;

/// A warm pool as defined (config file or `CreatePool`).
#[derive(Debug, Clone, PartialEq)]
pub struct PoolSpec {
    pub name: String,
    /// The template; its `image` is the pool's image.
    pub template: SandboxSpec,
    /// Ready, unclaimed sandboxes kept.
    pub target: u32,
    /// Sandboxes of the pool alive at once, claimed ones included.
    pub max: u32,
    /// A closed sandbox of the pool is reset (`SandboxBackend::reset`) and handed back to its
    /// ready ones instead of removed.
    pub recycle: bool,
}

impl PoolSpec {
    /// Every pool of the config file's `pools:`, checked; the first error names its index.
    pub fn all_from_config(pools: &[crate::config::PoolConfig]) -> Result<Vec<Self>, ProviderError> {
        pools.iter().enumerate().map(|(i, p)| Self::from_config(p, i)).collect()
    }

    /// The config file's `pools[index]`, its template read as a sandbox spec and every field
    /// checked (named `pools[index].…`).
    pub fn from_config(cfg: &crate::config::PoolConfig, index: usize) -> Result<Self, ProviderError> {
        let prefix = format!("pools[{index}]");
        let template_value =
            if cfg.template.is_null() { serde_json::json!({}) } else { cfg.template.clone() };
        let mut template: SandboxSpec = serde_json::from_value(template_value)
            .map_err(|e| ProviderError::invalid(format!("{prefix}.template"), e.to_string()))?;
        if !template.image.is_empty() && template.image != cfg.image {
            return Err(ProviderError::invalid(
                format!("{prefix}.template.image"),
                "must be unset (the pool's image is pools[N].image)",
            ));
        }
        template.image = cfg.image.clone();
        let spec =
            Self { name: cfg.name.clone(), template, target: cfg.target, max: cfg.max, recycle: cfg.recycle };
        spec.validate(&prefix)?;
        Ok(spec)
    }

    /// Refused with the field named under `prefix` (`pool` on the wire, `pools[N]` in the
    /// config file).
    pub fn validate(&self, prefix: &str) -> Result<(), ProviderError> {
        let field = |f: &str| format!("{prefix}.{f}");
        let refused = |(field, message): super::rules::Refusal| ProviderError::invalid(field, message);
        super::rules::check_name(&field("name"), &self.name).map_err(refused)?;
        match (&self.template.snapshot_id, self.template.image.is_empty()) {
            (Some(_), false) => {
                return Err(ProviderError::invalid(
                    field("image"),
                    "must be empty when template.snapshot_id names the (live) snapshot the pool restores",
                ))
            }
            (Some(_), true) => {}
            (None, true) => return Err(ProviderError::invalid(field("image"), "is required")),
            (None, false) => crate::core::spec::validate_image(&self.template.image)
                .map_err(|e| rename_field(e, "spec.image", &field("image")))?,
        }
        if self.template.ttl_s.is_some() {
            return Err(ProviderError::invalid(
                field("template.ttl_s"),
                "must be unset: a pool sandbox's lease starts when it is claimed (the claim's spec.ttl_s)",
            ));
        }
        self.template.validate().map_err(|e| rename_field(e, "spec.", &field("template.")))?;
        super::rules::check_sizes(prefix, self.target, self.max).map_err(refused)
    }

    /// Whether a `Create` that names no pool is this pool's: the fields fixed at `docker run`
    /// equal the template's (see the module's doc).
    pub fn matches(&self, call: &SandboxSpec) -> bool {
        let t = &self.template;
        call.snapshot_id == t.snapshot_id
            && crate::core::spec::normalize_image(&call.image) == crate::core::spec::normalize_image(&t.image)
            && call.workdir == t.workdir
            && call.resources == t.resources
            && call.entrypoint == t.entrypoint
            && call.ports == t.ports
            && call.provider_options == t.provider_options
            && call.ready_timeout_s == t.ready_timeout_s
            && call.network == t.network
            && call.cap_add == t.cap_add
            && call.shm_size_bytes == t.shm_size_bytes
            && call.volumes == t.volumes
            && call.runtime == t.runtime
    }

    /// A `Create` naming this pool: every field fixed at `docker run` must be unset or equal
    /// the template's (INVALID_ARGUMENT naming the first that is not).
    pub fn check_named(&self, call: &SandboxSpec) -> Result<(), ProviderError> {
        let t = &self.template;
        let differs = |field: &str| {
            Err(ProviderError::invalid(
                format!("spec.{field}"),
                format!(
                    "differs from the template of pool {:?}: leave it unset or equal to the template's \
                     (only env, files, metadata and ttl_s apply per claim)",
                    self.name
                ),
            ))
        };
        let image_set = !call.image.is_empty();
        if image_set
            && crate::core::spec::normalize_image(&call.image) != crate::core::spec::normalize_image(&t.image)
        {
            return differs("image");
        }
        if call.snapshot_id.is_some() && call.snapshot_id != t.snapshot_id {
            return differs("snapshot_id");
        }
        if call.workdir.is_some() && call.workdir != t.workdir {
            return differs("workdir");
        }
        if call.resources != Default::default() && call.resources != t.resources {
            return differs("resources");
        }
        if call.entrypoint.is_some() && call.entrypoint != t.entrypoint {
            return differs("entrypoint");
        }
        if !call.ports.is_empty() && call.ports != t.ports {
            return differs("ports");
        }
        if call.provider_options != Default::default() && call.provider_options != t.provider_options {
            return differs("provider_options");
        }
        if call.ready_timeout_s.is_some() && call.ready_timeout_s != t.ready_timeout_s {
            return differs("ready_timeout_s");
        }
        if call.network.is_some() && call.network != t.network {
            return differs("network");
        }
        if !call.cap_add.is_empty() && call.cap_add != t.cap_add {
            return differs("cap_add");
        }
        if call.shm_size_bytes.is_some() && call.shm_size_bytes != t.shm_size_bytes {
            return differs("shm_size_bytes");
        }
        if !call.volumes.is_empty() && call.volumes != t.volumes {
            return differs("volumes");
        }
        if call.runtime.is_some() && call.runtime != t.runtime {
            return differs("runtime");
        }
        Ok(())
    }

    /// The sandbox a claim stands for: the template with the call's env, files and metadata
    /// over it, the call's lease and tenant (what an on-demand create of an empty pool makes).
    pub fn claimed_spec(&self, call: &SandboxSpec) -> SandboxSpec {
        let mut spec = self.template.clone();
        spec.env.extend(call.env.clone());
        spec.files.extend(call.files.clone());
        spec.metadata = self.claim_metadata(call);
        spec.ttl_s = call.ttl_s;
        spec.tenant = call.tenant.clone();
        spec.pool_member = None;
        spec
    }

    /// The metadata a claimed sandbox has: the template's with the call's over them.
    pub fn claim_metadata(&self, call: &SandboxSpec) -> BTreeMap<String, String> {
        let mut metadata = self.template.metadata.clone();
        metadata.extend(call.metadata.clone());
        metadata
    }
}

/// The same error with its field under the pool's prefix.
fn rename_field(e: ProviderError, from: &str, to: &str) -> ProviderError {
    match e {
        ProviderError::InvalidArgument { field, message } => {
            ProviderError::InvalidArgument { field: field.replacen(from, to, 1), message }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> PoolSpec {
        PoolSpec {
            name: "py".into(),
            template: SandboxSpec { workdir: Some("/w".into()), ports: vec![80], ..SandboxSpec::new("img") },
            target: 2,
            max: 4,
            recycle: false,
        }
    }

    fn field_of(e: ProviderError) -> String {
        match e {
            ProviderError::InvalidArgument { field, .. } => field,
            other => panic!("{other}"),
        }
    }

    #[test]
    fn bad_pools_name_their_field() {
        assert!(pool().validate("pool").is_ok());
        let cases = [
            (PoolSpec { target: 5, ..pool() }, "pool.target"),
            (PoolSpec { max: 0, ..pool() }, "pool.max"),
            (PoolSpec { max: 5000, target: 0, ..pool() }, "pool.max"),
            (PoolSpec { name: "Bad Name".into(), ..pool() }, "pool.name"),
            (PoolSpec { template: SandboxSpec::default(), ..pool() }, "pool.image"),
            (
                PoolSpec {
                    template: SandboxSpec {
                        snapshot_id: Some("sandboxd-snapshot:0".into()),
                        ..pool().template
                    },
                    ..pool()
                },
                "pool.image",
            ),
            (
                PoolSpec { template: SandboxSpec { ttl_s: Some(5.0), ..pool().template }, ..pool() },
                "pool.template.ttl_s",
            ),
            (
                PoolSpec {
                    template: SandboxSpec { workdir: Some("rel".into()), ..pool().template },
                    ..pool()
                },
                "pool.template.workdir",
            ),
        ];
        for (p, field) in cases {
            assert_eq!(field_of(p.validate("pool").unwrap_err()), field);
        }
        assert_eq!(
            field_of(PoolSpec { target: 9, ..pool() }.validate("pools[1]").unwrap_err()),
            "pools[1].target"
        );
    }

    #[test]
    fn matching_is_on_what_docker_run_fixed() {
        let p = pool();
        let call = SandboxSpec {
            env: [("A".to_string(), "1".to_string())].into(),
            metadata: [("run".to_string(), "r".to_string())].into(),
            ttl_s: Some(60.0),
            ..p.template.clone()
        };
        assert!(p.matches(&call), "env, metadata and ttl_s apply per claim");
        assert!(!p.matches(&SandboxSpec { ports: vec![], ..call.clone() }));
        assert!(!p.matches(&SandboxSpec { image: "other".into(), ..call.clone() }));
        assert!(p.check_named(&SandboxSpec::default()).is_ok(), "a named claim may leave everything unset");
        assert_eq!(
            field_of(
                p.check_named(&SandboxSpec { workdir: Some("/x".into()), ..Default::default() }).unwrap_err()
            ),
            "spec.workdir"
        );
        let spec = p.claimed_spec(&call);
        assert_eq!((spec.image.as_str(), spec.ttl_s, spec.env.len()), ("img", Some(60.0), 1));
    }
}
