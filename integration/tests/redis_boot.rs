//! Booting while Redis is down (issue 24, item 9): a Redis limiter, or a
//! set of them, builds without its server and decides by its failure
//! policy, then decides in Redis once the server answers, with no rebuild.
//! Against a real `redis-server` started by each test on a port that had
//! no server when the limiter was built.

use std::time::Duration;

use shuffle_limiter::redis::{BuildError, FailurePolicy, RedisLimiter, RedisOptions, Source};
use shuffle_limiter::set::{LimiterSet, SetConfig};
use shuffle_limiter::{DenialReason, Limit, Quota, Request, ShardedLimiter};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::{RedisServer, free_port, stat};

/// Decides for `tenant` until Redis decides, at most `tries` times, a
/// moment of real time apart (the connection comes back on real I/O):
/// the tries it took, or `None`.
async fn tries_until_redis(limiter: &RedisLimiter, tries: u32) -> Option<u32> {
    for i in 1..=tries {
        if limiter.decide("t").await.source() == Source::Redis {
            return Some(i);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

fn builder() -> shuffle_limiter::Builder {
    ShardedLimiter::builder()
        .quota(Quota::per_hour(8))
        .buckets(4)
        .per_tenant(2)
        .name("boot")
}

fn options(policy: FailurePolicy) -> RedisOptions {
    RedisOptions::new(policy)
        .deadline(Duration::from_millis(500))
        .retry_every(Duration::from_millis(50))
        .connect_timeout(Duration::from_millis(500))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limiter_built_while_redis_is_down_serves_by_its_policy_then_by_redis() {
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let closed = builder()
        .build_redis(&url, options(FailurePolicy::FailClosed))
        .await
        .expect("builds while Redis is down");
    let open = builder()
        .build_redis(&url, options(FailurePolicy::FailOpen))
        .await
        .expect("builds while Redis is down");
    let fallback = builder()
        .build_redis(&url, options(FailurePolicy::LocalFallback { replicas: 2 }))
        .await
        .expect("builds while Redis is down");

    let decision = closed.decide("t").await;
    assert_eq!(decision.source(), Source::Policy);
    let denied = decision.result().unwrap_err();
    assert_eq!(denied.reason(), DenialReason::StoreUnavailable);
    let decision = open.decide("t").await;
    assert_eq!(decision.source(), Source::Policy);
    assert!(decision.result().is_ok());
    // The fallback's share is 4 of the 8: its tenant's two buckets hold 2.
    let granted = {
        let mut granted = 0;
        for _ in 0..4 {
            let decision = fallback.decide("t").await;
            assert_eq!(decision.source(), Source::Policy);
            granted += u32::from(decision.result().is_ok());
        }
        granted
    };
    assert_eq!(granted, 2);

    let server = RedisServer::start_on(port, &[]);
    for limiter in [&closed, &open, &fallback] {
        let tries = tries_until_redis(limiter, 250).await;
        assert!(
            tries.is_some(),
            "{:?} never reached Redis",
            limiter.failure_policy()
        );
    }
    // And Redis holds the one budget: the tenant's two buckets of 2.
    let granted = {
        let mut granted = 0;
        for _ in 0..8 {
            granted += u32::from(closed.check("t").await.is_ok());
        }
        granted
    };
    // The probes above granted up to 3 (one per limiter) already.
    assert!((1..=4).contains(&granted), "{granted}");
    // Built while Redis was away, each loaded the draw's library once it
    // was back, beside its decisions, and calls its functions (a weight of
    // 0 always asks Redis: no cached denial answers it).
    for limiter in [&closed, &open, &fallback] {
        server.command_stats().await;
        let by_fcall = async {
            for _ in 0..100 {
                let decision = limiter.decide(Request::tenant("t").tokens(0)).await;
                assert_eq!(decision.source(), Source::Redis);
                if stat(&server.command_stats().await, "fcall", "calls") > 0 {
                    return true;
                }
            }
            false
        };
        assert!(by_fcall.await, "{:?}", limiter.failure_policy());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_connects_while_redis_is_down_and_reaches_it_when_it_is_back() {
    let port = free_port();
    let config: SetConfig = toml::from_str(&format!(
        r#"
        [limiters.local]
        rate = "1/h"

        [limiters.closed]
        rate = "8/h"
        buckets = 4
        redis = "redis://127.0.0.1:{port}"
        deadline = "500ms"
        retry_every = "50ms"
        connect_timeout = "500ms"

        [limiters.fallback]
        rate = "8/h"
        buckets = 4
        redis = "redis://127.0.0.1:{port}"
        failure_policy = "local_fallback"
        replicas = 2
        deadline = "500ms"
        retry_every = "50ms"
        connect_timeout = "500ms"
        "#
    ))
    .unwrap();
    let set = LimiterSet::connect(&config)
        .await
        .expect("connects while Redis is down");
    assert!(set.get("local").unwrap().check("t").is_ok());
    let closed = set.get_redis("closed").unwrap();
    let denied = closed.check("t").await.unwrap_err();
    assert_eq!(denied.reason(), DenialReason::StoreUnavailable);
    let fallback = set.get_redis("fallback").unwrap();
    assert!(fallback.check("t").await.is_ok());

    let _server = RedisServer::start_on(port, &[]);
    assert!(tries_until_redis(closed, 250).await.is_some());
    assert!(tries_until_redis(fallback, 250).await.is_some());
}

#[tokio::test]
async fn what_no_server_can_fix_is_still_an_error_at_build() {
    let url = format!("redis://127.0.0.1:{}", free_port());
    let err = builder()
        .buckets(9)
        .build_redis(&url, options(FailurePolicy::FailClosed))
        .await
        .unwrap_err();
    assert!(matches!(err, BuildError::Config(_)), "{err:?}");
    let err = builder()
        .build_redis("http://127.0.0.1:1", options(FailurePolicy::FailClosed))
        .await
        .unwrap_err();
    assert!(matches!(err, BuildError::InvalidUrl { .. }), "{err:?}");
}
