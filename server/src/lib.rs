//! sandboxd: Docker-container sandboxes for AI agents and RL trainers, served over gRPC.
//!
//! Layers, bottom up: `docker::cli` runs docker subprocesses; `docker` builds their argv and
//! implements the provider (`DockerProvider`), its terminals in `docker::pty`; `service` maps the
//! provider onto `sandbox.v1.SandboxService`.

pub mod audit;
pub mod auth;
pub mod backend;
pub mod branching;
pub mod config;
pub mod docker;
pub mod error;
pub mod health;
pub mod inventory;
pub mod lease;
pub mod lifecycle;
pub mod logs;
pub mod memory;
pub mod metadata;
pub mod metrics;
pub mod service;
pub mod snapshot_expiry;
pub mod spec;
pub mod swarm;
pub mod terminal;

pub use error::{ProviderError, Result};
