//! sandboxd: Docker-container sandboxes for AI agents and RL trainers, served over gRPC.
//!
//! Layers, bottom up: `core` is the seam (`core::backend::SandboxBackend`) and the neutral rules;
//! `backends/docker` implements it with the docker CLI (its terminals in `backends::docker::pty`),
//! `backends/swarm` wraps it for cluster mode; `agent_client` speaks the in-sandbox agent's
//! protocol; `service` maps a backend onto `sandbox.v1.SandboxService`; `wiring` builds the
//! backend and its layers from the configuration.

pub mod agent_client;
pub mod audit;
pub mod auth;
pub mod backends;
pub mod config;
pub mod console;
pub mod core;
pub mod e2b;
pub mod egress;
pub mod error;
pub mod grpc_timeout;
pub mod health;
pub mod memory;
pub mod metrics;
pub mod otel;
pub mod service;
pub mod state_metrics;
pub mod wiring;

pub use error::{ProviderError, Result};
