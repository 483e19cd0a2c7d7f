//! Refunds over Redis that cannot go where the grant came from: to a bucket
//! a change of N removed and brought back since, or to a limiter with fewer
//! buckets. Each gives back what fits, says what did not, and never panics.
//! Against a real `redis-server` on 127.0.0.1.

use std::time::Duration;

use shuffle_limiter::redis::{Error, FailurePolicy, RedisLimiter, RedisOptions, Source};
use shuffle_limiter::{Limit, Quota, Request, ShardedLimiter};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::RedisServer;

/// `buckets` buckets of 8 tokens (room for `max`), k = 2, refilling one
/// token per 8 s per bucket: nothing refills during a test.
async fn limiter(server: &RedisServer, name: &str, buckets: u32, max: u32) -> RedisLimiter {
    let burst = 8 * buckets;
    ShardedLimiter::builder()
        .quota(Quota::new(buckets, Duration::from_secs(8)).with_burst(burst))
        .buckets(buckets)
        .max_buckets(max)
        .per_tenant(2)
        .salt("refund")
        .name(name)
        .build_redis(
            &server.url(),
            RedisOptions::new(FailurePolicy::FailClosed).deadline(Duration::from_secs(2)),
        )
        .await
        .unwrap()
}

/// Tokens `tenant` holds now, read without taking any.
async fn holds(limiter: &RedisLimiter, tenant: &str) -> u64 {
    limiter
        .check(Request::tenant(tenant).tokens(0))
        .await
        .unwrap()
        .remaining()
}

