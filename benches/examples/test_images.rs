//! Builds the test suites' images (testkit's recipes, no registry) for a bench run outside the
//! suites: `cargo run -p sandboxd-benches --example test_images -- [TAG ...]` (no tag: all).

use std::process::ExitCode;

fn main() -> ExitCode {
    let tags: Vec<String> = std::env::args().skip(1).collect();
    let built = if tags.is_empty() {
        testkit::images::ensure_images()
    } else {
        tags.iter().try_for_each(|tag| testkit::images::ensure(tag))
    };
    match built {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("test_images: {e}");
            ExitCode::FAILURE
        }
    }
}
