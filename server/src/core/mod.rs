//! The seam and the backend-neutral rules: what a sandbox is (`spec`), the `SandboxBackend`
//! trait every backend implements (`backend`), and the rules that hold whatever runs the
//! sandboxes (leases, expiry and the sweep, claims, inventory, lifecycle events, pools). Nothing
//! here names a backend: `backends/*` depend on `core`, never the reverse.

pub mod admission;
pub mod backend;
pub mod branching;
pub mod capabilities;
pub mod claims;
pub mod exec_engine;
pub mod expiry;
pub mod failure;
pub mod fs;
pub mod images;
pub mod inventory;
pub mod lease;
pub mod lifecycle;
pub mod logs;
pub mod metadata;
pub mod pools;
pub mod processes;
pub mod receipts;
pub mod record_map;
pub mod reset;
pub mod runtime;
pub mod snapshot_expiry;
pub mod spec;
pub mod stats;
pub mod sweep;
pub mod templates;
pub mod terminal;
pub mod usage;
pub mod usage_metrics;
pub mod watch;