fn far_tenants(limiter: &RedisLimiter, from: u32) -> Vec<String> {
    (0..400)
        .map(|t| format!("t{t}"))
        .filter(|t| limiter.shard(t).buckets().iter().all(|&b| b >= from))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_never_revives_a_bucket_removed_and_added_again() {
    let server = RedisServer::start();
    let limiter = limiter(&server, "revive", 8, 8).await;
    let tenants = far_tenants(&limiter, 4);
    let mut grants = Vec::new();
    for tenant in &tenants {
        while let Ok(grant) = limiter.check(tenant).await {
            grants.push(grant);
        }
    }
    assert_eq!(grants.len(), 32, "buckets 4-7 drained");
    limiter.set_buckets(4).await.unwrap();
    limiter.set_buckets(8).await.unwrap();
    let mut gone = 0;
    for grant in grants {
        let refunded = limiter.refund(grant).await.unwrap();
        assert_eq!(refunded.given(), 0);
        gone += refunded.gone();
    }
    assert_eq!(gone, 32);
    for tenant in &tenants {
        assert_eq!(holds(&limiter, tenant).await, 0, "{tenant}");
    }
    // A grant of a bucket that stayed is refunded as usual.
    let other = (0..)
        .map(|t| format!("x{t}"))
        .find(|t| limiter.shard(t).buckets().iter().all(|&b| b < 4))
        .unwrap();
    let grant = limiter.check(&other).await.unwrap();
    let left = holds(&limiter, &other).await;
    let refunded = limiter.refund(grant).await.unwrap();
    assert_eq!((refunded.given(), refunded.gone()), (1, 0));
    assert_eq!(holds(&limiter, &other).await, left + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_to_a_limiter_with_fewer_buckets_gives_back_what_fits() {
    let server = RedisServer::start();
    let large = limiter(&server, "large", 16, 16).await;
    let small = limiter(&server, "small", 4, 4).await;
    let far = &far_tenants(&large, 8)[0];
    let grant = large.check(far).await.unwrap();
    assert!(grant.bucket() >= 8);
    let refunded = small.refund(grant).await.unwrap();
    assert_eq!((refunded.given(), refunded.gone()), (0, 1));
    // The small limiter still decides.
    assert!(small.check("anyone").await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_of_the_local_fallback_is_refunded_to_it_not_to_redis() {
    let server = RedisServer::start();
    let limiter = ShardedLimiter::builder()
        .quota(Quota::new(4, Duration::from_secs(8)).with_burst(8))
        .buckets(4)
        .per_tenant(1)
        .name("fallback")
        .build_redis(
            &server.url(),
            RedisOptions::new(FailurePolicy::LocalFallback { replicas: 1 })
                .deadline(Duration::from_millis(300))
                .retry_every(Duration::from_millis(1))
                .cache_denials(false),
        )
        .await
        .unwrap();
    while limiter.check("t").await.is_ok() {}
    // Redis paused: the local fallback grants, from its own buckets.
    server.signal("-STOP");
    let decision = limiter.decide("t").await;
    server.signal("-CONT");
    assert_eq!(decision.source(), Source::Policy);
    let grant = decision.into_result().unwrap();
    let local = limiter.fallback().unwrap();
    let before = local.remaining("t");
    let refunded = limiter.refund(grant).await.unwrap();
    assert_eq!((refunded.given(), refunded.gone()), (1, 0));
    assert_eq!(local.remaining("t"), before + 1, "the fallback got it back");
    // Redis, which never paid it, got nothing.
    let mut tries = 0;
    let from_redis = loop {
        let decision = limiter.decide(Request::tenant("t").tokens(0)).await;
        if decision.source() == Source::Redis {
            break decision.into_result().unwrap();
        }
        tries += 1;
        assert!(tries < 100, "Redis never answered again");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(from_redis.remaining(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_to_a_bucket_key_of_another_type_is_refused_whole() {
    use redis::AsyncCommands;
    let server = RedisServer::start();
    let limiter = ShardedLimiter::builder()
        .quota(Quota::new(4, Duration::from_secs(8)).with_burst(8))
        .buckets(4)
        .per_tenant(2)
        .name("typed")
        .build_redis(
            &server.url(),
            RedisOptions::new(FailurePolicy::FailClosed).deadline(Duration::from_secs(2)),
        )
        .await
        .unwrap();
    // A weight of 3 is paid by both of the tenant's buckets (2 each).
    let grant = limiter.check(Request::tenant("t").tokens(3)).await.unwrap();
    let [first, second] = *grant.payments() else {
        panic!("{grant:?}");
    };
    let mut connection = server.connection().await;
    let key = limiter.key(second.bucket()).unwrap().to_owned();
    let _: () = connection.del(&key).await.unwrap();
    let _: () = connection.hset(&key, "a", "b").await.unwrap();
    let before: Option<u64> = connection
        .get(limiter.key(first.bucket()).unwrap())
        .await
        .unwrap();
    let err = limiter.refund(grant).await.unwrap_err();
    assert!(
        matches!(err, shuffle_limiter::redis::Error::NotABucket { .. }),
        "{err:?}"
    );
    // Nothing was given back, not even to the bucket that is a bucket.
    let after: Option<u64> = connection
        .get(limiter.key(first.bucket()).unwrap())
        .await
        .unwrap();
    assert_eq!(before, after);
}

/// A refund to a Redis that stopped answering ends at the limiter's
/// deadline with `Error::Timeout`, as a decision does, instead of hanging
/// as long as the connection does (a lost refund only leaves budget
/// unused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_to_a_hung_redis_ends_at_the_deadline() {
    let server = RedisServer::start();
    let deadline = Duration::from_millis(300);
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(100))
        .name("hung-refund")
        .build_redis(
            &server.url(),
            RedisOptions::new(FailurePolicy::FailClosed).deadline(deadline),
        )
        .await
        .unwrap();
    let grant = limiter.check("t").await.unwrap();
    server.signal("-STOP");
    let started = std::time::Instant::now();
    let refund = tokio::time::timeout(deadline * 10, limiter.refund(grant)).await;
    server.signal("-CONT");
    let refund = refund.expect("no answer within ten deadlines");
    assert!(
        matches!(refund, Err(Error::Timeout { after }) if after == deadline),
        "{refund:?}"
    );
    assert!(started.elapsed() < deadline * 3, "{:?}", started.elapsed());
}
