//! The `sandbox.v1` contract: messages, the `SandboxService` client and server stubs, and the
//! encoded descriptor set the server publishes through gRPC reflection.

/// Generated from `proto/sandbox/v1/sandbox.proto`.
pub mod v1 {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("sandbox.v1");
}

/// The encoded `FileDescriptorSet` of the contract, for `tonic-reflection`.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/sandbox_descriptor.bin"));

pub mod contract;
pub mod marker;
