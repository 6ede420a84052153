//! Compiles `proto/sandbox/v1/sandbox.proto` into Rust without a system `protoc`: `protox`
//! (pure Rust) builds the descriptor set, `tonic-prost-build` generates messages and stubs from
//! it, and the set itself is written out for the server's reflection service.

use std::{env, fs, path::PathBuf};

/// Relative to this crate's folder, where Cargo runs the build script; the include root `.`
/// makes its name in the descriptor set `sandbox/v1/sandbox.proto`, as grpcurl and stubs see it.
const PROTO: &str = "sandbox/v1/sandbox.proto";
/// The calls the nodes of a cluster make to each other (`SandboxPeer`).
const PEER_PROTO: &str = "sandbox/v1/peer.proto";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed={PROTO}");
    println!("cargo:rerun-if-changed={PEER_PROTO}");
    println!("cargo:rerun-if-changed=build.rs");

    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    let descriptors = protox::Compiler::new(["."])?
        .include_imports(true)
        .include_source_info(true)
        .open_files([PROTO, PEER_PROTO])?
        .file_descriptor_set();

    fs::write(out_dir.join("sandbox_descriptor.bin"), prost::Message::encode_to_vec(&descriptors))?;

    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // The `Connect` RPC would clash with the generated `connect(dst)` constructor; clients
        // build a `Channel` themselves and call `SandboxServiceClient::new`.
        .build_transport(false)
        .compile_fds(descriptors)?;

    // E2B's envd services (vendored, see e2b/README.md): messages only, served over Connect by
    // the server's E2B front-end, which also needs their descriptors for the JSON codec.
    let envd = ["e2b/envd/process/process.proto", "e2b/envd/filesystem/filesystem.proto"];
    for file in envd {
        println!("cargo:rerun-if-changed={file}");
    }
    let envd_descriptors = protox::Compiler::new(["e2b"])?
        .include_imports(true)
        .open_files(envd.map(|f| &f[4..]))?
        .file_descriptor_set();
    fs::write(out_dir.join("envd_descriptor.bin"), prost::Message::encode_to_vec(&envd_descriptors))?;
    tonic_prost_build::configure().build_server(false).build_client(false).compile_fds(envd_descriptors)?;
    Ok(())
}
