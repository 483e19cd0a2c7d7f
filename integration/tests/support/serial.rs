//! The helpers of the Redis test files: one test at a time on a fresh
//! runtime, and limiters with a deadline generous enough for a busy host.

// Each test file uses a part of this.
#![allow(dead_code)]

use std::future::Future;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use shuffle_limiter::redis::{FailurePolicy, RedisLimiter, RedisOptions};
use shuffle_limiter::{Quota, ShardedLimiter};

use super::redis_server::RedisServer;

/// Holds off the other tests while the guard lives.
pub(crate) fn one_at_a_time() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs one test at a time on a fresh two-thread runtime.
pub(crate) fn serial<F: Future>(test: F) -> F::Output {
    let _guard = one_at_a_time();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(test)
}

/// Options with a generous deadline, for the tests that are about decisions
/// rather than latency: a busy machine must not turn them into the policy's.
pub(crate) fn options(policy: FailurePolicy) -> RedisOptions {
    RedisOptions::new(policy).deadline(Duration::from_secs(1))
}

/// A limiter on `server` with the tests' generous deadline.
pub(crate) async fn redis_limiter(
    server: &RedisServer,
    quota: Quota,
    (buckets, per_tenant): (u32, u32),
    name: &str,
    policy: FailurePolicy,
) -> RedisLimiter {
    ShardedLimiter::builder()
        .quota(quota)
        .buckets(buckets)
        .per_tenant(per_tenant)
        .name(name)
        .build_redis(&server.url(), options(policy))
        .await
        .unwrap()
}

/// The server's clock, in microseconds.
pub(crate) async fn server_micros(limiter: &RedisLimiter) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut limiter.connection().clone())
        .await
        .unwrap();
    secs * 1_000_000 + micros
}
