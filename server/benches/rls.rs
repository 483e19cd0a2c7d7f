//! Decisions per second and p50/p99 latency of `ShouldRateLimit` over real
//! gRPC on 127.0.0.1, at 1, 16 and 64 concurrent streams on one HTTP/2
//! connection (as an Envoy's), against a no-op handler (always OK) served
//! on the same tonic stack with the same bounds, in the same run.
//!
//! `cargo bench -p shuffle-limiter-server --bench rls` (`-- SECS` for the
//! seconds per measurement, default 3). With `RLS_BENCH_REDIS=redis://...`
//! also the server over that Redis, beside the usual one-key GCRA script
//! (`tests/support/one_key_gcra.lua`, the Redis benchmarks' baseline) and
//! the library's own Redis checks
//! (the same script, no gRPC) at the same concurrency.

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use shuffle_limiter_server::{MAX_MESSAGE, MAX_STREAMS, Options};
use tonic::transport::Channel;

// A budget no run exhausts: every decision is a real grant.
const CONFIG: &str = r#"
domain: bench
descriptors:
  - key: tenant
    rate_limit: {rate: "4000000000/s"}
    shuffle: {buckets: 16, per_tenant: 2}
"#;

struct Noop;

#[tonic::async_trait]
impl RateLimitService for Noop {
    async fn should_rate_limit(
        &self,
        _: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            ..Default::default()
        }))
    }
}

/// The no-op on the server's tonic settings.
async fn noop() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = RateLimitServiceServer::new(Noop).max_decoding_message_size(MAX_MESSAGE);
    let router = tonic::transport::Server::builder()
        .max_concurrent_streams(Some(MAX_STREAMS))
        .concurrency_limit_per_connection(MAX_STREAMS as usize)
        .initial_stream_window_size(Some(MAX_MESSAGE as u32))
        .initial_connection_window_size(Some(1024 * 1024))
        .http2_max_header_list_size(Some(16 * 1024))
        .timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .add_service(service);
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    tokio::spawn(router.serve_with_incoming(incoming));
    addr
}

fn request(i: usize) -> RateLimitRequest {
    RateLimitRequest {
        domain: "bench".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "tenant".into(),
                value: format!("tenant-{}", i % 1000),
            }],
            ..Default::default()
        }],
        hits_addend: 1,
    }
}

struct Figures {
    per_sec: f64,
    p50: Duration,
    p99: Duration,
}

async fn measure(channel: Channel, streams: usize, secs: f64) -> Figures {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for s in 0..streams {
        let mut client = RateLimitServiceClient::new(channel.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut i = s * 7919;
            while Instant::now() < end {
                let asked = request(i);
                let start = Instant::now();
                let answer = client.should_rate_limit(asked).await.unwrap().into_inner();
                latencies.push(start.elapsed());
                assert_eq!(answer.overall_code, Code::Ok as i32);
                i += 1;
            }
            latencies
        }));
    }
    let started = Instant::now();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    figures(all, started.elapsed().as_secs_f64())
}

#[tokio::main]
async fn main() {
    let secs: f64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(3.0);
    let path = std::env::temp_dir().join(format!("rls-bench-{}.yaml", std::process::id()));
    std::fs::write(&path, CONFIG).unwrap();
    let mut options = Options::new(&path);
    options.grpc = "127.0.0.1:0".parse().unwrap();
    options.http = "127.0.0.1:0".parse().unwrap();
    options.watch = None;
    options.sighup = false;
    let server = shuffle_limiter_server::start(options).await.unwrap();
    let noop = noop().await;
    let connect = |addr: std::net::SocketAddr| async move {
        Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap()
    };
    let ours = connect(server.grpc_addr()).await;
    let theirs = connect(noop).await;
    // Warm both up.
    measure(ours.clone(), 4, 0.5).await;
    measure(theirs.clone(), 4, 0.5).await;
    println!(
        "streams | server decisions/s | p50 | p99 | no-op decisions/s | p50 | p99 | ratio/s | ratio p99"
    );
    for streams in [1, 16, 64] {
        let a = measure(ours.clone(), streams, secs).await;
        let b = measure(theirs.clone(), streams, secs).await;
        println!(
            "{streams} | {:.0} | {:?} | {:?} | {:.0} | {:?} | {:?} | {:.2} | {:.2}",
            a.per_sec,
            a.p50,
            a.p99,
            b.per_sec,
            b.p50,
            b.p99,
            a.per_sec / b.per_sec,
            a.p99.as_secs_f64() / b.p99.as_secs_f64(),
        );
    }
    server.shutdown().await;
    if let Ok(url) = std::env::var("RLS_BENCH_REDIS") {
        over_redis(&path, &url, secs).await;
    }
    let _ = std::fs::remove_file(&path);
}

