//! Builds the in-sandbox agent (`agent/`) as a static binary for the server to embed.
//!
//! A nested `cargo build --release -p sandboxd-agent --target <this target>` with
//! `-C target-feature=+crt-static` (only the gnu std is installed; the explicit `--target` keeps
//! build scripts and proc macros dynamic), in its own target directory under `OUT_DIR` so it
//! never waits on the outer build's lock. `SANDBOXD_AGENT_BINARY` may name a prebuilt agent
//! instead (cross builds, packagers).

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let workspace = manifest_dir.parent().expect("the server sits in the workspace").to_path_buf();
    let agent_dir = workspace.join("agent");
    let embedded = out_dir.join("sandboxd-agent");
    println!("cargo:rerun-if-changed={}", agent_dir.join("src").display());
    println!("cargo:rerun-if-changed={}", agent_dir.join("Cargo.toml").display());
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SANDBOXD_AGENT_BINARY");

    if let Some(prebuilt) = env::var_os("SANDBOXD_AGENT_BINARY") {
        std::fs::copy(&prebuilt, &embedded).expect("copying SANDBOXD_AGENT_BINARY");
        return;
    }
    let target = env::var("TARGET").expect("TARGET");
    let target_dir = out_dir.join("agent-target");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .args(["build", "--release", "--offline", "-p", "sandboxd-agent", "--target", &target])
        .arg("--manifest-path")
        .arg(workspace.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target_dir)
        .env("RUSTFLAGS", "-C target-feature=+crt-static -C strip=symbols");
    // What the outer cargo set for this build script must not leak into the nested build
    // (encoded flags win over RUSTFLAGS; clippy's wrapper would only lint).
    for (key, _) in env::vars_os() {
        let key = key.to_string_lossy();
        let leaks = (key.starts_with("CARGO_") && key != "CARGO_HOME" && key != "CARGO_MAKEFLAGS")
            || key.starts_with("RUSTC_")
            || key.starts_with("__CARGO");
        if leaks && key != "CARGO_TARGET_DIR" {
            build.env_remove(key.as_ref());
        }
    }
    let status = build.status().expect("running cargo for sandboxd-agent");
    assert!(status.success(), "building the static sandboxd-agent failed");
    let built = target_dir.join(&target).join("release").join("sandboxd-agent");
    std::fs::copy(&built, &embedded).expect("copying the agent binary");
}
