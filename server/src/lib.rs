//! sandboxd: Docker-container sandboxes for AI agents and RL trainers, served over gRPC.
//!
//! Layers, bottom up: `docker::cli` runs docker subprocesses; `docker` builds their argv and
//! implements the provider (`DockerProvider`), its terminals in `docker::pty`; `service` maps the
//! provider onto `sandbox.v1.SandboxService`.

pub mod audit;
pub mod auth;
pub mod backend;
pub mod branching;
pub mod claims;
pub mod config;
pub mod docker;
pub mod egress;
pub mod error;
pub mod expiry;
pub mod fs;
pub mod grpc_timeout;
pub mod health;
pub mod inventory;
pub mod lease;
pub mod lifecycle;
pub mod logs;
pub mod memory;
pub mod metadata;
pub mod metrics;
pub mod otel;
pub mod pools;
pub mod processes;
pub mod runtime;
pub mod service;
pub mod snapshot_expiry;
pub mod spec;
pub mod state_metrics;
pub mod stats;
pub mod sweep;
pub mod terminal;
pub mod usage_metrics;
pub mod watch;

pub use error::{ProviderError, Result};
