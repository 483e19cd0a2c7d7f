//! A Redis limiter's metrics: every decision counted by who made it (the
//! script, the denial cache, the failure policy) and every failed request,
//! the same numbers as its `stats()`. Against a real `redis-server` on
//! 127.0.0.1, through a test recorder.

use std::collections::HashMap;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use shuffle_limiter::metrics::{DENIALS, GRANTS, REDIS_DECISIONS, REDIS_ERRORS};
use shuffle_limiter::redis::{FailurePolicy, RedisLimiter, RedisOptions, Source};
use shuffle_limiter::{DenialReason, Quota, Request, ShardedLimiter};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::RedisServer;

/// Every counter of `limiter`, by name and its other label's value
/// (`source`, `bucket`, or empty for none).
fn counters(snapshotter: &Snapshotter, limiter: &str) -> HashMap<(String, String), u64> {
    let mut series = HashMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let labels: HashMap<&str, &str> = key.labels().map(|l| (l.key(), l.value())).collect();
        if labels.get("limiter") != Some(&limiter) {
            continue;
        }
        let other: Vec<_> = labels.iter().filter(|(k, _)| **k != "limiter").collect();
        assert!(other.len() <= 1, "{} has labels {labels:?}", key.name());
        let other = other
            .first()
            .map(|(_, v)| v.to_string())
            .unwrap_or_default();
        let DebugValue::Counter(n) = value else {
            continue;
        };
        series.insert((key.name().to_owned(), other), n);
    }
    series
}

#[test]
fn every_redis_decision_is_counted_by_its_source_as_the_stats_count_it() {
    let mut server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    // Handles are registered at build time, with the recorder in force then.
    let limiter: RedisLimiter = metrics::with_local_recorder(&recorder, || {
        runtime.block_on(
            ShardedLimiter::builder()
                .quota(Quota::per_second(1).with_burst(4))
                .buckets(2)
                .per_tenant(1)
                .name("metered")
                .build_redis(
                    &server.url(),
                    // Long enough for a busy host, short enough for the
                    // outage below to end quickly.
                    RedisOptions::new(FailurePolicy::FailClosed)
                        .deadline(Duration::from_millis(300)),
                ),
        )
    })
    .unwrap();

    // Every series exists from the start, at zero.
    let at_start = counters(&snapshotter, "metered");
    for source in ["redis", "cached_denial", "policy"] {
        let id = (REDIS_DECISIONS.to_owned(), source.to_owned());
        assert_eq!(at_start.get(&id), Some(&0), "{id:?}: {at_start:?}");
    }
    assert_eq!(
        at_start.get(&(REDIS_ERRORS.to_owned(), String::new())),
        Some(&0)
    );

    let mut sources: HashMap<Source, u64> = HashMap::new();
    runtime.block_on(async {
        // Two grants from Redis (a bucket holds 2), a denial from Redis,
        // then one from the denial cache.
        for _ in 0..4 {
            let decision = limiter.decide("tenant").await;
            if let Err(denied) = decision.result() {
                assert_eq!(denied.reason(), DenialReason::Limited);
            }
            *sources.entry(decision.source()).or_default() += 1;
        }
        assert_eq!(sources.get(&Source::Redis), Some(&3), "{sources:?}");
        assert_eq!(sources.get(&Source::CachedDenial), Some(&1), "{sources:?}");
        // A request no bucket can ever pay: the limiter's own answer, no
        // bucket short, so no denial counted (as in process).
        let never = limiter.decide(Request::tenant("tenant").tokens(100)).await;
        assert!(matches!(
            never.result().unwrap_err().reason(),
            DenialReason::NeverFits { .. }
        ));
        assert_eq!(never.source(), Source::Limiter);
        // Redis gone: the policy answers, with an error, then a paused
        // shard. (A tenant on the other bucket, which no denial is cached for.)
        let other = (0..)
            .map(|i| format!("other-{i}"))
            .find(|t| limiter.shard(t).overlap(&limiter.shard("tenant")) == 0)
            .unwrap();
        server.kill();
        for _ in 0..3 {
            let decision = limiter.decide(&other).await;
            assert_eq!(decision.source(), Source::Policy);
            let denied = decision.result().unwrap_err();
            assert_eq!(denied.reason(), DenialReason::StoreUnavailable);
            *sources.entry(decision.source()).or_default() += 1;
        }
    });

    let stats = limiter.stats();
    let series = counters(&snapshotter, "metered");
    let decided = |source: &str| series[&(REDIS_DECISIONS.to_owned(), source.to_owned())];
    assert_eq!(decided("redis"), stats.from_redis(), "{series:?}");
    assert_eq!(decided("cached_denial"), stats.from_cache(), "{series:?}");
    assert_eq!(decided("policy"), stats.from_policy(), "{series:?}");
    assert_eq!(
        series[&(REDIS_ERRORS.to_owned(), String::new())],
        stats.errors(),
        "{series:?}"
    );
    // And the stats are what the decisions said.
    assert_eq!(stats.from_redis(), 3);
    assert_eq!(stats.from_cache(), 1);
    assert_eq!(stats.from_policy(), 3);
    assert!(
        (1..=3).contains(&stats.errors()),
        "a lost connection is an error at least once: {stats:?}"
    );
    // Grants and denials are counted by bucket, whoever decided, except
    // the policy's denials while Redis is gone: no bucket is short then,
    // and they are counted once, as decisions of `source="policy"`.
    let total = |name: &str| -> u64 {
        series
            .iter()
            .filter(|((n, _), _)| n == name)
            .map(|(_, v)| v)
            .sum()
    };
    assert_eq!(total(GRANTS), 2);
    assert_eq!(total(DENIALS), 2, "{series:?}");
}
