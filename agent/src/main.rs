//! `sandboxd-agent serve`: speak the agent protocol on stdin/stdout until stdin ends.

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("serve") => sandboxd_agent::serve::serve(),
        Some("--version") => println!(
            "sandboxd-agent {} (protocol {})",
            env!("CARGO_PKG_VERSION"),
            sandboxd_agent::protocol::PROTOCOL_VERSION
        ),
        _ => {
            eprintln!("usage: sandboxd-agent serve   (started by sandboxd through `docker exec -i`)");
            std::process::exit(2);
        }
    }
}
