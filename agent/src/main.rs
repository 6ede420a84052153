//! `sandboxd-agent serve` (stdio), `listen` (a socket), `init` (the sandbox's keep-alive on a
//! socket) or `connect` (stdio relayed to that socket).

use std::path::PathBuf;

const USAGE: &str = "usage:
  sandboxd-agent serve                       speak the agent protocol on stdin/stdout (through `docker exec -i`)
  sandboxd-agent listen [--run-dir DIR]      serve DIR/agent.sock (default /.sandboxd/run)
  sandboxd-agent init [OPTIONS] [--] [ARGV…] keep the sandbox alive (with ARGV) and serve the socket
  sandboxd-agent ping [--run-dir DIR]        connect to the socket and print its hello (a health check)
  sandboxd-agent connect [--run-dir DIR]     relay stdin/stdout to the socket (a host that cannot reach it)
  sandboxd-agent relay [--ready-file PATH] TARGET PORT…
                                             listen on 127.0.0.1:PORT… and splice each connection to TARGET:PORT
    --run-dir DIR  --user USER  --shell SHELL  --probe CMD  --probe-expect TEXT
    --probe-timeout-ms N  --probe-deadline-ms N  --probe-stable-count N  --probe-stable-delay-ms N";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("serve") => sandboxd_agent::serve::serve(),
        Some("listen") => listen(&args[1..]),
        Some("init") => match sandboxd_agent::init::parse(&args[1..]) {
            Ok(options) => sandboxd_agent::init::run(options),
            Err(e) => fail(&e),
        },
        Some("ping") => ping(&args[1..]),
        Some("connect") => sandboxd_agent::connect::run(&run_dir("connect", &args[1..])),
        Some("relay") => match sandboxd_agent::relay::run(&args[1..]) {
            Ok(()) => {}
            Err(e) => fail(&e),
        },
        Some("--version") => println!(
            "sandboxd-agent {} (protocol {})",
            env!("CARGO_PKG_VERSION"),
            sandboxd_agent::protocol::PROTOCOL_VERSION
        ),
        _ => fail("no mode given"),
    }
}

fn fail(why: &str) -> ! {
    eprintln!("sandboxd-agent: {why}\n{USAGE}");
    std::process::exit(2)
}

fn run_dir(mode: &str, args: &[String]) -> PathBuf {
    match args {
        [] => PathBuf::from(sandboxd_agent::socket::DEFAULT_SOCKET)
            .parent()
            .map(PathBuf::from)
            .unwrap_or_default(),
        [flag, dir] if flag == "--run-dir" => PathBuf::from(dir),
        _ => fail(&format!("{mode} takes only --run-dir DIR")),
    }
}

/// Connect as the caller and print the agent's hello and readiness.
fn ping(args: &[String]) -> ! {
    use sandboxd_agent::protocol::{self, Event};
    let path = run_dir("ping", args).join(sandboxd_agent::socket::SOCKET_NAME);
    let mut stream = match std::os::unix::net::UnixStream::connect(&path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sandboxd-agent: cannot connect to {}: {e}", path.display());
            std::process::exit(1)
        }
    };
    let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(5)));
    for _ in 0..2 {
        match protocol::read_body(&mut stream, protocol::MAX_FRAME)
            .map(|b| b.map(|b| protocol::decode_event(&b)))
        {
            Ok(Some(Ok(frame))) => match frame.message {
                Event::Hello { version, pid } => println!("hello protocol={version} pid={pid}"),
                Event::Readiness { state, shell, detail } => {
                    println!("readiness {state:?} shell={shell:?} {detail}")
                }
                other => println!("{other:?}"),
            },
            Ok(Some(Err(e))) | Err(e) => {
                eprintln!("sandboxd-agent: {}: {e}", path.display());
                std::process::exit(1)
            }
            Ok(None) => {
                eprintln!("sandboxd-agent: {} closed the connection without a hello", path.display());
                std::process::exit(1)
            }
        }
    }
    std::process::exit(0)
}

fn listen(args: &[String]) -> ! {
    let dir = run_dir("listen", args);
    // SAFETY: prctl on this process: orphans of its sessions re-parent here and are reaped.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    let listener = match sandboxd_agent::socket::listen(&dir) {
        Ok(l) => l,
        Err(e) => fail(&e.to_string()),
    };
    let env = sandboxd_agent::serve::own_environment();
    let path = env.iter().rev().find(|(k, _)| k == "PATH").map(|(_, v)| v.clone());
    let shell = sandboxd_agent::probe::detect_shell(None, path.as_deref());
    sandboxd_agent::socket::announce(sandboxd_agent::protocol::ReadyState::Ready, &shell, "");
    listener.serve(env)
}
