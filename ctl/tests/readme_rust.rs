//! The README's Rust example (`rust-example`) runs as written against a server and Docker: the
//! block in the README is `client/examples/quickstart.rs` byte for byte, and its `run` is called
//! here with this test's server address and test image (all a reader's machine does differently).

#[path = "../../client/examples/quickstart.rs"]
#[allow(dead_code)]
mod quickstart;

use testkit::images::BUSYBOX;
use testkit::service::TestService;
use testkit::TestLabel;

const EXAMPLE: &str = include_str!("../../client/examples/quickstart.rs");
const README: &str = include_str!("../../README.md");

#[test]
fn the_readme_shows_the_example_file_as_it_is() {
    let marker = "<!-- example rust-example: ctl/tests/readme_rust.rs -->\n```rust\n";
    let start = README.find(marker).expect("the README's rust-example block") + marker.len();
    let body = &README[start..start + README[start..].find("```\n").expect("the block's end")];
    assert_eq!(body, EXAMPLE, "README.md's rust-example differs from client/examples/quickstart.rs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_rust_example_runs() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let out = quickstart::run(&server.addr(), BUSYBOX).await.expect("the example runs");
    assert_eq!(out, "0 hello from rust\nkept");
}
