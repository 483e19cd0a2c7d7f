//! `shuffle-limiter-server --config FILE [--grpc ADDR] [--http ADDR] [--redis URL]`

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use shuffle_limiter_server::{Options, start};

/// Envoy's rate-limit service (gRPC RLS v3, and HTTP /json) on
/// shuffle-limiter.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// The config: envoyproxy/ratelimit's YAML plus `shuffle` blocks.
    #[arg(long)]
    config: PathBuf,
    /// Where gRPC listens.
    #[arg(long, default_value = "127.0.0.1:8081")]
    grpc: SocketAddr,
    /// Where HTTP listens (/json, /healthcheck, /metrics).
    #[arg(long, default_value = "127.0.0.1:8080")]
    http: SocketAddr,
    /// Keep the buckets in this Redis, shared by every replica.
    #[arg(long)]
    redis: Option<String>,
    /// How often to look at the config file's modification time, in
    /// seconds (0: do not watch; SIGHUP still reloads).
    #[arg(long, default_value_t = 2)]
    watch_secs: u64,
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();
    let mut options = Options::new(args.config);
    options.grpc = args.grpc;
    options.http = args.http;
    options.redis = args.redis;
    options.watch = (args.watch_secs > 0).then(|| Duration::from_secs(args.watch_secs));
    let served = match start(options).await {
        Ok(running) => running.wait().await,
        Err(e) => Err(e),
    };
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shuffle-limiter-server: {e}");
            ExitCode::FAILURE
        }
    }
}
