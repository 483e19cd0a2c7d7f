//! Values in the spread layout's keys that the limiter never writes, on a
//! real `redis-server`: a quota beside a spread bucket, where no quota is
//! ever set live, may not lift the budget through any script that finds it
//! (a hold-off, a refund), as it cannot through a draw.

#![cfg(feature = "redis")]

use std::time::Duration;

use shuffle_limiter::redis::{Error, FailurePolicy, Layout, RedisLimiter, RedisOptions};
use shuffle_limiter::upstream::HoldOff;
use shuffle_limiter::{Limit, Quota, ShardedLimiter};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::RedisServer;

/// A runtime with two workers, as the other Redis tests run in.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// 8 tokens per 1000 s over 8 buckets: one token each, no refill within a
/// test.
async fn one_token_each(server: &RedisServer, name: &str) -> RedisLimiter {
    ShardedLimiter::builder()
        .quota(Quota::new(8, Duration::from_secs(1000)).with_burst(8))
        .buckets(8)
        .per_tenant(2)
        .name(name)
        .build_redis(
            &server.url(),
            RedisOptions::new(FailurePolicy::FailClosed)
                .layout(Layout::Spread)
                .deadline(Duration::from_secs(2)),
        )
        .await
        .unwrap()
}

/// A tenant whose shard holds bucket 0.
fn on_bucket_0(limiter: &RedisLimiter) -> String {
    (0..1000)
        .map(|t| format!("tenant-{t}"))
        .find(|t| limiter.shard(t.as_str()).buckets().contains(&0))
        .unwrap()
}

/// Writes a well-formed quota (version 1, a million per 1000 s, burst 8),
/// by nobody this limiter knows, beside spread bucket 0.
async fn stray_quota_beside_bucket_0(server: &RedisServer, limiter: &RedisLimiter) {
    let mut admin = server.connection().await;
    let _: () = redis::cmd("SET")
        .arg(format!("{}:quota", limiter.key(0).unwrap()))
        .arg("1 1000000 1000000000 100000 8")
        .query_async(&mut admin)
        .await
        .unwrap();
}

/// Grants of `most` checks of `tenant`.
async fn granted(limiter: &RedisLimiter, tenant: &str, most: u32) -> u32 {
    let mut granted = 0;
    for _ in 0..most {
        granted += u32::from(limiter.check(tenant).await.is_ok());
    }
    granted
}

/// `Layout::Spread`'s docs: its quota keys "stay missing: the quota the
/// limiter was built with" (`set_quota` is refused, `Error::SpreadQuota`),
/// and a draw answers a version found there as an error; DESIGN.md: grants
/// ≤ R·t + B whatever the Redis values. A hold-off that finds a version
/// beside its bucket must answer it as the draw does, never read bucket
/// 0's quota key and adopt the stray quota's rate and burst (it did: 2000
/// grants against a budget of 8).
#[test]
fn a_stray_quota_beside_spread_bucket_0_never_lifts_the_budget() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let limiter = one_token_each(&server, "spread-stray-holdoff").await;
        let tenant = on_bucket_0(&limiter);
        stray_quota_beside_bucket_0(&server, &limiter).await;
        // An upstream's 429: hold everyone off for a millisecond.
        let held = limiter
            .hold_off(HoldOff::all(Duration::from_millis(1)))
            .await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        let granted = granted(&limiter, &tenant, 2_000).await;
        println!(
            "hold_off -> {held:?}; quota now {:?}; {tenant} granted {granted}",
            limiter.quota()
        );
        // The whole fleet's budget over this test is R·t + B ≈ 8.
        assert!(
            granted <= 8,
            "{tenant} was granted {granted} by a limiter built for 8 tokens per 1000 s \
             (its quota now reads {:?})",
            limiter.quota()
        );
        assert_eq!(limiter.quota().count(), 8, "the stray quota was adopted");
        // What was wrong is said, as data, not an outage.
        // Every other bucket is held; bucket 0 is not, and why is said.
        match &held {
            Err(Error::NotAllHeld { unheld, error }) => {
                assert_eq!(unheld, &[0]);
                assert!(matches!(**error, Error::Reply { .. }), "{error:?}");
            }
            other => panic!("{other:?}"),
        }
    });
}

/// The same promise for a refund (and so for a charge, which answers the
/// quota key alike): a refund that finds a version beside its bucket gives
/// nothing back and adopts nothing, though every spread bucket has such a
/// quota beside it (another deployment's, say): adopted, it let every
/// bucket the grant did not touch draw on the stray quota's burst.
#[test]
fn a_refund_that_finds_a_stray_quota_beside_its_spread_bucket_adopts_nothing() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let limiter = one_token_each(&server, "spread-stray-refund").await;
        let grant = limiter.check("payer").await.unwrap();
        let paid = grant.bucket();
        let mut admin = server.connection().await;
        for b in 0..8 {
            let _: () = redis::cmd("SET")
                .arg(format!("{}:quota", limiter.key(b).unwrap()))
                .arg("1 1000000 1000000000 100000 8")
                .query_async(&mut admin)
                .await
                .unwrap();
        }
        let refunded = limiter.refund(grant).await;
        // A tenant whose buckets the grant did not touch.
        let other = (0..1000)
            .map(|t| format!("tenant-{t}"))
            .find(|t| !limiter.shard(t.as_str()).buckets().contains(&paid))
            .unwrap();
        let granted = granted(&limiter, &other, 2_000).await;
        println!(
            "refund -> {refunded:?}; quota now {:?}; {other} granted {granted}",
            limiter.quota()
        );
        // The budget left is 7 tokens; the stray quota's draws are errors.
        assert!(
            granted <= 7,
            "{other} was granted {granted} by a limiter built for 8 tokens per 1000 s \
             (its quota now reads {:?})",
            limiter.quota()
        );
        assert!(matches!(refunded, Err(Error::Reply { .. })), "{refunded:?}");
        assert_eq!(limiter.quota().count(), 8, "the stray quota was adopted");
    });
}
