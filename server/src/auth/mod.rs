//! Who may do what: capability tokens (`token`, signed with `keys`, refused once in
//! `revocations`), tenants and their quotas (`tenants`, `quota`), the [`Principal`] a call
//! acts as (`principal`) and the interceptor that finds it (`gate`). The service asks the
//! principal once per handler: `principal.require(sandbox_id, Scope::X)`.

pub mod gate;
pub mod keys;
pub mod principal;
pub mod revocations;
pub mod scope;
pub mod tenants;
pub mod token;

pub use gate::AccessGate;
pub use principal::Principal;
pub use scope::Scope;
pub use tenants::{Quotas, Tenant, Tenants};
pub use token::{Claims, Tokens};

/// The label every sandbox and snapshot of a tenant carries (set by the server at `docker run`
/// and `docker commit`; `spec.metadata` lives under another prefix, so a caller can neither set
/// nor fake it).
pub const TENANT_LABEL: &str = "sandboxd.tenant";
/// CPUs a tenant's sandbox reserved (`resources.cpu`), for the `cpus` quota.
pub const CPUS_LABEL: &str = "sandboxd.reserved.cpus";
/// MiB a tenant's sandbox reserved (`resources.memory_mib`), for the `memory_mib` quota.
pub const MEMORY_LABEL: &str = "sandboxd.reserved.memory-mib";