/// The server over Redis, and the library's Redis checks alone.
async fn over_redis(path: &std::path::Path, url: &str, secs: f64) {
    let mut options = Options::new(path);
    options.grpc = "127.0.0.1:0".parse().unwrap();
    options.http = "127.0.0.1:0".parse().unwrap();
    options.watch = None;
    options.sighup = false;
    options.redis = Some(url.to_owned());
    let server = shuffle_limiter_server::start(options).await.unwrap();
    let channel = Channel::from_shared(format!("http://{}", server.grpc_addr()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let limiter = std::sync::Arc::new(
        shuffle_limiter::ShardedLimiter::builder()
            .quota(shuffle_limiter::Quota::per_second(4_000_000_000))
            .buckets(16)
            .per_tenant(2)
            .name("rls-bench-direct")
            .build_redis(
                url,
                shuffle_limiter::redis::RedisOptions::new(
                    shuffle_limiter::redis::FailurePolicy::FailClosed,
                ),
            )
            .await
            .unwrap(),
    );
    measure(channel.clone(), 4, 0.5).await;
    println!(
        "over Redis: streams | server decisions/s | p50 | p99 | one-key script/s | p50 | p99 | \
         library checks/s | p50 | p99 | server vs one-key | server vs library"
    );
    let connection = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    for streams in [1, 16, 64] {
        let a = measure(channel.clone(), streams, secs).await;
        let k = one_key(&connection, streams, secs).await;
        let b = direct(&limiter, streams, secs).await;
        println!(
            "{streams} | {:.0} | {:?} | {:?} | {:.0} | {:?} | {:?} | {:.0} | {:?} | {:?} | {:.2} | {:.2}",
            a.per_sec,
            a.p50,
            a.p99,
            k.per_sec,
            k.p50,
            k.p99,
            b.per_sec,
            b.p50,
            b.p99,
            a.per_sec / k.per_sec,
            a.per_sec / b.per_sec,
        );
    }
    server.shutdown().await;
}

/// `call(i)` looped from `tasks` tasks for `secs` seconds (`i` counting
/// on from a different start in each), timed one by one.
async fn timed<F, Fut>(tasks: usize, secs: f64, call: F) -> Figures
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut handles = Vec::new();
    for s in 0..tasks {
        let call = call.clone();
        handles.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut i = s * 7919;
            while Instant::now() < end {
                let start = Instant::now();
                call(i).await;
                latencies.push(start.elapsed());
                i += 1;
            }
            latencies
        }));
    }
    let started = Instant::now();
    let mut all = Vec::new();
    for handle in handles {
        all.extend(handle.await.unwrap());
    }
    figures(all, started.elapsed().as_secs_f64())
}

/// The one-key GCRA script, a key per tenant value (1000 of them), every
/// call a grant.
async fn one_key(
    connection: &redis::aio::MultiplexedConnection,
    tasks: usize,
    secs: f64,
) -> Figures {
    const ONE_KEY_GCRA: &str = include_str!("../../tests/support/one_key_gcra.lua");
    let script = std::sync::Arc::new(redis::Script::new(ONE_KEY_GCRA));
    let connection = connection.clone();
    timed(tasks, secs, move |i| {
        let (script, mut connection) = (script.clone(), connection.clone());
        async move {
            let reply: Vec<i64> = script
                .key(format!("{{rls-one-key}}:t{}", i % 1000))
                .arg(1u64)
                .arg(1_000_000u64)
                .invoke_async(&mut connection)
                .await
                .unwrap();
            assert_eq!(reply[0], 1);
        }
    })
    .await
}

/// The library's own Redis checks, no gRPC.
async fn direct(
    limiter: &std::sync::Arc<shuffle_limiter::redis::RedisLimiter>,
    tasks: usize,
    secs: f64,
) -> Figures {
    use shuffle_limiter::Limit;
    let limiter = std::sync::Arc::clone(limiter);
    timed(tasks, secs, move |i| {
        let limiter = std::sync::Arc::clone(&limiter);
        async move {
            let tenant = format!("tenant-{}", i % 1000);
            Limit::check(&*limiter, tenant.as_str()).await.unwrap();
        }
    })
    .await
}

fn figures(mut all: Vec<Duration>, took: f64) -> Figures {
    all.sort_unstable();
    let at = |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)];
    Figures {
        per_sec: all.len() as f64 / took,
        p50: at(0.50),
        p99: at(0.99),
    }
}
