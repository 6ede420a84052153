//! The `sandbox.v1` contract: messages, the `SandboxService` client and server stubs, and the
//! encoded descriptor set the server publishes through gRPC reflection.

/// Generated from `proto/sandbox/v1/sandbox.proto`.
pub mod v1 {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("sandbox.v1");
}

/// The encoded `FileDescriptorSet` of the contract, for `tonic-reflection`.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/sandbox_descriptor.bin"));

/// E2B's envd messages (`proto/e2b/envd`, vendored under Apache-2.0), for the server's E2B
/// front-end.
pub mod envd {
    /// `process.Process`'s messages.
    pub mod process {
        #![allow(clippy::all, missing_docs)]
        tonic::include_proto!("process");
    }
    /// `filesystem.Filesystem`'s messages.
    pub mod filesystem {
        #![allow(clippy::all, missing_docs)]
        tonic::include_proto!("filesystem");
    }
    /// The encoded `FileDescriptorSet` of both (with `google/protobuf/timestamp.proto`), for
    /// the Connect JSON codec.
    pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/envd_descriptor.bin"));
}

pub mod contract;
pub mod marker;
