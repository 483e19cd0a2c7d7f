//! The helpers of the in-flight-over-Redis tests: limits as processes of a
//! fleet build them, one test at a time, and what the pools hold in Redis.

// Each test file uses a part of this.
#![allow(dead_code)]

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use shuffle_limiter::inflight::{InFlight, LeaseOptions, RedisInFlight};
use shuffle_limiter::redis::FailurePolicy;

use super::redis_server::RedisServer;

/// Holds off the other tests of the file while the guard lives: the
/// TTL-driven ones measure real time.
pub(crate) fn one_at_a_time() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A two-thread runtime, as a service runs.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A connection of its own to `server`, as another process has.
pub(crate) async fn connect(server: &RedisServer) -> MultiplexedConnection {
    server.connection().await
}

/// The options of the tests: a deadline a busy host cannot miss.
pub(crate) fn options(name: &str, ttl: Duration) -> LeaseOptions {
    LeaseOptions::new(name, ttl).deadline(Duration::from_secs(2))
}

/// A limit of `concurrency` over `pools`, `k` each, as a process builds it
/// on its own connection.
pub(crate) async fn limit(
    server: &RedisServer,
    (concurrency, pools, k): (u32, u32, u32),
    options: LeaseOptions,
) -> RedisInFlight<MultiplexedConnection> {
    InFlight::builder()
        .concurrency(concurrency)
        .pools(pools)
        .per_tenant(k)
        .build_redis(connect(server).await, options)
        .await
        .unwrap()
}

/// The policy-less default: fail closed.
pub(crate) fn closed(name: &str, ttl: Duration) -> LeaseOptions {
    options(name, ttl).failure_policy(FailurePolicy::FailClosed)
}

/// The seats held in Redis in `pool` by leases not yet expired at `now_ms`
/// (the server's clock), and their members.
pub(crate) async fn members(
    connection: &mut MultiplexedConnection,
    inflight: &RedisInFlight<MultiplexedConnection>,
    pool: u32,
) -> Vec<(String, u64)> {
    let key = inflight.key(pool).unwrap();
    let now = server_micros(connection).await;
    let raw: Vec<(String, u64)> = connection.zrange_withscores(key, 0, -1).await.unwrap();
    raw.into_iter()
        .filter(|(_, expiry)| *expiry > now)
        .collect()
}

/// The seats the live members of `pool` hold.
pub(crate) async fn held(
    connection: &mut MultiplexedConnection,
    inflight: &RedisInFlight<MultiplexedConnection>,
    pool: u32,
) -> u32 {
    let members = members(connection, inflight, pool).await;
    members
        .iter()
        .map(|(m, _)| m.split_once(':').unwrap().1.parse::<u32>().unwrap())
        .sum()
}

/// The server's clock, in µs.
pub(crate) async fn server_micros(connection: &mut MultiplexedConnection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(connection).await.unwrap();
    secs * 1_000_000 + micros
}

/// Tries `attempt` every 10 ms until it answers `Some`, for at most
/// `within`: how long it took, and the answer.
pub(crate) async fn within<T, F, Fut>(within: Duration, mut attempt: F) -> Option<(Duration, T)>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = std::time::Instant::now();
    while start.elapsed() < within {
        if let Some(out) = attempt().await {
            return Some((start.elapsed(), out));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// The seats held in Redis by every member of `pool`, expired or not, read
/// over a connection of the test's own.
pub(crate) async fn seats<Conn>(
    server: &RedisServer,
    inflight: &RedisInFlight<Conn>,
    pool: u32,
) -> u32 {
    let mut connection = server.connection().await;
    let key = inflight.key(pool).unwrap();
    let members: Vec<String> = connection.zrange(key, 0, -1).await.unwrap();
    members
        .iter()
        .map(|m| m.split_once(':').unwrap().1.parse::<u32>().unwrap())
        .sum()
}
