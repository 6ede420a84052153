//! `sandboxd`: the gRPC server. See `sandboxd --help` and the README.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use sandboxd::config::FileConfig;
use sandboxd::service::{serve, ServeOptions, TlsFiles};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// Docker-container sandboxes for AI agents and RL trainers, over gRPC (sandbox.v1).
#[derive(Debug, Parser)]
#[command(name = "sandboxd", version)]
struct Args {
    /// Address to listen on: `IP:PORT` or `HOST:PORT` (`localhost:50051`).
    #[arg(long, env = "SANDBOXD_LISTEN", default_value = "127.0.0.1:50051", value_parser = parse_listen)]
    listen: SocketAddr,
    /// Serve Prometheus metrics at http://ADDR/metrics (loopback unless --insecure). Off by default.
    #[arg(long, env = "SANDBOXD_METRICS_LISTEN", value_parser = parse_listen)]
    metrics_listen: Option<SocketAddr>,
    /// Config file, JSON or YAML (`.yaml`/`.yml`, or content not starting with `{`):
    /// {"docker": {"create": {…}, "exec": {…}, "probe": {…}}, "server": {…}}.
    #[arg(long, env = "SANDBOXD_CONFIG")]
    config: Option<PathBuf>,
    /// File holding the bearer token every RPC but health must carry.
    #[arg(long, env = "SANDBOXD_AUTH_TOKEN_FILE")]
    auth_token_file: Option<PathBuf>,
    /// Allow listening on a non-loopback address without a token.
    #[arg(long, env = "SANDBOXD_INSECURE")]
    insecure: bool,
    /// Remove the sandboxes this process created when it shuts down.
    #[arg(long, env = "SANDBOXD_REMOVE_ON_SHUTDOWN")]
    remove_on_shutdown: bool,
    /// Seconds in-flight calls get to finish after SIGTERM (0..=86400).
    #[arg(long = "drain-timeout-s", env = "SANDBOXD_DRAIN_TIMEOUT_S", default_value = "30", value_parser = parse_drain)]
    drain_timeout: Duration,
    /// Serve TLS with this PEM certificate chain (needs --tls-key).
    #[arg(long, env = "SANDBOXD_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, env = "SANDBOXD_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Mutual TLS: clients must present a certificate signed by this PEM CA.
    #[arg(long, env = "SANDBOXD_TLS_CLIENT_CA", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// Log format (logs go to stderr; filter with RUST_LOG).
    #[arg(long, env = "SANDBOXD_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// `--drain-timeout-s`: seconds in 0..=86400, a `Duration` from here on.
fn parse_drain(value: &str) -> Result<Duration, String> {
    match value.trim().parse::<f64>() {
        Ok(s) if (0.0..=86_400.0).contains(&s) => Ok(Duration::from_secs_f64(s)),
        _ => Err("must be seconds in 0..=86400".into()),
    }
}

/// `IP:PORT`, or `HOST:PORT` resolved now (IPv4 first: `localhost` means 127.0.0.1).
fn parse_listen(value: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = value.parse() {
        return Ok(addr);
    }
    let addrs: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(value)
        .map_err(|e| format!("expected IP:PORT or HOST:PORT ({e})"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| format!("{value} resolves to no address"))
}

/// Logs to stderr; with `server.tracing.otlp_endpoint`, spans to the collector too (the
/// exporter is returned, to be flushed at exit).
fn init_tracing(
    format: LogFormat,
    tracing: &sandboxd::config::TracingSection,
) -> Result<Option<sandboxd::otel::Exporter>, String> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let Some((exporter, otel)) = sandboxd::otel::start(tracing)? else {
        let builder =
            tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
        match format {
            LogFormat::Text => builder.init(),
            LogFormat::Json => builder.json().with_current_span(true).with_span_list(true).init(),
        }
        return Ok(None);
    };
    // Each its own filter: RUST_LOG for the log, `otel::start`'s for the spans.
    let log = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(ansi);
    let log = match format {
        LogFormat::Text => log.with_filter(filter).boxed(),
        LogFormat::Json => {
            log.json().with_current_span(true).with_span_list(true).with_filter(filter).boxed()
        }
    };
    tracing_subscriber::registry().with(otel).with(log).init();
    Ok(Some(exporter))
}

fn options(args: &Args) -> Result<ServeOptions, String> {
    let config = match &args.config {
        Some(path) => FileConfig::load(path).map_err(|e| format!("config {}: {e}", path.display()))?,
        None => FileConfig::default(),
    };
    let auth_token = match &args.auth_token_file {
        Some(path) => {
            let token = std::fs::read_to_string(path)
                .map_err(|e| format!("--auth-token-file {}: {e}", path.display()))?
                .trim()
                .to_string();
            if token.is_empty() {
                return Err(format!("--auth-token-file {} is empty", path.display()));
            }
            Some(token)
        }
        None => None,
    };
    Ok(ServeOptions {
        listen: args.listen,
        config,
        auth_token,
        insecure: args.insecure,
        remove_on_shutdown: args.remove_on_shutdown,
        drain_timeout: args.drain_timeout,
        metrics_listen: args.metrics_listen,
        tls: match (&args.tls_cert, &args.tls_key) {
            (Some(cert), Some(key)) => {
                Some(TlsFiles { cert: cert.clone(), key: key.clone(), client_ca: args.tls_client_ca.clone() })
            }
            _ => None,
        },
    })
}

fn main() -> ExitCode {
    // Before the runtime starts its threads: glibc fixes the arena bound when one first needs it.
    sandboxd::memory::tune_allocator();
    tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime").block_on(run())
}

async fn run() -> ExitCode {
    let args = Args::parse();
    let options = match options(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("sandboxd: {e}");
            return ExitCode::from(2);
        }
    };
    let exporter = match init_tracing(args.log_format, &options.config.server.tracing) {
        Ok(exporter) => exporter,
        Err(e) => {
            eprintln!("sandboxd: {e}");
            return ExitCode::from(2);
        }
    };
    // Exit right away once `serve` returns: connection tasks still running after the drain are
    // ended with the process rather than awaited (queued spans get a bounded moment to go).
    let code = match serve(options).await {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("sandboxd: {e}");
            1
        }
    };
    if let Some(exporter) = exporter {
        exporter.shutdown(Duration::from_secs(3));
    }
    std::process::exit(code)
}
